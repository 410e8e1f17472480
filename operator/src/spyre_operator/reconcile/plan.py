"""What a decision comes to (pure): the actions on the children, the status and its
Events, when to come back; and the actions more than one step writes the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from spyre_operator.api.names import KIND
from spyre_operator.api.status import CompileStatus
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.conditions import Event
from spyre_operator.reconcile.drift import needs_apply
from spyre_operator.reconcile.views import JobView

Verb = Literal["create", "apply", "add-owner", "scale", "mark", "delete"]
"""create: POST (PVC, Job: first writer wins, a Job's template is immutable); apply:
server-side apply of the whole manifest (Deployment, Service), which also removes what a
previous apply set and this one does not; add-owner: one more owner of a shared Job;
scale: spec.replicas of a Deployment that keeps its old cache meanwhile; mark: annotate
a compile Job as its key's clean-up starts, guarded by the resourceVersion decided from;
delete: an inventory entry deletes itself once its key is removed (reconcile/inventory.py)."""


@dataclass(frozen=True)
class Action:
    verb: Verb
    obj: dict[str, Any]  # manifest (create/apply) or the patch's target and body
    reason: str  # Event reason, e.g. CreatedJob
    message: str


@dataclass(frozen=True)
class Plan:
    """Children to write (each with its Event once it succeeded), the status, the
    Events of status transitions (none when nothing changed), when to reconcile again
    without an event (a running compile's progress), and what may wait until no other
    reconcile does (`deferred`: the key's inventory entry, written after `actions`;
    `later`: it waits, so the pass runs again once none does)."""

    actions: list[Action]
    status: CompileStatus  # a SpyreModel's (SpyreModelStatus) or a SpyreCache's
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None  # reconcile again in this many seconds
    deferred: list[Action] = field(default_factory=list)
    later: bool = False


def starts_job(plan: Plan) -> bool:
    """The plan starts a Job (a download, a compile): its other children are dry-run first."""
    return any(a.verb == "create" and a.obj["kind"] == "Job" for a in plan.actions)


def shared_job(
    model: SpyreModel,
    uid: str,
    job: JobView | None,
    manifest: dict[str, Any],
    created: tuple[str, str],
    shared: tuple[str, str],
) -> list[Action]:
    """Create a Job shared by SpyreModels (first writer wins), or join it as an owner;
    `created` and `shared`: the Event (reason, message) of each."""
    if job is None:
        return [Action("create", manifest, *created)]
    if uid in job.owner_uids:
        return []
    target: dict[str, Any] = {
        "kind": "Job",
        "metadata": {"name": job.name, "namespace": model.namespace},
    }
    if (job.succeeded or job.failed) and not any(kind == KIND for kind, _ in job.owners):
        # Its key's clean-up may start now (reconcile/inventory.py): join the Job only as
        # it was seen, so that one of the two writes fails and decides again.
        target["metadata"]["resourceVersion"] = job.resource_version
    (ref,) = manifest["metadata"]["ownerReferences"]
    return [Action("add-owner", target | {"ref": ref}, *shared)]


def apply_child(want: dict[str, Any], live: dict[str, Any] | None) -> list[Action]:
    """Server-side apply of an owned child (Service, NetworkPolicy) when it differs."""
    if not needs_apply(want, live):
        return []
    kind, name = want["kind"], want["metadata"]["name"]
    if live is None:
        return [Action("apply", want, f"Created{kind}", f"created {kind} {name}")]
    return [Action("apply", want, f"Updated{kind}", f"applied the spec to {kind} {name}")]


def sooner(*delays: float | None) -> float | None:
    """The soonest of the re-runs asked for (a clean-up to wait for, a compile's progress
    to read); None: none."""
    asked = [d for d in delays if d is not None]
    return min(asked) if asked else None
