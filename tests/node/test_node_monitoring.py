"""The chart's monitoring through the real Prometheus Operator on the node: the chart-installed
operator with the chart's PodMonitor, serving ServiceMonitor and PrometheusRule, and a
Prometheus object that the Prometheus Operator renders into a running Prometheus
(spyre_devcluster/prometheus_operator.py): the scrape configuration and rules Prometheus
loads are the operator's rendering of the chart's objects, nothing written between.
The alerts Prometheus' HTTP API reports must name each SpyreModel by its own namespace and
name: two models with one name in two namespaces, one Failed (its model folder is empty:
the compile fails at once), one stuck compiling (its compile pod asks for more CPU than the
node has, so it is never scheduled). Twice: a plain Prometheus, and one configured as
OpenShift's User Workload Monitoring configures its own (namespace label enforced,
honorLabels overridden, namespace selectors ignored) with the chart's
monitoring.userWorkload, where the model's namespace is in `model_namespace`. In the plain
one a SpyreCache also compiles the tiny Granite, so a key has bytes on its volume, and every
panel of the chart's Grafana dashboard must return series, the cache panels the bytes the
SpyreCache's status says."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from nodelib import EMPTY, Kubectl, SharedNode

from spyre_devcluster import node_operator
from spyre_devcluster.node import Node
from spyre_devcluster.prometheus_operator import PrometheusOperator
from spyre_devcluster.prometheus_server import PrometheusServer
from spyre_devcluster.simulate import Timeout, poll_until

pytestmark = pytest.mark.node

WAIT = 600  # a compile pod started and failed on a loaded 2-core machine
COMPILED = 1500  # a real compile of the tiny Granite, on a loaded 2-core machine
NAME = "granite"  # both models' name
CACHE = "compiled"  # the SpyreCache compiled (in the Failed model's namespace)
# Installed with the operator: a resync pass every 20 s (the resync panel has data within
# the test), the monitors every 5 s, the rules with short waits, the dashboard.
INSTALLED = {
    "operator.resyncSeconds": "20",
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
MODES = {"plain": False, "user-workload": True}
MONITOR_JOBS = {"PodMonitor": "podMonitor", "ServiceMonitor": "serviceMonitor"}


@dataclass
class Monitored:
    node: Node
    prometheus: PrometheusServer
    objects: list[dict[str, Any]]  # the chart as installed
    failed: str  # the namespace of the Failed model
    stuck: str  # the namespace of the model stuck compiling
    user_workload: bool

    @property
    def model_label(self) -> str:
        """The label with a model's namespace (the chart's monitoring.userWorkload)."""
        return "model_namespace" if self.user_workload else "namespace"

    def kubectl(self, namespace: str) -> Kubectl:
        return Kubectl(self.node.kubeconfig, namespace)

    def only(self, kind: str) -> dict[str, Any]:
        (found,) = [d for d in self.objects if d["kind"] == kind]
        return found


def _deploy(kubectl: Kubectl, doc: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(doc))


@pytest.fixture(scope="module", params=list(MODES))
def monitored(
    request: pytest.FixtureRequest,
    shared_node: SharedNode,
    prometheus_operator: PrometheusOperator,
    models: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Monitored]:
    user_workload = MODES[request.param]
    node = shared_node.with_operator()
    namespaces = [f"mon-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    failed, stuck = namespaces
    values = dict(INSTALLED)
    if user_workload:  # a serving monitor in each model namespace: made before the install
        values |= {
            "monitoring.userWorkload": "true",
            "monitoring.serving.namespaces": "{" + ",".join(namespaces) + "}",
        }
    prometheus = None
    try:
        for namespace in namespaces:
            node_operator.make_namespace(node, namespace, models)
        node_operator.install_chart(node, values)
        objects = node_operator.render_chart(node, values)
        prometheus = prometheus_operator.deploy(request.param, user_workload=user_workload)
        doc = node_operator.tiny_model(NAME)
        doc["spec"]["model"]["path"] = f"/models/{EMPTY}"
        _deploy(Kubectl(node.kubeconfig, failed), doc)
        doc = node_operator.tiny_model(NAME)
        doc["spec"]["cache"]["compile"] = {"resources": {"requests": {"cpu": "64"}}}
        _deploy(Kubectl(node.kubeconfig, stuck), doc)
        if not user_workload:  # the cache panels (test_every_dashboard_panel_returns_series)
            doc = node_operator.tiny_model(CACHE) | {"kind": "SpyreCache"}
            _deploy(Kubectl(node.kubeconfig, failed), doc)
        yield Monitored(node, prometheus, objects, failed, stuck, user_workload)
    finally:
        if prometheus is not None:
            prometheus.delete()
        node_operator.install_chart(node)  # the defaults again, for the tests after these
        for namespace in namespaces:
            node_operator.delete_namespace(node, namespace)


def _phase(monitored: Monitored, namespace: str) -> str:
    status = monitored.kubectl(namespace).get(f"spyremodel/{NAME}").get("status") or {}
    return str(status.get("phase"))


def test_the_configuration_is_the_operators_rendering_of_the_charts_monitors(
    monitored: Monitored,
) -> None:
    """Every monitor of the chart is a job of the configuration Prometheus loaded, as the
    Prometheus Operator names and renders it (Kubernetes discovery), honor_labels as the
    Prometheus object allows."""
    monitors = [d for d in monitored.objects if d["kind"] in MONITOR_JOBS]
    jobs = {
        job["job_name"]: job
        for job in yaml.safe_load(monitored.prometheus.config())["scrape_configs"]
    }
    expected = {
        f"{MONITOR_JOBS[d['kind']]}/{d['metadata']['namespace']}/{d['metadata']['name']}/0"
        for d in monitors
    }
    assert set(jobs) == expected, sorted(jobs)
    assert all(job["kubernetes_sd_configs"] for job in jobs.values()), jobs
    (operator_job,) = [j for name, j in jobs.items() if name.startswith("podMonitor/")]
    # (Prometheus leaves a false honor_labels out of the configuration it shows)
    assert operator_job.get("honor_labels", False) is not monitored.user_workload, operator_job
    if monitored.user_workload:  # one serving monitor per model namespace, each its own
        serving = [j for name, j in jobs.items() if name.startswith("serviceMonitor/")]
        assert sorted(n for j in serving for c in j["kubernetes_sd_configs"]
                      for n in c["namespaces"]["names"]) == sorted(
            [monitored.failed, monitored.stuck]
        )  # fmt: skip


def test_the_alerts_name_each_model_by_its_own_namespace(monitored: Monitored) -> None:
    prometheus, label = monitored.prometheus, monitored.model_label
    ours = {monitored.failed, monitored.stuck, node_operator.NAMESPACE}

    def model_alerts() -> list[tuple[str, str, str]] | None:
        """(alert, model namespace, name) of the model alerts firing about our models (or
        about the operator's own namespace, where a lost label would put them), once both
        alerts fire."""
        found = sorted(
            (a["labels"]["alertname"], a["labels"].get(label, ""), a["labels"]["name"])
            for a in prometheus.alerts()
            if a["labels"]["alertname"] in MODEL_ALERTS and a["labels"].get(label) in ours
        )
        return found if {a for a, _, _ in found} == set(MODEL_ALERTS) else None

    try:
        firing = poll_until(model_alerts, "both model alerts firing", WAIT, interval=2.0)
    except Exception:
        print(monitored.kubectl(monitored.failed)("describe", "spyremodel"))
        print(json.dumps(prometheus.targets(), indent=1)[-3000:])
        raise
    assert firing == sorted(
        [
            ("SpyreModelCompileTooLong", monitored.stuck, NAME),
            ("SpyreModelFailed", monitored.failed, NAME),
        ]
    ), firing
    if monitored.user_workload:  # `namespace` is enforced: the rule's own, never the model's
        namespaces = {
            a["labels"]["namespace"]
            for a in prometheus.alerts()
            if a["labels"]["alertname"] in MODEL_ALERTS
        }
        assert namespaces == {node_operator.NAMESPACE}, namespaces
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


@pytest.mark.parametrize("monitored", ["plain"], indirect=True)
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
