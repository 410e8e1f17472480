"""The operator on the local node, the way a user gets it: the project's images built and
pushed to the node's private registry, the Helm chart installed with the operator image
from there (and the serving image's repository there: the chart's runtimeImage), both
pulled by the kubelet with the credentials of a docker-registry Secret, and a CPU
SpyreModel whose model is made here (random weights, a locally trained tokenizer, no hub).
Shared by the node tests and `scripts/demo`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from spyre_devcluster.images import recipes
from spyre_devcluster.images.push import push
from spyre_devcluster.images.store import Image
from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.node import Node, NodeError
from spyre_devcluster.tools import tool
from spyre_operator import __version__
from spyre_operator.api.runtimes import RuntimeImages
from spyre_runtime.contract import FLAVOURS

RELEASE = "spyre-operator"
NAMESPACE = "spyre-system"
FLAVOUR = "sendnn-inference"
MODEL_NAME = "tiny-granite"
BACKEND = "inductor"  # the CPU backend with a real compiled-graph cache (docs/runtime.md)
# Fake Spyre cards of the demo's and the node tests' node (a common Spyre node: 8 cards,
# two TP4 replicas fill it).
NODE_CARDS = 8
# The docker-registry Secret of the node's registry, in the operator's namespace (the
# chart's imagePullSecrets) and in each namespace with SpyreModels (add_pull_secret).
PULL_SECRET = "spyre-registry"
OPERATOR_IMAGE = "operator"
RUNTIME_IMAGE = "runtime"  # the CPU serving image under the operator's default tags
# Pod Security admission's strictest profile, enforced on every namespace the node tests
# make and on the operator's: what clusters that follow the Kubernetes docs run.
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
# The claim a tiny_model loads its weights from (make_namespace binds it to the folder):
# restricted refuses a pod's hostPath volume, a PersistentVolume's is the cluster's own.
WEIGHTS_CLAIM = "weights"


def runtime_images(node: Node) -> RuntimeImages:
    """The chart's runtimeImage on the node: the registry's runtime repository."""
    return RuntimeImages(node.registry.repository(RUNTIME_IMAGE))


def serving_image(node: Node) -> str:
    """The serving image the operator renders for the tiny model (from the registry)."""
    return runtime_images(node).image(FLAVOUR, FLAVOURS[FLAVOUR].default_version)


IMAGES = ["operator", "runtime-cpu"]  # recipes.build_images: what push_images pushes


def push_images(node: Node, log: Callable[[str], None], built: list[Image] | None = None) -> None:
    """Build (or find cached) the operator and CPU serving images (`built`: IMAGES built
    already) and push them to the node's registry: the operator image as
    `operator:<version>`, the serving image under the tag the operator renders for the
    flavour. What the registry has is not sent again (its storage is kept in the cache:
    the ~9 GB serving layer goes once). Further nodes get the serving image's layers
    hard-linked into their stores (no disk, no pull)."""
    operator, runtime = built or recipes.build_images(IMAGES)
    for image, name, tag in (
        (operator, OPERATOR_IMAGE, __version__),
        (runtime, RUNTIME_IMAGE, serving_image(node).rpartition(":")[2]),
    ):
        done = push(image, node.registry, name, tag)
        state = "already there" if done.already else f"{done.sent / 1e6:.0f} MB pushed"
        log(f"{done.reference}: {state} ({done.skipped} blobs there, {done.seconds:.1f}s)")
    for layout in node.layouts[1:]:  # the kubelet's pull then finds every layer unpacked
        started = time.monotonic()
        node.import_image(runtime, layout)
        log(f"{runtime.name}: linked into {layout.member.name} ({time.monotonic() - started:.1f}s)")


def add_pull_secret(node: Node, namespace: str) -> None:
    """The registry's docker-registry Secret (PULL_SECRET) in namespace."""
    secret = node.registry.pull_secret(PULL_SECRET, namespace)
    Kubectl(node.kubeconfig, namespace)("apply", "-f", "-", input=json.dumps(secret))


def make_namespace(node: Node, name: str, models: Path | None = None) -> Kubectl:
    """The namespace (restricted) with the pull Secret and, with `models`, the claim
    WEIGHTS_CLAIM, read-only, bound to a volume of that folder (the way an administrator
    hands out an existing share: a PersistentVolume of its own, claimRef set); kubectl in
    it. delete_namespace removes both."""
    labelled = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": RESTRICTED},
    }
    Kubectl(node.kubeconfig, None)("apply", "-f", "-", input=json.dumps(labelled))
    add_pull_secret(node, name)
    if models is not None:
        add_weights(node, name, models)
    return Kubectl(node.kubeconfig, name)


def add_weights(node: Node, namespace: str, models: Path) -> None:
    """The claim WEIGHTS_CLAIM in namespace, read-only, bound to a volume of the folder."""
    volume, claim = _weights(namespace, models)
    listed = {"apiVersion": "v1", "kind": "List", "items": [volume, claim]}
    Kubectl(node.kubeconfig, namespace)("apply", "-f", "-", input=json.dumps(listed))


def delete_namespace(node: Node, name: str) -> None:
    """The namespace and the weights volume make_namespace made for it (without waiting)."""
    system = Kubectl(node.kubeconfig, None)
    system("delete", "namespace", name, "--wait=false", "--ignore-not-found")
    system("delete", "pv", _weights_volume(name), "--wait=false", "--ignore-not-found")


def _weights_volume(namespace: str) -> str:
    return f"{WEIGHTS_CLAIM}-{namespace}"


