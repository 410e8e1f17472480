"""Find the Kubernetes binaries: etcd, kube-apiserver, kube-controller-manager, and the
node's kubelet, kube-scheduler and kube-proxy.

Order of preference:
1. `KUBEBUILDER_ASSETS` (the envtest convention): a folder with `etcd` and
   `kube-apiserver`, optionally `kube-controller-manager`. This is how people with a
   current Kubernetes run the same tests.
2. The project's cache folder for the selected release (`SPYRE_KUBERNETES`: `current`, the
   default, or `oldest`), filled by `cluster install` from the Go modules in `gomod/`.

A node (`cluster up --node`) runs its own set, Kubernetes 1.20 built from Debian's source
(install_debian.py) in `$SPYRE_SERVING_CACHE/k8s/bin`, plane included: all five come from
one source tree, so the kubelet matches the API server and the flags written for it.
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


def node_bin_dir() -> Path:
    return cache_root() / "k8s" / "bin"


def missing_node_binaries() -> list[str]:
    """The node binaries (and control-plane ones) the node's folder lacks."""
    folder = node_bin_dir()
    names = (ETCD, *PLANE_BINARIES, *NODE_BINARIES)
    return [name for name in names if not _executable(folder / name)]


def node_binaries() -> tuple[Binaries, dict[str, Path]]:
    """The cache's control plane and node binaries, or BinariesMissing with what to do."""
    missing = missing_node_binaries()
    folder = node_bin_dir()
    if missing:
        raise BinariesMissing(
            f"{', '.join(missing)} missing from {folder}; run "
            "`spyre-operator cluster install --node` (as root; builds them from Debian's "
            "kubernetes source, about 10 minutes, and installs containerd, runc, the CNI "
            "plugins and iptables)"
        )
    plane = Binaries(folder / ETCD, folder / APISERVER, folder / CONTROLLER_MANAGER, "cache")
    return plane, {name: folder / name for name in NODE_BINARIES}
