"""Find the Kubernetes binaries: etcd, kube-apiserver, kube-controller-manager, and the
node's kubelet, kube-scheduler and kube-proxy.

Order of preference:
1. `KUBEBUILDER_ASSETS` (the envtest convention): a folder with `etcd` and
   `kube-apiserver`, optionally `kube-controller-manager`. This is how people with a
   current Kubernetes run the same tests.
2. The project's cache folder (`$SPYRE_SERVING_CACHE/k8s/bin`, filled by `cluster install`).

A node (`cluster up --node`) always runs the cache's set: all five come from one source
tree, so the kubelet matches the API server and the flags written for that version.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
KUBELET = "kubelet"
SCHEDULER = "kube-scheduler"
PROXY = "kube-proxy"
NODE_BINARIES = (KUBELET, SCHEDULER, PROXY)


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not available; the message says how to get them."""


def cache_root() -> Path:
    return Path(os.environ.get("SPYRE_SERVING_CACHE", Path.home() / ".cache" / "spyre-serving"))


def cache_bin_dir() -> Path:
    return cache_root() / "k8s" / "bin"


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
    found = _from_folder(cache_bin_dir(), "cache")
    if found is None:
        raise BinariesMissing(
            f"no kube-apiserver/etcd found (looked in KUBEBUILDER_ASSETS, unset, and "
            f"{cache_bin_dir()}). Run `spyre-operator cluster install` to build them "
            "from Debian's packages (needs root and about 10 minutes), or set "
            "KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver."
        )
    return found


def missing_node_binaries() -> list[str]:
    """The node binaries (and control-plane ones) the cache folder lacks."""
    folder = cache_bin_dir()
    names = (ETCD, APISERVER, CONTROLLER_MANAGER, *NODE_BINARIES)
    return [name for name in names if not _executable(folder / name)]


def node_binaries() -> tuple[Binaries, dict[str, Path]]:
    """The cache's control plane and node binaries, or BinariesMissing with what to do."""
    missing = missing_node_binaries()
    if missing:
        raise BinariesMissing(
            f"{', '.join(missing)} missing from {cache_bin_dir()}; run "
            "`spyre-operator cluster install --node` (as root; builds them from Debian's "
            "kubernetes source, about 5 minutes, and installs containerd, runc, the CNI "
            "plugins and iptables)"
        )
    folder = cache_bin_dir()
    plane = Binaries(folder / ETCD, folder / APISERVER, folder / CONTROLLER_MANAGER, "cache")
    return plane, {name: folder / name for name in NODE_BINARIES}
