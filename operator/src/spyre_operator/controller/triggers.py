"""What makes a SpyreModel or SpyreCache reconcile: its own events, its children's and
pods' events, the compile queue moving, and the periodic resync. Each only queues the
object (workqueue.py): a kopf handler never waits for a reconcile."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from spyre_operator.api.names import API_VERSION, CACHE_KIND, KIND
from spyre_operator.controller.kinds import Controller
from spyre_operator.controller.workqueue import Key, WorkQueue
from spyre_operator.kube.client import KINDS, METADATA_ONLY, ApiError, Kube, one_line, path
from spyre_operator.kube.entries import plain
from spyre_operator.reconcile import compile_queue, inventory
from spyre_operator.reconcile.views import job_view
from spyre_operator.render import meta, router

log = logging.getLogger(__name__)

Controllers = Mapping[str, Controller]  # by kind: SpyreModel, SpyreCache


PAGE = 500  # objects per page of the resync's LIST (their metadata only: the keys, versions)
BACKLOG_PAUSE = 0.5  # seconds between looks at a resync lane too full to add to
# Seconds a pass may fall behind its schedule and catch up (a page's LIST takes about
# one on a loaded API server: 40 of them would stretch a pass of 20,000 objects by a
# seventh); beyond, the rest moves back (an outage never ends in a burst).
CATCH_UP = 5.0


class Resync(threading.Thread):
    """Every `period` seconds, each SpyreModel and SpyreCache (`kinds`, in the watched
    `namespaces`; none: all) that a paged LIST brings is queued once (its run reads the watch
    store: no GET per object; `seen` is told each object's resourceVersion, so a store that
    missed an event is read around), spread evenly over the period: each object period / n after
    the last one (n: `count()`, read as the pass goes), so the reconciles of a pass (and their
    API requests) come at n / period per second instead of all at once (WorkQueue.resync, behind
    what the triggers queued). The next page is listed when the last one is queued, and not
    while the queue holds a page's worth of the resync's keys not taken yet (the workers lag):
    one page's keys and versions in memory (a LIST of metadata only). An expired continue token
    (410) is followed by the one its answer brings (the rest of the list, from a newer state);
    without one (or on any other error), the pass ends there and the next one lists again. The
    first pass starts one period after the start (the start-up listing reconciled everything),
    each next one a period after the last one started, or when it ended if it took longer.
    `passes` and `last_pass` (objects, seconds from its start to its last object queued) tell
    the metrics how passes keep up with their period; `after_pass` runs after each one (the
    allocator's trim). `clock` and `wait` (returns True once stopped) are injectable for tests."""

    def __init__(
        self,
        kube: Kube,
        queue: WorkQueue,
        count: Callable[[], int],
        period: float,
        kinds: Iterable[str] = (KIND, CACHE_KIND),
        namespaces: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        after_pass: Callable[[], object] = lambda: None,
        seen: Callable[[Key, str], object] = lambda key, version: None,
    ) -> None:
        super().__init__(name="resync", daemon=True)
        self.after_pass, self.seen = after_pass, seen
        self.kube, self.queue, self.count, self.period = kube, queue, count, period
        self.kinds, self.namespaces, self.clock = tuple(kinds), tuple(namespaces), clock
        self._stop = threading.Event()
        self.wait = wait or self._stop.wait
        self.passes = 0
        self.last_pass: tuple[int, float] | None = None

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        due = self.clock() + self.period
        while not self._wait_until(due):
            start = self.clock()
            due = start + self.period  # a pass that took longer: the next one at its end
            try:
                if self.one_pass(start):
                    return
            except Exception as err:  # the API server away, a timeout: the next pass
                log.warning("resync pass stopped: %s (again in %gs)", one_line(err), self.period)

    def one_pass(self, start: float) -> bool:
        """Queue every object, spread from `start` on; True once stopped. A pass up to
        CATCH_UP seconds behind its schedule (a page's LIST) catches up; an object queued
        later than that (a very slow LIST, a full queue) moves the rest back by the
        excess: a pass far behind never catches up in a burst."""
        due, queued = start, 0
        for key, version in self.listed():
            if self._wait_until(due) or self._wait_for_room():
                return True
            due = max(due, self.clock() - CATCH_UP)
            self.seen(key, version)
            self.queue.resync(key)
            queued += 1
            # The next a period's n-th later, n counted now: a pass that started before a
            # burst of creates keeps pace with it (10,000 models: 6 instead of 67/s).
            due += self.period / max(1, self.count())
        seconds = self.clock() - start
        self.passes, self.last_pass = self.passes + 1, (queued, seconds)
        self.after_pass()
        if seconds > self.period + CATCH_UP:
            log.warning(
                "resync: a pass of %d objects took %.0f s, longer than its period of %g s "
                "(the workers or the API server lag); the next one starts now",
                queued,
                seconds,
                self.period,
            )
        return False

    def _wait_for_room(self) -> bool:
        while self.queue.resyncs_waiting() >= PAGE:
            if self.wait(BACKLOG_PAUSE):
                return True
        return False

    def listed(self) -> Iterator[tuple[Key, str]]:
        """Every object of each kind and its resourceVersion, page by page."""
        for kind in self.kinds:
            for url in self._urls(kind):
                token = ""
                while True:
                    query = {"limit": str(PAGE)} | ({"continue": token} if token else {})
                    try:
                        page = self.kube.request("GET", url, query=query, accept=METADATA_ONLY)
                    except ApiError as err:
                        token = expired_continue(err)
                        if not token:
                            raise
                        log.info("resync: the %s list expired: continued from a newer state", kind)
                        continue
                    # Only the keys and versions are held while the page is spread out.
                    found = [
                        ((kind, m["namespace"], m["name"]), m["resourceVersion"])
                        for m in (body["metadata"] for body in page.get("items") or [])
                    ]
                    token = (page.get("metadata") or {}).get("continue") or ""
                    del page
                    yield from found
                    if not token:
                        break

    def _urls(self, kind: str) -> list[str]:
        if self.namespaces:
            return [path(kind, namespace) for namespace in self.namespaces]
        prefix, plural = KINDS[kind]
        return [f"/{prefix}/{plural}"]

    def _wait_until(self, when: float) -> bool:
        return self.wait(max(0.0, when - self.clock()))


def expired_continue(err: ApiError) -> str:
    """The token of an inconsistent continuation that a 410 (an expired continue token)
    brings in its Status ("": another error, or none brought)."""
    if err.status != 410:
        return ""
    token: str = (err.body.get("metadata") or {}).get("continue") or ""
    return token


def watched_count(watched: Mapping[str, Any]) -> int:
    """How many SpyreModels and SpyreCaches the operator watches (their indexes:
    `watched`, by kind): the resync's estimate of a pass's length."""
    return sum(len(index) for index in watched.values())


def model_event(controller: Controller, event_type: str | None, body: Mapping[str, Any]) -> None:
    """Any event of a SpyreModel (the start-up listing too, so this is also the resume):
    reconcile it (its run reads the watch store, which kopf's index updated before this
    handler), unless the event is the echo of the reconciler's own status write."""
    metadata = body["metadata"]
    if event_type == "DELETED":
        controller.forget(metadata["namespace"], metadata["name"])
    else:
        controller.enqueue(metadata["namespace"], metadata["name"], metadata["resourceVersion"])


def owners(obj: Mapping[str, Any], kind: str = KIND) -> list[str]:
    """Names of the SpyreModels (or SpyreCaches) owning a child (a shared compile Job has
    several). The endpoint picker's Deployment and Service are owned by the model's
    InferencePool, named as the model (spec.routing): its SpyreModel's too."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    owning = {(kind, API_VERSION)} | (
        {(router.POOL, router.POOL_API_VERSION)} if kind == KIND else set()
    )
    return [r["name"] for r in refs if (r.get("kind"), r.get("apiVersion")) in owning]


def reconcile_owners(controllers: Controllers, obj: Mapping[str, Any]) -> None:
    namespace = obj["metadata"]["namespace"]
    for kind, controller in controllers.items():
        reconcile_each(controller, [(namespace, name) for name in owners(obj, kind)])


def reconcile_each(controller: Controller, keys: Iterable[tuple[str, str]]) -> None:
    for namespace, name in keys:
        controller.enqueue(namespace, name)


def child_changed(
    controllers: Controllers, event_type: str | None, body: Mapping[str, Any]
) -> None:
    """A Job/Deployment/Service/NetworkPolicy changed or was deleted: reconcile its
    owners. ADDED and the initial listing are skipped: the reconciler made the object (the
    start-up listing of the SpyreModels covers restarts); but a new compile Job without
    its key's inventory entry has its owners reconciled `later` (behind every other
    reconcile), to make the entry. A compile Job that started, finished or went away moves
    the compile queue: then the SpyreModels and SpyreCaches waiting in it, first in line
    first (the first ones may start now, the others learn their new place)."""
    if event_type in ("MODIFIED", "DELETED"):
        reconcile_owners(controllers, body)
    elif event_type == "ADDED" and lacks_entry(body):
        namespace = body["metadata"]["namespace"]
        for kind, controller in controllers.items():
            for name in owners(body, kind):
                controller.enqueue_later(namespace, name)
    if moves_compile_queue(event_type, body):
        queue = controllers[KIND].reconciler.compile_queue()
        wanting = queue.wanting if queue is not None else ()
        for want in sorted(wanting, key=compile_queue.fair):
            controllers[want.kind].enqueue(want.namespace, want.name)


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


def pod_changed(controllers: Controllers, event_type: str | None, body: Mapping[str, Any]) -> None:
    """A compile or weights pod finished (its Job's owners read its summary) or a serving
    pod got stuck (its SpyreModel reports why). ADDED too: the reconcile reads pods from
    the pods' store, and a pod may reach it (already ended) after its Job's own change was
    reconciled without it. Not the start-up listing."""
    if event_type is None:
        return
    namespace = body["metadata"]["namespace"]
    labels = body["metadata"].get("labels") or {}
    component = meta.component(body)
    models = controllers[KIND]
    if component == meta.SERVER and meta.MODEL_LABEL in labels:
        reconcile_each(models, [(namespace, labels[meta.MODEL_LABEL])])
    elif component in (meta.COMPILE, meta.WEIGHTS) and meta.JOB_NAME_LABEL in labels:
        job = models.reconciler.kube.get("Job", namespace, labels[meta.JOB_NAME_LABEL])
        reconcile_owners(controllers, job or {"metadata": {"namespace": namespace}})
