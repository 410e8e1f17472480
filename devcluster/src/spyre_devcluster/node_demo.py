"""`spyre-operator dev --node`: the demo for real, on the local node.

Brings the node up (with fake Spyre cards) while the images are built (or found cached),
pushes them to the node's registry, installs the operator with the Helm chart, makes a
tiny Granite model, applies a CPU SpyreModel for it (holding one card, as a card model
would), says what changes as its pods really compile and start (the model's phase and
conditions, each pod's state), and prints a completion fetched through the Service's
ClusterIP. Without --keep the node is taken down at the end.

The model's cache registry is the node's own (docs/cache-sharing.md), whose storage is kept
across runs: the first run compiles and publishes the key, a later one pulls it on its
fresh node instead of compiling again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from spyre_devcluster import node_operator
from spyre_devcluster.controlplane import ControlPlaneError
from spyre_devcluster.images import recipes
from spyre_devcluster.images.store import ImageBuildError
from spyre_devcluster.kubectl import Kubectl, KubectlError
from spyre_devcluster.node import Node
from spyre_devcluster.node_config import SPYRE_PF

POLL = 1.0
DEMO_CARDS = 1
CACHE_SECRET = "spyre-cache-registry"  # .dockerconfigjson and ca.crt of the node's registry
CACHE_REPOSITORY = "demo-caches"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(directory: Path, keep: bool, timeout: float) -> int:
    node = Node(directory)
    kubectl = Kubectl(node.kubeconfig)
    try:
        say(
            "bringing up the node (root; one per machine); meanwhile the images, built where "
            "not cached (the first time: minutes)"
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            built = pool.submit(recipes.build_images, node_operator.IMAGES)
            node.up(log=say, cards={SPYRE_PF: node_operator.NODE_CARDS})
            images = built.result()
        say("pushing the images to the node's registry")
        node_operator.push_images(node, say, images)
        say(f"installing the operator with the Helm chart into {node_operator.NAMESPACE}")
        node_operator.install_chart(node)
        models = tiny_models(directory)
        say(
            f"the tiny Granite (seeded random weights) in {models}; applying a CPU SpyreModel "
            f"that holds {DEMO_CARDS} of the node's {node_operator.NODE_CARDS} fake Spyre "
            "cards, as a card model would"
        )
        node_operator.add_pull_secret(node, "default")
        secret = node.registry.cache_secret(CACHE_SECRET, "default")
        kubectl("apply", "-f", "-", input=json.dumps(secret))
        model = node_operator.tiny_model(cards=DEMO_CARDS, host_path=models)
        repository = node.registry.repository(CACHE_REPOSITORY)
        model["spec"]["cache"]["registry"] = {"repository": repository, "secretName": CACHE_SECRET}
        say(f"its cache registry: {repository} (kept across runs: a second run pulls the key)")
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
            say(
                f"kept: kubectl --kubeconfig {node.kubeconfig} get pods -A; logs with "
                f"kubectl logs; stop it: spyre-operator cluster down --dir {node.dir}"
            )
        else:
            say("taking the node down")
            node.down()


def tiny_models(directory: Path) -> Path:
    """The tiny Granite, made once per version of its recipe and kept beside the node's
    folder: its weights are seeded, so it is the same model, its hostPath the same cache
    key, and a later run neither makes it again nor compiles it."""
    recipe = recipes.checkout() / "image" / "src" / "spyre_runtime" / "tinymodel.py"
    models = directory / f"models-{hashlib.sha256(recipe.read_bytes()).hexdigest()[:12]}"
    if not models.is_dir():
        partial = directory / "models.partial"  # renamed when whole: never half a model
        shutil.rmtree(partial, ignore_errors=True)
        node_operator.make_tiny_model(partial)
        partial.rename(models)
    return models


def watch(kubectl: Kubectl, timeout: float) -> dict[str, Any]:
    """Say what changes (the model's phase, conditions and compile step, each pod's state)
    until the model is Ready or Failed; its status."""
    deadline = time.monotonic() + timeout
    said: dict[str, tuple[str, str]] = {}
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = kubectl.get("spyremodel", node_operator.MODEL_NAME).get("status") or {}
        now = describe(status, kubectl.get("pods")["items"])
        for what, (state, text) in now.items():
            if what not in said or said[what][0] != state:
                say(f"{what}: {text}")
        for what in said.keys() - now.keys():
            say(f"{what}: gone")
        said = now
        if status.get("phase") in ("Ready", "Failed"):
            return status
        time.sleep(POLL)
    return status


# The model's own conditions; Progressing, Reconciling and Stalled repeat them (kstatus).
SAID_CONDITIONS = ("CacheReady", "Available", "Degraded", "Ready")


def describe(status: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Subject -> (its state, what to say when the state changes): a condition's state is
    its status and reason, so a message that only counts seconds says nothing new."""
    phase = status.get("phase") or "(none yet)"
    found = {f"{node_operator.MODEL_NAME} phase": (phase, phase)}
    for cond in status.get("conditions") or []:
        if cond["type"] in SAID_CONDITIONS:
            state = f"{cond['status']} {cond.get('reason', '')}"
            found[f"  {cond['type']}"] = (state, f"{state}: {cond.get('message') or ''}")
    step = ((status.get("cache") or {}).get("progress") or {}).get("step")
    if step:
        detail = status["cache"]["progress"].get("detail", "")
        found["  compile step"] = (step, f"{step} ({detail})")
    for pod in pods:
        state = pod_state(pod)
        found[f"pod {pod['metadata']['name']}"] = (state, state)
    return found


def pod_state(pod: dict[str, Any]) -> str:
    """Its phase and each container's state: `Running: serve ready`."""
    st = pod.get("status") or {}
    containers = (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or [])
    parts = []
    for c in containers:
        state = c.get("state") or {}
        if "waiting" in state:
            parts.append(f"{c['name']} waiting ({state['waiting'].get('reason', '')})")
        elif "running" in state:
            parts.append(f"{c['name']} {'ready' if c.get('ready') else 'running'}")
        elif "terminated" in state:
            done = state["terminated"]
            parts.append(f"{c['name']} {done.get('reason', 'ended')} ({done.get('exitCode')})")
    phase = st.get("phase", "Unknown")
    return f"{phase}: {', '.join(parts)}" if parts else phase
