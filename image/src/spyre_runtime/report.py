"""Logging and the one-line JSON termination message the operator copies into status."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from .contract import (
    DEFAULT_TERMINATION_LOG,
    SPYRE_SERVING_TERMINATION_LOG,
    Reason,
    Step,
    Summary,
    step_line,
)

log = logging.getLogger("spyre_runtime")

# Kubernetes keeps at most 4096 bytes of a termination message.
_MAX_MESSAGE = 1500
LOG_FORMAT = "%(asctime)s spyre-runtime %(levelname)s %(message)s"


def setup_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=LOG_FORMAT)


def termination_log(environ: Mapping[str, str]) -> Path:
    """Where the summary line goes (the kubelet's termination message file)."""
    return Path(environ.get(SPYRE_SERVING_TERMINATION_LOG) or DEFAULT_TERMINATION_LOG)


# The command's start (time.monotonic(), one clock for the whole machine) for a child
# process, so its steps count from the same start.
STARTED_ENV = "SPYRE_RUNTIME_STARTED"


class Progress:
    """Logs each step (contract.step_line) with the time since the command started.

    A child process given `current` also keeps its step in progress there (a small JSON
    file), so that the parent's heartbeat can say what the child is doing."""

    def __init__(self, started: float | None = None, current: Path | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self.current = current

    @classmethod
    def of_parent(cls, current: Path) -> Progress:
        """A child's Progress, counting from the parent's start (STARTED_ENV)."""
        started = os.environ.get(STARTED_ENV)
        return cls(float(started) if started else None, current)

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def step(self, name: str, detail: str = "") -> None:
        log.info("%s", step_line(Step(name, self.elapsed(), detail)))
        self.note(name, detail)

    def note(self, name: str, detail: str) -> None:
        """Keep the step in progress for the heartbeat without logging a line."""
        if self.current is None:
            return
        partial = self.current.with_name(self.current.name + ".tmp")
        try:
            partial.write_text(json.dumps({"name": name, "detail": detail}))
            os.replace(partial, self.current)
        except OSError as e:  # the heartbeat then says less; the compile goes on
            log.debug("cannot keep the step in %s: %s", self.current, e)

    def heartbeat(self, current: Path, name: str) -> None:
        """`name` is still running: log it with the child's step in progress, if any."""
        try:
            doing = json.loads(current.read_text())
        except (OSError, ValueError):
            doing = {}
        detail = "still running"
        if doing.get("detail"):
            detail += f": {doing['detail']}"
        log.info("%s", step_line(Step(str(doing.get("name") or name), self.elapsed(), detail)))


def failure(reason: Reason, message: str) -> Summary:
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    return {"ok": False, "reason": reason, "message": message}


def write_summary(path: Path, summary: Summary) -> None:
    """Write the summary line; outside a pod the path may not exist, so just log it."""
    line = json.dumps(summary, sort_keys=True)
    log.info("summary %s", line)
    try:
        with open(path, "w") as f:
            f.write(line + "\n")
    except OSError as e:
        log.info("termination log %s not writable (%s)", path, e.strerror)
