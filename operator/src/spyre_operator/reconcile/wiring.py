"""What connects kopf to the reconciler: settings, child-object triggers, Events, metrics.

Configuration comes from the environment (the `run` command sets it from its flags), so
`kopf run -m spyre_operator.handlers` works the same way.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf
from kubernetes import client

from spyre_operator.api.names import API_VERSION, GROUP, KIND
from spyre_operator.reconcile import options
from spyre_operator.reconcile.conditions import Event, clip
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.kube import KINDS, Kube, load_api_client
from spyre_operator.render import meta

log = logging.getLogger(__name__)

MANAGED = {"app.kubernetes.io/managed-by": "spyre-operator"}
COMPONENT = "app.kubernetes.io/component"
MODELS = "spyremodels"  # the index of SpyreModel names (handlers.py)
EVENT_MESSAGE_LIMIT = 1024


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    """Own keys for kopf's bookkeeping, no kopf-posted Events, one client for every handler
    (reading the children from the indexes), and the periodic resync."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # No handler needs a finalizer any more; kopf removes this one (added by the resync
    # timer of earlier versions) from the SpyreModels it still finds it on.
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.enabled = False  # the reconciler posts its Events itself (post_event)
    settings.peering.standalone = True  # one replica (Recreate); no peering CRDs needed
    workers = options.workers()
    settings.execution.max_workers = workers
    settings.execution.default_backoff = 10  # seconds before a failed reconcile is retried
    api = load_api_client(os.environ.get("KUBECONFIG"), pool_size=workers + 4)
    kube = IndexedKube(api, {plural: indexes[plural] for plural in INDEXED})
    memo.reconciler = Reconciler(kube, lambda body, event: post_event(kube, body, event))
    memo.resync = start_resync(memo.reconciler, indexes[MODELS], options.resync_seconds())
    port = options.metrics_port()
    if port:
        serve_metrics(memo.reconciler, port)


def shutdown(memo: kopf.Memo) -> None:
    memo.resync.set()


# ----- reads from kopf's indexes ------------------------------------------------------
INDEXED = ("jobs", "deployments", "services", "persistentvolumeclaims")
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


# ----- Events and the periodic resync --------------------------------------------------
def post_event(kube: Kube, body: Mapping[str, Any], event: Event) -> None:
    """A core/v1 Event on the SpyreModel. Events are informative: a failure is logged,
    never fails the reconcile."""
    metadata = body["metadata"]
    now = datetime.datetime.now(datetime.UTC).isoformat()
    try:
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"namespace": metadata["namespace"], "generateName": "spyre-operator-"},
                "involvedObject": {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "namespace": metadata["namespace"],
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                },
                "type": event.type,
                "reason": event.reason,
                "message": clip(event.message, EVENT_MESSAGE_LIMIT),
                "source": {"component": "spyre-operator"},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )
    except Exception as err:
        log.warning(
            "%s/%s: could not post Event %s: %s",
            metadata["namespace"],
            metadata["name"],
            event.reason,
            err,
        )


def start_resync(reconciler: Reconciler, models: Any, interval: float) -> threading.Event:
    """Every `interval` seconds, reconcile each SpyreModel the operator watches (the
    index), one after the other. Set the returned Event to stop."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            reconcile_each(reconciler, list(models))

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


def reconcile_body(reconciler: Reconciler, body: Mapping[str, Any]) -> None:
    meta_ = body["metadata"]
    reconciler.reconcile(meta_["namespace"], meta_["name"], plain(body))


def owners(obj: Mapping[str, Any]) -> list[str]:
    """Names of the SpyreModels owning a child (a shared compile Job has several)."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return [r["name"] for r in refs if r.get("kind") == KIND and r.get("apiVersion") == API_VERSION]


def reconcile_each(reconciler: Reconciler, keys: Iterable[tuple[str, str]]) -> None:
    for namespace, name in keys:
        try:  # one broken SpyreModel must not keep the others from reacting
            reconciler.reconcile(namespace, name)
        except Exception:
            log.exception("reconciling %s/%s", namespace, name)


def child_changed(reconciler: Reconciler, event_type: str | None, body: Mapping[str, Any]) -> None:
    """A Job/Deployment/Service changed or was deleted: reconcile its owners. ADDED and
    the initial listing are skipped: the reconciler made the object (resume covers
    restarts)."""
    if event_type in ("MODIFIED", "DELETED"):
        namespace = body["metadata"]["namespace"]
        reconcile_each(reconciler, [(namespace, name) for name in owners(body)])


def pod_changed(reconciler: Reconciler, event_type: str | None, body: Mapping[str, Any]) -> None:
    """A compile pod finished (its Job's owners read its summary) or a serving pod got
    stuck (its SpyreModel reports why)."""
    if event_type not in ("MODIFIED", "DELETED"):
        return
    namespace = body["metadata"]["namespace"]
    labels = body["metadata"].get("labels") or {}
    if labels.get(COMPONENT) == meta.SERVER and meta.MODEL_LABEL in labels:
        reconcile_each(reconciler, [(namespace, labels[meta.MODEL_LABEL])])
    elif labels.get(COMPONENT) == meta.COMPILE and "job-name" in labels:
        job = reconciler.kube.get("Job", namespace, labels["job-name"])
        reconcile_each(reconciler, [(namespace, name) for name in owners(job or {})])


def metrics_text(reconciler: Reconciler) -> str:
    """Prometheus text format: reconciles, errors, status writes and every API write."""
    stats, prefix = reconciler.stats, "spyre_operator"
    lines = [
        f"{prefix}_reconciles_total {stats['reconciles']}",
        f"{prefix}_reconcile_errors_total {stats['errors']}",
        f"{prefix}_reconcile_conflicts_total {stats['conflicts']}",
        f"{prefix}_status_writes_total {stats['status_writes']}",
        f"{prefix}_reconcile_seconds_total {reconciler.seconds:.6f}",
        f"{prefix}_api_writes_total {reconciler.kube.total_writes()}",
    ]
    for request, count in sorted(reconciler.kube.writes.items()):
        verb, kind = request.split(" ", 1)
        lines.append(f'{prefix}_api_requests_total{{verb="{verb}",kind="{kind}"}} {count}')
    return "\n".join(lines) + "\n"


def serve_metrics(reconciler: Reconciler, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = metrics_text(reconciler).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes are not worth a log line."""

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("metrics on http://0.0.0.0:%d/metrics", port)
    return server
