"""A release installed the way a user gets it, then mirrored for an air-gapped cluster, on
the real node with the node's registry (TLS, basic auth) standing in for quay.io:

1. `scripts/release VERSION REGISTRY` publishes the operator image, the CPU serving image
   and the chart (oci://) to the registry;
2. README's "Using it against a real cluster", as written but for the registry: `helm
   install oci://...` with the registry's credentials, a model applied with `kubectl -n`,
   `kubectl wait --for=condition=Ready`, and it answers;
3. docs/install.md's air-gapped recipe: `skopeo copy` of the images and `helm pull` +
   `helm push` of the chart into another path of the registry (the mirror), then `helm
   upgrade` from the mirror's chart with the mirror's repositories: the operator and the
   model roll onto the mirror's images (same digests), no compile Job, the same cache key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nodelib import Kubectl, SharedNode

from spyre_devcluster import node_operator, release
from spyre_devcluster.images import recipes
from spyre_devcluster.images.oci import MEDIA_INDEX
from spyre_devcluster.images.push import client
from spyre_devcluster.node import Node
from spyre_devcluster.registry import Registry
from spyre_devcluster.simulate import poll_until
from spyre_devcluster.tools import tool
from spyre_operator import __version__
from spyre_operator.api.runtimes import RuntimeImages
from spyre_runtime.contract import FLAVOURS

pytestmark = pytest.mark.node

MODEL = "released"
COMPILE = "app.kubernetes.io/component=compile"
WAIT = 1500  # a compile plus a serving start, on a loaded 2-core machine


def run(cmd: list[str], timeout: float = 600, **kwargs: Any) -> str:
    print(f"$ {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    print(f"  ({time.monotonic() - started:.0f}s)", flush=True)
    assert done.returncode == 0, f"{cmd[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def serving_tag() -> str:
    flavour = node_operator.FLAVOUR
    return RuntimeImages("x").image(flavour, FLAVOURS[flavour].default_version).split(":")[1]


@pytest.fixture
def node(shared_node: SharedNode) -> Iterator[Node]:
    node = shared_node.get()
    yield node
    # the release replaced the stories' operator: the next with_operator installs it again
    shared_node.operator_on = None


@pytest.fixture
def certs(node: Node, tmp_path: Path) -> Path:
    """skopeo's --cert-dir for the registry: its CA alone (a *.key there would be taken
    for a client certificate's)."""
    folder = tmp_path / "certs"
    folder.mkdir()
    shutil.copy(node.registry.ca or "", folder / "ca.crt")
    return folder


def helm_auth(registry: Registry) -> list[str]:
    return ["--ca-file", registry.ca or "", "--username", registry.username,
            "--password", registry.password]  # fmt: skip


def skopeo_copy(registry: Registry, certs: Path, source: str, dest: str) -> None:
    """docs/install.md's recipe: every architecture, the digests unchanged."""
    creds = f"{registry.username}:{registry.password}"
    run(["skopeo", "copy", "--all", "--preserve-digests",
         "--src-cert-dir", str(certs), "--src-creds", creds,
         "--dest-cert-dir", str(certs), "--dest-creds", creds,
         f"docker://{source}", f"docker://{dest}"], timeout=1800)  # fmt: skip


def manifest_digest(registry: Registry, target: release.Target, name: str, tag: str) -> str:
    path = f"{target.path}/{name}"
    # both are indexes of their architectures (the serving image's: amd64 alone here)
    digest = client(registry, path).manifest_digest(tag, MEDIA_INDEX)
    assert digest, f"{target.repository(name)}:{tag} is not in the registry"
    return digest


