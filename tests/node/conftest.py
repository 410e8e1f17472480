"""Fixtures on a REAL node: the control plane plus containerd, kubelet, kube-proxy,
scheduler and the hostPath provisioner, started by the product's own `Node`.

One node per machine, so one shared node serves every test that asks for `node`; a test
that needs its own (the up/down check) stops the shared one first, and the next test
that asks for `node` starts it again. Tests skip only when the preflight says this
machine cannot run a node (not root, no cgroup v1, ...), with its reasons.
`SPYRE_KEEP_NODE=1` leaves the shared node running after the session, to look around.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodelib import Kubectl, SharedNode, import_python_image

from spyre_devcluster import node_operator, preflight
from spyre_devcluster.node import Node
from spyre_devcluster.prometheus_operator import PrometheusOperator
from spyre_devcluster.prometheus_server import PrometheusServer


@pytest.fixture(scope="session")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedNode]:
    found = preflight.problems()
    if found:
        pytest.skip(preflight.report(found))
    shared = SharedNode(tmp_path_factory.mktemp("node"))
    try:
        yield shared
    finally:
        if os.environ.get("SPYRE_KEEP_NODE") and shared.node is not None:
            print(
                f"\nnode kept (SPYRE_KEEP_NODE): kubectl --kubeconfig {shared.node.kubeconfig}"
                f" ...; stop it with `spyre-operator cluster down --dir {shared.folder}`"
            )
        else:
            shared.stop()


@pytest.fixture
def node(shared_node: SharedNode) -> Node:
    return shared_node.get()


@pytest.fixture
def kubectl(node: Node) -> Iterator[Kubectl]:
    """kubectl on the node, in a fresh namespace of its own."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    Kubectl(node.kubeconfig, "default")("create", "namespace", name)
    node_operator.add_pull_secret(node, name)  # the node's registry, for SpyreModels' pods
    yield Kubectl(node.kubeconfig, name)
    Kubectl(node.kubeconfig, "default")("delete", "namespace", name, "--wait=false")


@pytest.fixture
def python_image(node: Node) -> str:
    """A small image with Python (Debian minbase + the host's Python), built once and
    kept in the node's image store across sessions."""
    return import_python_image(node)


@pytest.fixture
def operator_node(shared_node: SharedNode) -> Node:
    """The node with the project's images imported and the operator installed by its chart
    (once per node: a test that restarts the node makes the next one install again)."""
    return shared_node.with_operator()


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hostPath folder with the tiny Granite in granite/ (random weights, no hub)."""
    return node_operator.make_tiny_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def prometheus_operator(
    shared_node: SharedNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusOperator]:
    """The Prometheus Operator (a host process) watching the node, its CRDs installed and
    the images of the Prometheus pods it renders imported; `.deploy(name)` runs one."""
    running = PrometheusOperator(shared_node.get(), tmp_path_factory.mktemp("prometheus-op"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def prometheus(prometheus_operator: PrometheusOperator) -> Iterator[PrometheusServer]:
    """A Prometheus the Prometheus Operator runs on the node, scraping every PodMonitor and
    ServiceMonitor (e.g. the chart's serving monitor: vLLM's metrics) and evaluating every
    PrometheusRule of the cluster every 5 s; its HTTP API at `.url` (a pod address the
    host and the pods reach), `.query(expr)`, `.alerts()`."""
    server = prometheus_operator.deploy("testbed")
    try:
        yield server
    finally:
        server.delete()
