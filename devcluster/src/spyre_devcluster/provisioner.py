"""The node's volume provisioner: hostPath volumes for claims of its classes.

The in-tree hostPath provisioner refuses ReadWriteMany, and the operator's cache claim
is RWX. This process gives each pending claim of a class it serves a folder under the
class's root and a PV bound to it (claimRef set), and deletes the folder and the PV once
the claim is gone. The default class's root is a folder on the node; spyre-cephfs's is
the node's CephFS mount (cephfs.py), so its volumes are folders of a network
filesystem, mounted on each node, as a CSI driver's would be.

Run by `cluster up --node` as `python -m spyre_devcluster.provisioner`; it polls,
because a local node has a handful of claims and a poll survives API restarts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from spyre_devcluster.kubeapi import Api, ApiError
from spyre_devcluster.node_config import PROVISIONER_NAME

ANNOTATION = "pv.kubernetes.io/provisioned-by"
POLL = 0.5


def volume_for(claim: dict[str, Any], roots: dict[str, Path]) -> dict[str, Any]:
    """The PV that satisfies claim: a folder of its own, pre-bound to it."""
    meta, spec = claim["metadata"], claim["spec"]
    root = roots[spec["storageClassName"]]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {ANNOTATION: PROVISIONER_NAME}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec["accessModes"],
            "hostPath": {"path": str(root / f"{meta['namespace']}-{meta['name']}-{meta['uid']}")},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec["storageClassName"],
        },
    }


def wants_volume(claim: dict[str, Any], classes: Collection[str]) -> bool:
    spec = claim["spec"]
    return (
        spec.get("storageClassName") in classes
        and not spec.get("volumeName")
        and claim.get("status", {}).get("phase") == "Pending"
        and "deletionTimestamp" not in claim["metadata"]
    )


def sync(api: Api, roots: dict[str, Path]) -> None:
    for claim in api.get("/api/v1/persistentvolumeclaims")["items"]:
        if wants_volume(claim, roots):
            volume = volume_for(claim, roots)
            folder = Path(volume["spec"]["hostPath"]["path"])
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o777)  # any pod user may write, as on a fresh network volume
            api.create("/api/v1/persistentvolumes", volume)
    for volume in api.get("/api/v1/persistentvolumes")["items"]:
        ours = volume["metadata"].get("annotations", {}).get(ANNOTATION) == PROVISIONER_NAME
        if ours and volume.get("status", {}).get("phase") == "Released":
            shutil.rmtree(volume["spec"]["hostPath"]["path"], ignore_errors=True)
            api.delete(f"/api/v1/persistentvolumes/{volume['metadata']['name']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument(
        "--class",
        dest="classes",
        action="append",
        required=True,
        metavar="NAME=ROOT",
        help="a StorageClass this provisioner serves, and the folder its volumes go in",
    )
    args = parser.parse_args()
    api = Api.from_kubeconfig(args.kubeconfig)
    roots = {name: Path(root) for name, _, root in (c.partition("=") for c in args.classes)}
    for root in roots.values():
        root.mkdir(parents=True, exist_ok=True)
    os.umask(0)
    while True:
        try:
            sync(api, roots)
        except (ApiError, OSError) as exc:  # API restarting: try again on the next tick
            print(f"provisioner: {exc}", flush=True)
        time.sleep(POLL)


if __name__ == "__main__":
    main()
