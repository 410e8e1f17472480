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

`--node` also builds what a node runs, the same way: the current release's kubelet,
kube-scheduler and kube-proxy (in the same `go build` as its plane when both are missing),
containerd 2 (`gomod/containerd`) and the CNI plugins (`gomod/cni-plugins`); installs the
node's Debian packages (runc, iptables, apache2-utils) and unpacks docker-registry into the
cache (spyre_devcluster/registry.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from spyre_devcluster import cephfs, registry
from spyre_devcluster.binaries import (
    CNI_PLUGINS,
    CONTAINERD_COMMANDS,
    ETCD,
    NODE_BINARIES,
    PLANE_BINARIES,
    Binaries,
    GoBuild,
    cni_plugins,
    containerd,
    etcd,
    find_binaries,
    go_build,
    kubernetes,
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
    "runc",
    "iptables",
    "gcc",
    "libc6-dev",
    "apache2-utils",  # htpasswd (bcrypt) for the node's registry
    *cephfs.PACKAGES,  # the network filesystem of the node's spyre-cephfs class
]
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


def _kubernetes_version(version: str) -> dict[str, str]:
    major, minor = version.removeprefix("v").split(".")[:2]
    return {"gitVersion": version, "gitMajor": major, "gitMinor": minor}


def prometheus_release(version: str) -> str:
    """Prometheus' release of its Go module's version: v0.305.0 is 3.5.0 (v0.MMmm.p)."""
    found = re.fullmatch(r"v0\.(\d+)(\d\d)\.(\d+)", version)
    if found is None:
        raise ValueError(f"{version} is not a Prometheus module version (v0.MMmm.p)")
    return ".".join(str(int(part)) for part in found.groups())


def _plain_version(version: str) -> dict[str, str]:
    return {"Version": version.removeprefix("v")}


# per module: the package whose variables make its commands report their release (unset,
# they say "unknown"), and their values from the version ("v1.37.2")
VERSION_VARIABLES: dict[str, tuple[str, Callable[[str], dict[str, str]]]] = {
    "k8s.io/kubernetes": ("k8s.io/component-base/version", _kubernetes_version),
    "github.com/containerd/containerd/v2": (
        "github.com/containerd/containerd/v2/version",
        _plain_version,
    ),
    "github.com/prometheus-operator/prometheus-operator": (
        "github.com/prometheus/common/version",
        _plain_version,
    ),
    "github.com/prometheus/prometheus": (
        "github.com/prometheus/common/version",
        lambda version: {"Version": prometheus_release(version)},
    ),
    "github.com/kedacore/keda/v2": (
        "github.com/kedacore/keda/v2/version",
        lambda version: {"Version": version.removeprefix("v")},
    ),
}


def _version_stamp(build: GoBuild) -> list[str]:
    """The -X flags that stamp the build's version in."""
    if build.module not in VERSION_VARIABLES:
        return []
    package, values = VERSION_VARIABLES[build.module]
    return [f"-X {package}.{name}={value}" for name, value in values(build.version).items()]


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
    # -s -w: no symbol table and DWARF, as upstream's release builds (a third smaller)
    ldflags = " ".join(["-s", "-w", *_version_stamp(build)])
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
    (SPYRE_KUBERNETES) available in the cache; with node=True also what a node runs
    (binaries.node_builds) and its Debian packages. Serialised (_install_lock)."""
    with _install_lock():
        return _install_locked(log, node)


def go_commands(folder: str, targets: dict[str, str], log: Log = say) -> dict[str, Path]:
    """The commands of gomod/<folder> (binary name: package, "." for a main.go of ours
    there), built into the cache the first time; a failure says which module and why."""
    build = go_build(folder)
    with _install_lock():
        _build_missing(build, targets, log)
    return {name: build.bin_dir() / name for name in targets}


def go_module_dir(folder: str) -> Path:
    """The source of the module gomod/<folder> builds (downloaded by the go command), for
    what a release ships beside its commands (its CRDs)."""
    build = go_build(folder)
    go = shutil.which("go") or "go"
    found = subprocess.run(
        [go, "mod", "download", "-json", f"{build.module}@{build.version}"],
        cwd=build.folder,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        detail = (found.stdout + found.stderr).strip()
        raise InstallError(f"{build.module} {build.version}", detail, "check GOPROXY")
    return Path(json.loads(found.stdout)["Dir"])


def _missing(folder: Path, names: Sequence[str]) -> bool:
    return any(not os.access(folder / name, os.X_OK) for name in names)


def _build_missing(build: GoBuild, targets: dict[str, str], log: Log) -> bool:
    """Build `targets` (binary name: package) unless all are in the cache; True if built."""
    if not _missing(build.bin_dir(), list(targets)):
        return False
    _go_build(build, targets, log)
    return True


def _build_release(release: GoBuild, names: Sequence[str], log: Log) -> bool:
    """Build etcd and the missing `names` of a Kubernetes release in one `go build` (their
    shared packages compile once); True if anything was built."""
    missing = [name for name in names if _missing(release.bin_dir(), [name])]
    if not missing and not _missing(release.bin_dir(), [ETCD]):
        return False
    store = etcd()
    _build_missing(store, {ETCD: store.module}, log)
    if missing:
        _go_build(release, {name: f"{release.module}/cmd/{name}" for name in missing}, log)
    link = release.bin_dir() / ETCD
    link.unlink(missing_ok=True)
    link.symlink_to(store.bin_dir() / ETCD)
    return True


def _build_node(log: Log) -> bool:
    """Build what a node runs where missing; True if anything was."""
    built = _build_release(kubernetes("current"), [*PLANE_BINARIES, *NODE_BINARIES], log)
    for build, commands in ((containerd(), CONTAINERD_COMMANDS), (cni_plugins(), CNI_PLUGINS)):
        targets = {name: f"{build.module}/{package}" for name, package in commands.items()}
        built = _build_missing(build, targets, log) or built
    return built


def _install_locked(log: Log, node: bool) -> Binaries:
    packages = missing_packages(APT_PACKAGES + (NODE_APT_PACKAGES if node else []))
    if node:
        registry.install(log)  # unpacked into the cache, not installed (no service)
    if packages:
        apt_install(packages, log)
    # with KUBEBUILDER_ASSETS the plane comes from there (binaries.find_binaries)
    built = node and _build_node(log)
    if not os.environ.get("KUBEBUILDER_ASSETS"):
        built = _build_release(kubernetes(), PLANE_BINARIES, log) or built
    if not (built or packages):
        log(f"binaries already available ({find_binaries().source})")
    return find_binaries()
