"""Install the Kubernetes binaries from Debian's packages (`cluster install [--node]`).

Debian packages etcd (`etcd-server`) but ships Kubernetes only as a source package, so
kube-apiserver and kube-controller-manager are built from it, and in the same run (shared
code generators and packages, a few minutes more) the node's kubelet, kube-scheduler and
kube-proxy. Go 1.19 crashes the 1.20 API server through the vendored reflect2 1.0.1, so
that folder is replaced with Debian's reflect2 1.0.2 first. Results go to the cache
folder, so this runs once per machine.

`--node` also installs the node's Debian packages (containerd, runc, the CNI plugins,
iptables, apache2-utils), unpacks docker-registry into the cache (spyre_devcluster/registry.py) and
builds the node binaries if an older install lacks them. It is opt-in
because on a systemd host the containerd package starts a system containerd.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from spyre_devcluster import registry
from spyre_devcluster.binaries import (
    APISERVER,
    CONTROLLER_MANAGER,
    ETCD,
    NODE_BINARIES,
    Binaries,
    BinariesMissing,
    cache_bin_dir,
    cache_root,
    find_binaries,
    missing_node_binaries,
)

APT_PACKAGES = [
    "etcd-server",
    "golang-go",
    "rsync",
    "golang-github-modern-go-reflect2-dev",
    "openssl",
]
# gcc and libc6-dev make the static pause binary of the node's pod sandboxes
NODE_APT_PACKAGES = [
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "gcc",
    "libc6-dev",
    "apache2-utils",  # htpasswd (bcrypt) for the node's registry
]
BUILT = (APISERVER, CONTROLLER_MANAGER, *NODE_BINARIES)
DEB_SRC_LIST = Path("/etc/apt/sources.list.d/spyre-serving-src.sources")
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
REFLECT2_SRC = Path("/usr/share/gocode/src/github.com/modern-go/reflect2")


class InstallError(RuntimeError):
    def __init__(self, step: str, detail: str, hint: str) -> None:
        super().__init__(f"step '{step}' failed: {detail}\n  what to do: {hint}")
        self.step = step


Log = Callable[[str], None]


def _say(message: str) -> None:
    print(f">> {message}", file=sys.stderr, flush=True)


def _run(
    step: str,
    cmd: Sequence[str],
    hint: str,
    log: Log,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Run a command, streaming its output as progress; raise InstallError on failure."""
    log(f"[{step}] $ {' '.join(cmd)}")
    started = time.monotonic()
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as exc:
        raise InstallError(step, f"cannot run {cmd[0]}: {exc}", hint) from exc
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = [*tail[-19:], line.rstrip()]
        print(
            f"   [{step} {time.monotonic() - started:5.0f}s] {line.rstrip()}",
            file=sys.stderr,
            flush=True,
        )
    if proc.wait() != 0:
        raise InstallError(
            step,
            f"`{' '.join(cmd)}` exited with {proc.returncode}; "
            "last output:\n    " + "\n    ".join(tail),
            hint,
        )


def _require_root(step: str) -> None:
    if os.geteuid() != 0:
        raise InstallError(
            step,
            "installing Debian packages needs root",
            "run `sudo spyre-operator cluster install`, or set "
            "KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver",
        )


def _enable_deb_src(log: Log) -> None:
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
    _run(
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
        _run(
            f"build-{name}",
            ["make", f"WHAT=cmd/{name}"],
            "see the output above; the build needs about 4 GB of RAM and 3 GB of disk",
            log,
            cwd=tree,
            env=env,
        )
        built[name] = tree / "_output" / "local" / "bin" / "linux" / "amd64" / name
    return built


def install(log: Log = _say, *, node: bool = False) -> Binaries:
    """Make etcd, kube-apiserver and kube-controller-manager available in the cache (and,
    with node=True, the node's binaries and Debian packages).

    Serialised by a lock file: a second `install` waits for the first, then finds its result.
    """
    lock_path = cache_root() / "k8s" / "install.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install_locked(log, node)


def _to_build(node: bool) -> list[str]:
    """The binaries this install must build: all of them when the control plane is
    missing (one run of the source tree), else the node's missing ones when asked."""
    try:
        plane_ready = find_binaries().controller_manager is not None
    except BinariesMissing:
        plane_ready = False
    if not plane_ready:
        return list(BUILT)
    if node:
        return [name for name in missing_node_binaries() if name in BUILT]
    return []


def _missing_packages(names: Sequence[str]) -> list[str]:
    return [
        name
        for name in names
        if subprocess.run(["dpkg", "-s", name], capture_output=True, check=False).returncode
    ]


def _install_locked(log: Log, node: bool) -> Binaries:
    targets = _to_build(node)
    packages = (APT_PACKAGES if targets else []) + (NODE_APT_PACKAGES if node else [])
    packages = _missing_packages(packages)
    if node:
        registry.install(log)  # unpacked into the cache, not installed (no service)
    if not targets and not packages:
        log(f"binaries already available ({find_binaries().source})")
        return find_binaries()
    _require_root("apt-get install")
    if targets:
        _enable_deb_src(log)
    hint = "run `apt-get update` by hand to see the error"
    _run("apt-get update", ["apt-get", "update"], hint, log)
    _run(
        "apt-get install",
        ["apt-get", "install", "-y", "--no-install-recommends", *packages],
        "check the package names with `apt-cache policy`",
        log,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if targets:
        _build_into_cache(targets, log)
    return find_binaries()


def _build_into_cache(targets: Sequence[str], log: Log) -> None:
    bin_dir = cache_bin_dir()
    bin_dir.mkdir(parents=True, exist_ok=True)
    etcd = shutil.which(ETCD)
    if etcd is None:
        raise InstallError(
            "apt-get install",
            "etcd-server installed but `etcd` is not on PATH",
            "install etcd by hand and put it in " + str(bin_dir),
        )
    work = cache_root() / "k8s" / "build"
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
