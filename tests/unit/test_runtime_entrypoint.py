"""The image's entrypoint script: the base image's senlib config reaches the pod's HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SENLIB = '{"GENERAL": {"sen_bus_id": []}, "RISCV": {"DOOM": {"enable": false}}}\n'


def run_entrypoint(image_home: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """The real script and the real spyre-runtime (its --help), as the container runs them."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "SPYRE_SERVING_IMAGE_HOME": str(image_home),
    }
    return subprocess.run(
        ["bash", str(REPO / "image" / "entrypoint"), "--help"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def image_home(tmp_path: Path) -> Path:
    home = tmp_path / "senuser"
    home.mkdir()
    (home / ".senlib.json").write_text(SENLIB)
    return home


def test_the_senlib_config_is_copied_into_an_empty_home(image_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run_entrypoint(image_home, home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: spyre-runtime <command>")
    assert (home / ".senlib.json").read_text() == SENLIB


def test_every_start_begins_from_the_image_config(image_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".senlib.json").write_text("{}")  # edited by an earlier start of the container
    assert run_entrypoint(image_home, home).returncode == 0
    assert (home / ".senlib.json").read_text() == SENLIB


def test_home_at_the_image_home_is_left_alone(image_home: Path) -> None:
    done = run_entrypoint(image_home, image_home)
    assert done.returncode == 0 and done.stderr == ""
    assert (image_home / ".senlib.json").read_text() == SENLIB


def test_an_unwritable_home_is_reported_and_the_runtime_still_starts(
    image_home: Path, tmp_path: Path
) -> None:
    if os.geteuid() == 0:
        home = Path("/proc")  # not writable even by root
    else:
        home = tmp_path / "home"
        home.mkdir(mode=0o500)
    done = run_entrypoint(image_home, home)
    assert done.returncode == 0
    assert f"cannot copy {image_home}/.senlib.json to HOME={home}" in done.stderr
