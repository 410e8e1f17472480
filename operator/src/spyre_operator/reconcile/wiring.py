"""What connects kopf to the reconciler: settings, child-object triggers, Events, metrics.

Configuration comes from the environment (the `run` command sets it from its flags), so
`kopf run -m spyre_operator.handlers` works the same way.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import kopf

from spyre_operator.api.names import API_VERSION, GROUP, KIND
from spyre_operator.reconcile import options
from spyre_operator.reconcile.conditions import Event
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.kube import Kube, load_api_client
from spyre_operator.render import meta

log = logging.getLogger(__name__)

MANAGED = {"app.kubernetes.io/managed-by": "spyre-operator"}
COMPONENT = "app.kubernetes.io/component"


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo) -> None:
    """Own keys for kopf's bookkeeping, quiet posting, one client for every handler."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.reporting_component = "spyre-operator"
    settings.posting.event_name_prefix = "spyre-operator-"
    settings.posting.loggers = False  # only the Events the reconciler posts on purpose
    settings.peering.standalone = True  # one replica (Recreate); no peering CRDs needed
    workers = options.workers()
    settings.execution.max_workers = workers
    settings.execution.default_backoff = 10  # seconds before a failed reconcile is retried
    kube = Kube(load_api_client(os.environ.get("KUBECONFIG"), pool_size=workers + 4))
    memo.reconciler = Reconciler(kube, post_event)
    port = options.metrics_port()
    if port:
        serve_metrics(memo.reconciler, port)


def post_event(body: dict[str, Any], event: Event) -> None:
    kopf.event(cast(kopf.Body, body), type=event.type, reason=event.reason, message=event.message)


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


def _reconcile_each(reconciler: Reconciler, namespace: str, names: list[str]) -> None:
    for name in names:
        try:  # one broken SpyreModel must not keep the others from reacting
            reconciler.reconcile(namespace, name)
        except Exception:
            log.exception("reconciling %s/%s after a child changed", namespace, name)


def child_changed(reconciler: Reconciler, event_type: str | None, body: Mapping[str, Any]) -> None:
    """A Job/Deployment/Service changed or was deleted: reconcile its owners. ADDED and
    the initial listing are skipped: the reconciler made the object (resume covers
    restarts)."""
    if event_type in ("MODIFIED", "DELETED"):
        _reconcile_each(reconciler, body["metadata"]["namespace"], owners(body))


def pod_changed(reconciler: Reconciler, event_type: str | None, body: Mapping[str, Any]) -> None:
    """A compile pod finished (its Job's owners read its summary) or a serving pod got
    stuck (its SpyreModel reports why)."""
    if event_type not in ("MODIFIED", "DELETED"):
        return
    namespace = body["metadata"]["namespace"]
    labels = body["metadata"].get("labels") or {}
    if labels.get(COMPONENT) == meta.SERVER and meta.MODEL_LABEL in labels:
        _reconcile_each(reconciler, namespace, [labels[meta.MODEL_LABEL]])
    elif labels.get(COMPONENT) == meta.COMPILE and "job-name" in labels:
        job = reconciler.kube.get("Job", namespace, labels["job-name"])
        _reconcile_each(reconciler, namespace, owners(job) if job else [])


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
