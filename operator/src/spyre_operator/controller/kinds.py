"""One kind's controller (SpyreModel, SpyreCache): what the triggers ask of it (queue a
key, now or `later`; the resync's listing; an object gone) and the run of a key, between
the work queue (workqueue.py: when a key runs, its retries, the loop's metrics), the echoes
of the reconciler's own status writes (echoes.py) and the reconciler (reconcile/engine.py:
what a run does)."""

from __future__ import annotations

from typing import Protocol

from spyre_operator.controller.echoes import Echoes
from spyre_operator.controller.workqueue import WorkQueue
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.result import Result


class Forgets(Protocol):
    """What the metrics keep per object (controller/metrics.py)."""

    def forget(self, kind: str, key: tuple[str, str]) -> None: ...


class NoMetrics:
    """No metrics (the tests, the dev tools)."""

    def forget(self, kind: str, key: tuple[str, str]) -> None:
        pass


class Controller:
    """`reconciler` reads its objects through `echoes` (its store: Reconciler(...,
    store=echoes)); `queue` is shared by both kinds, and so is `metrics`."""

    def __init__(
        self,
        reconciler: Reconciler,
        queue: WorkQueue,
        echoes: Echoes,
        metrics: Forgets | None = None,
    ) -> None:
        self.reconciler, self.queue, self.echoes = reconciler, queue, echoes
        self.metrics = metrics or NoMetrics()
        self.kind = reconciler.kind

    def enqueue(self, namespace: str, name: str, version: str | None = None) -> None:
        """Have the object reconciled by the queue's workers (never blocks), unless
        `version` (the resourceVersion its own event brought) is the one our last status
        write returned: the echo of that write needs no run."""
        if version is not None and self.echoes.echo(namespace, name, version):
            return
        self.queue.add((self.kind, namespace, name))

    def enqueue_later(self, namespace: str, name: str) -> None:
        """Have the object reconciled once no reconcile a trigger asked for waits (its
        inventory entry: WorkQueue.later)."""
        self.queue.later((self.kind, namespace, name))

    def listed(self, namespace: str, name: str, version: str) -> None:
        self.echoes.listed(namespace, name, version)

    def forget(self, namespace: str, name: str) -> None:
        """The object is gone: drop what is kept about it."""
        self.echoes.forget(namespace, name)
        self.queue.forget((self.kind, namespace, name))
        self.reconciler.forget(namespace, name)
        self.metrics.forget(self.kind, (namespace, name))

    def reconcile(self, namespace: str, name: str) -> Result:
        """A run of the object's key (the work queue's worker calls it)."""
        result = self.reconciler.reconcile(namespace, name)
        if result.gone:
            self.forget(namespace, name)  # its children go with it (ownerReferences)
        return result
