"""What a node changes on the host, and how `down` puts it back.

A kubelet, kube-proxy, containerd and the CNI plugins write to global places whatever
their flags say: kernel settings, iptables chains, a bridge, cgroups at the root of every
hierarchy, mounts, and a few fixed folders. `up` records the state before it starts
anything; `down` removes what it finds of theirs and restores the recorded values. All
functions here are idempotent: `down` may run after a failed or half-finished `up`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

# Kernel settings the kubelet (setupKernelTunables), kube-proxy (route_localnet) and the
# bridge plugin (ip_forward) change; `down` writes the recorded values back.
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
)
# Folders the kubelet and containerd use whatever the flags say; removed by
# `down` only when `up` found them absent.
FIXED_PATHS = (
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/run/containerd",
)
SHARED_PATHS = ("/run/containerd",)  # any containerd's shims put their sockets there
CGROUP_ROOT = Path("/sys/fs/cgroup")
POD_CGROUP = "kubepods"
CHAIN_PREFIXES = ("KUBE-", "CNI-", "SPYRE-")
UNROUTED_CHAIN = "SPYRE-UNROUTED"
IPTABLES_TABLES = ("filter", "nat", "mangle")
MNT_DETACH = 2


def read_sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        try:
            values[name] = (Path("/proc/sys") / name).read_text().strip()
        except OSError:
            continue  # not in this kernel (e.g. br_netfilter not loaded)
    return values


def restore_sysctls(saved: dict[str, str]) -> None:
    now = read_sysctls()
    for name, value in saved.items():
        if now.get(name, value) != value:
            (Path("/proc/sys") / name).write_text(value)


def absent_fixed_paths() -> list[str]:
    return [path for path in FIXED_PATHS if not os.path.lexists(path)]


def remove_paths(paths: Iterable[str]) -> None:
    for path in paths:
        if path in SHARED_PATHS:
            _prune_empty(Path(path))
        else:
            shutil.rmtree(path, ignore_errors=True)


def _prune_empty(top: Path) -> None:
    """Remove the empty folders of top, bottom up: another containerd on the machine may
    have put live sockets there since."""
    for folder, _, _ in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


# ----- mounts -------------------------------------------------------------------------
def mounts_under(roots: Iterable[Path]) -> list[str]:
    """Mount points at or below any of roots, deepest first."""
    prefixes = [str(root.resolve()) for root in roots]
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # \040 for spaces
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def unmount_under(roots: Iterable[Path]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    roots = list(roots)
    for _ in range(5):  # stacked mounts need several rounds
        points = mounts_under(roots)
        if not points:
            return
        for point in points:
            if libc.umount2(point.encode(), 0) != 0:
                libc.umount2(point.encode(), MNT_DETACH)


# ----- cgroups ------------------------------------------------------------------------
def cgroup_hierarchies() -> list[Path]:
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(h for h in CGROUP_ROOT.iterdir() if h.is_dir() and not h.is_symlink())


def pod_cgroups(roots: Iterable[str] = ("/",)) -> list[Path]:
    """The kubelets' pod cgroups in every v1 hierarchy, below each of their cgroup roots
    (a kubelet's --cgroup-root), deepest first."""
    found: list[Path] = []
    for hierarchy in cgroup_hierarchies():
        for root in roots:
            top = hierarchy / root.lstrip("/") / POD_CGROUP
            if top.is_dir() and not top.is_symlink():
                found.extend(Path(folder) for folder, _, _ in os.walk(top))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def kill_pod_processes(roots: Iterable[str] = ("/",)) -> None:
    """SIGKILL whatever still runs in a pod cgroup (containers whose shim is gone)."""
    for group in pod_cgroups(roots):
        try:
            pids = (group / "cgroup.procs").read_text().split()
        except OSError:
            continue
        for pid in pids:
            kill(int(pid))


def remove_pod_cgroups(roots: Iterable[str] = ("/",), timeout: float = 10.0) -> list[Path]:
    """rmdir the pod cgroups; returns those still there after timeout."""
    roots = list(roots)
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for group in pod_cgroups(roots):
            try:
                group.rmdir()
            except OSError:
                left.append(group)
        if not left or time.monotonic() > deadline:
            return left
        kill_pod_processes(roots)
        time.sleep(0.2)


# ----- iptables -----------------------------------------------------------------------
def _ours(chain: str) -> bool:
    return chain.startswith(CHAIN_PREFIXES)


def iptables_commands() -> list[str]:
    return [cmd for cmd in ("iptables", "ip6tables") if shutil.which(cmd)]


def our_chains(cmd: str, table: str) -> list[str]:
    out = subprocess.run([cmd, "-w", "-t", table, "-S"], capture_output=True, text=True)
    return [
        line.split()[1]
        for line in out.stdout.splitlines()
        if line.startswith("-N ") and _ours(line.split()[1])
    ]


def all_our_chains() -> dict[str, list[str]]:
    """{"iptables/nat": [chains]} of every KUBE-/CNI-/SPYRE- chain on the host."""
    found = {}
    for cmd in iptables_commands():
        for table in IPTABLES_TABLES:
            chains = our_chains(cmd, table)
            if chains:
                found[f"{cmd}/{table}"] = chains
    return found


def remove_chains() -> None:
    """Delete the rules that jump to KUBE-/CNI-/SPYRE- chains, then those chains."""
    for cmd in iptables_commands():
        for table in IPTABLES_TABLES:
            rules = subprocess.run(
                [cmd, "-w", "-t", table, "-S"], capture_output=True, text=True
            ).stdout.splitlines()
            for rule in rules:
                words = shlex.split(rule)
                if words[:1] != ["-A"] or _ours(words[1]):
                    continue
                target = words[words.index("-j") + 1] if "-j" in words else ""
                if _ours(target):
                    subprocess.run([cmd, "-w", "-t", table, "-D", *words[1:]], check=False)
            chains = our_chains(cmd, table)
            for flag in ("-F", "-X"):
                for chain in chains:
                    subprocess.run([cmd, "-w", "-t", table, flag, chain], capture_output=True)


def reject_unrouted(cidr: str) -> None:
    """Refuse connections to the cluster IPs kube-proxy has not routed (yet). Left alone
    they leave by the default route, and where that network answers any address (this
    sandbox's gateway says 404 to anything on :443) the API server keeps the connection
    and sends an aggregated API's or a webhook's calls there for good. A real cluster's
    network drops them; this refuses them at once. Checked after kube-proxy's NAT, so a
    routed Service's packets no longer carry a cluster IP here."""
    iptables = ["iptables", "-w", "-t", "filter"]
    subprocess.run([*iptables, "-N", UNROUTED_CHAIN], check=True)
    for rule in (["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"], ["-j", "REJECT"]):
        subprocess.run([*iptables, "-A", UNROUTED_CHAIN, "-d", cidr, *rule], check=True)
    for hook in ("OUTPUT", "FORWARD"):  # the host's own connections, and the pods'
        subprocess.run([*iptables, "-I", hook, "1", "-j", UNROUTED_CHAIN], check=True)


# ----- links and addresses ------------------------------------------------------------
def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def delete_link(name: str) -> None:
    if link_exists(name):
        subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)


def lo_has(address: str) -> bool:
    out = subprocess.run(["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True, text=True)
    return re.search(rf"inet {re.escape(address)}/", out.stdout) is not None


def add_lo_address(address: str) -> None:
    subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True)


def delete_lo_address(address: str) -> None:
    if lo_has(address):
        subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], check=False)


# ----- processes ----------------------------------------------------------------------
def pids_with_cmdline(*needles: str) -> list[int]:
    """Processes whose command line contains every needle (e.g. shims of one socket)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if all(needle in cmdline for needle in needles):
            found.append(int(entry.name))
    return found


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
