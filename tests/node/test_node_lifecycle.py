"""`cluster up --node --network-storage` then `down` leaves the host as it was: no
process (the Ceph daemons and ceph-fuse included), mount (FUSE ones anywhere included),
cgroup, link, address, iptables chain, sysctl change or fixed-path folder of the node
remains."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nodelib import Kubectl, SharedNode, import_python_image

from spyre_devcluster import cephfs, host
from spyre_devcluster.node import MACHINE_RECORD, Node, NodeError
from spyre_devcluster.node_config import NODE_IP

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
        "pod cgroups": host.pod_cgroups(),
        "fixed paths": [p for p in host.FIXED_PATHS if os.path.lexists(p)],
        "machine record": MACHINE_RECORD.exists(),
    }


def node_processes(node: Node, binaries: list[str]) -> list[int]:
    return [
        *host.pids_with_cmdline("containerd-shim", str(node.layout.containerd_socket)),
        *(pid for b in binaries for pid in host.pids_with_cmdline(b, str(node.dir))),
    ]


def test_down_leaves_nothing_behind(
    shared_node: SharedNode, tmp_path_factory: pytest.TempPathFactory
) -> None:
    shared_node.stop()  # one node per machine: this test needs its own
    before = host_snapshot()
    folder = tmp_path_factory.mktemp("own")
    node = Node(folder)
    state = node.up(network_storage=True)
    try:
        binaries = [p.binary for p in state.processes]
        assert host.pod_cgroups() and host.lo_has(NODE_IP)
        with pytest.raises(NodeError, match="a node already runs on this machine"):
            Node(folder.with_name("second")).up()
        # a pod with a volume, so the bridge, veths, netns, shm and volume mounts exist
        image = import_python_image(node)
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
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sleeper"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-c", "import time; time.sleep(3600)"],
                        "volumeMounts": [
                            {"name": name, "mountPath": f"/{name}"} for name in ("data", "shared")
                        ],
                    }
                ],
                "volumes": [
                    {"name": name, "persistentVolumeClaim": {"claimName": name}}
                    for name in ("data", "shared")
                ],
            },
        }
        kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [*claims, pod]}),
        )
        kubectl.wait("pod/sleeper", "condition=Ready")
        assert host.all_our_chains()
        assert host.mounts_under([node.dir])
        assert str(node.layout.cephfs_mount) in fuse_mounts()
    finally:
        node.down()
    assert node_processes(node, binaries) == []
    assert host.mounts_under([node.dir, node.layout.containerd_root]) == []
    assert host_snapshot() == before
    assert not (node.dir / "node").exists()
    # the image store stays for the next `up`
    assert (node.layout.containerd_root / "io.containerd.metadata.v1.bolt").is_dir()
