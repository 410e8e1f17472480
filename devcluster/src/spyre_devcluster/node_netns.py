"""A further node's namespaces and its link to the host (`cluster up --node --nodes N`).

The first node runs in the host's namespaces. Each further node gets a network and a
mount namespace of its own, held open by `python -m spyre_devcluster.node_netns` (one of
the node's processes; its containerd, kubelet, kube-proxy and device plugin enter them
with nsenter). The network namespace: a veth whose host end sits on the host bridge
NODES_BRIDGE (the host is NODES_NETWORK.1 there), the node's address on its end, a
default route to the host, and on the host a route to the node's pod range, so pods of
every node reach each other and the control plane and registry on NODE_IP. The mount
namespace (slave: the host's later mounts reach it, its own stay inside): folders of the
node's own bound over PRIVATE_PATHS, which the kubelet uses whatever its flags say.

Everything of a further node lives in its namespaces: when its processes end, its
links, pod networks, iptables chains and mounts go with them. What stays on the host
(the bridge, the veth's host end, the cgroup root) `remove` takes away.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
from pathlib import Path

from spyre_devcluster import host
from spyre_devcluster.node_config import NODES_BRIDGE, NODES_NETWORK, PRIVATE_PATHS, Layout, Member

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
GATEWAY = f"{NODES_NETWORK}.1"
NODE_LINK = "eth0"
READY = "namespaces ready"  # the holder says so in its log


class MemberError(RuntimeError):
    """A further node's namespaces or link could not be made."""


def _ip(*args: str, pid: int | None = None) -> None:
    cmd = ["ip", *args] if pid is None else ["nsenter", f"--target={pid}", "--net", "ip", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise MemberError(f"`{' '.join(cmd)}` failed: {out.stderr.strip()}")


def holder_args(layout: Layout) -> list[str]:
    """The holder's arguments after the Python: each private path and its own folder."""
    binds = [f"--bind={layout.private / path.lstrip('/')}={path}" for path in PRIVATE_PATHS]
    return ["-m", "spyre_devcluster.node_netns", *binds]


def enter(holder: int) -> list[str]:
    """The command prefix that runs a program in the node's namespaces."""
    return ["nsenter", f"--target={holder}", "--net", "--mount", "--"]


def prepare(member: Member) -> None:
    """Before the holder starts: the private paths to bind over and the kubelet's
    cgroup root, in every hierarchy (cpuset's with the machine's cpus and memory nodes,
    which a new cpuset cgroup lacks)."""
    for path in PRIVATE_PATHS:
        os.makedirs(path, exist_ok=True)
    for hierarchy in host.cgroup_hierarchies():
        group = hierarchy / member.cgroup_root.lstrip("/")
        group.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).exists():
                (group / name).write_text((hierarchy / name).read_text())


def link(member: Member, holder: int) -> None:
    """Join the holder's network namespace to the host (see the module's docstring)."""
    if not host.link_exists(NODES_BRIDGE):
        _ip("link", "add", NODES_BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{GATEWAY}/24", "dev", NODES_BRIDGE)
        _ip("link", "set", NODES_BRIDGE, "up")
    _ip("link", "add", member.veth, "type", "veth", "peer", "name", NODE_LINK, "netns", str(holder))
    _ip("link", "set", member.veth, "master", NODES_BRIDGE, "up")
    _ip("link", "set", "lo", "up", pid=holder)
    _ip("addr", "add", f"{member.ip}/24", "dev", NODE_LINK, pid=holder)
    _ip("link", "set", NODE_LINK, "up", pid=holder)
    _ip("route", "add", "default", "via", GATEWAY, pid=holder)
    _ip("route", "add", member.pod_cidr, "via", member.ip)


def remove(members: list[Member]) -> None:
    """What further nodes leave on the host once their processes are gone (idempotent):
    their veths, the bridge (with the routes through it) and their cgroup roots."""
    for member in members:
        host.delete_link(member.veth)
    host.delete_link(NODES_BRIDGE)
    for member in members:
        for hierarchy in host.cgroup_hierarchies():
            group = hierarchy / member.cgroup_root.lstrip("/")
            with contextlib.suppress(OSError):  # gone, or busy: the snapshot test sees it
                group.rmdir()


def _hold(binds: list[tuple[Path, str]]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS | CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare of the network and mount namespaces")
    subprocess.run(["mount", "--make-rslave", "/"], check=True)
    for source, target in binds:
        source.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(source), target], check=True)
    print(READY, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        signal.pause()


def main() -> None:
    parser = argparse.ArgumentParser(description="hold a further node's namespaces open")
    parser.add_argument("--bind", action="append", default=[], metavar="SOURCE=TARGET")
    args = parser.parse_args()
    _hold([(Path(source), target) for source, _, target in (b.partition("=") for b in args.bind)])


if __name__ == "__main__":
    main()
