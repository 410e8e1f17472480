"""`spyre-operator dev --node`: the demo for real, on the local node.

Brings the node up, builds and imports the images, installs the operator with the Helm
chart, makes a tiny Granite model, applies a CPU SpyreModel for it, shows the pods as
they really compile and start, and prints a completion fetched through the Service's
ClusterIP. Without --keep the node is taken down at the end.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from spyre_operator.local import node_operator
from spyre_operator.local.controlplane import ControlPlaneError
from spyre_operator.local.images.store import ImageBuildError
from spyre_operator.local.node import Node
from spyre_operator.local.tools import tool

POLL = 1.0


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def kubectl(node: Node, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [tool("kubectl"), "--kubeconfig", str(node.kubeconfig), "-n", "default", *args],
        input=stdin, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    if result.returncode != 0:
        raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def main(directory: Path, keep: bool, timeout: float) -> int:
    node = Node(directory)
    try:
        say("bringing up the node (root; one per machine)")
        node.up(log=say)
        say("images: building what is not cached (the first time: minutes), importing")
        node_operator.import_images(node, say)
        say(f"installing the operator with the Helm chart into {node_operator.NAMESPACE}")
        node_operator.install_chart(node)
        models = node_operator.make_tiny_model(directory / "models")
        say(f"made a tiny Granite (random weights) in {models}; applying a CPU SpyreModel")
        kubectl(node, "apply", "-f", "-", stdin=json.dumps(node_operator.tiny_model(models)))
        status = watch(node, timeout)
        if status.get("phase") != "Ready":
            say(f"the model did not get Ready: {status}")
            return 1
        service = json.loads(kubectl(node, "get", "svc", node_operator.MODEL_NAME, "-o", "json"))
        ip, port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"]
        say(f"POST http://{ip}:{port}/v1/completions (the Service's ClusterIP, via kube-proxy)")
        answer = node_operator.complete(ip, port, "Hello")
        say(f"answer: {answer['choices'][0]['text']!r} ({answer['usage']})")
        return 0
    except (ControlPlaneError, ImageBuildError, OSError) as err:
        say(f"error: {err}")
        return 1
    finally:
        if keep:
            say(f"kept: kubectl --kubeconfig {node.kubeconfig} get pods -A; logs with "
                f"kubectl logs; stop it: spyre-operator cluster down --dir {node.dir}")  # fmt: skip
        else:
            say("taking the node down")
            node.down()


def watch(node: Node, timeout: float) -> dict[str, Any]:
    """Print the SpyreModel and its pods whenever they change, until Ready or Failed."""
    deadline = time.monotonic() + timeout
    last = ""
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        table = kubectl(node, "get", "spyremodels,pods", "-o", "wide")
        if table != last:
            print(table, flush=True)
            last = table
        got = json.loads(kubectl(node, "get", "spyremodel", node_operator.MODEL_NAME, "-o", "json"))
        status = got.get("status") or {}
        if status.get("phase") in ("Ready", "Failed"):
            return status
        time.sleep(POLL)
    return status
