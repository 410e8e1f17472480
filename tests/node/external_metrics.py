"""An external metrics API (`external.metrics.k8s.io/v1beta1`, the contract KEDA serves
to the HPA controller) that a node test runs on the host and drives by hand.

The API server reaches it the way it reaches KEDA: an APIService naming a Service, here
one without a selector whose Endpoints point at the host (kube-proxy routes the Service's
address there). Every metric's value is what the test last set.
"""

from __future__ import annotations

import datetime
import json
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.node_config import NODE_IP
from spyre_operator.webhook import certs
from spyre_operator.webhook.server import load_into

GROUP, VERSION = "external.metrics.k8s.io", "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
API_SERVICE = f"{VERSION}.{GROUP}"
SERVICE = "spyre-test-external-metrics"
VALUE_PATH = re.compile(rf"/apis/{re.escape(GROUP_VERSION)}/namespaces/([^/]+)/([^/?]+)")


class ExternalMetrics:
    """Serves values set with `set(name, value)` (a Kubernetes quantity, e.g. "2")."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.reads: dict[str, int] = {}
        self.server = ThreadingHTTPServer(("0.0.0.0", 0), self._handler())
        self.port = self.server.server_address[1]
        now = datetime.datetime.now(datetime.UTC)
        issued = certs.issue([NODE_IP], now)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        load_into(context, issued.cert, issued.key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    def set(self, name: str, value: str) -> None:
        self.values[name] = value

    def __enter__(self) -> ExternalMetrics:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def register(self, kubectl: Kubectl, namespace: str) -> None:
        """The Service, its Endpoints (the host) and the APIService that route the API
        server's requests for the group here."""
        objects = [
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE},
             "spec": {"ports": [{"port": 443, "targetPort": self.port}]}},
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": SERVICE},
             "subsets": [{"addresses": [{"ip": NODE_IP}], "ports": [{"port": self.port}]}]},
            {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
             "metadata": {"name": API_SERVICE},
             "spec": {"group": GROUP, "version": VERSION, "insecureSkipTLSVerify": True,
                      "groupPriorityMinimum": 100, "versionPriority": 100,
                      "service": {"name": SERVICE, "namespace": namespace, "port": 443}}},
        ]  # fmt: skip
        for doc in objects:
            kubectl("apply", "-f", "-", input=json.dumps(doc))
        kubectl.wait(f"apiservice/{API_SERVICE}", "condition=Available")

    @staticmethod
    def unregister(kubectl: Kubectl) -> None:
        """An APIService left without its server would break discovery (kubectl, helm)."""
        kubectl("delete", "apiservice", API_SERVICE, "--ignore-not-found")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == f"/apis/{GROUP_VERSION}":
                    self.reply(200, resources())
                elif (match := VALUE_PATH.fullmatch(path)) and match[2] in metrics.values:
                    name = match[2]
                    metrics.reads[name] = metrics.reads.get(name, 0) + 1
                    self.reply(200, value_list(name, metrics.values[name]))
                else:
                    self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "NotFound", "code": 404})  # fmt: skip

            def reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the API server polls often; the test asserts on `reads` instead

        return Handler


def resources() -> dict[str, Any]:
    """What the API server's availability check and discovery read."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [{"name": "externalmetrics", "singularName": "", "namespaced": True,
                       "kind": "ExternalMetricValueList", "verbs": ["get"]}],
    }  # fmt: skip


def value_list(name: str, value: str) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "kind": "ExternalMetricValueList",
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "items": [{"metricName": name, "metricLabels": {}, "timestamp": now, "value": value}],
    }