def _weights(namespace: str, models: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PersistentVolume of the folder (Retain: the folder is the session's) and the
    claim bound to it, of no class, so the node's provisioner leaves both alone."""
    size, modes = {"storage": "1Gi"}, ["ReadOnlyMany"]
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": _weights_volume(namespace)},
        "spec": {
            "capacity": size,
            "accessModes": modes,
            "hostPath": {"path": str(models), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": WEIGHTS_CLAIM},
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": WEIGHTS_CLAIM, "namespace": namespace},
        "spec": {
            "accessModes": modes,
            "resources": {"requests": size},
            "storageClassName": "",
            "volumeName": _weights_volume(namespace),
        },
    }
    return volume, claim


def _chart_args(node: Node, values: dict[str, str] | None) -> list[str]:
    """The chart, and as --set: the operator image and the serving image's repository in
    the node's registry with its pull Secret, a compile's progress read every 5 s (the
    tiny model compiles in a minute or two, less than the default 60 s shows), and
    `values`."""
    chart = recipes.checkout() / "charts" / "spyre-operator"
    sets = {
        "image.repository": node.registry.repository(OPERATOR_IMAGE),
        "imagePullSecrets[0].name": PULL_SECRET,
        "runtimeImage.repository": runtime_images(node).repository,
        "operator.progressSeconds": "5",
    } | (values or {})
    return [str(chart), "-n", NAMESPACE, *(f"--set={k}={v}" for k, v in sets.items())]


def install_chart(node: Node, values: dict[str, str] | None = None) -> None:
    """Install or upgrade the release with the chart's defaults and what _chart_args sets,
    its namespace (restricted) made first with the pull Secret the operator pod's image
    needs."""
    make_namespace(node, NAMESPACE)  # the Secret before the operator pod pulls its image
    result = subprocess.run(
        [tool("helm"), "--kubeconfig", str(node.kubeconfig), "upgrade", "--install",
         RELEASE, *_chart_args(node, values), "--create-namespace", "--wait", "--timeout", "5m"],
        capture_output=True, text=True, check=False, timeout=400,
    )  # fmt: skip
    if result.returncode != 0:
        raise NodeError(f"helm install of the operator failed: {result.stderr.strip()}")


def render_chart(node: Node, values: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The objects `install_chart(node, values)` installs (`helm template`), e.g. with
    the Prometheus Operator's objects, which the node has no CRDs for, switched on."""
    result = subprocess.run(
        [tool("helm"), "template", RELEASE, *_chart_args(node, values)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    if result.returncode != 0:
        raise NodeError(f"helm template of the operator failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def make_tiny_model(folder: Path) -> Path:
    """The tiny Granite (`spyre-runtime tiny-models`, with the CPU runtime's transformers)
    in folder/granite, readable by the serving pod's non-root user; returns folder (the
    volume to mount)."""
    runtime = recipes.runtime_venv(FLAVOUR) / "bin" / "spyre-runtime"
    # this checkout's spyre_runtime: the venv's editable install points at whichever
    # checkout ran scripts/runtime-env last, which may be gone since
    source = {"PYTHONPATH": str(recipes.checkout() / "image" / "src")}
    result = subprocess.run(
        [str(runtime), "tiny-models", str(folder)],
        capture_output=True, text=True, check=False, env=os.environ | source,
    )  # fmt: skip
    if result.returncode != 0:
        raise NodeError(f"making the tiny model failed: {result.stderr.strip()[-2000:]}")
    folder.chmod(0o755)  # the hostPath itself: a test's tmp folder is 0700
    return folder


def tiny_model(
    name: str = MODEL_NAME, cards: int = 0, host_path: Path | None = None
) -> dict[str, Any]:
    """A SpyreModel serving the tiny Granite on CPU from the claim WEIGHTS_CLAIM (see
    make_namespace), or from `host_path`, a folder on the node (which restricted
    namespaces refuse), its pods pulling with PULL_SECRET (add_pull_secret in its namespace
    first); with `cards` its pods hold that many Spyre cards as a card model's would (a
    stand-in, docs/api.md "Cards")."""
    source = (
        {"hostPath": {"path": str(host_path)}}
        if host_path is not None
        else {"pvc": {"claimName": WEIGHTS_CLAIM}}
    )
    return {
        "apiVersion": "serving.spyre.dev/v1alpha1",
        "kind": "SpyreModel",
        "metadata": {"name": name},
        "spec": {
            "model": {
                "id": MODEL_NAME,
                "path": "/models/granite",
                "source": source,
            },
            # no image: the operator's for the flavour, from the chart's runtimeImage
            "imagePullSecrets": [{"name": PULL_SECRET}],
            "backend": BACKEND,
            "runtime": {"flavour": FLAVOUR},
            "accelerator": {"count": cards},
            "batching": {
                "continuous": {"maxModelLen": 256, "maxNumSeqs": 2, "maxNumBatchedTokens": 128}
            },
            "cache": {"volume": {"size": "1Gi"}},
            # small requests: a 2-core node holds two models, a second replica and a compile
            "resources": {"requests": {"cpu": "250m", "memory": "2Gi"}},
        },
    }


def complete(ip: str, port: int, prompt: str, timeout: float = 60) -> dict[str, Any]:
    """POST /v1/completions to a Service's ClusterIP (from the host, through kube-proxy)
    or a pod's IP; retried until timeout, as kube-proxy follows a new endpoint within a
    second or so."""
    request = urllib.request.Request(
        f"http://{ip}:{port}/v1/completions",
        data=json.dumps({"model": MODEL_NAME, "prompt": prompt, "max_tokens": 8}).encode(),
        headers={"Content-Type": "application/json"},
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                answer: dict[str, Any] = json.loads(resp.read())
                return answer
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
