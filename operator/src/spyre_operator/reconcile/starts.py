"""Did each serving replica start from the cache? Its compile report says (the `warmed=1`
line each of its processes logs when the warmup ends, before the pod turns Ready:
spyre_runtime.contract.startup).

The operator reads a ready serving pod's log once, from its start (bounded: LIMIT_BYTES,
a short timeout), and keeps what it found while the pod lives: a pod started once. A read
that fails (refused, no kubelet, a timeout) is tried again at the next reconcile, and
logged once per kind of failure; it never fails a reconcile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass

from spyre_operator.kube.client import Kube, one_line
from spyre_operator.reconcile.log_reads import FAILURES, FirstFailures
from spyre_operator.render.pod import CONTAINER_NAMES
from spyre_runtime.contract import startup

log = logging.getLogger(__name__)

LIMIT_BYTES = 1024 * 1024  # vLLM's start-up at INFO is some hundred lines
TIMEOUT_SECONDS = 5.0

Pod = tuple[str, str]  # name, creationTimestamp (a new pod of the same name is another)
Model = tuple[str, str]  # namespace, name


@dataclass(frozen=True)
class Start:
    """A ready serving pod's start-up, as its compile report says."""

    pod: str
    compiled: bool | None  # None: no report in its log (an image without one)
    misses: int = 0  # graphs inductor compiled (fxgraph misses and bypasses)
    seconds: float = 0.0  # in torch.compile, cache loads included


class StartReader:
    """Shared by the reconcilers (thread-safe)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._found: dict[Model, dict[Pod, Start]] = {}
        self._failures = FirstFailures()
        self._guard = threading.Lock()
        self.reads = 0

    def __call__(self, model: Model, pod: Pod) -> Start | None:
        """The pod's start-up; None when its log could not be read (tried again later)."""
        with self._guard:
            found = self._found.get(model, {}).get(pod)
        if found is not None:
            return found
        found = self._read(model[0], pod[0])
        if found is not None:
            with self._guard:
                self._found.setdefault(model, {})[pod] = found
        return found

    def forget(self, model: Model, keep: Collection[Pod] = ()) -> None:
        """Forget the model's pods but `keep` (those it has now; none: the model went)."""
        with self._guard:
            pods = self._found.get(model, {})
            for gone in set(pods) - set(keep):
                del pods[gone]
            if not pods:
                self._found.pop(model, None)

    def _read(self, namespace: str, name: str) -> Start | None:
        self.reads += 1
        try:
            text = self.kube.log_tail(
                namespace, name, CONTAINER_NAMES["serve"], None, LIMIT_BYTES, TIMEOUT_SECONDS
            )
        except FAILURES as err:
            if self._failures.first(err):
                log.warning("reading a serving pod's start-up report: %s", one_line(err))
            return None
        reports = startup(text).values()
        if not reports:
            return Start(name, None)
        misses = sum(r.fxgraph_miss + r.fxgraph_bypass for r in reports)
        seconds = sum(r.compile_ms for r in reports) / 1000
        return Start(name, any(r.compiled for r in reports), misses, seconds)
