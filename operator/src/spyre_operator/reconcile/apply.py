"""Write the decided children: create (PVC, Job), server-side apply (Deployment,
Service: created and updated alike), owner merge (a shared Job) and the replicas patch.
Every helper is idempotent."""

from __future__ import annotations

from typing import Any

from spyre_operator.kube.client import STRATEGIC, ApiError, Kube
from spyre_operator.reconcile.plan import Action


def add_owner(
    kube: Kube, kind: str, namespace: str, name: str, ref: dict[str, Any], version: str = ""
) -> None:
    """Strategic merge on ownerReferences merges by uid: an owner already there stays one.
    With a resourceVersion, only the object as it was seen is joined (else 409)."""
    guard = {"resourceVersion": version} if version else {}
    body = {"metadata": {"ownerReferences": [ref], **guard}}
    kube.patch(kind, namespace, name, body, content_type=STRATEGIC)


def execute(kube: Kube, action: Action) -> None:
    obj, meta = action.obj, action.obj["metadata"]
    if action.verb == "create":
        try:
            kube.create(obj)
        except ApiError as err:
            if not err.conflict:
                raise
            # Created meanwhile (another SpyreModel with the same key, or a restart):
            # a shared Job gets this SpyreModel as one more owner; a PVC stays unowned.
            for ref in meta.get("ownerReferences", []):
                add_owner(kube, obj["kind"], meta["namespace"], meta["name"], ref)
    elif action.verb == "apply":
        kube.apply(obj)
    elif action.verb == "add-owner":
        version = meta.get("resourceVersion", "")
        add_owner(kube, obj["kind"], meta["namespace"], meta["name"], obj["ref"], version)
    elif action.verb == "mark":  # a merge patch guarded by the resourceVersion decided from
        guarded = {"resourceVersion": meta["resourceVersion"], "annotations": meta["annotations"]}
        kube.patch(obj["kind"], meta["namespace"], meta["name"], {"metadata": guarded})
    elif action.verb == "delete":
        kube.delete(obj["kind"], meta["namespace"], meta["name"], meta.get("resourceVersion", ""))
    else:  # scale: follow spec.replicas on a Deployment that keeps its old cache. A merge
        # patch: an apply of only the replicas would drop every other field the operator owns.
        kube.patch(obj["kind"], meta["namespace"], meta["name"], {"spec": obj["spec"]})


def write_status(
    kube: Kube, kind: str, body: dict[str, Any], patch: dict[str, Any]
) -> dict[str, Any]:
    """Merge-patch the status subresource, failing with 409 if the object changed since
    it was read (so a decision made from a stale status is never written)."""
    meta = body["metadata"]
    guarded = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": patch}
    return kube.patch(kind, meta["namespace"], meta["name"], guarded, sub="status")
