"""Find the Kubernetes binaries: etcd, kube-apiserver, kube-controller-manager, and the
node's kubelet, kube-scheduler and kube-proxy.

Order of preference:
1. `KUBEBUILDER_ASSETS` (the envtest convention): a folder with `etcd` and
   `kube-apiserver`, optionally `kube-controller-manager`. This is how people with a
   current Kubernetes run the same tests.
2. The project's cache folder for the selected release (`SPYRE_KUBERNETES`: `current`, the
   default, or `oldest`), filled by `cluster install` from the Go modules in `gomod/`.

A node (`cluster up --node`) always runs the `current` release, plane included (never
`KUBEBUILDER_ASSETS` or `SPYRE_KUBERNETES`: the kubelet matches the API server and the
settings written for it), with containerd 2 and the CNI plugins, each built from the Go
modules of its own go.mod in `gomod/` and cached the same way.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
KUBELET = "kubelet"
SCHEDULER = "kube-scheduler"
PROXY = "kube-proxy"
NODE_BINARIES = (KUBELET, SCHEDULER, PROXY)
PLANE_BINARIES = (APISERVER, CONTROLLER_MANAGER)
CONTAINERD, SHIM, CTR = "containerd", "containerd-shim-runc-v2", "ctr"
# binary name: package of the module
CONTAINERD_COMMANDS = {
    CONTAINERD: "cmd/containerd",
    SHIM: "cmd/containerd-shim-runc-v2",
    CTR: "cmd/ctr",
}
CNI_PLUGINS = {
    "bridge": "plugins/main/bridge",
    "host-local": "plugins/ipam/host-local",
    "loopback": "plugins/main/loopback",
    "portmap": "plugins/meta/portmap",
}

GOMOD = Path(__file__).parent / "gomod"  # the go.mod of each build: versions live there
RELEASE_ENV = "SPYRE_KUBERNETES"
# current: every tier, the node included; oldest: the API-server tier's second run
RELEASES = {"current": "kubernetes", "oldest": "kubernetes-oldest"}


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not available; the message says how to get them."""


def cache_root() -> Path:
    return Path(os.environ.get("SPYRE_SERVING_CACHE", Path.home() / ".cache" / "spyre-serving"))


@dataclass(frozen=True)
class GoBuild:
    """One go.mod of gomod/: the module whose release it builds, and where the result goes."""

    folder: Path
    module: str  # the required module that carries the commands
    version: str

    @property
    def key(self) -> str:
        """The version and a digest of go.mod + go.sum (and main.go, a program of ours):
        any change there rebuilds."""
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum", "main.go"):
            if (self.folder / name).exists():
                digest.update((self.folder / name).read_bytes())
        return f"{self.version}-{digest.hexdigest()[:12]}"

    def bin_dir(self) -> Path:
        return cache_root() / "k8s" / f"{self.folder.name}-{self.key}"


def go_build(folder: str) -> GoBuild:
    """The build described by gomod/<folder>/go.mod (its single direct requirement)."""
    path = GOMOD / folder
    text = (path / "go.mod").read_text()
    found = re.search(r"^require (\S+) (v\S+)$", text, re.MULTILINE)
    if found is None:
        raise BinariesMissing(f"{path / 'go.mod'} has no single-line `require MODULE VERSION`")
    return GoBuild(path, found.group(1), found.group(2))


def selected_release() -> str:
    name = os.environ.get(RELEASE_ENV, "current")
    if name not in RELEASES:
        raise BinariesMissing(
            f"{RELEASE_ENV}={name} is not a release the testbed builds; use one of "
            f"{', '.join(RELEASES)} (versions in {GOMOD}/*/go.mod)"
        )
    return name


def kubernetes(release: str | None = None) -> GoBuild:
    return go_build(RELEASES[release or selected_release()])


def etcd() -> GoBuild:
    return go_build("etcd")


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    apiserver: Path
    controller_manager: Path | None
    source: str  # where they came from, for messages


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _from_folder(folder: Path, source: str) -> Binaries | None:
    etcd = folder / ETCD
    apiserver = folder / APISERVER
    if not (_executable(etcd) and _executable(apiserver)):
        return None
    manager = folder / CONTROLLER_MANAGER
    return Binaries(etcd, apiserver, manager if _executable(manager) else None, source)


def find_binaries() -> Binaries:
    """Return the binaries to run, or raise BinariesMissing with what to do."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        found = _from_folder(Path(assets), "KUBEBUILDER_ASSETS")
        if found is None:
            raise BinariesMissing(
                f"KUBEBUILDER_ASSETS={assets} does not hold executable `{ETCD}` and "
                f"`{APISERVER}`; point it at an envtest assets folder or unset it."
            )
        return found
    release = kubernetes()
    found = _from_folder(release.bin_dir(), f"cache, Kubernetes {release.version}")
    if found is None:
        raise BinariesMissing(
            f"no kube-apiserver/etcd found (looked in KUBEBUILDER_ASSETS, unset, and "
            f"{release.bin_dir()}). Run `spyre-operator cluster install` to build "
            f"Kubernetes {release.version} and etcd from their Go modules (about 15 "
            "minutes the first time), or set KUBEBUILDER_ASSETS to a folder with etcd "
            "and kube-apiserver."
        )
    return found


def containerd() -> GoBuild:
    return go_build("containerd")


def cni_plugins() -> GoBuild:
    return go_build("cni-plugins")


def node_builds() -> dict[GoBuild, list[str]]:
    """What a node runs: each build and the binaries it makes (the `current` release)."""
    return {
        kubernetes("current"): [ETCD, *PLANE_BINARIES, *NODE_BINARIES],
        containerd(): list(CONTAINERD_COMMANDS),
        cni_plugins(): list(CNI_PLUGINS),
    }


def missing_node_binaries() -> list[str]:
    """The binaries a node runs that the cache lacks."""
    return [
        name
        for build, names in node_builds().items()
        for name in names
        if not _executable(build.bin_dir() / name)
    ]


@dataclass(frozen=True)
class NodeBinaries:
    plane: Binaries
    programs: dict[str, Path]  # kubelet, kube-scheduler, kube-proxy, containerd, its shim, ctr
    cni_dir: Path


def node_binaries() -> NodeBinaries:
    """The cache's node binaries, or BinariesMissing with what to do."""
    missing = missing_node_binaries()
    if missing:
        raise BinariesMissing(
            f"{', '.join(missing)} missing from {cache_root() / 'k8s'}; run "
            "`spyre-operator cluster install --node` (as root; builds Kubernetes, "
            "containerd and the CNI plugins from their Go modules, about 25 minutes the "
            "first time, and installs runc and iptables)"
        )
    release, store = kubernetes("current").bin_dir(), containerd().bin_dir()
    plane = Binaries(
        release / ETCD,
        release / APISERVER,
        release / CONTROLLER_MANAGER,
        f"cache, Kubernetes {kubernetes('current').version}",
    )
    programs = {name: release / name for name in NODE_BINARIES}
    programs |= {name: store / name for name in CONTAINERD_COMMANDS}
    return NodeBinaries(plane, programs, cni_plugins().bin_dir())


def ctr_binary() -> Path:
    """The node's ctr (a client of the same version as its containerd)."""
    return containerd().bin_dir() / CTR
