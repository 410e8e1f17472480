"""An operator of another architecture on the real node: the multi-arch operator index
pushed to the node's registry as a release pushes it, the chart installed with the arm64
image, which the kubelet pulls with the chart's pull Secret and runc runs under
qemu-user-static (binfmt_misc), through to a Ready model served from its compiled cache.

containerd's CRI plugin resolves an index to the host's platform and has no setting for
another, so the chart names the index's per-architecture tag (`<version>-arm64`, pushed
with the index). The chart is put back to the node's own operator image afterwards, for
the tests that share the node.
"""

from __future__ import annotations

import json
import platform
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nodelib import Kubectl, SharedNode

from spyre_devcluster import node_operator
from spyre_devcluster.images import emulation, operator_index
from spyre_devcluster.images.platforms import PLATFORMS
from spyre_devcluster.images.push import push_index
from spyre_devcluster.node import Node
from spyre_devcluster.registry import REPOSITORY_PREFIX
from spyre_devcluster.simulate import poll_until
from spyre_operator import __version__

pytestmark = pytest.mark.node

ARCH = "arm64"  # the fastest of the three under qemu here
INDEX = "operator-index"  # the repository the index goes to (operator: the node's own)
WAIT = 1500  # a compile plus a serving start, on a loaded 2-core machine
OPERATOR = f"app.kubernetes.io/name={node_operator.RELEASE}"


@pytest.fixture
def arm64_operator(shared_node: SharedNode) -> Iterator[Node]:
    """The node, the index pushed to its registry, the chart on the arm64 tag; the
    node's own operator image back afterwards."""
    node = shared_node.with_operator()  # the serving image pushed, the chart installed
    emulation.ensure(PLATFORMS[ARCH].machine)
    # the host's and the story's architecture (the images tier runs all four)
    images = operator_index.build_index([PLATFORMS["amd64"], PLATFORMS[ARCH]])
    pushed = push_index(images, node.registry, f"{REPOSITORY_PREFIX}/{INDEX}", __version__)
    print(f"{pushed.reference}: {pushed.digest} ({pushed.sent / 1e6:.0f} MB sent)")
    values = {
        "image.repository": node.registry.repository(INDEX),
        "image.tag": f"{__version__}-{ARCH}",
        # an emulated Python starts in tens of seconds: room before the first probe
        "livenessProbe.initialDelaySeconds": "120",
    }
    try:
        node_operator.install_chart(node, values)
        yield node
    finally:
        node_operator.install_chart(node)


def operator_pod(kubectl: Kubectl) -> dict[str, Any]:
    pods = kubectl.get("pods", "-l", OPERATOR)["items"]
    (pod,) = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return pod


def test_an_arm64_operator_from_the_index_brings_a_model_to_ready(
    arm64_operator: Node, models: Path
) -> None:
    node = arm64_operator
    system = Kubectl(node.kubeconfig, node_operator.NAMESPACE)
    pod = operator_pod(system)
    (container,) = pod["spec"]["containers"]
    assert container["image"].endswith(f"/{INDEX}:{__version__}-{ARCH}")
    name = pod["metadata"]["name"]
    machine = system(
        "exec", name, "--", "python3", "-c", "import platform; print(platform.machine())"
    )
    assert machine.strip() == PLATFORMS[ARCH].machine != platform.machine()
    assert __version__ in system("exec", name, "--", "spyre-operator", "--version")

    namespace = f"arch-{uuid.uuid4().hex[:8]}"
    try:
        kubectl = node_operator.make_namespace(node, namespace, models)
        doc = node_operator.tiny_model("arch")
        doc["spec"]["batching"]["continuous"] = {
            "maxModelLen": 256,
            "maxNumSeqs": 2,
            "maxNumBatchedTokens": 128,
        }
        kubectl("apply", "-f", "-", input=json.dumps(doc))

        def ready() -> dict[str, Any] | None:
            status = kubectl.get("spyremodel/arch").get("status") or {}
            return status if status.get("phase") == "Ready" else None

        try:
            status = poll_until(ready, "the model Ready (arm64 operator)", WAIT, interval=2.0)
        except Exception:
            print(kubectl("get", "spyremodel,job,pod", "-o", "wide"))
            print(system("logs", name, "--tail=60"))
            raise
        assert status["readyReplicas"] == 1 and status["cache"]["ok"] is True, status
        service = kubectl.get("service/arch")["spec"]
        got = node_operator.complete(service["clusterIP"], service["ports"][0]["port"], "Hi")
        assert got["usage"]["completion_tokens"] >= 1, got
        # the same operator pod did it all: never restarted by its probe
        restarts = operator_pod(system)["status"]["containerStatuses"][0]["restartCount"]
        assert restarts == 0
    finally:
        node_operator.delete_namespace(node, namespace)
