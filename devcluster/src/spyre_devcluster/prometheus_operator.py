"""The Prometheus Operator on the testbed's node, and the Prometheus servers it runs there.

Built with the go command, cached by install.go_commands: the operator and its config
reloader from gomod/prometheus-operator, Prometheus from gomod/prometheus (the release the
operator defaults to; its own go.mod, as the operator's client-go is too new for it).
Debian's Prometheus (2.42) cannot stand in: it is built without Kubernetes service
discovery, which every PodMonitor and ServiceMonitor renders to, and is older than the
oldest release the operator supports (2.45). The operator runs as a host process against
the node's API server (like cert-manager's controllers); a `Prometheus` object becomes the
StatefulSet the operator renders, whose pods run two images made here, one static binary
each, imported into the node's containerd. Nothing is written between the monitors and
rules the operator reads and the configuration Prometheus loads.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from spyre_devcluster.binaries import go_build
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.host_programs import HostPrograms
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
from spyre_devcluster.install import go_commands, go_module_dir, prometheus_release
from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.node import Node
from spyre_devcluster.prometheus_server import PrometheusServer, prometheus_objects

FOLDER = "prometheus-operator"  # gomod/<FOLDER>: the operator and its config reloader
PROMETHEUS = "prometheus"  # gomod/<PROMETHEUS>: the server
OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
COMMANDS = {
    "operator": f"{OPERATOR_MODULE}/cmd/operator",
    "prometheus-config-reloader": f"{OPERATOR_MODULE}/cmd/prometheus-config-reloader",
}
NAMESPACE = "monitoring"  # where the testbed's Prometheus objects live
NOBODY = "65534:65534"  # the user of upstream's images (the operator's pods set their own)


def programs() -> dict[str, Path]:
    """The operator, the config reloader and Prometheus, built the first time."""
    server = go_build(PROMETHEUS)
    return go_commands(FOLDER, COMMANDS) | go_commands(
        PROMETHEUS, {"prometheus": f"{server.module}/cmd/prometheus"}
    )


def prometheus_version() -> str:
    """The Prometheus release gomod/prometheus builds, as the Prometheus object names it."""
    return f"v{prometheus_release(go_build(PROMETHEUS).version)}"


def crd_files() -> list[Path]:
    """The monitoring.coreos.com CRDs of the operator's release."""
    return sorted((go_module_dir(FOLDER) / "example" / "prometheus-operator-crd").glob("*.yaml"))


def binary_image(binary: Path, tag: str) -> Image:
    """An image of one static binary, /bin/<name>, its entrypoint (as upstream's images of
    Prometheus and the config reloader: the operator's pods give only arguments)."""
    name = f"{REGISTRY}/{binary.name}:{tag}"
    key = inputs_key({"binary": str(binary), "name": name, "user": NOBODY})
    found = cached(binary.name, key)
    if found:
        return found
    with building(binary.name, key) as scratch:
        tree = scratch / "layer"
        (tree / "bin").mkdir(mode=0o755, parents=True)
        tree.chmod(0o755)
        shutil.copy2(binary, tree / "bin" / binary.name)
        config = ImageConfig(user=NOBODY, entrypoint=(f"/bin/{binary.name}",))
        image = Image(name, key, (final_layer(scratch, tree),), config)
        image.save(scratch)
    return image


class PrometheusOperator(HostPrograms):
    """The operator watching the node's API server, with its CRDs installed and the images
    of the Prometheus pods it renders in the node's image store; `deploy` runs a Prometheus."""

    def __init__(self, node: Node, logs: Path) -> None:
        super().__init__("prometheus-operator", logs)
        self.node = node
        binaries = programs()
        self.version = prometheus_version()
        with locked():
            self.prometheus_image = binary_image(binaries["prometheus"], self.version)
            self.reloader_image = binary_image(
                binaries["prometheus-config-reloader"], go_build(FOLDER).version
            )
        for image in (self.prometheus_image, self.reloader_image):
            node.import_image(image)
        kubectl = Kubectl(node.kubeconfig, None)
        crds = crd_files()
        for crd in crds:  # server-side: the Prometheus CRD is too big for the annotation
            kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        names = [f"crd/{p.stem.partition('_')[2]}.{p.stem.partition('_')[0]}" for p in crds]
        kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        self.start(
            "operator",
            [str(binaries["operator"]),
             f"--prometheus-config-reloader={self.reloader_image.name}",
             f"--web.listen-address=127.0.0.1:{free_port()}"],
            env={**os.environ, "KUBECONFIG": str(node.kubeconfig)},
        )  # fmt: skip

    def deploy(self, name: str, *, user_workload: bool = False) -> PrometheusServer:
        """A Prometheus `name` in NAMESPACE that scrapes every monitor and evaluates every
        rule of the cluster every 5 s, once ready; with `user_workload`, configured as
        OpenShift's User Workload Monitoring configures its own (prometheus_server.py)."""
        docs = prometheus_objects(
            name, NAMESPACE, self.prometheus_image.name, self.version, user_workload
        )
        listed = {"apiVersion": "v1", "kind": "List", "items": docs}
        Kubectl(self.node.kubeconfig, None)("apply", "-f", "-", input=json.dumps(listed))
        server = PrometheusServer(self.node.kubeconfig, NAMESPACE, name, docs)
        try:
            server.wait_ready(self.check_alive)
        except Exception:
            print(server.describe())
            print(self.tail("operator", 40))
            raise
        return server
