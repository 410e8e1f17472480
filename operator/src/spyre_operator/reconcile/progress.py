"""A running compile's progress: the newest step its pod logged (status.cache.progress).

The pod logs its steps (spyre_runtime.contract.step_line; the warmup repeats its step
every HEARTBEAT_SECONDS). The operator reads the end of that log through the API server
(`pods/log`, get only), which asks the pod's kubelet: bounded (TAIL_LINES lines, at most
LIMIT_BYTES), with a short timeout, and at most once per interval per compile Job however
many reconciles its owners run. A failure (refused, no kubelet, a timeout) leaves the
progress out and is logged once per kind of failure; it never fails a reconcile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from spyre_operator.kube.client import ApiError, Kube, one_line
from spyre_operator.reconcile.compile_queue import JobRef
from spyre_operator.reconcile.log_reads import FAILURES, FirstFailures
from spyre_operator.render import meta
from spyre_operator.render.pod import CONTAINER_NAMES
from spyre_runtime.contract import Step, last_step

log = logging.getLogger(__name__)

TAIL_LINES = 100  # vLLM logs between two heartbeats; the newest step is usually the last
LIMIT_BYTES = 32 * 1024
TIMEOUT_SECONDS = 5.0
# A reading this much of the interval old is read again, so the reconcile the heartbeat
# asks for (one interval after the last) always reads.
FRESH = 0.9
FORGET_AFTER = 10  # intervals without a reconcile asking: the Job is gone


@dataclass(frozen=True)
class Reading:
    pod: str
    step: Step


class ProgressReader:
    """Shared by the reconcilers of SpyreModels and SpyreCaches (a Job may be both's)."""

    def __init__(
        self, kube: Kube, interval: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube, self.interval, self.clock = kube, interval, clock
        self._readings: dict[JobRef, tuple[float, Reading | None]] = {}
        self._locks: dict[JobRef, threading.Lock] = {}
        self._failures = FirstFailures()
        self._guard = threading.Lock()
        self.reads = 0  # log reads tried (tests: at most one per interval per Job)

    def __call__(self, namespace: str, job: str) -> Reading | None:
        """The Job's newest step, read again once the last reading is stale; callers for
        the same Job meanwhile wait for that read."""
        ref = (namespace, job)
        with self._guard:
            lock = self._locks.setdefault(ref, threading.Lock())
        with lock:
            now = self.clock()
            with self._guard:
                self._forget_old(now)
                cached = self._readings.get(ref)
            if cached is not None and now - cached[0] < self.interval * FRESH:
                return cached[1]
            reading = self._read(namespace, job)
            with self._guard:
                self._readings[ref] = (now, reading)
            return reading

    def _forget_old(self, now: float) -> None:
        for ref, (when, _) in list(self._readings.items()):
            if now - when > self.interval * FORGET_AFTER:
                del self._readings[ref]
                self._locks.pop(ref, None)

    def _read(self, namespace: str, job: str) -> Reading | None:
        with self._guard:
            self.reads += 1
        try:
            pods = self.kube.list("Pod", namespace, f"{meta.JOB_NAME_LABEL}={job}")
            running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
            if not running:
                return None
            newest = max(running, key=lambda p: p["metadata"].get("creationTimestamp", ""))
            pod = newest["metadata"]["name"]
            text = self.kube.log_tail(
                namespace,
                pod,
                CONTAINER_NAMES["precompile"],
                TAIL_LINES,
                LIMIT_BYTES,
                TIMEOUT_SECONDS,
            )
        except FAILURES as err:
            self._complain(namespace, job, err)
            return None
        step = last_step(text)
        return Reading(pod, step) if step is not None else None

    def _complain(self, namespace: str, job: str, err: Exception) -> None:
        """Once per kind of failure (a 403, a 404, a timeout, ...), not per Job or read."""
        if not self._failures.first(err):
            return
        hint = (
            " (the operator needs get on pods/log; --progress-seconds 0 turns the reads off)"
            if isinstance(err, ApiError) and err.status == 403
            else ""
        )
        log.warning(
            "compile progress of Job %s/%s left out: reading its pod's log failed: %s%s; "
            "said once for this kind of failure",
            namespace,
            job,
            one_line(err),
            hint,
        )
