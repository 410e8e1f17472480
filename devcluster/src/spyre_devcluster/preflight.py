"""Can this machine run a node? Each check names what is missing and what to do.

The node needs root with the capabilities for mounts, network namespaces and iptables,
cgroup v1 hierarchies (these machines boot a hybrid whose v2 holds only hugetlb; the
kubelet is told to accept v1, node_config.kubelet_config), overlayfs and bridges in the
kernel, the Debian packages and the binaries `cluster install --node` builds.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from spyre_devcluster import host, registry
from spyre_devcluster.binaries import missing_node_binaries

CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
CGROUP_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer")
PROGRAMS = {
    "runc": "runc",
    "iptables": "iptables",
    "ip": "iproute2",
    "openssl": "openssl",
    "gcc": "gcc",
    "htpasswd": "apache2-utils",
}
INSTALL = "run `spyre-operator cluster install --node` as root"


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}: {self.fix}"


def _capabilities() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def _kernel_has(filesystem: str) -> bool:
    text = Path("/proc/filesystems").read_text()
    return any(line.split()[-1] == filesystem for line in text.splitlines() if line.strip())


def problems() -> list[Problem]:
    """Everything that stops a node from running here (empty: it can run)."""
    found: list[Problem] = []
    if os.geteuid() != 0:
        return [Problem("not root", "run `cluster up --node` (and its tests) as root")]
    caps = _capabilities()
    for bit, name in ((CAP_SYS_ADMIN, "CAP_SYS_ADMIN"), (CAP_NET_ADMIN, "CAP_NET_ADMIN")):
        if not caps >> bit & 1:
            found.append(
                Problem(f"missing capability {name}", "run in a VM or a privileged container")
            )
    missing = [c for c in CGROUP_CONTROLLERS if not (host.CGROUP_ROOT / c).is_dir()]
    if missing:
        found.append(
            Problem(
                f"cgroup v1 hierarchies missing: {', '.join(missing)} under {host.CGROUP_ROOT}",
                "the node runs its pods in cgroup v1 (boot with "
                "systemd.unified_cgroup_hierarchy=0, or mount the v1 controllers)",
            )
        )
    if not _kernel_has("overlay"):
        found.append(Problem("overlayfs not in the kernel", "`modprobe overlay`"))
    if not Path("/sys/module/bridge").exists():
        found.append(Problem("bridge support not in the kernel", "`modprobe bridge`"))
    for program, package in PROGRAMS.items():
        if shutil.which(program) is None:
            found.append(Problem(f"`{program}` not found", f"`apt-get install {package}`"))
    binaries = missing_node_binaries()
    if not registry.binary().exists():
        binaries.append(registry.PACKAGE)
    if binaries:
        found.append(Problem(f"binaries missing: {', '.join(binaries)}", INSTALL))
    return found


def report(found: list[Problem]) -> str:
    lines = "\n".join(f"  - {p}" for p in found)
    return f"this machine cannot run a node:\n{lines}"