def test_release_install_from_oci_then_move_to_an_air_gapped_mirror(
    node: Node, models: Path, certs: Path, tmp_path: Path
) -> None:
    registry = node.registry
    published = release.Target.parse(f"{registry.address}/release")
    mirror = release.Target.parse(f"{registry.address}/mirror/spyre")
    kubeconfig = ["--kubeconfig", str(node.kubeconfig)]
    system = Kubectl(node.kubeconfig, node_operator.NAMESPACE)

    # 1. the release, as CI runs it (with the registry's CA and account)
    env = os.environ | {
        release.USERNAME_ENV: registry.username,
        release.PASSWORD_ENV: registry.password,
    }
    script = str(recipes.checkout() / "scripts" / "release")
    # the serving image's amd64 alone: its arm64 (8.7 GB more to push and mirror) is run
    # in tests/images/test_serving_index.py; the index push is the operator's, tested here
    out = run([script, f"v{__version__}", str(published), "--ca-file", registry.ca or "",
               "--serving-platforms", "amd64"], timeout=3600, env=env)  # fmt: skip
    chart = f"{published.chart_url()}/{release.CHART}"
    assert f"{chart}:{__version__}: pushed" in out, out

    # 2. README's "Using it against a real cluster", the registry's credentials added
    namespace = f"rel-{uuid.uuid4().hex[:8]}"
    run([tool("helm"), *kubeconfig, "uninstall", "spyre-operator", "-n",
         node_operator.NAMESPACE, "--ignore-not-found", "--wait"])  # the stories' one  # fmt: skip
    node_operator.make_namespace(node, node_operator.NAMESPACE)  # restricted, the pull Secret
    run([tool("helm"), *kubeconfig, "install", "spyre-operator", chart, "--version",
         __version__, *helm_auth(registry), "-n", node_operator.NAMESPACE, "--create-namespace",
         f"--set=imagePullSecrets[0].name={node_operator.PULL_SECRET}",
         f"--set=runtimeImage.repository={published.repository(release.RUNTIME_CPU)}",
         f"--set=runtimeImage.pullSecrets[0].name={node_operator.PULL_SECRET}",
         "--wait", "--timeout", "10m"], timeout=700)  # fmt: skip
    pods = system.get("pods", "-l", "app.kubernetes.io/name=spyre-operator")["items"]
    # the uninstalled release's pod may still be terminating: helm waited for its Deployment
    (operator,) = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    operator_image = f"{published.repository(release.OPERATOR)}:{__version__}"
    assert operator["spec"]["containers"][0]["image"] == operator_image

    # the pull Secret: the chart's runtimeImage.pullSecrets
    kubectl = node_operator.make_namespace(node, namespace, models)
    doc = node_operator.tiny_model(MODEL)
    del doc["spec"]["imagePullSecrets"]  # the chart-level pull Secret only
    try:
        kubectl("apply", "-f", "-", input=json.dumps(doc))
        wait_ready(kubectl)
        status = kubectl.get(f"spyremodel/{MODEL}")["status"]
        key = status["activeCacheKey"]
        jobs = compile_jobs(kubectl)
        assert len(jobs) == 1, jobs
        (pod,) = serving_pods(kubectl)
        image = f"{published.repository(release.RUNTIME_CPU)}:{serving_tag()}"
        assert pod["spec"]["containers"][0]["image"] == image
        answer(kubectl)

        # 3. the air-gapped recipe: images and chart into the mirror, install from there
        for name, tag in ((release.OPERATOR, __version__), (release.RUNTIME_CPU, serving_tag())):
            source, dest = f"{published.repository(name)}:{tag}", f"{mirror.repository(name)}:{tag}"
            skopeo_copy(registry, certs, source, dest)
            digest = manifest_digest(registry, published, name, tag)
            assert manifest_digest(registry, mirror, name, tag) == digest
        run([tool("helm"), "pull", chart, "--version", __version__, *helm_auth(registry),
             "--destination", str(tmp_path)])  # fmt: skip
        package = tmp_path / f"{release.CHART}-{__version__}.tgz"
        run([tool("helm"), "push", str(package), mirror.chart_url(), *helm_auth(registry)])
        mirrored = f"{mirror.chart_url()}/{release.CHART}"
        run([tool("helm"), *kubeconfig, "upgrade", "spyre-operator", mirrored, "--version",
             __version__, *helm_auth(registry), "-n", node_operator.NAMESPACE,
             f"--set=image.repository={mirror.repository(release.OPERATOR)}",
             f"--set=imagePullSecrets[0].name={node_operator.PULL_SECRET}",
             f"--set=runtimeImage.repository={mirror.repository(release.RUNTIME_CPU)}",
             f"--set=runtimeImage.pullSecrets[0].name={node_operator.PULL_SECRET}",
             "--wait", "--timeout", "10m"], timeout=700)  # fmt: skip
        moved = f"{mirror.repository(release.RUNTIME_CPU)}:{serving_tag()}"

        def rolled() -> bool:
            pods = serving_pods(kubectl)
            images = {p["spec"]["containers"][0]["image"] for p in pods}
            ready = all(
                all(c.get("ready") for c in p["status"].get("containerStatuses", [{}]))
                for p in pods
            )
            return images == {moved} and ready and len(pods) == 1

        poll_until(rolled, "the model rolled onto the mirror's image", WAIT, interval=2.0)
        wait_ready(kubectl)
        assert kubectl.get(f"spyremodel/{MODEL}")["status"]["activeCacheKey"] == key
        assert compile_jobs(kubectl) == jobs  # nothing compiled again
        (operator,) = [
            p
            for p in system.get("pods", "-l", "app.kubernetes.io/name=spyre-operator")["items"]
            if not p["metadata"].get("deletionTimestamp")
        ]
        assert operator["spec"]["containers"][0]["image"] == (
            f"{mirror.repository(release.OPERATOR)}:{__version__}"
        )
        pulled = node.ctr().images()
        assert pulled[moved] == pulled[image]  # the same image under the mirror's name
        answer(kubectl)
    except Exception:
        print(kubectl("get", "spyremodel,job,pod", "-o", "wide"))
        print(kubectl("describe", "spyremodel,pod"))
        raise
    finally:
        node_operator.delete_namespace(node, namespace)


def wait_ready(kubectl: Kubectl) -> None:
    """README's `kubectl wait` (scripts, CI)."""
    kubectl.wait(f"sm/{MODEL}", "condition=Ready", WAIT)


def compile_jobs(kubectl: Kubectl) -> dict[str, str]:
    items = kubectl.get("jobs", "-l", COMPILE)["items"]
    return {j["metadata"]["name"]: j["metadata"]["uid"] for j in items}


def serving_pods(kubectl: Kubectl) -> list[dict[str, Any]]:
    selector = kubectl.get(f"spyremodel/{MODEL}")["status"]["selector"]
    items: list[dict[str, Any]] = kubectl.get("pods", "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def answer(kubectl: Kubectl) -> None:
    svc = kubectl.get(f"service/{MODEL}")["spec"]
    got = node_operator.complete(svc["clusterIP"], svc["ports"][0]["port"], "Hello")
    assert got["usage"]["completion_tokens"] >= 1, got
