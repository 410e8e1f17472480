"""`spyre-operator dev --node`: the demo for real, on the local node.

Brings the node up (with fake Spyre cards), builds and imports the images, installs the
operator with the Helm chart, makes a tiny Granite model, applies a CPU SpyreModel for it
(holding one card, as a card model would), shows the pods as they really compile and
start, and prints a completion fetched through the Service's ClusterIP. Without --keep
the node is taken down at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from spyre_devcluster import node_operator
from spyre_devcluster.controlplane import ControlPlaneError
from spyre_devcluster.images.store import ImageBuildError
from spyre_devcluster.kubectl import Kubectl, KubectlError
from spyre_devcluster.node import Node
from spyre_devcluster.node_config import SPYRE_PF

POLL = 1.0
DEMO_CARDS = 1


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(directory: Path, keep: bool, timeout: float) -> int:
    node = Node(directory)
    kubectl = Kubectl(node.kubeconfig)
    try:
        say("bringing up the node (root; one per machine)")
        node.up(log=say, cards={SPYRE_PF: node_operator.NODE_CARDS})
        say("images: building what is not cached (the first time: minutes), pushing them")
        node_operator.push_images(node, say)
        say(f"installing the operator with the Helm chart into {node_operator.NAMESPACE}")
        node_operator.install_chart(node)
        models = node_operator.make_tiny_model(directory / "models")
        say(
            f"made a tiny Granite (random weights) in {models}; applying a CPU SpyreModel "
            f"that holds {DEMO_CARDS} of the node's {node_operator.NODE_CARDS} fake Spyre "
            "cards, as a card model would"
        )
        node_operator.add_pull_secret(node, "default")
        model = node_operator.tiny_model(models, cards=DEMO_CARDS)
        kubectl("apply", "-f", "-", input=json.dumps(model))
        status = watch(kubectl, timeout)
        if status.get("phase") != "Ready":
            say(f"the model did not get Ready: {status}")
            return 1
        service = kubectl.get("svc", node_operator.MODEL_NAME)
        ip, port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"]
        say(f"POST http://{ip}:{port}/v1/completions (the Service's ClusterIP, via kube-proxy)")
        answer = node_operator.complete(ip, port, "Hello")
        say(f"answer: {answer['choices'][0]['text']!r} ({answer['usage']})")
        return 0
    except (ControlPlaneError, KubectlError, ImageBuildError, OSError) as err:
        say(f"error: {err}")
        return 1
    finally:
        if keep:
            say(f"kept: kubectl --kubeconfig {node.kubeconfig} get pods -A; logs with "
                f"kubectl logs; stop it: spyre-operator cluster down --dir {node.dir}")  # fmt: skip
        else:
            say("taking the node down")
            node.down()


def watch(kubectl: Kubectl, timeout: float) -> dict[str, Any]:
    """Print the SpyreModel and its pods whenever they change, until Ready or Failed."""
    deadline = time.monotonic() + timeout
    last = ""
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        table = kubectl("get", "spyremodels,pods", "-o", "wide")
        if table != last:
            print(table, flush=True)
            last = table
        status = kubectl.get("spyremodel", node_operator.MODEL_NAME).get("status") or {}
        if status.get("phase") in ("Ready", "Failed"):
            return status
        time.sleep(POLL)
    return status
