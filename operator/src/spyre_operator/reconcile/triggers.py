"""What makes a SpyreModel or SpyreCache reconcile: its own events, its children's and
pods' events, the compile queue moving, and the periodic resync. Each only queues the
object (workqueue.py): a kopf handler never waits for a reconcile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spyre_operator.api.names import API_VERSION, KIND
from spyre_operator.reconcile import compiles, inventory
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.indexes import plain
from spyre_operator.reconcile.observe import job_view
from spyre_operator.reconcile.workqueue import Key
from spyre_operator.render import meta

Reconcilers = Mapping[str, Reconciler]  # by kind: SpyreModel, SpyreCache


class Resync(threading.Thread):
    """Every `period` seconds, each SpyreModel and SpyreCache the operator watches
    (`keys()`, read at the start of each pass) is queued once, spread evenly over the period:
    key i of n at i * period / n, so the reconciles of a pass (and their API reads) come at
    n / period per second instead of all at once (`add`: WorkQueue.resync, behind what the
    triggers queued). The first pass starts one period after
    the start (the start-up listing reconciled everything). `clock` and `wait` (returns
    True once stopped) are injectable for tests."""

    def __init__(
        self,
        keys: Callable[[], list[Key]],
        add: Callable[[Key], None],
        period: float,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        super().__init__(name="resync", daemon=True)
        self.keys, self.add, self.period, self.clock = keys, add, period, clock
        self._stop = threading.Event()
        self.wait = wait or self._stop.wait

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        start = self.clock()
        while True:
            start += self.period
            if self._wait_until(start):
                return
            keys = self.keys()
            for i, key in enumerate(keys):
                if self._wait_until(start + self.period * i / len(keys)):
                    return
                self.add(key)

    def _wait_until(self, when: float) -> bool:
        return self.wait(max(0.0, when - self.clock()))


def watched_keys(watched: Mapping[str, Any]) -> list[Key]:
    """(kind, namespace, name) of every object in the indexes of SpyreModels and
    SpyreCaches (`watched`, by kind), in a stable order."""
    return sorted((kind, ns, name) for kind, index in watched.items() for ns, name in list(index))


def model_event(reconciler: Reconciler, event_type: str | None, body: Mapping[str, Any]) -> None:
    """Any event of a SpyreModel (the start-up listing too, so this is also the resume):
    reconcile from the copy the event brings."""
    metadata = body["metadata"]
    if event_type == "DELETED":
        reconciler.forget(metadata["namespace"], metadata["name"])
    else:
        reconciler.enqueue(metadata["namespace"], metadata["name"], plain(body))


def owners(obj: Mapping[str, Any], kind: str = KIND) -> list[str]:
    """Names of the SpyreModels (or SpyreCaches) owning a child (a shared compile Job has
    several)."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return [r["name"] for r in refs if r.get("kind") == kind and r.get("apiVersion") == API_VERSION]


def reconcile_owners(reconcilers: Reconcilers, obj: Mapping[str, Any]) -> None:
    namespace = obj["metadata"]["namespace"]
    for kind, reconciler in reconcilers.items():
        reconcile_each(reconciler, [(namespace, name) for name in owners(obj, kind)])


def reconcile_each(reconciler: Reconciler, keys: Iterable[tuple[str, str]]) -> None:
    for namespace, name in keys:
        reconciler.enqueue(namespace, name)


def child_changed(
    reconcilers: Reconcilers, event_type: str | None, body: Mapping[str, Any]
) -> None:
    """A Job/Deployment/Service/NetworkPolicy changed or was deleted: reconcile its
    owners. ADDED and the initial listing are skipped: the reconciler made the object (the
    start-up listing of the SpyreModels covers restarts); but a new compile Job without
    its key's inventory entry has its owners reconciled `later` (behind every other
    reconcile), to make the entry. A compile Job that started, finished or went away moves
    the compile queue: then the SpyreModels and SpyreCaches waiting in it, first in line
    first (the first ones may start now, the others learn their new place)."""
    if event_type in ("MODIFIED", "DELETED"):
        reconcile_owners(reconcilers, body)
    elif event_type == "ADDED" and lacks_entry(body):
        namespace = body["metadata"]["namespace"]
        for kind, reconciler in reconcilers.items():
            for name in owners(body, kind):
                reconciler.enqueue_later(namespace, name)
    if moves_compile_queue(event_type, body):
        queue = reconcilers[KIND].compile_queue()
        wanting = queue.wanting if queue is not None else ()
        for want in sorted(wanting, key=compiles.fair):
            reconcilers[want.kind].enqueue(want.namespace, want.name)


def lacks_entry(body: Mapping[str, Any]) -> bool:
    """A compile Job its key's inventory entry does not own."""
    if meta.component(body) != meta.COMPILE:
        return False
    view = job_view(plain(body), [])
    return view.cache_key is not None and inventory.needs_entry(view.cache_key, view)


def moves_compile_queue(event_type: str | None, body: Mapping[str, Any]) -> bool:
    if meta.component(body) != meta.COMPILE or event_type is None:
        return False
    view = job_view(plain(body), [])
    return event_type in ("ADDED", "DELETED") or view.succeeded or view.failed


def pod_changed(reconcilers: Reconcilers, event_type: str | None, body: Mapping[str, Any]) -> None:
    """A compile or weights pod finished (its Job's owners read its summary) or a serving
    pod got stuck (its SpyreModel reports why)."""
    if event_type not in ("MODIFIED", "DELETED"):
        return
    namespace = body["metadata"]["namespace"]
    labels = body["metadata"].get("labels") or {}
    component = meta.component(body)
    models = reconcilers[KIND]
    if component == meta.SERVER and meta.MODEL_LABEL in labels:
        reconcile_each(models, [(namespace, labels[meta.MODEL_LABEL])])
    elif component in (meta.COMPILE, meta.WEIGHTS) and "job-name" in labels:
        job = models.kube.get("Job", namespace, labels["job-name"])
        reconcile_owners(reconcilers, job or {"metadata": {"namespace": namespace}})
