"""benchmarks/cache_effect.py's start-up breakdown: the phases between the milestones of a
serving pod's timestamped log (the node run is the benchmark's, docs/node.md)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest
from apilib import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import cache_effect

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 26, 8, 0, 0, tzinfo=UTC).timestamp()


def stamped(seconds: float, text: str) -> str:
    at = datetime.fromtimestamp(T0 + seconds, UTC)
    return f"{at.strftime('%Y-%m-%dT%H:%M:%S')}.{at.microsecond:06d}123Z {text}"


LOG = "\n".join(
    [
        stamped(2.5, "2026-11-26 08:00:02,500 spyre-runtime INFO cache ... is READY"),
        stamped(2.6, "2026-11-26 08:00:02,600 spyre-runtime INFO exec vllm serve /models/g"),
        stamped(20.0, "(APIServer pid=1) INFO non-default args: {'model': '/models/g'}"),
        stamped(30.0, "(EngineCore pid=9) INFO [spyre_worker.py:395] load model..."),
        stamped(31.5, "(EngineCore pid=9) INFO [spyre_worker.py:405] load model took 1.5s"),
        stamped(33.0, "(EngineCore pid=9) INFO [WARMUP] Prefill [1/2]..."),
        stamped(50.0, "(EngineCore pid=9) INFO [WARMUP] Finished in 17.0s (compilation ...)"),
        stamped(55.25, "(APIServer pid=1) INFO:     Application startup complete."),
    ]
)


def test_each_phase_runs_from_the_milestone_before() -> None:
    found = cache_effect.phases(LOG, created=T0, ready=T0 + 58.0)
    assert list(found) == [name for name, _ in cache_effect.PHASES]
    expected = [2.5, 17.5, 10.0, 1.5, 1.5, 17.0, 5.25, 2.75]
    assert list(found.values()) == pytest.approx(expected)


def test_a_missing_milestone_folds_its_phase_into_the_next() -> None:
    log = "\n".join(line for line in LOG.splitlines() if "load model took" not in line)
    found = cache_effect.phases(log, created=T0, ready=T0 + 58.0)
    assert found["weights load"] is None
    assert found["engine setup"] == pytest.approx(3.0)
    assert cache_effect.phases("no timestamps\n", T0, T0 + 1.0)["readiness"] == 1.0
