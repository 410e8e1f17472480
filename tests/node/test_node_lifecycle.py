"""`cluster up --node --nodes 2 --network-storage` then `down` leaves the host as it was: no
process (the Ceph daemons and ceph-fuse included), mount (FUSE ones anywhere included),
cgroup, link, route, address, iptables chain, sysctl change or fixed-path folder of either
node remains, and no process in the second node's network or mount namespace (whose
links, pod networks, iptables chains and mounts go with it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from nodelib import Kubectl, SharedNode, import_python_image

from spyre_devcluster import cephfs, host
from spyre_devcluster.node import FURTHER, MACHINE_RECORD, NAMESPACES, Node, NodeError
from spyre_devcluster.node_config import FIRST, NODE_IP, Member

pytestmark = pytest.mark.node


def fuse_mounts() -> list[str]:
    """Every FUSE mount of the machine (fstype after the " - " of /proc/self/mountinfo)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line.split()[4] for line in lines if line.split(" - ")[1].startswith("fuse")]


def host_snapshot() -> dict[str, object]:
    return {
        "fuse mounts": fuse_mounts(),
        "sysctls": host.read_sysctls(),
        "links": sorted(os.listdir("/sys/class/net")),
        "node address on lo": host.lo_has(NODE_IP),
        "iptables chains": host.all_our_chains(),
        "pod cgroups": host.pod_cgroups(m.cgroup_root for m in [FIRST, *FURTHER]),
        "node cgroup roots": [
            h / m.name for h in host.cgroup_hierarchies() for m in FURTHER if (h / m.name).exists()
        ],
        "routes": subprocess.run(["ip", "route"], capture_output=True, text=True).stdout,
        "named network namespaces": sorted(os.listdir("/run/netns"))
        if os.path.isdir("/run/netns")
        else [],
        "fixed paths": [p for p in host.FIXED_PATHS if os.path.lexists(p)],
        "machine record": MACHINE_RECORD.exists(),
    }


def node_processes(node: Node, binaries: list[str]) -> list[int]:
    return [
        *(
            pid
            for layout in node.layouts
            for pid in host.pids_with_cmdline("containerd-shim", str(layout.containerd_socket))
        ),
        *(pid for b in binaries for pid in host.pids_with_cmdline(b, str(node.dir))),
    ]


def namespaces(pid: int) -> set[str]:
    """A process's network and mount namespaces ("net:[4026532]")."""
    return {os.readlink(f"/proc/{pid}/ns/{kind}") for kind in ("net", "mnt")}


def in_namespaces(held: set[str]) -> list[int]:
    """Every process in any of these namespaces."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if namespaces(int(entry)) & held:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def sleeper(name: str, image: str, node_name: str, claims: list[str]) -> dict[str, object]:
    """A pod on one node with `claims` mounted (volumes, a network and shm)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", "import time; time.sleep(3600)"],
                    "volumeMounts": [{"name": c, "mountPath": f"/{c}"} for c in claims],
                }
            ],
            "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims],
        },
    }


def test_down_leaves_nothing_behind(
    shared_node: SharedNode, tmp_path_factory: pytest.TempPathFactory
) -> None:
    shared_node.stop()  # one node per machine: this test needs its own
    before = host_snapshot()
    folder = tmp_path_factory.mktemp("own")
    node = Node(folder, nodes=2)
    state = node.up(network_storage=True)
    second = Member(1)
    try:
        binaries = [p.binary for p in state.processes]
        assert host.pod_cgroups() and host.lo_has(NODE_IP)
        with pytest.raises(NodeError, match="a node already runs on this machine"):
            Node(folder.with_name("second")).up()
        (holder,) = [p for p in state.processes if p.name == second.process(NAMESPACES)]
        held = namespaces(holder.pid) - namespaces(os.getpid())
        assert len(held) == 2  # a network and a mount namespace of its own
        # a pod with a volume on each node, so the bridges, veths, netns, shm and volume
        # mounts exist on both
        images = {layout.member.name: import_python_image(node, layout) for layout in node.layouts}
        kubectl = Kubectl(node.kubeconfig, "default")
        claims = [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "resources": {"requests": {"storage": "1Mi"}},
                    **({"storageClassName": cephfs.CLASS} if name == "shared" else {}),
                },
            }
            for name in ("data", "shared")
        ]
        # the CephFS claim on the first node (the host's mount; the second node's pods
        # would need it mounted in its own mount namespace, not done yet)
        pods = [
            sleeper(f"sleeper-{i}", images[n], n, ["data", "shared"] if i == 0 else ["data"])
            for i, n in enumerate(images)
        ]
        kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [*claims, *pods]}),
        )
        for pod in pods:
            kubectl.wait(f"pod/{pod['metadata']['name']}", "condition=Ready")  # type: ignore[index]
        assert host.all_our_chains()
        assert host.mounts_under([node.dir])
        assert str(node.layout.cephfs_mount) in fuse_mounts()
        assert host.pod_cgroups([second.cgroup_root])

        def inside(*cmd: str) -> str:
            enter = ["nsenter", f"--target={holder.pid}", "--net", "--mount", "--"]
            return subprocess.run([*enter, *cmd], capture_output=True, text=True).stdout

        assert "-N KUBE-SERVICES" in inside("iptables", "-t", "nat", "-S")
        assert second.bridge in inside("ip", "-o", "link")  # its pods' bridge, its own
        volumes = str(node.layouts[1].kubelet_root)
        assert volumes in inside("cat", "/proc/self/mountinfo")  # its pods' mounts: its own
        assert volumes not in Path("/proc/self/mountinfo").read_text()
    finally:
        node.down()
    assert node_processes(node, binaries) == []
    assert in_namespaces(held) == []  # and so its links, chains and mounts are gone
    assert host.mounts_under([node.dir, *(layout.containerd_root for layout in node.layouts)]) == []
    assert host_snapshot() == before
    assert not (node.dir / "node").exists()
    # the image stores stay for the next `up`
    for layout in node.layouts:
        assert (layout.containerd_root / "io.containerd.metadata.v1.bolt").is_dir()
