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
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spyre_devcluster.kubectl import Kubectl, KubectlError
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
        self.served = 0
        now = datetime.datetime.now(datetime.UTC)
        issued = certs.issue([NODE_IP], now)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        load_into(context, issued.cert, issued.key)
        self.server = TLSServer(("0.0.0.0", 0), self._handler(), context)
        self.port = self.server.server_address[1]

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
        try:
            kubectl.wait(f"apiservice/{API_SERVICE}", "condition=Available")
        except KubectlError as error:
            raise KubectlError(f"{error}\n{self.diagnosis(kubectl)}") from None

    def diagnosis(self, kubectl: Kubectl) -> str:
        """Why the API server finds the group unavailable: its own condition, the objects
        on its route, and whether this server answers straight and through the Service."""
        service = kubectl.get(f"service/{SERVICE}")["spec"]
        probes = {
            "straight": f"https://{NODE_IP}:{self.port}/apis/{GROUP_VERSION}",
            "through the Service": f"https://{service['clusterIP']}:443/apis/{GROUP_VERSION}",
        }
        lines = [
            f"APIService: {kubectl.get(f'apiservice/{API_SERVICE}').get('status')}",
            f"requests served: {self.served}",
            kubectl("get", "endpoints,endpointslices", "-o", "wide"),
        ]
        for route, url in probes.items():
            lines.append(f"GET {url} ({route}): {probe(url)}")
        return "\n".join(lines)

    @staticmethod
    def unregister(kubectl: Kubectl) -> None:
        """An APIService left without its server would break discovery (kubectl, helm)."""
        kubectl("delete", "apiservice", API_SERVICE, "--ignore-not-found")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                metrics.served += 1
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


class TLSServer(ThreadingHTTPServer):
    """TLS with each handshake in the connection's own thread: a handshake done by the
    accepting thread (a wrapped listening socket) stalls every later connection while a
    slow client sends its hello, and the API server's availability check gives up after 5 s."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, context: ssl.SSLContext) -> None:
        super().__init__(address, handler)
        self.context = context

    def finish_request(self, request: Any, client_address: Any) -> None:
        with self.context.wrap_socket(request, server_side=True) as tls:
            super().finish_request(tls, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError)):
            super().handle_error(request, client_address)  # a client that hung up: no news


def probe(url: str) -> str:
    """One GET with the API server's patience (5 s), for the diagnosis."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return f"HTTP {response.status}"
    except (OSError, urllib.error.URLError) as error:
        return f"failed: {error}"


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
