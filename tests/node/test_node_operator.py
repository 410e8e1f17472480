"""The operator, installed by the Helm chart on the real node, takes a CPU SpyreModel
from `kubectl apply` to Ready with real pods: the compile Job really compiles (its
termination message lands in status.cache), the serving pod really starts as non-root
on a read-only root filesystem, and a completion is answered through the Service's
ClusterIP. The model is made here (random weights, no hub); the images are the
project's own (operator/Containerfile, image/Containerfile over the CPU runtime)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from nodelib import Kubectl, SharedNode

from spyre_operator.local import node_operator
from spyre_operator.local.node import Node
from spyre_operator.local.node_operator import MODEL_NAME as NAME

pytestmark = pytest.mark.node

READY_TIMEOUT = 1200  # compile (~1-2 min) + serving start on a loaded 2-core machine


@pytest.fixture(scope="module")
def operator_node(shared_node: SharedNode) -> Node:
    """The node with the project's images imported and the chart installed."""
    node = shared_node.get()
    node_operator.import_images(node, print)
    node_operator.install_chart(node)
    return node


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return node_operator.make_tiny_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def ready(operator_node: Node, model_dir: Path) -> dict[str, Any]:
    """The SpyreModel applied and Ready; its final object."""
    kubectl = Kubectl(operator_node.kubeconfig, "default")
    kubectl("apply", "-f", "-", input=json.dumps(node_operator.tiny_model(model_dir)))
    try:
        kubectl.wait(f"spyremodel/{NAME}", "jsonpath={.status.phase}=Ready", READY_TIMEOUT)
    except AssertionError:
        print(kubectl("get", "spyremodel,job,pod,pvc", "-o", "wide"))
        print(kubectl("describe", "pod"))
        raise
    return json.loads(kubectl("get", f"spyremodel/{NAME}", "-o", "json"))


def test_the_compile_pods_termination_message_lands_in_status(ready: dict[str, Any]) -> None:
    # the summary the precompile step wrote to /dev/termination-log, copied by the operator
    status = ready["status"]
    cache = status["cache"]
    assert cache["ok"] is True, cache
    assert cache["cacheKey"] == status["activeCacheKey"]
    assert cache["seconds"] > 0
    assert cache["versions"], cache


def test_the_serving_pod_runs_as_non_root_on_a_read_only_root(
    operator_node: Node, ready: dict[str, Any]
) -> None:
    kubectl = Kubectl(operator_node.kubeconfig, "default")
    selector = ready["status"]["selector"]
    pods = json.loads(kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
    running = [p for p in pods if p["status"]["phase"] == "Running"]
    assert running, [p["status"]["phase"] for p in pods]
    name = running[0]["metadata"]["name"]
    uid = kubectl("exec", name, "--", "python3", "-c", "import os; print(os.getuid())").strip()
    assert uid != "0"
    probe = "open('/probe', 'w')"
    result = subprocess.run(
        [*kubectl.base, "exec", name, "--", "python3", "-c", probe],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and "Read-only file system" in result.stderr


def test_a_completion_is_answered_through_the_services_cluster_ip(
    operator_node: Node, ready: dict[str, Any]
) -> None:
    kubectl = Kubectl(operator_node.kubeconfig, "default")
    services = json.loads(kubectl("get", "svc", "-o", "json"))["items"]
    (service,) = [s for s in services if s["metadata"]["name"].startswith(NAME)]
    ip, port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"]
    answer = node_operator.complete(ip, port, "Hello")
    assert answer["choices"][0]["text"]
    assert answer["usage"]["completion_tokens"] >= 1
