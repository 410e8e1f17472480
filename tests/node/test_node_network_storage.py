"""Shared volumes on a network filesystem (issue 40): the node's CephFS (Debian's Ceph,
mounted with ceph-fuse: `cluster up --node --network-storage`) behind the ReadWriteMany
class spyre-cephfs. A model whose weights volume and cache volume are both of that class:
its compile Job writes the key through the filesystem, and its serving pod loads the
graphs from there and compiles nothing. Then the filesystem's server (its OSD and
metadata server) is stopped in the middle of a compile: the compile's I/O waits, the
model says its cache volume does not answer (naming the claim) and serves nothing; the
server back, the compile goes on and the key completes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nodelib import SharedNode, apply
from test_node_cache_sharing import condition
from test_node_stories import (
    Cluster,
    assert_started_from_cache,
    compile_reports,
    place,
    volume_folder,
)

from spyre_devcluster import cephfs, node_operator
from spyre_runtime.contract import READY_NAME

pytestmark = pytest.mark.node

NAME = "networked"
WEIGHTS = "shared-weights"  # beside the namespace's own "weights" claim (make_namespace)


@pytest.fixture
def cluster(shared_node: SharedNode, models: Path) -> Iterator[Cluster]:
    shared_node.get(network_storage=True)  # the places of the stories that follow have it
    with place(shared_node, models, "cephfs") as made:
        yield made


def weights_claim(cluster: Cluster) -> Path:
    """A spyre-cephfs claim holding the tiny Granite, copied in through the node's mount
    (as an admin would fill a shared volume); returns its folder there."""
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": WEIGHTS},
        "spec": {
            "storageClassName": cephfs.CLASS,
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    apply(cluster.kubectl, claim)
    bound = cluster.wait(
        "the weights claim bound",
        lambda: cluster.get(f"pvc/{WEIGHTS}")["spec"].get("volumeName"),
    )
    folder = Path(cluster.get(f"pv/{bound}")["spec"]["hostPath"]["path"])
    shutil.copytree(cluster.models / "granite", folder / "granite")
    return folder


def apply_model(cluster: Cluster) -> None:
    """The tiny Granite from the weights claim, its cache on a spyre-cephfs claim."""
    weights = weights_claim(cluster)
    assert weights.parent == cluster.node.layout.cephfs_mount, weights  # a folder of the mount
    doc = node_operator.tiny_model(NAME)
    doc["spec"]["model"]["source"] = {"pvc": {"claimName": WEIGHTS}}
    doc["spec"]["cache"]["volume"]["storageClassName"] = cephfs.CLASS
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def assert_served_from_the_filesystem(cluster: Cluster, status: dict[str, Any]) -> None:
    """Compiled by its Job into the CephFS volume, READY there, and served by a pod that
    compiled nothing."""
    mount = cluster.node.layout.cephfs_mount
    cache, key = status["cache"], status["activeCacheKey"]
    assert cache["ok"] is True and cache["jobName"].startswith("spyre-compile-"), cache
    assert any(c.compiled for c in compile_reports(cluster, f"job/{cache['jobName']}"))
    folder = volume_folder(cluster)
    assert folder.parent == mount, folder
    pv = cluster.get(f"pv/{cluster.get('pvc/spyre-graph-cache')['spec']['volumeName']}")
    assert pv["spec"]["storageClassName"] == cephfs.CLASS
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
    # the key, as the filesystem holds it: READY written last, through ceph-fuse
    assert (folder / key / READY_NAME).is_file()
    (pod,) = cluster.pods(NAME)
    assert_started_from_cache(cluster, pod)
    assert cluster.answer(*cluster.service(NAME))


def test_a_key_compiled_by_a_job_is_served_through_the_network_filesystem(
    cluster: Cluster,
) -> None:
    apply_model(cluster)
    assert_served_from_the_filesystem(cluster, cluster.ready(NAME))


def test_the_filesystem_server_stopped_mid_compile_holds_the_key_and_the_model_says_why(
    cluster: Cluster,
) -> None:
    storage = cluster.node.network_storage()
    apply_model(cluster)
    cluster.wait(  # in the middle of the compile: its pod logs its steps
        "the compile running", lambda: (cluster.status(NAME).get("cache") or {}).get("progress")
    )
    storage.server(running=False)
    try:

        def unanswered() -> dict[str, Any] | None:
            said = condition(cluster.status(NAME), "CacheReady")
            return said if said.get("reason") == "CacheVolumeNotAnswering" else None

        said = cluster.wait("the model to say its cache volume does not answer", unanswered)
        print("while the server is down:", said)
        assert "its cache volume (claim spyre-graph-cache) does not answer" in said["message"]
        status = cluster.status(NAME)
        # nothing half-written is taken for a key: no active key, nothing serving
        assert status["phase"] == "Compiling" and "activeCacheKey" not in status, status
        assert not cluster.kubectl("get", "deploy", NAME, "--ignore-not-found", "-o", "name")
    finally:
        storage.server(running=True)  # the mount's waiting I/O goes on
    status = cluster.ready(NAME)
    assert condition(status, "CacheReady")["reason"] == "Compiled", status
    assert_served_from_the_filesystem(cluster, status)
