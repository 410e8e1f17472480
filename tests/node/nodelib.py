"""Helpers for the node tests (imported by name, like tests/chart/chartlib.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from spyre_devcluster import node_operator
from spyre_devcluster.images import recipes
from spyre_devcluster.images.store import locked
from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.node import Node
from spyre_devcluster.node_config import SPYRE_PF

__all__ = ["Kubectl", "SharedNode", "apply", "import_python_image", "pod"]


class SharedNode:
    """The session's node, started when first asked for."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.node: Node | None = None
        self.operator_on: Node | None = None

    def get(self, network_storage: bool = False) -> Node:
        """The node; with network_storage, one with its CephFS (the running node is
        replaced if it has none; later tests keep it)."""
        if self.node is not None and network_storage and not self.node.layout.ceph.exists():
            self.stop()
        if self.node is None:
            node = Node(self.folder)
            node.up(cards={SPYRE_PF: node_operator.NODE_CARDS}, network_storage=network_storage)
            self.node = node
        return self.node

    def with_operator(self, network_storage: bool = False) -> Node:
        """The node with the project's images pushed to its registry and the chart
        installed."""
        node = self.get(network_storage)
        if self.operator_on is not node:
            node_operator.push_images(node, print)
            node_operator.install_chart(node)
            self.operator_on = node
        return node

    def stop(self) -> None:
        if self.node is not None:
            self.node.down()
            self.node = None


def import_python_image(node: Node) -> str:
    """A small image with Python (Debian minbase + the host's Python), built once, kept
    in the node's image store across `up`s; returns its name."""
    with locked():
        image = recipes.python_image(recipes.python_prefix())
    node.import_image(image)
    return image.name


def pod(name: str, image: str, script: str, **spec: object) -> dict[str, object]:
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["python3", "-c", script],
        **spec.pop("container", {}),  # type: ignore[dict-item]
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def apply(kubectl: Kubectl, *docs: Mapping[str, object]) -> None:
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )
