"""Install the Kubernetes binaries (`cluster install [--node]`).

Kubernetes and etcd are built with the go command from their Go modules, each from a
go.mod of the testbed's own (`gomod/`, with go.sum): k8s.io/kubernetes replaces its
staging modules with local folders, so that go.mod requires the release and replaces each
staging module (k8s.io/api, ...) with its published version of the same release. The
components get their version stamped in (`-ldflags -X k8s.io/component-base/version...`).
One `go build` makes all of a release's commands (their shared packages compile once);
results go to a cache folder keyed by the version and a digest of go.mod + go.sum, so a
version change rebuilds and everything else runs once per machine. The Go module and
build caches (~/go/pkg/mod, ~/.cache/go-build) are the go command's own.

`--node` also installs the node's Debian packages (containerd, runc, the CNI plugins,
iptables, apache2-utils), unpacks docker-registry into the cache (spyre_devcluster/registry.py) and
builds the node binaries if an older install lacks them. It is opt-in
because on a systemd host the containerd package starts a system containerd.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from spyre_devcluster import install_debian, registry
from spyre_devcluster.binaries import (
    ETCD,
    PLANE_BINARIES,
    Binaries,
    GoBuild,
    etcd,
    find_binaries,
    go_build,
    kubernetes,
    missing_node_binaries,
)
from spyre_devcluster.install_steps import (
    InstallError,
    Log,
    apt_install,
    missing_packages,
    run,
    say,
)

__all__ = ["InstallError", "install"]

APT_PACKAGES = ["openssl"]  # the control plane's service-account key pair
# gcc and libc6-dev make the static pause binary of the node's pod sandboxes
NODE_APT_PACKAGES = [
    *install_debian.APT_PACKAGES,
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "gcc",
    "libc6-dev",
    "apache2-utils",  # htpasswd (bcrypt) for the node's registry
]
VERSION_PACKAGE = "k8s.io/component-base/version"
GO_HINT = (
    "the go command needs the Go module proxy (GOPROXY) and the Go version named in the "
    "go.mod; fix what the message names, then run `spyre-operator cluster install` again"
)


def _owner(build: GoBuild, package: str) -> str:
    """The module of go.mod that provides `package` (the longest matching path)."""
    modules = re.findall(
        r"^\s*(?:require )?(\S+) (v\S+)", (build.folder / "go.mod").read_text(), re.M
    )
    owners = [f"{m}@{v}" for m, v in modules if package == m or package.startswith(m + "/")]
    return max(owners, key=len, default=f"{build.module}@{build.version}")


def explain_go_failure(build: GoBuild, output: list[str]) -> str:
    """Which module failed and why, from the go command's output."""
    where = f"building {build.module} {build.version} ({build.folder.name}/go.mod)"
    text = "\n".join(output)
    toolchain = re.search(r"go\.mod requires go >= (\S+) \(running go (\S+)", text)
    if toolchain:
        return (
            f"{where}: its go.mod needs Go {toolchain.group(1)}, the go command here is "
            f"{toolchain.group(2)}"
        )
    fetch = re.search(r"(\S+@v[^\s:]+): (.+)", text)
    if fetch:
        return f"{where}: module {fetch.group(1)} could not be had: {fetch.group(2)}"
    missing = re.search(r"missing go\.sum entry for module providing package (\S+)", text)
    if missing:
        return f"{where}: go.sum lacks {_owner(build, missing.group(1))}: run `go mod tidy` there"
    compiled = re.search(r"^# (\S+)\n(.+)", text, re.M)
    if compiled:
        package = compiled.group(1)
        return (
            f"{where}: package {package} of module {_owner(build, package)} does not "
            f"compile: {compiled.group(2)}"
        )
    return f"{where}: the go command failed"


def _go_build(build: GoBuild, targets: dict[str, str], log: Log) -> None:
    """Build `targets` (binary name: package) of one go.mod into its cache folder."""
    go = shutil.which("go")
    if go is None:
        raise InstallError(
            "go", "the go command is not on PATH", "install Go (the version in gomod/*/go.mod)"
        )
    out = build.bin_dir()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    major, minor = build.version.removeprefix("v").split(".")[:2]
    stamp = {"gitVersion": build.version, "gitMajor": major, "gitMinor": minor}
    # -s -w: no symbol table and DWARF, as upstream's release builds (a third smaller)
    ldflags = " ".join(["-s", "-w", *(f"-X {VERSION_PACKAGE}.{k}={v}" for k, v in stamp.items())])
    env = {
        **os.environ,
        "CGO_ENABLED": "0",  # static, as upstream's release binaries
        "GOFLAGS": "-mod=readonly -buildvcs=false",  # go.sum as committed; no VCS stamp
    }
    try:
        # one target: `-o FILE`; several: `-o DIR/`, each named after its package
        dest = str(work / next(iter(targets))) if len(targets) == 1 else f"{work}/"
        run(
            f"go-build {build.folder.name}",
            [go, "build", "-ldflags", ldflags, "-o", dest, *targets.values()],
            GO_HINT,
            log,
            cwd=build.folder,
            env=env,
            explain=lambda output: explain_go_failure(build, output),
        )
        out.mkdir(parents=True, exist_ok=True)
        for name in targets:
            (work / name).replace(out / name)  # same file system: a binary appears whole
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"built {', '.join(targets)} {build.version} into {out}")


@contextmanager
def _install_lock() -> Iterator[None]:
    """One build at a time: a second waits for the first, then finds its result."""
    lock_path = kubernetes().bin_dir().parent / "install.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def install(log: Log = say, *, node: bool = False) -> Binaries:
    """Make etcd, kube-apiserver and kube-controller-manager of the selected release
    (SPYRE_KUBERNETES) available in the cache; with node=True also the node's Debian
    packages and its Kubernetes 1.20 (install_debian.py). Serialised (_install_lock)."""
    with _install_lock():
        return _install_locked(log, node)


def go_commands(folder: str, targets: dict[str, str], log: Log = say) -> dict[str, Path]:
    """The commands of gomod/<folder> (binary name: package, "." for a main.go of ours
    there), built into the cache the first time; a failure says which module and why."""
    build = go_build(folder)
    with _install_lock():
        if _missing(build.bin_dir(), list(targets)):
            _go_build(build, targets, log)
    return {name: build.bin_dir() / name for name in targets}


def _missing(folder: Path, names: Sequence[str]) -> bool:
    return any(not os.access(folder / name, os.X_OK) for name in names)


def _build_plane(log: Log) -> bool:
    """Build etcd and the selected release's plane where missing; True if anything was."""
    release, store = kubernetes(), etcd()
    if not _missing(release.bin_dir(), [ETCD, *PLANE_BINARIES]):
        return False
    if _missing(store.bin_dir(), [ETCD]):
        _go_build(store, {ETCD: store.module}, log)
    if _missing(release.bin_dir(), PLANE_BINARIES):
        _go_build(release, {name: f"{release.module}/cmd/{name}" for name in PLANE_BINARIES}, log)
    link = release.bin_dir() / ETCD
    link.unlink(missing_ok=True)
    link.symlink_to(store.bin_dir() / ETCD)
    return True


def _node_targets(node: bool) -> list[str]:
    """The node's 1.20 binaries to build from Debian's source: the missing ones."""
    return [name for name in missing_node_binaries() if name != ETCD] if node else []


def _install_locked(log: Log, node: bool) -> Binaries:
    packages = missing_packages(APT_PACKAGES + (NODE_APT_PACKAGES if node else []))
    if node:
        registry.install(log)  # unpacked into the cache, not installed (no service)
    if packages:
        apt_install(packages, log)
    # with KUBEBUILDER_ASSETS the plane comes from there (binaries.find_binaries)
    built = not os.environ.get("KUBEBUILDER_ASSETS") and _build_plane(log)
    node_targets = _node_targets(node)
    if node_targets:
        install_debian.build_into_cache(node_targets, log)
    if not (built or packages or node_targets):
        log(f"binaries already available ({find_binaries().source})")
    return find_binaries()
