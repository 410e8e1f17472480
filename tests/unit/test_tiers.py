"""The tiers agree: every folder of tests/ is a marker pyproject.toml declares (the folder
is the tier, tests/conftest.py checks each test), scripts/test installs for each, and every
declared marker marks some test, so `scripts/test -m MARKER` never finds nothing (pytest's
exit 5)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FOLDERS = {folder.name for folder in TESTS.iterdir() if any(folder.glob("test_*.py"))}


def declared() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {line.split(":")[0] for line in config["tool"]["pytest"]["ini_options"]["markers"]}


def test_every_folder_is_a_declared_marker() -> None:
    assert "unit" in FOLDERS
    assert declared() >= FOLDERS


def test_scripts_test_installs_for_every_tier_but_unit() -> None:
    """Its `needs "a|b"` lines name each tier that needs more than the project venv."""
    script = (ROOT / "scripts" / "test").read_text()
    named = {t for alts in re.findall(r'needs "([a-z0-9_|]+)"', script) for t in alts.split("|")}
    assert named == FOLDERS - {"unit"}


def test_every_declared_marker_marks_some_test() -> None:
    used = {
        name
        for path in TESTS.rglob("test_*.py")
        for name in re.findall(r"pytest\.mark\.(\w+)", path.read_text())
    }
    assert declared() <= used
