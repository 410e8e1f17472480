"""The chart's monitoring in a real Prometheus: the chart-installed operator on the node is
scraped with the configuration its PodMonitor (and the serving ServiceMonitor) stand for
(tests/node/promlib.py translates the rendered objects as the Prometheus Operator does,
and stands in for the Kubernetes discovery Debian's Prometheus is built without),
the chart's PrometheusRule is evaluated, and the alerts Prometheus' HTTP API reports must
name each SpyreModel by its own namespace and name: two models with one name in two
namespaces, one Failed (its model folder is empty: the compile fails at once), one stuck
compiling (its compile pod asks for more CPU than the node has, so it is never
scheduled); and a SpyreCache that compiles the tiny Granite, so a key has bytes on its
volume. Every panel of the chart's Grafana dashboard must return series, and the cache
panels the bytes the SpyreCache's status says."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nodelib import EMPTY, Kubectl, SharedNode
from promlib import KubernetesTargets, Prometheus, scrape_configs

from spyre_devcluster import node_operator
from spyre_devcluster.node import Node
from spyre_devcluster.simulate import Timeout, poll_until

pytestmark = pytest.mark.node

WAIT = 600  # a compile pod started and failed on a loaded 2-core machine
COMPILED = 1500  # a real compile of the tiny Granite, on a loaded 2-core machine
NAME = "granite"  # both models' name
CACHE = "compiled"  # the SpyreCache compiled (in the Failed model's namespace)
# Installed: a resync pass every 20 s, so the resync panel has data within the test.
INSTALLED = {"operator.resyncSeconds": "20"}
# Rendered besides (the node has no Prometheus Operator CRDs: the objects are read, not
# installed): the monitors, the rules with short waits, the dashboard.
MONITORING = {
    "monitoring.operator.enabled": "true",
    "monitoring.operator.interval": "5s",
    "monitoring.operator.scrapeTimeout": "4s",
    "monitoring.serving.enabled": "true",
    "monitoring.serving.kind": "ServiceMonitor",
    "monitoring.rules.enabled": "true",
    "monitoring.rules.failedFor": "10s",
    "monitoring.rules.compilingFor": "10s",
    "monitoring.dashboard.enabled": "true",
}
MODEL_ALERTS = ("SpyreModelFailed", "SpyreModelCompileTooLong")


@dataclass
class Monitored:
    node: Node
    prometheus: Prometheus
    objects: list[dict[str, Any]]  # the rendered chart
    failed: str  # the namespace of the Failed model
    stuck: str  # the namespace of the model stuck compiling

    def kubectl(self, namespace: str) -> Kubectl:
        return Kubectl(self.node.kubeconfig, namespace)

    def only(self, kind: str) -> dict[str, Any]:
        (found,) = [d for d in self.objects if d["kind"] == kind]
        return found


def _deploy(kubectl: Kubectl, doc: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(doc))


@pytest.fixture(scope="module")
def monitored(
    shared_node: SharedNode, models: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Monitored]:
    node = shared_node.with_operator()
    node_operator.install_chart(node, INSTALLED)
    objects = node_operator.render_chart(node, INSTALLED | MONITORING)
    monitors = [d for d in objects if d["kind"] in ("PodMonitor", "ServiceMonitor")]
    assert {d["kind"] for d in monitors} == {"PodMonitor", "ServiceMonitor"}
    scrapes = [job for d in monitors for job in scrape_configs(d, node.kubeconfig)]
    (rule,) = [d for d in objects if d["kind"] == "PrometheusRule"]
    folder = tmp_path_factory.mktemp("prometheus")
    prometheus, targets = Prometheus(folder), KubernetesTargets(node.kubeconfig, folder)
    namespaces = [f"mon-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    try:
        prometheus.start(scrapes, targets, rule["spec"]["groups"], interval="5s")
        for namespace in namespaces:
            node_operator.make_namespace(node, namespace, models)
        failed, stuck = namespaces
        doc = node_operator.tiny_model(NAME)
        doc["spec"]["model"]["path"] = f"/models/{EMPTY}"
        _deploy(Kubectl(node.kubeconfig, failed), doc)
        doc = node_operator.tiny_model(NAME)
        doc["spec"]["cache"]["compile"] = {"resources": {"requests": {"cpu": "64"}}}
        _deploy(Kubectl(node.kubeconfig, stuck), doc)
        doc = node_operator.tiny_model(CACHE) | {"kind": "SpyreCache"}
        _deploy(Kubectl(node.kubeconfig, failed), doc)
        yield Monitored(node, prometheus, objects, failed, stuck)
    finally:
        prometheus.stop()
        for namespace in namespaces:
            node_operator.delete_namespace(node, namespace)
        node_operator.install_chart(node)  # the defaults again, for the tests after these


def _phase(monitored: Monitored, namespace: str) -> str:
    status = monitored.kubectl(namespace).get(f"spyremodel/{NAME}").get("status") or {}
    return str(status.get("phase"))


def test_the_alerts_name_each_model_by_its_own_namespace(monitored: Monitored) -> None:
    prometheus = monitored.prometheus
    ours = {monitored.failed, monitored.stuck, node_operator.NAMESPACE}

    def model_alerts() -> list[tuple[str, str, str]] | None:
        """(alert, namespace, name) of the model alerts firing about our models (or about
        the operator's own namespace, where a lost label would put them), once both
        alerts fire."""
        found = sorted(
            (a["labels"]["alertname"], a["labels"].get("namespace", ""), a["labels"]["name"])
            for a in prometheus.alerts()
            if a["labels"]["alertname"] in MODEL_ALERTS and a["labels"].get("namespace") in ours
        )
        return found if {a for a, _, _ in found} == set(MODEL_ALERTS) else None

    try:
        firing = poll_until(model_alerts, "both model alerts firing", WAIT, interval=2.0)
    except Exception:
        print(monitored.kubectl(monitored.failed)("describe", "spyremodel"))
        print(prometheus.log()[-3000:])
        raise
    assert firing == sorted(
        [
            ("SpyreModelCompileTooLong", monitored.stuck, NAME),
            ("SpyreModelFailed", monitored.failed, NAME),
        ]
    ), firing
    # what the alerts say is what the models' status says
    assert _phase(monitored, monitored.failed) == "Failed"
    assert _phase(monitored, monitored.stuck) == "Compiling"
    (pod,) = monitored.kubectl(monitored.stuck).get("pods")["items"]
    assert pod["status"]["phase"] == "Pending", pod["status"]
    # the operator is scraped under the job its PodMonitor names, so it is not "down"
    podmonitor = monitored.only("PodMonitor")["metadata"]
    job = f"{podmonitor['namespace']}/{podmonitor['name']}"
    (up,) = prometheus.query(f'up{{job="{job}"}}')
    assert up["value"][1] == "1" and up["metric"]["namespace"] == node_operator.NAMESPACE, up
    states = {a["labels"]["alertname"]: a["state"] for a in prometheus.api("alerts")["alerts"]}
    assert "SpyreOperatorDown" not in states, states


def test_every_dashboard_panel_returns_series(monitored: Monitored) -> None:
    configmap = monitored.only("ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = configmap["data"].values()
    queries = [
        (panel["title"], target["expr"])
        for panel in json.loads(text)["panels"]
        for target in panel.get("targets", [])
    ]
    assert len({title for title, _ in queries}) >= 10, queries

    missing: list[tuple[str, str]] = []

    def all_have_data() -> bool:
        missing[:] = [(title, e) for title, e in queries if not monitored.prometheus.query(e)]
        return not missing

    # some are empty until the models have their phases, a resync pass ran and the
    # SpyreCache compiled
    try:
        poll_until(all_have_data, "every panel's query returning series", COMPILED, interval=5.0)
    except Timeout:
        raise AssertionError(f"panels whose query returns no series: {missing}") from None
    # the cache panels show the compiled key's bytes on its volume, as its status says
    status = monitored.kubectl(monitored.failed).get(f"spyrecache/{CACHE}")["status"]
    assert status["cache"]["ok"] is True and status["cache"]["bytes"] > 0, status
    ((namespace, claim), size) = _series(
        monitored, "sum by (namespace, claim) (spyre_operator_cache_key_bytes)"
    )
    assert (namespace, claim, size) == (
        monitored.failed,
        "spyre-graph-cache",
        status["cache"]["bytes"],
    )
    (_, keys) = _series(monitored, "count by (namespace, claim) (spyre_operator_cache_key_bytes)")
    assert keys == 1


def _series(monitored: Monitored, query: str) -> tuple[tuple[str, str], int]:
    """The one series of a query by (namespace, claim), and its value."""
    (found,) = monitored.prometheus.query(query)
    labels = found["metric"]
    return (labels["namespace"], labels["claim"]), int(float(found["value"][1]))
