"""Pure views of a Job and a Deployment: the facts decide, the compile queue and the
indexes read from the raw objects (and a Job's pods)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spyre_operator.reconcile.pods import (
    DeadlineExceeded,
    PodIssue,
    PodStart,
    Terminated,
    Unschedulable,
    deadline_exceeded,
    newest_termination,
    pod_issues,
    pod_starts,
    unschedulable,
)
from spyre_operator.render import meta
from spyre_operator.render.pod import CONTAINER_NAMES


@dataclass(frozen=True)
class JobView:
    name: str
    cache_key: str | None
    owner_uids: tuple[str, ...]
    succeeded: bool
    failed: bool
    owners: tuple[tuple[str, str], ...] = ()  # (kind, name) of each owner
    resource_version: str = ""
    finished_at: str | None = None  # completionTime, or when it failed
    cleanup: str | None = None  # a compile Job: when its key's clean-up started
    failed_reason: str = ""  # the Job's Failed condition: BackoffLimitExceeded, DeadlineExceeded
    failed_message: str = ""
    active_deadline_seconds: int | None = None
    failures: int = 0  # failed pods so far (the Job may still retry)
    active: int = 0  # pods running or about to
    terminated: Terminated | None = None  # the newest terminated container of its pods
    unschedulable: Unschedulable | None = None  # a pod of the running Job no node takes
    stuck: PodIssue | None = None  # a pod of the running Job whose container cannot start
    starts: tuple[PodStart, ...] = ()  # its pods' waits for a node (when they were read)
    deadline_exceeded: DeadlineExceeded | None = None


@dataclass(frozen=True)
class DeploymentView:
    live: dict[str, Any]
    cache_key: str | None
    generation: int
    observed_generation: int
    spec_replicas: int
    replicas: int
    ready_replicas: int
    available_replicas: int
    updated_replicas: int
    conditions: dict[str, tuple[str, str, str]]  # type -> (status, reason, message)

    def condition(self, kind: str) -> tuple[str, str, str]:
        return self.conditions.get(kind, ("Unknown", "", ""))

    @property
    def rolled_out(self) -> bool:
        """The controller saw the newest spec and every replica runs it (and only it)."""
        return (
            self.observed_generation >= self.generation
            and self.updated_replicas >= self.spec_replicas
            and self.replicas <= self.updated_replicas
            and self.available_replicas >= self.spec_replicas
        )


def _annotation(obj: dict[str, Any], key: str) -> str | None:
    value = (obj.get("metadata", {}).get("annotations") or {}).get(key)
    return value if isinstance(value, str) else None


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    found = obj.get("status", {}).get("conditions") or []
    return {
        c["type"]: (c.get("status", "Unknown"), c.get("reason", ""), c.get("message", ""))
        for c in found
    }


def job_view(
    job: dict[str, Any], pods: list[dict[str, Any]], container: str = CONTAINER_NAMES["precompile"]
) -> JobView:
    conditions = _conditions(job)
    found = job.get("status", {}).get("conditions") or []
    failed = conditions.get("Failed", ("False", "", ""))
    complete = conditions.get("Complete", ("False", "", ""))
    owners = job["metadata"].get("ownerReferences") or []
    failed_at = next(
        (c.get("lastTransitionTime") for c in found if c.get("type") == "Failed"), None
    )
    return JobView(
        name=job["metadata"]["name"],
        cache_key=_annotation(job, meta.CACHE_KEY_ANNOTATION),
        owner_uids=tuple(o["uid"] for o in owners),
        succeeded=complete[0] == "True",
        failed=failed[0] == "True",
        owners=tuple((o.get("kind", ""), o.get("name", "")) for o in owners),
        resource_version=job["metadata"].get("resourceVersion", ""),
        finished_at=job.get("status", {}).get("completionTime")
        or (failed_at if failed[0] == "True" else None),
        cleanup=_annotation(job, meta.CLEANUP_ANNOTATION),
        failed_reason=failed[1] if failed[0] == "True" else "",
        failed_message=failed[2] if failed[0] == "True" else "",
        active_deadline_seconds=job.get("spec", {}).get("activeDeadlineSeconds"),
        failures=int(job.get("status", {}).get("failed", 0)),
        active=int(job.get("status", {}).get("active", 0)),
        terminated=newest_termination(pods, container),
        unschedulable=next(iter(unschedulable(pods)), None),
        stuck=next(iter(pod_issues(pods)), None),
        starts=pod_starts(pods),
        deadline_exceeded=deadline_exceeded(pods),
    )


def deployment_view(deploy: dict[str, Any]) -> DeploymentView:
    status = deploy.get("status", {})
    return DeploymentView(
        live=deploy,
        cache_key=_annotation(deploy, meta.CACHE_KEY_ANNOTATION),
        generation=int(deploy["metadata"].get("generation", 1)),
        observed_generation=int(status.get("observedGeneration", 0)),
        spec_replicas=int(deploy.get("spec", {}).get("replicas", 1)),
        replicas=int(status.get("replicas", 0)),
        ready_replicas=int(status.get("readyReplicas", 0)),
        available_replicas=int(status.get("availableReplicas", 0)),
        updated_replicas=int(status.get("updatedReplicas", 0)),
        conditions=_conditions(deploy),
    )
