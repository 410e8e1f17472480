"""KEDA scales a SpyreModel on vLLM's own queue (docs/install.md "Autoscaling"), on the
real node: KEDA built from its Go module and installed from its own manifests
(spyre_devcluster/keda.py), the Prometheus the Prometheus Operator runs (the `prometheus`
fixture) scraping the serving pods through the chart's serving monitor
(`monitoring.serving.enabled`), and the ScaledObject read from docs/install.md and applied
unchanged: its names (the SpyreModel `granite` in namespace `ai`, Prometheus at
`prometheus-operated.monitoring:9090`) are what the test sets up.

A load generator on the node keeps completions queued on the model's Service: KEDA reads
vllm:num_requests_waiting from Prometheus, its HPA takes the model from 1 to 2 replicas
through the SpyreModel's scale subresource, and the second replica's own report says it
compiled nothing. After the load KEDA takes it back to 1 (once the HPA's scale-down
window has passed: 5 minutes, Kubernetes' default, which the docs' example keeps).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from nodelib import SharedNode
from test_node_stories import Cluster, assert_started_from_cache

from spyre_devcluster import node_operator
from spyre_devcluster.keda import Keda
from spyre_devcluster.kubectl import KubectlError
from spyre_devcluster.prometheus_operator import NAMESPACE as MONITORING_NAMESPACE
from spyre_devcluster.prometheus_server import PrometheusServer

pytestmark = pytest.mark.node

DOCS = Path(__file__).parents[2] / "docs" / "install.md"
# The serving monitor, scraped every 5 s (the chart's default is 30 s)
MONITORING = {
    "monitoring.serving.enabled": "true",
    "monitoring.serving.interval": "5s",
    "monitoring.serving.scrapeTimeout": "4s",
}
# Clients with a completion always in flight: 2 run (maxNumSeqs), about 6 wait, so the
# docs' threshold of 4 waiting requests per replica asks for 2 replicas, and no more.
CLIENTS = 8
TOKENS = 128  # each completion's length (ignore_eos): long enough to keep the queue full
SCALE_DOWN = 1500  # the HPA's 5-minute window, then a replica stopping, on a loaded machine


def docs_scaled_object() -> dict[str, Any]:
    """The ScaledObject of docs/install.md, as a user copies it."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    (found,) = [yaml.safe_load(b) for b in blocks if "kind: ScaledObject" in b]
    doc: dict[str, Any] = found
    return doc


@dataclass
class Scaled:
    cluster: Cluster  # the docs' namespace, with the docs' SpyreModel in it
    prometheus: PrometheusServer
    keda: Keda
    scaled_object: dict[str, Any]

    def diagnosis(self) -> str:
        """KEDA's pods and logs, the ScaledObject and its HPA, for a failed wait."""
        described = self.cluster.kubectl("describe", "scaledobjects,hpa")
        return f"{self.keda.diagnosis()}\n{described}"

    @property
    def name(self) -> str:
        name: str = self.scaled_object["spec"]["scaleTargetRef"]["name"]
        return name


class Load:
    """`clients` threads on the node, each sending the next completion to `address` (the
    model's Service: kube-proxy spreads the connections) as soon as its last is answered."""

    def __init__(self, address: tuple[str, int], clients: int) -> None:
        ip, port = address
        body = {"model": node_operator.MODEL_NAME, "prompt": "Hello", "max_tokens": TOKENS,
                "ignore_eos": True}  # fmt: skip
        self.request = urllib.request.Request(
            f"http://{ip}:{port}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        self.stop = threading.Event()
        self.answered = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def _client(self) -> None:
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.request, timeout=300) as response:
                    json.loads(response.read())
                self.answered += 1
            except (OSError, urllib.error.URLError) as error:
                self.errors.append(str(error))
                self.stop.wait(1.0)  # a replica starting or stopping: try again

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=330)


@pytest.fixture(scope="module")
def scaled(shared_node: SharedNode, models: Path, prometheus: PrometheusServer) -> Iterator[Scaled]:
    scaled_object = docs_scaled_object()
    namespace = scaled_object["metadata"]["namespace"]
    name = scaled_object["spec"]["scaleTargetRef"]["name"]
    trigger = scaled_object["spec"]["triggers"][0]["metadata"]
    server = urllib.parse.urlsplit(trigger["serverAddress"]).hostname or ""
    service, _, service_namespace = server.partition(".")  # <service>.<namespace>
    assert service_namespace == MONITORING_NAMESPACE, f"the docs name Prometheus {server}"
    node = shared_node.with_operator()
    node_operator.install_chart(node, MONITORING)
    kubectl = node_operator.make_namespace(node, namespace, models)  # restricted
    keda = Keda(node)
    cluster = Cluster(node, kubectl, namespace, models)
    try:
        keda.install({server: (service, service_namespace)})
        cluster.apply(name)
        cluster.ready(name, replicas=1)
        yield Scaled(cluster, prometheus, keda, scaled_object)
    finally:  # the ScaledObject first, while KEDA runs to take its finalizer off
        with contextlib.suppress(KubectlError):
            cluster.kubectl("delete", "scaledobjects", "--all", "--timeout=120s")
        node_operator.delete_namespace(node, namespace)
        keda.remove()
        node_operator.install_chart(node)  # the shared operator as the other tests left it


def test_keda_scales_a_model_to_two_on_vllms_queue_and_back_to_one(scaled: Scaled) -> None:
    try:
        scales(scaled)
    except Exception:
        print(scaled.diagnosis())
        raise


def scales(scaled: Scaled) -> None:
    """Load on, 2 replicas, the second compiled nothing; load off, 1 replica."""
    cluster, name = scaled.cluster, scaled.name
    query = scaled.scaled_object["spec"]["triggers"][0]["metadata"]["query"]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(scaled.scaled_object))
    cluster.wait("the ScaledObject Ready, its HPA on the SpyreModel", lambda: (
        condition(cluster.get(f"scaledobject/{name}"), "Ready") == "True"
    ))  # fmt: skip
    hpa = cluster.get(f"scaledobject/{name}")["status"]["hpaName"]
    target = cluster.get(f"horizontalpodautoscalers.v2.autoscaling/{hpa}")["spec"]
    assert target["scaleTargetRef"]["kind"] == "SpyreModel", target
    (first,) = cluster.pods(name)
    with Load(cluster.service(name), CLIENTS) as load:
        series = cluster.wait(f"Prometheus answering {query} above the threshold", lambda: (
            [s for s in scaled.prometheus.query(query) if float(s["value"][1]) > 4] or None
        ))  # fmt: skip
        assert series, series
        cluster.ready(name, replicas=2)
        assert cluster.get(f"spyremodel/{name}")["spec"]["replicas"] == 2
        assert load.answered > 0, load.errors[-5:]
    pods = cluster.pods(name)
    (second,) = [p for p in pods if p["metadata"]["name"] != first["metadata"]["name"]]
    assert_started_from_cache(cluster, second)
    cluster.wait("KEDA back to one replica after the load", lambda: (
        cluster.get(f"spyremodel/{name}")["spec"]["replicas"] == 1
    ), timeout=SCALE_DOWN)  # fmt: skip
    cluster.ready(name, replicas=1)


def condition(obj: dict[str, Any], kind: str) -> str | None:
    found = [c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind]
    return str(found[0]["status"]) if found else None
