"""The node's pure parts: what the provisioner creates, what install builds, the preflight
message. The node itself is tested for real in tests/node."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from spyre_devcluster import binaries, cephfs, preflight, registry
from spyre_devcluster.node import Node, NodeError
from spyre_devcluster.node_config import (
    STORAGE_CLASS,
    Layout,
    Member,
    cni_conflist,
    containerd_config,
    kubelet_args,
    kubelet_config,
    proxy_config,
)
from spyre_devcluster.node_member import image_store
from spyre_devcluster.provisioner import volume_for, wants_volume
from spyre_operator.cli import main

pytestmark = pytest.mark.unit


def claim(**spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": "cache", "namespace": "llm", "uid": "1234-abcd"},
        "spec": {
            "storageClassName": STORAGE_CLASS,
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "20Gi"}},
            **spec,
        },
        "status": {"phase": "Pending"},
    }


ROOTS = {STORAGE_CLASS: Path("/n/volumes"), cephfs.CLASS: Path("/n/cephfs")}


def test_a_claim_gets_its_own_folder_and_a_volume_bound_to_it() -> None:
    volume = volume_for(claim(), ROOTS)
    assert volume["metadata"]["name"] == "pvc-1234-abcd"
    spec = volume["spec"]
    assert spec["hostPath"] == {"path": "/n/volumes/llm-cache-1234-abcd"}
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["capacity"] == {"storage": "20Gi"}
    assert spec["storageClassName"] == STORAGE_CLASS
    assert spec["claimRef"]["uid"] == "1234-abcd"
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"


def test_a_claim_of_the_network_class_gets_a_folder_of_the_cephfs_mount() -> None:
    spec = volume_for(claim(storageClassName=cephfs.CLASS), ROOTS)["spec"]
    assert spec["hostPath"] == {"path": "/n/cephfs/llm-cache-1234-abcd"}
    assert spec["storageClassName"] == cephfs.CLASS


def test_only_pending_unbound_claims_of_its_classes_get_a_volume() -> None:
    assert wants_volume(claim(), ROOTS)
    assert wants_volume(claim(storageClassName=cephfs.CLASS), ROOTS)
    assert not wants_volume(claim(storageClassName="other"), ROOTS)
    assert not wants_volume(claim(volumeName="pv-1"), ROOTS)
    bound = claim()
    bound["status"] = {"phase": "Bound"}
    assert not wants_volume(bound, ROOTS)


def test_the_ceph_config_keeps_every_path_in_its_folder() -> None:
    text = cephfs.config(Path("/n/ceph"), "f5d1", "10.234.0.1", 3300)
    paths = [line.split(" = ")[1] for line in text.splitlines() if " = /" in line]
    assert paths and all(p.startswith("/n/ceph/") or p == "/dev/null" for p in paths), paths
    assert "mon_host = [v2:10.234.0.1:3300]" in text


def test_a_node_runs_binaries_of_its_own_builds_each_keyed_by_version_and_go_mod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPYRE_SERVING_CACHE", str(tmp_path))
    monkeypatch.setenv("SPYRE_KUBERNETES", "oldest")  # the node runs the current release
    builds = {build.folder.name: build for build in binaries.node_builds()}
    assert builds.keys() == {"kubernetes", "containerd", "cni-plugins"}
    assert builds["containerd"].module == "github.com/containerd/containerd/v2"
    assert builds["containerd"].version.startswith("v2.")
    assert builds["cni-plugins"].module == "github.com/containernetworking/plugins"
    assert binaries.missing_node_binaries() == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kubelet",
        "kube-scheduler",
        "kube-proxy",
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "bridge",
        "host-local",
        "loopback",
        "portmap",
    ]
    for build, names in binaries.node_builds().items():
        assert build.bin_dir().parent == tmp_path / "k8s"
        assert build.bin_dir().name.startswith(f"{build.folder.name}-{build.version}-")
        build.bin_dir().mkdir(parents=True)
        for name in names:
            (build.bin_dir() / name).write_text("#!/bin/sh\n")
            (build.bin_dir() / name).chmod(0o755)
    assert binaries.missing_node_binaries() == []
    found = binaries.node_binaries()
    assert found.cni_dir == builds["cni-plugins"].bin_dir()
    assert found.programs["containerd"].parent == builds["containerd"].bin_dir()
    assert found.plane.apiserver.parent == builds["kubernetes"].bin_dir()


def test_preflight_names_what_is_missing_in_one_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert [str(p) for p in preflight.problems()] == [
        "not root: run `cluster up --node` (and its tests) as root"
    ]
    with pytest.raises(NodeError) as err:
        Node(tmp_path).up()
    assert str(err.value).startswith("this machine cannot run a node:\n  - not root")
    assert not (tmp_path / "node.json").exists()


def test_down_and_status_work_where_containerd_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no containerd, no ctr
    node = Node(tmp_path / "plane")
    assert node.layout.containerd_root.name == f"containerd-{binaries.containerd().version}"
    assert node.status() is None
    assert node.down() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cards", "2"], "--cards and --vf-cards need --node"),
        (["--node", "--vf-cards", "-1"], "count cards: use 0 or more"),
        (["--nodes", "2"], "--nodes needs --node"),
        (["--node", "--nodes", "0"], "--nodes 0: a cluster has 1 to 8 nodes"),
    ],
)
def test_card_options_are_checked_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["cluster", "up", "--dir", str(tmp_path / "plane"), *args]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "plane").exists()


def test_the_registry_pull_secret_is_what_kubectl_makes_and_containerd_trusts_its_ca(
    tmp_path: Path,
) -> None:
    reg = registry.Registry("127.0.0.1:5123", "/x/ca.crt", "spyre", "pw")
    secret = reg.pull_secret("spyre-registry", "llm")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    (entry,) = config["auths"].values()
    assert config["auths"].keys() == {"127.0.0.1:5123"}
    assert base64.b64decode(entry["auth"]) == b"spyre:pw"
    registry.write_containerd_hosts(reg, tmp_path)
    hosts = (tmp_path / "127.0.0.1:5123" / "hosts.toml").read_text()
    assert 'server = "https://127.0.0.1:5123"' in hosts and 'ca = "/x/ca.crt"' in hosts
    layout = Layout(tmp_path / "node", tmp_path / "root")
    config_path = f'config_path = "{layout.registry_hosts}"'
    assert config_path in containerd_config(layout, "pause:1", tmp_path / "shim", tmp_path / "cni")
    assert reg.reference("operator", "0.1.0") == "127.0.0.1:5123/spyre-serving/operator:0.1.0"


def test_a_further_node_has_its_own_name_address_pod_range_sockets_and_cgroup_root(
    tmp_path: Path,
) -> None:
    first = Layout(tmp_path / "node", tmp_path / "root")
    second = Layout(tmp_path / "node", tmp_path / "root-2", Member(1))
    assert first.kubelet_root == tmp_path / "node" / "kubelet"  # the single node's, as before
    assert second.kubelet_root == tmp_path / "node" / "spyre-node-2" / "kubelet"
    assert (second.pki, second.registry_hosts) == (first.pki, first.registry_hosts)
    configs = {
        layout.member.name: (
            kubelet_config(layout, 10250, 10248),
            kubelet_args(layout),
            cni_conflist(layout)["plugins"][0],
            proxy_config(layout, 10256, 10249),
            containerd_config(layout, "pause:1", tmp_path / "shim", tmp_path / "cni"),
        )
        for layout in (first, second)
    }
    kubelet, args, network, proxy, containerd = configs["spyre-node-2"]
    assert kubelet["address"] == kubelet["healthzBindAddress"] == "10.234.1.2"
    assert kubelet["cgroupRoot"] == "/spyre-node-2"
    assert configs["spyre-node"][0]["cgroupRoot"] == "/"
    assert "--hostname-override=spyre-node-2" in args and "--node-ip=10.234.1.2" in args
    assert network["bridge"] == "spyre1"
    assert network["ipam"]["ranges"] == [[{"subnet": "10.233.1.0/24"}]]
    assert configs["spyre-node"][2]["ipam"]["ranges"] == [[{"subnet": "10.233.0.0/24"}]]
    assert proxy["hostnameOverride"] == "spyre-node-2"
    assert proxy["clusterCIDR"] == "10.233.0.0/16"  # every node's pods
    assert 'address = "/run/spyre-node/spyre-node-2/containerd.sock"' in containerd
    assert f'root = "{tmp_path / "root-2"}"' in containerd
    assert image_store(Member(1)).name == f"{image_store().name}-spyre-node-2"
