"""The compile's watch on its cache volume (spyre_runtime/volumewatch.py): a probe that
waits is reported once past its patience and cleared when it answers. The waiting probe
is real: a FIFO where the probe file goes makes its open wait until a reader comes, as
a write to a network filesystem whose server is gone waits until it is back."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from spyre_devcluster.simulate import poll_until
from spyre_runtime import precompile
from spyre_runtime.contract import VOLUME_STEP
from spyre_runtime.report import Progress
from spyre_runtime.volumewatch import VolumeWatch

pytestmark = pytest.mark.unit


def test_a_volume_that_answers_is_never_reported_and_keeps_no_probe_file(tmp_path: Path) -> None:
    now = [0.0]
    watch = VolumeWatch(tmp_path, patience=20, clock=lambda: now[0])
    assert watch.stalled() is None  # the first probe starts
    now[0] = 100.0  # long after: the probe has answered, so a new one starts
    poll_until(lambda: watch.stalled() is None and not list(tmp_path.iterdir()), "no probe", 10)


def test_a_probe_that_waits_is_reported_past_its_patience_then_cleared(tmp_path: Path) -> None:
    now = [0.0]
    watch = VolumeWatch(tmp_path, patience=20, clock=lambda: now[0])
    fifo = tmp_path / f".probe-{socket.gethostname()}-{os.getpid()}"
    os.mkfifo(fifo)
    assert watch.stalled() is None  # the probe's open waits for a reader
    now[0] = 19.0
    assert watch.stalled() is None  # not yet past its patience
    now[0] = 31.0
    assert watch.stalled() == 31.0
    assert watch.stalled() == 31.0  # still the same probe, no second one started
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the server is back
    try:
        poll_until(lambda: watch.stalled() is None, "the probe answered", 10)
    finally:
        os.close(reader)


def test_the_compile_watch_logs_the_volume_step_while_its_probe_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """precompile's wait for its warmup child: a volume whose probe waits past its
    patience is logged as VOLUME_STEP, naming the volume; the child's exit still ends it."""
    cache = tmp_path / "volume" / "key"
    cache.parent.mkdir()
    os.mkfifo(cache.parent / f".probe-{socket.gethostname()}-{os.getpid()}")
    monkeypatch.setattr(precompile, "VOLUME_CHECK_SECONDS", 0.05)
    monkeypatch.setattr(precompile, "VolumeWatch", partial(VolumeWatch, patience=0.1))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    with caplog.at_level(logging.INFO, logger="spyre_runtime"):
        assert precompile._watch(child, Progress(), tmp_path / "current", cache) == 0
    said = [r.getMessage() for r in caplog.records if f"step={VOLUME_STEP}" in r.getMessage()]
    assert len(said) == 1, caplog.text  # once, then again only at the heartbeat
    assert f"the cache volume at {cache.parent} has not answered a write for" in said[0]
    os.close(
        os.open(
            cache.parent / f".probe-{socket.gethostname()}-{os.getpid()}",
            os.O_RDONLY | os.O_NONBLOCK,
        )
    )
