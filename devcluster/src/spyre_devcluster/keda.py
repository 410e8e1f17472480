"""KEDA on the node: its operator and its metrics API server (the aggregated API
v1beta1.external.metrics.k8s.io the HPA controller reads) as pods, installed from KEDA's
own manifests.

Both programs are built with the go command from github.com/kedacore/keda/v2 at the
version gomod/keda's go.mod requires (cmd/operator, cmd/adapter), once into the install
cache (install.go_commands). No container registry is reachable, so each goes into an
image made here as upstream's (the one static binary at /keda or /keda-adapter, user
65532) and imported into the node's containerd. The manifests are the module's
config/minimal (KEDA without its admission webhooks) as `kubectl kustomize` renders it,
changed only where this node differs from a cluster:
- the images are these (imagePullPolicy IfNotPresent: they are imported, not pulled);
- the node runs no cluster DNS, so each pod gets the names it dials (the operator's gRPC
  Service for the metrics server, Prometheus for the operator's scaler) as hostAliases,
  at the addresses cluster DNS would give.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from spyre_devcluster.binaries import go_build
from spyre_devcluster.images.oci import ImageConfig
from spyre_devcluster.images.store import (
    REGISTRY,
    Image,
    building,
    cached,
    final_layer,
    inputs_key,
    locked,
)
from spyre_devcluster.install import go_commands, go_module_dir
from spyre_devcluster.kubectl import Kubectl, KubectlError
from spyre_devcluster.node import Node
from spyre_devcluster.tools import tool

FOLDER = "keda"  # gomod/<FOLDER>
NAMESPACE = "keda"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
USER = "65532:65532"  # upstream's images: distroless static, nonroot
# upstream image -> (package under cmd/, the binary's path in the image)
IMAGES = {
    "ghcr.io/kedacore/keda": ("operator", "keda"),
    "ghcr.io/kedacore/keda-metrics-apiserver": ("adapter", "keda-adapter"),
}
OPERATOR_GRPC = f"keda-operator.{NAMESPACE}.svc.cluster.local"  # the metrics server's default


class KedaError(RuntimeError):
    """KEDA did not come up; the message says which part and why."""


def programs() -> dict[str, Path]:
    """The operator and the adapter (package name: binary), built once."""
    module = go_build(FOLDER).module
    return go_commands(FOLDER, {cmd: f"{module}/cmd/{cmd}" for cmd, _ in IMAGES.values()})


def version() -> str:
    return go_build(FOLDER).version.removeprefix("v")


def images() -> dict[str, Image]:
    """Upstream image name -> the image made here from the built binary (cached)."""
    built = programs()
    made = {}
    with locked():
        for upstream, (cmd, path) in IMAGES.items():
            made[upstream] = _image(upstream.rpartition("/")[2], built[cmd], path)
    return made


def _image(name: str, binary: Path, path: str) -> Image:
    key = inputs_key({"binary": str(binary), "size": binary.stat().st_size, "path": path})
    slug = f"keda-{name}"
    found = cached(slug, key)
    if found:
        return found
    with building(slug, key) as scratch:
        layer = scratch / "layer"
        layer.mkdir(mode=0o755)
        (layer / "tmp").mkdir(mode=0o1777)
        try:
            os.link(binary, layer / path)  # the cache and the image store share a disk
        except OSError:
            shutil.copy2(binary, layer / path)
        config = ImageConfig(user=USER, entrypoint=(f"/{path}",), workdir="/")
        image = Image(f"{REGISTRY}/{name}:{version()}", key, (final_layer(scratch, layer),), config)
        image.save(scratch)
    return image


def manifests() -> list[dict[str, Any]]:
    """KEDA's config/minimal as `kubectl kustomize` renders it."""
    folder = go_module_dir(FOLDER) / "config" / "minimal"
    out = subprocess.run(
        [tool("kubectl"), "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise KedaError(f"kubectl kustomize {folder} failed: {out.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def for_node(
    docs: list[dict[str, Any]], made: Mapping[str, Image], aliases: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The manifests with this node's images and the hostAliases for `aliases` (name ->
    address) in each Deployment."""
    by_ip: dict[str, list[str]] = {}
    for name, ip in aliases.items():
        by_ip.setdefault(ip, []).append(name)
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        pod["hostAliases"] = [{"ip": ip, "hostnames": names} for ip, names in by_ip.items()]
        for container in pod["containers"]:
            upstream = container["image"].rpartition(":")[0]
            if upstream not in made:
                raise KedaError(f"KEDA's manifests name an image not built here: {upstream}")
            container["image"] = made[upstream].name
            container["imagePullPolicy"] = "IfNotPresent"
    return docs


def service_address(kubectl: Kubectl, name: str, namespace: str) -> str:
    """What cluster DNS answers for <name>.<namespace>: the Service's ClusterIP, or for a
    headless Service its first endpoint."""
    service = kubectl.get("-n", namespace, f"service/{name}")
    ip: str = service["spec"].get("clusterIP", "None")
    if ip != "None":
        return ip
    slices = kubectl.get(
        "-n", namespace, "endpointslices", "-l", f"kubernetes.io/service-name={name}"
    )["items"]
    addresses = [a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]]
    if not addresses:
        raise KedaError(f"service {namespace}/{name} is headless and has no endpoints yet")
    return str(addresses[0])


class Keda:
    """KEDA on a node: `install` puts it there, `remove` takes it away again (its
    APIService first: left without its server it would break discovery, and with it
    kubectl and helm), whatever `install` got done."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.cluster = Kubectl(node.kubeconfig, None)
        self.kubectl = Kubectl(node.kubeconfig, NAMESPACE)

    def install(
        self, resolve: Mapping[str, tuple[str, str]], log: Callable[[str], None] = print
    ) -> None:
        """Install KEDA and wait until the external metrics API is Available. `resolve`:
        the names KEDA's pods dial besides its own -> (Service, namespace)."""
        made = images()
        for image in made.values():
            self.node.import_image(image)
        docs = manifests()
        deployments = [d for d in docs if d["kind"] == "Deployment"]
        self._apply([d for d in docs if d["kind"] != "Deployment"])
        aliases = {OPERATOR_GRPC: service_address(self.cluster, "keda-operator", NAMESPACE)}
        for name, (service, namespace) in resolve.items():
            aliases[name] = service_address(self.cluster, service, namespace)
        self._apply(for_node(deployments, made, aliases))
        log(f"KEDA {version()} ({', '.join(i.name for i in made.values())}), {aliases}")
        try:
            for deployment in deployments:
                name = deployment["metadata"]["name"]
                self.kubectl.wait(f"deployment/{name}", "condition=Available", timeout=300)
            self.cluster.wait(f"apiservice/{API_SERVICE}", "condition=Available")
        except KubectlError as error:
            raise KedaError(f"KEDA did not come up: {error}\n{self.diagnosis()}") from None

    def _apply(self, docs: list[dict[str, Any]]) -> None:
        items = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
        self.cluster("apply", "--server-side", "-f", "-", input=items)

    def diagnosis(self) -> str:
        """The APIService's status, KEDA's pods and the tail of their logs."""
        lines = [f"APIService: {self.cluster.get(f'apiservice/{API_SERVICE}').get('status')}"]
        lines.append(self.kubectl("get", "pods", "-o", "wide"))
        for pod in self.kubectl.get("pods")["items"]:
            name = pod["metadata"]["name"]
            try:
                lines.append(f"--- {name}\n" + self.kubectl("logs", name, "--tail=40"))
            except KubectlError as error:
                lines.append(f"--- {name}: {error}")
        return "\n".join(lines)

    def remove(self) -> None:
        self.cluster("delete", "apiservice", API_SERVICE, "--ignore-not-found")
        self.cluster("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
