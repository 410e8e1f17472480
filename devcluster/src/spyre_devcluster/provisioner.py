"""The node's volume provisioner: hostPath volumes for claims of the default class.

The in-tree hostPath provisioner refuses ReadWriteMany, and the operator's cache claim
is RWX. On a single node a folder is shared by every pod, so this process gives each
pending claim of the class a folder under the node's volume root and a PV bound to it
(claimRef set), and deletes the folder and the PV once the claim is gone.

Run by `cluster up --node` as `python -m spyre_devcluster.provisioner`; it polls,
because a local node has a handful of claims and a poll survives API restarts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path
from typing import Any

from spyre_devcluster.kubeapi import Api, ApiError
from spyre_devcluster.node_config import PROVISIONER_NAME, STORAGE_CLASS

ANNOTATION = "pv.kubernetes.io/provisioned-by"
POLL = 0.5


def volume_for(claim: dict[str, Any], root: Path) -> dict[str, Any]:
    """The PV that satisfies claim: a folder of its own, pre-bound to it."""
    meta, spec = claim["metadata"], claim["spec"]
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
            "storageClassName": STORAGE_CLASS,
        },
    }


def wants_volume(claim: dict[str, Any]) -> bool:
    spec = claim["spec"]
    return (
        spec.get("storageClassName") == STORAGE_CLASS
        and not spec.get("volumeName")
        and claim.get("status", {}).get("phase") == "Pending"
        and "deletionTimestamp" not in claim["metadata"]
    )


def sync(api: Api, root: Path) -> None:
    for claim in api.get("/api/v1/persistentvolumeclaims")["items"]:
        if wants_volume(claim):
            volume = volume_for(claim, root)
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
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args()
    api = Api.from_kubeconfig(args.kubeconfig)
    args.root.mkdir(parents=True, exist_ok=True)
    os.umask(0)
    while True:
        try:
            sync(api, args.root)
        except (ApiError, OSError) as exc:  # API restarting: try again on the next tick
            print(f"provisioner: {exc}", flush=True)
        time.sleep(POLL)


if __name__ == "__main__":
    main()
