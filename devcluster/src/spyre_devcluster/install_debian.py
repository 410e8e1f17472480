"""The node's Kubernetes 1.20, built from Debian's `kubernetes` source package.

The node tier (kubelet, kube-proxy, kube-scheduler and the plane they join) still runs
1.20 with Debian's containerd 1.6 and etcd 3.4: Kubernetes 1.36+ needs containerd 2, and
moving the node is a step of its own (docs/node.md). Debian ships Kubernetes only as a
source package, so its five binaries are built from it in one run (shared code
generators). Go 1.19 crashes the 1.20 API server through the vendored reflect2 1.0.1, so
that folder is replaced with Debian's reflect2 1.0.2 first.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from spyre_devcluster.binaries import ETCD, node_bin_dir
from spyre_devcluster.install_steps import InstallError, Log, run

APT_PACKAGES = ["etcd-server", "golang-go", "rsync", "golang-github-modern-go-reflect2-dev"]
DEB_SRC_LIST = Path("/etc/apt/sources.list.d/spyre-serving-src.sources")
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
REFLECT2_SRC = Path("/usr/share/gocode/src/github.com/modern-go/reflect2")


def enable_deb_src(log: Log) -> None:
    """Add a deb-src stanza next to the image's Debian source (same mirror and key)."""
    if DEB_SRC_LIST.exists():
        return
    if not DEBIAN_SOURCES.exists():
        raise InstallError(
            "enable-deb-src",
            f"{DEBIAN_SOURCES} not found",
            "add a `deb-src` line for bookworm main to your apt sources",
        )
    stanza = DEBIAN_SOURCES.read_text().split("\n\n")[0]
    lines = [
        ("Types: deb-src" if ln.startswith("Types:") else ln)
        for ln in stanza.splitlines()
        if not ln.startswith("#")
    ]
    DEB_SRC_LIST.write_text("\n".join(lines) + "\n")
    log(f"[enable-deb-src] wrote {DEB_SRC_LIST}")


def _unpack_source(work: Path, log: Log) -> Path:
    hint = "check that apt can reach the Debian mirror and that deb-src is enabled"
    run(
        "download-source",
        ["apt-get", "source", "--download-only", "kubernetes"],
        hint,
        log,
        cwd=work,
    )
    archives = sorted(work.glob("kubernetes_*.orig.tar.gz"))
    if not archives:
        raise InstallError("download-source", "no kubernetes_*.orig.tar.gz was downloaded", hint)
    src = work / "src"
    log(f"[unpack] {archives[-1].name}")
    with tarfile.open(archives[-1]) as tar:
        tar.extractall(src, filter="tar")
    top = [p for p in src.iterdir() if p.is_dir()]
    if len(top) != 1:
        raise InstallError("unpack", f"unexpected archive layout: {top}", hint)
    return top[0]


def _build(tree: Path, names: Sequence[str], log: Log) -> dict[str, Path]:
    vendor = tree / "vendor" / "github.com" / "modern-go" / "reflect2"
    shutil.rmtree(vendor, ignore_errors=True)
    shutil.copytree(REFLECT2_SRC, vendor)
    log("[patch] vendor/github.com/modern-go/reflect2 <- Debian's reflect2 1.0.2")
    # GOPATH mode, laid out the way Debian's own debian/rules does it
    gopath = tree / ".go"
    link = gopath / "src" / "k8s.io" / "kubernetes"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to("../../..")
    env = {
        **os.environ,
        "GOPATH": str(gopath),
        "CGO_ENABLED": "0",
        "HOME": tempfile.mkdtemp(prefix="k8s-build-home-"),
    }
    built: dict[str, Path] = {}
    for name in names:
        run(
            f"build-{name}",
            ["make", f"WHAT=cmd/{name}"],
            "see the output above; the build needs about 4 GB of RAM and 3 GB of disk",
            log,
            cwd=tree,
            env=env,
        )
        built[name] = tree / "_output" / "local" / "bin" / "linux" / "amd64" / name
    return built


def build_into_cache(targets: Sequence[str], log: Log) -> None:
    bin_dir = node_bin_dir()
    bin_dir.mkdir(parents=True, exist_ok=True)
    etcd = shutil.which(ETCD, path="/usr/bin")
    if etcd is None:
        raise InstallError(
            "apt-get install",
            "etcd-server installed but /usr/bin/etcd is missing",
            "install etcd by hand and put it in " + str(bin_dir),
        )
    enable_deb_src(log)
    run("apt-get update", ["apt-get", "update"], "run `apt-get update` by hand", log)
    work = bin_dir.parent / "build"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    built = _build(_unpack_source(work, log), targets, log)
    for name, path in built.items():
        # copy to a temp name, then rename: a half-copied binary never looks installed
        tmp = bin_dir / f".{name}.tmp"
        shutil.copy2(path, tmp)
        tmp.replace(bin_dir / name)
    (bin_dir / ETCD).unlink(missing_ok=True)
    (bin_dir / ETCD).symlink_to(etcd)
    shutil.rmtree(work, ignore_errors=True)
    log(f"installed {', '.join(built)} into {bin_dir}")
