"""Helpers for the node tests (imported by name, like tests/chart/chartlib.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from spyre_devcluster import node_operator
from spyre_devcluster.images import recipes
from spyre_devcluster.images.store import locked
from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.node import Node
from spyre_devcluster.node_config import SPYRE_PF, Layout

__all__ = ["EMPTY", "Kubectl", "Requests", "SharedNode", "apply", "import_python_image", "pod"]

EMPTY = "empty"  # a model folder with nothing in it, beside granite/ in the `models` folder

# What Pod Security's restricted profile asks of a pod (the tests' namespaces enforce it):
# a non-root user (the Python image's default is root), the runtime's seccomp profile, no
# privilege escalation, no capabilities.
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


class SharedNode:
    """The session's node (cluster), started when first asked for; asked for another
    number of nodes, it starts again with that many."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.node: Node | None = None
        self.operator_on: Node | None = None

    def get(self, nodes: int = 1, network_storage: bool = False) -> Node:
        """The cluster of `nodes` nodes; with network_storage, one with its CephFS (a
        running cluster of another size, or without a CephFS when one is asked for, is
        replaced; later tests keep it)."""
        if self.node is not None and (
            len(self.node.members) != nodes
            or (network_storage and not self.node.layout.ceph.exists())
        ):
            self.stop()
        if self.node is None:
            node = Node(self.folder, nodes)
            node.up(cards={SPYRE_PF: node_operator.NODE_CARDS}, network_storage=network_storage)
            self.node = node
        return self.node

    def with_operator(self, nodes: int = 1, network_storage: bool = False) -> Node:
        """The node with the project's images pushed to its registry and the chart
        installed."""
        node = self.get(nodes, network_storage)
        if self.operator_on is not node:
            node_operator.push_images(node, print)
            node_operator.install_chart(node)
            self.operator_on = node
        return node

    def stop(self) -> None:
        if self.node is not None:
            self.node.down()
            self.node = None


def import_python_image(node: Node, layout: Layout | None = None) -> str:
    """A small image with Python (Debian minbase + the host's Python), built once, kept
    in a node's image store across `up`s (default: the first node's); returns its name."""
    with locked():
        image = recipes.python_image(recipes.python_prefix())
    node.import_image(image, layout)
    return image.name


def pod(name: str, image: str, script: str, **spec: object) -> dict[str, object]:
    """A Pod running `script` with the image's Python, admitted under restricted; `spec`
    adds to the pod's spec (its securityContext to POD_SECURITY), `container=` to the
    container's."""
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["python3", "-c", script],
        "securityContext": CONTAINER_SECURITY,
        **spec.pop("container", {}),  # type: ignore[dict-item]
    }
    security = POD_SECURITY | spec.pop("securityContext", {})  # type: ignore[operator]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": security,
            "containers": [container],
            **spec,
        },
    }


def apply(kubectl: Kubectl, *docs: Mapping[str, object]) -> None:
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )


class Requests(threading.Thread):
    """Completions through a Service's ClusterIP, one after another, while a change goes
    on; `between` runs after each (e.g. to sample the replicas)."""

    def __init__(self, ip: str, port: int, between: Callable[[], None] = lambda: None) -> None:
        super().__init__(daemon=True)
        self.ip, self.port, self.between = ip, port, between
        self.ok = self.failed = 0
        self.failures: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                node_operator.complete(self.ip, self.port, "Hello", timeout=0)
                self.ok += 1
            except Exception as exc:
                self.failed += 1
                self.failures.append(repr(exc))
                time.sleep(1)
            self.between()

    def stop(self) -> tuple[int, int]:
        self.stopping.set()
        self.join(timeout=120)
        return self.ok, self.failed
