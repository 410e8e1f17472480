"""Find the control-plane binaries: etcd, kube-apiserver and kube-controller-manager.

Order of preference:
1. `KUBEBUILDER_ASSETS` (the envtest convention): a folder with `etcd` and
   `kube-apiserver`, optionally `kube-controller-manager`. This is how people with a
   current Kubernetes run the same tests.
2. The project's cache folder (`$SPYRE_SERVING_CACHE/k8s/bin`, filled by `cluster install`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"


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
