"""benchmarks/fuzz.py keeps working (its mutants: fuzz_mutants.py): they cover every
kind, and a short offline run finds no crash or hang (the full run is the benchmark's,
docs/api.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from apilib import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import fuzz
import fuzz_mutants

pytestmark = pytest.mark.unit


def test_the_mutants_cover_every_kind_and_are_deterministic() -> None:
    cases = fuzz_mutants.mutants(150, seed=7)
    assert {kind for kind, _ in cases} == set(fuzz_mutants.KINDS)
    assert cases == fuzz_mutants.mutants(150, seed=7)


def test_a_short_offline_run_has_no_crash_or_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fuzz.offline(fuzz_mutants.mutants(40, seed=3), timeout=30, directory=tmp_path) == 0
    out = capsys.readouterr().out
    assert "crashes 0" in out and "hangs (> 30 s) 0" in out
    assert "1 MB file (values): " in out
