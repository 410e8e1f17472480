"""The compile pod's step lines (contract.step_line/parse_step): what precompile and its
warmup child log is what the operator parses back, heartbeat included. The lines are made
by the runtime's own Progress and log format, never copied by hand."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spyre_runtime import report
from spyre_runtime.contract import Step, last_step, parse_step
from spyre_runtime.report import STARTED_ENV, Progress
from spyre_runtime.warmup import WarmupTap, current_step_path

pytestmark = pytest.mark.unit


@pytest.fixture
def pod_log() -> Iterator[io.StringIO]:
    """The container's log as the image writes it (report.LOG_FORMAT)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter(report.LOG_FORMAT))
    report.log.addHandler(handler)
    level = report.log.level
    report.log.setLevel(logging.INFO)
    yield out
    report.log.removeHandler(handler)
    report.log.setLevel(level)


def step_of(line: str) -> Step:
    step = parse_step(line)
    assert step is not None, line
    return step


def test_each_step_line_parses_back(pod_log: io.StringIO) -> None:
    progress = Progress(started=time.monotonic() - 61.25)
    progress.step("warmup", "cache /cache/k; vllm serve /models/x --max-model-len 256")
    progress.step("ready", "")
    first, second = pod_log.getvalue().splitlines()
    step = step_of(first)
    assert step.name == "warmup" and 61.2 <= step.elapsed < 70
    assert step.detail == "cache /cache/k; vllm serve /models/x --max-model-len 256"
    assert (step_of(second).name, step_of(second).detail) == ("ready", "")


def test_the_heartbeat_names_the_childs_step_and_the_plugins_warmup_line(
    pod_log: io.StringIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = Progress(started=time.monotonic() - 300)
    current = current_step_path(tmp_path / "result.json")
    parent.heartbeat(current, "warmup")  # the child has said nothing yet
    monkeypatch.setenv(STARTED_ENV, repr(parent.started))
    child = Progress.of_parent(current)
    child.step("engine", "loading the model and warming up")
    plugin = logging.getLogger("test_progress_plugin.v1.worker")
    plugin.propagate, plugin.level = True, logging.INFO
    tap = WarmupTap(child)
    logging.getLogger("test_progress_plugin").addHandler(tap)
    try:
        plugin.info("[WARMUP] (%d/%d) for prompt length %d with batch size %d...", 2, 3, 64, 1)
        plugin.info("Loading weights took 1.0 seconds")  # not a warmup line: ignored
    finally:
        logging.getLogger("test_progress_plugin").removeHandler(tap)
    parent.heartbeat(current, "warmup")
    first, engine, beat = (step_of(line) for line in pod_log.getvalue().splitlines())
    assert (first.name, first.detail) == ("warmup", "still running") and first.elapsed >= 300
    assert (engine.name, engine.detail) == ("engine", "loading the model and warming up")
    assert engine.elapsed >= 300  # counted from the parent's start
    assert last_step(pod_log.getvalue()) == beat
    assert (beat.name, beat.detail) == (
        "engine",
        "still running: [WARMUP] (2/3) for prompt length 64 with batch size 1...",
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "INFO 11-25 17:47:44 [core.py:100] init engine took 3 s\n",
        "2026-11-25 17:47:44,123 spyre-runtime INFO step=engine loading the model\n",
        "step=warmup elapsed=soon still running",
    ],
)
def test_logs_without_a_step_line_have_no_step(text: str) -> None:
    assert last_step(text) is None


def test_the_newest_step_wins_and_other_output_between_is_skipped() -> None:
    text = (
        "x spyre-runtime INFO step=warmup elapsed=0.4s cache /c\n"
        "INFO vllm noise step=nothing\n"
        "x spyre-runtime INFO step=engine elapsed=3.0s loading\r\n"
        "Traceback (most recent call last): ...\n"
    )
    assert last_step(text) == Step("engine", 3.0, "loading")
