"""What connects kopf to the reconciler: settings, child-object triggers, Events, metrics.

Configuration comes from the environment (the `run` command sets it from its flags), so
`kopf run -m spyre_operator.handlers` works the same way.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import kopf
from kubernetes import client

from spyre_operator.api.names import API_VERSION, CACHE_KIND, KIND
from spyre_operator.reconcile import compiles, metrics, options
from spyre_operator.reconcile.conditions import Event, clip, event_object_name
from spyre_operator.reconcile.engine import Reconciler, Starts
from spyre_operator.reconcile.kube import KINDS, ApiError, Kube, load_api_client
from spyre_operator.reconcile.observe import job_view
from spyre_operator.render import meta

log = logging.getLogger(__name__)

MANAGED = {"app.kubernetes.io/managed-by": "spyre-operator"}
MODELS = "spyremodels"  # the index of SpyreModels -> the compile Job each wants (handlers.py)
CACHES = "spyrecaches"  # the same of SpyreCaches
EVENT_MESSAGE_LIMIT = 1024
HOST = socket.gethostname()  # the pod's name in a cluster: which replica said it


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    """No kopf-posted Events, one client for every handler (reading the children from the
    indexes), Events posted from a thread of their own, and the periodic resync."""
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.enabled = False  # the reconciler posts its Events itself (EventPoster)
    settings.peering.standalone = True  # one replica (Recreate); no peering CRDs needed
    workers = options.workers()
    settings.execution.max_workers = workers
    api = load_api_client(os.environ.get("KUBECONFIG"), pool_size=workers + 4)
    kube = IndexedKube(api, {plural: indexes[plural] for plural in INDEXED})
    memo.events = EventPoster(kube)
    limits = compiles.Limits(*options.compile_limits())
    wants = (indexes[MODELS], indexes[CACHES])
    queue = functools.partial(compile_queue, limits, indexes["jobs"], wants)
    unlimited = limits == compiles.Limits()  # no queue to read, no lock to take
    starts = Starts()  # compile starts, shared: the queue's limits hold for both kinds
    memo.reconcilers = {
        kind: Reconciler(
            kube,
            memo.events,
            compile_queue=None if unlimited else queue,
            kind=kind,
            starts=starts,
        )
        for kind in (KIND, CACHE_KIND)
    }
    memo.reconciler = memo.reconcilers[KIND]
    watched = {KIND: indexes[MODELS], CACHE_KIND: indexes[CACHES]}
    memo.resync = start_resync(memo.reconcilers, watched, options.resync_seconds())
    port = options.metrics_port()
    if port:
        metrics.serve(lambda: metrics_text(memo.reconciler), port)


def shutdown(memo: kopf.Memo) -> None:
    memo.resync.set()
    memo.events.close()


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base (a deep copy of the whole body) on every watch event, for
    create/update handlers; the operator has none (handlers.py), so that copy of every
    Job, Pod and Deployment event is skipped."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return {}

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        """Nothing to remember."""


# ----- reads from kopf's indexes ------------------------------------------------------
INDEXED = ("jobs", "deployments", "services", "networkpolicies", "persistentvolumeclaims")
KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
)


def index_entry(plural: str, body: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """A child as the reconciler reads it, keyed by (namespace, name): only what observe
    and decide look at (no managedFields; of a Job not the pod template; of a PVC that it
    exists), so the indexes stay small."""
    metadata = body["metadata"]
    entry: dict[str, Any] = {
        "metadata": {k: plain(metadata[k]) for k in KEPT_METADATA if k in metadata}
    }
    if plural == "jobs":
        deadline = body.get("spec", {}).get("activeDeadlineSeconds")
        entry["spec"] = {} if deadline is None else {"activeDeadlineSeconds": deadline}
        entry["status"] = plain(body.get("status") or {})
    elif plural != "persistentvolumeclaims":
        entry["spec"] = plain(body.get("spec") or {})
        entry["status"] = plain(body.get("status") or {})
    return {(metadata["namespace"], metadata["name"]): entry}


class IndexedKube(Kube):
    """The operator's client, but GETs of indexed kinds are answered from kopf's indexes
    (kopf fills them before any handler runs and updates them before handling each
    watch event). The answers are shared: read them, never change them."""

    def __init__(self, api: client.ApiClient, indexes: Mapping[str, Any]) -> None:
        super().__init__(api)
        self.indexes = indexes

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        index = self.indexes.get(KINDS[kind][1])
        if index is None:
            return super().get(kind, namespace, name)
        found: list[dict[str, Any]] = list(index.get((namespace, name), ()))
        return found[-1] if found else None


# ----- the compile queue, from the indexes ----------------------------------------------
def model_entry(body: Mapping[str, Any]) -> dict[tuple[str, str], compiles.Want | None]:
    """A SpyreModel as the index keeps it: the compile Job it wants (the resync walks the
    keys)."""
    metadata = body["metadata"]
    return {(metadata["namespace"], metadata["name"]): compiles.wanted(plain(body))}


def _values(index: Mapping[Any, Any]) -> list[Any]:
    """Every value of a kopf index, read from a worker thread while the event loop may
    change it (list() of the key iterator is atomic, a Python-level loop over it is not)."""
    return [value for key in list(index) for value in list(index.get(key, ()))]


def compile_queue(
    limits: compiles.Limits, jobs: Mapping[Any, Any], wants: Iterable[Mapping[Any, Any]]
) -> compiles.Queue:
    """The queue as the cluster shows it: the compile Jobs, and the SpyreModels and
    SpyreCaches (their indexes: `wants`) whose wanted Job does not exist."""
    known, running = set(), set()
    for job in _values(jobs):
        if meta.component(job) != meta.COMPILE:
            continue
        ref = (job["metadata"]["namespace"], job["metadata"]["name"])
        known.add(ref)
        view = job_view(job, [])
        if not (view.succeeded or view.failed):
            running.add(ref)
    wanting = tuple(
        w for index in wants for w in _values(index) if w is not None and w.ref not in known
    )
    return compiles.Queue(limits, frozenset(running), wanting, frozenset(known))


# ----- Events and the periodic resync --------------------------------------------------
class EventPoster:
    """Posts core/v1 Events on SpyreModels. Phase transitions are posted at once (the
    reconcile waits: their status is written only after them, see conditions.event_name),
    the rest from one background thread, in order, so a reconcile never waits for them.
    Every Event has its name before the first attempt, so a POST that timed out but landed
    is AlreadyExists when tried again. Events are informative: a failure is logged, never
    fails anything."""

    ATTEMPTS = 3
    PAUSE_SECONDS = 1.0  # before the second attempt, doubled before each one after it

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="events", daemon=True)
        self.thread.start()

    def __call__(self, body: Mapping[str, Any], event: Event, name: str | None = None) -> None:
        obj = event_object(body, event, datetime.datetime.now(datetime.UTC), name)
        if name is None:
            self.queue.put(obj)
        else:
            self.post(obj)

    def close(self, timeout: float = 5.0) -> None:
        """Post what is queued (for at most `timeout` seconds), then stop."""
        self.queue.put(None)
        self.thread.join(timeout)

    def _loop(self) -> None:
        while (obj := self.queue.get()) is not None:
            self.post(obj)

    def post(self, obj: dict[str, Any]) -> None:
        """Create the Event; a timeout, 429 or 5xx is tried again (ATTEMPTS in all)."""
        for attempt in range(self.ATTEMPTS):
            if attempt:
                time.sleep(self.PAUSE_SECONDS * 2 ** (attempt - 1))
            try:
                self.kube.create(obj)
                return
            except ApiError as err:
                if err.conflict:
                    return  # posted by an earlier attempt (or an earlier operator)
                failure: Exception = err
                if err.status != 429 and err.status < 500:
                    break
            except Exception as err:  # timeouts, refused connections: try again
                failure = err
        involved = obj["involvedObject"]
        log.warning(
            "%s/%s: could not post Event %s: %s",
            involved["namespace"],
            involved["name"],
            obj["reason"],
            failure,
        )


def event_object(
    body: Mapping[str, Any], event: Event, when: datetime.datetime, name: str | None = None
) -> dict[str, Any]:
    """A core/v1 Event; without a name, kubectl's kind: the object's name and a unique
    suffix."""
    metadata, stamp = body["metadata"], when.isoformat()
    if name is None:
        name = event_object_name(metadata["name"], uuid.uuid4().hex[:16])
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"namespace": metadata["namespace"], "name": name},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": body.get("kind") or KIND,
            "namespace": metadata["namespace"],
            "name": metadata["name"],
            "uid": metadata["uid"],
        },
        "type": event.type,
        "reason": event.reason,
        "message": clip(event.message, EVENT_MESSAGE_LIMIT),
        "source": {"component": "spyre-operator", "host": HOST},
        "reportingComponent": "spyre-operator",
        "reportingInstance": HOST,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


Reconcilers = Mapping[str, Reconciler]  # by kind: SpyreModel, SpyreCache


def start_resync(
    reconcilers: Reconcilers, watched: Mapping[str, Any], interval: float
) -> threading.Event:
    """Every `interval` seconds, reconcile each SpyreModel and SpyreCache the operator
    watches (their indexes, by kind), one after the other. Set the returned Event to stop."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            for kind, index in watched.items():
                reconcile_each(reconcilers[kind], list(index))

    threading.Thread(target=loop, name="resync", daemon=True).start()
    return stop


def plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """A mutable deep copy of kopf's read-only body."""

    def copy(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: copy(v) for k, v in value.items()}
        if isinstance(value, list):
            return [copy(v) for v in value]
        return value

    out: dict[str, Any] = copy(body)
    return out


def model_event(reconciler: Reconciler, event_type: str | None, body: Mapping[str, Any]) -> None:
    """Any event of a SpyreModel (the start-up listing too, so this is also the resume):
    reconcile from the copy the event brings."""
    metadata = body["metadata"]
    if event_type == "DELETED":
        reconciler.forget(metadata["namespace"], metadata["name"])
    else:
        reconciler.run(metadata["namespace"], metadata["name"], plain(body))


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
        reconciler.run(namespace, name)


def child_changed(
    reconcilers: Reconcilers, event_type: str | None, body: Mapping[str, Any]
) -> None:
    """A Job/Deployment/Service/NetworkPolicy changed or was deleted: reconcile its
    owners. ADDED and the initial listing are skipped: the reconciler made the object (the
    start-up listing of the SpyreModels covers restarts). A compile Job that started,
    finished or went away moves the compile queue: then the SpyreModels and SpyreCaches
    waiting in it, first in line first (the first ones may start now, the others learn
    their new place)."""
    if event_type in ("MODIFIED", "DELETED"):
        reconcile_owners(reconcilers, body)
    if moves_compile_queue(event_type, body):
        queue = reconcilers[KIND].compile_queue()
        wanting = queue.wanting if queue is not None else ()
        for want in sorted(wanting, key=compiles.fair):
            reconcilers[want.kind].run(want.namespace, want.name)


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


def metrics_text(reconciler: Reconciler) -> str:
    kube = reconciler.kube
    return metrics.exposition(reconciler.stats, reconciler.metrics, kube.writes, kube.dry_runs)
