"""Logging and the one-line JSON termination message the operator copies into status."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from .contract import Reason, Summary

log = logging.getLogger("spyre_runtime")

# Kubernetes keeps at most 4096 bytes of a termination message.
_MAX_MESSAGE = 1500


def setup_logging() -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s spyre-runtime %(levelname)s %(message)s",
    )


class Progress:
    """Logs each step with the time since the command started."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def step(self, name: str, detail: str = "") -> None:
        log.info("step=%s elapsed=%.1fs %s", name, self.elapsed(), detail)


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
