"""Helpers for the node tests (imported by name, like tests/chart/chartlib.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from spyre_operator.local.images import recipes
from spyre_operator.local.images.containerd import import_image
from spyre_operator.local.images.store import locked
from spyre_operator.local.node import Node
from spyre_operator.local.tools import tool


class Kubectl:
    """kubectl against the node, in one namespace; failures raise with stderr."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.base = [tool("kubectl"), "--kubeconfig", str(kubeconfig), "-n", namespace]

    def __call__(self, *args: str, input: str | None = None, timeout: float = 180) -> str:
        result = subprocess.run(
            [*self.base, *args], input=input, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def wait(self, what: str, condition: str, timeout: int = 180) -> None:
        self("wait", f"--for={condition}", what, f"--timeout={timeout}s", timeout=timeout + 30)


class SharedNode:
    """The session's node, started when first asked for."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.node: Node | None = None

    def get(self) -> Node:
        if self.node is None:
            node = Node(self.folder)
            node.up()
            self.node = node
        return self.node

    def stop(self) -> None:
        if self.node is not None:
            self.node.down()
            self.node = None


def import_python_image(node: Node) -> str:
    """A small image with Python (Debian minbase + the host's Python), built once, kept
    in the node's image store across `up`s; returns its name."""
    with locked():
        image = recipes.python_image(recipes.python_prefix())
    import_image(image, str(node.layout.containerd_socket))
    return image.name
