"""kstatus' reading of a custom resource, as kubernetes-sigs/cli-utils states it in
pkg/kstatus/README.md (what Flux, kpt and other cli-utils tools compute), written out for
the tests: an observedGeneration behind metadata.generation is InProgress ("there are
changes that the controller has not yet seen"); a `Reconciling` condition True is
InProgress, a `Stalled` condition True is Failed; a resource with neither falls back to
its `Ready` condition (True: Current, False: InProgress); anything else is Current."""

from __future__ import annotations

from typing import Any


def kstatus(obj: dict[str, Any]) -> str:
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    observed = status.get("observedGeneration")
    if observed is not None and observed != obj["metadata"].get("generation"):
        return "InProgress"
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    if conditions.get("Reconciling") == "True":
        return "InProgress"
    if conditions.get("Stalled") == "True":
        return "Failed"
    if "Reconciling" not in conditions and "Stalled" not in conditions and "Ready" in conditions:
        return "Current" if conditions["Ready"] == "True" else "InProgress"
    return "Current"
