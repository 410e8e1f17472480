"""What a SpyreModel's pods say, read into plain facts (pure): a container's termination
and its JSON summary, the scheduler's refusal, a pod's wait for a node, the kubelet's
deadline, and the waiting reasons that need a person (of the init container too: the
injected runtime's image). observe.py's views of Jobs and Deployments are made of these;
image_fault.py reads which of them say the image cannot run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from spyre_operator.reconcile.image_fault import cannot_run, fault
from spyre_operator.render.inject import INIT_CONTAINER
from spyre_operator.render.pod import CONTAINER_NAMES
from spyre_runtime.contract import Summary

# Pod waiting reasons that need a person (the rest are transient: ContainerCreating, ...).
STUCK_WAITING = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)


@dataclass(frozen=True)
class Terminated:
    """A container's last termination (what the kubelet records)."""

    pod: str
    reason: str  # Completed, Error, OOMKilled, ...
    exit_code: int
    message: str  # the termination message: JSON summary, or the log tail
    image: str = ""  # the container's image, as its status names it
    container: str = ""

    @property
    def summary(self) -> Summary | None:
        """The command's JSON summary (spyre_runtime.contract), if the message is one."""
        try:
            parsed = json.loads(self.message.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None
        return cast(Summary, parsed) if isinstance(parsed, dict) else None

    @property
    def fault(self) -> str | None:
        """Why its image cannot run (image_fault.py), from its summary when it wrote one."""
        said = self.summary
        if said is not None and said.get("ok") is False:
            reason, message = str(said.get("reason")), str(said.get("message", ""))
            return fault(self.container, self.image, reason, message)
        return fault(self.container, self.image, self.reason, self.message)


@dataclass(frozen=True)
class Unschedulable:
    """A pod the scheduler cannot place (PodScheduled False, reason Unschedulable): no
    node has the cards, CPU or memory it asks for, its scheduler does not run, its claim
    is not bound, ... in the scheduler's own words."""

    pod: str
    message: str  # e.g. 0/1 nodes are available: 1 Insufficient ibm.com/spyre_pf.
    since: str  # when the scheduler first said so (RFC 3339)


@dataclass(frozen=True)
class PodStart:
    """When a Job's pod was made and when a node started it (the kubelet's startTime,
    after the scheduler placed it: None while it waits for a node); `pending`: it still
    waits. The time between is not counted by a pod's activeDeadlineSeconds."""

    created: str
    started: str | None
    pending: bool


@dataclass(frozen=True)
class DeadlineExceeded:
    """The newest pod of a Job, stopped by the kubelet at its activeDeadlineSeconds."""

    pod: str
    seconds: int | None


@dataclass(frozen=True)
class PodIssue:
    pod: str
    reason: str  # a waiting reason, or the reason of serve's termination (message)
    message: str
    container: str = ""
    image: str = ""  # the container's image, as its status names it

    @property
    def fault(self) -> str | None:
        """Why its image cannot run (image_fault.py); None: not the image's fault."""
        return fault(self.container, self.image, self.reason, self.message)


def _terminations(pod: dict[str, Any], container: str) -> list[Terminated]:
    name = pod["metadata"]["name"]
    out = []
    statuses = pod.get("status", {})
    for status in (statuses.get("initContainerStatuses") or []) + (
        statuses.get("containerStatuses") or []
    ):
        if status.get("name") != container:
            continue
        for state in (status.get("state") or {}, status.get("lastState") or {}):
            done = state.get("terminated")
            if done:
                out.append(
                    Terminated(
                        pod=name,
                        reason=done.get("reason", ""),
                        exit_code=int(done.get("exitCode", 0)),
                        message=done.get("message", ""),
                        image=status.get("image", ""),
                        container=container,
                    )
                )
    return out


def unschedulable(pods: list[dict[str, Any]]) -> tuple[Unschedulable, ...]:
    """The pods the scheduler said it cannot place (pending ones only), by name."""
    found = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if pod.get("status", {}).get("phase") not in (None, "Pending"):
            continue
        for cond in pod.get("status", {}).get("conditions") or []:
            said = (cond.get("type"), cond.get("status"), cond.get("reason"))
            if said == ("PodScheduled", "False", "Unschedulable"):
                since = cond.get("lastTransitionTime") or ""
                name = pod["metadata"]["name"]
                found.append(Unschedulable(name, cond.get("message") or "", since))
    return tuple(found)


def _ended(pod: dict[str, Any], container: str) -> Terminated | None:
    """The container's termination; if it never ran, the injected runtime's init
    container's failure (its copy did not run: another CPU, no python3, ...)."""
    found = _terminations(pod, container)[:1] or [
        t for t in _terminations(pod, INIT_CONTAINER)[:1] if t.exit_code != 0
    ]
    return found[0] if found else None


def newest_termination(pods: list[dict[str, Any]], container: str) -> Terminated | None:
    """The newest pod's termination (Job retries make several pods)."""
    ordered = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    found = [t for pod in ordered if (t := _ended(pod, container)) is not None]
    return found[-1] if found else None


def pod_starts(pods: list[dict[str, Any]]) -> tuple[PodStart, ...]:
    """Each pod's creation and start on a node, oldest first."""
    ordered = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    return tuple(
        PodStart(
            p["metadata"].get("creationTimestamp", ""),
            p.get("status", {}).get("startTime"),
            p.get("status", {}).get("phase") == "Pending",
        )
        for p in ordered
    )


def deadline_exceeded(pods: list[dict[str, Any]]) -> DeadlineExceeded | None:
    """The newest pod, if the kubelet stopped it at its activeDeadlineSeconds (its
    status.reason; its containers were killed, so their termination says little)."""
    ordered = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    if not ordered or ordered[-1].get("status", {}).get("reason") != "DeadlineExceeded":
        return None
    newest = ordered[-1]
    return DeadlineExceeded(
        newest["metadata"]["name"], newest.get("spec", {}).get("activeDeadlineSeconds")
    )


def pod_issues(pods: list[dict[str, Any]]) -> tuple[PodIssue, ...]:
    """Why serving pods do not come up: a rejected cache or an image that cannot run
    first, then stuck containers (of a Job's pods too: an image that cannot be pulled,
    the injected runtime's init container, ...)."""
    issues = []
    serve = CONTAINER_NAMES["serve"]
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        name = pod["metadata"]["name"]
        for done in _terminations(pod, serve) + _terminations(pod, INIT_CONTAINER):
            summary = done.summary
            if summary and summary.get("ok") is False:
                reason = str(summary.get("reason") or "ServeFailed")
                message = str(summary.get("message", ""))
                issues.append(PodIssue(name, reason, message, serve, done.image))
                break
            if summary is None and cannot_run(done.message):  # e.g. exec format error
                said = (done.reason, done.message, done.container, done.image)
                issues.append(PodIssue(name, *said))
                break
        status = pod.get("status", {})
        for state in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            waiting = (state.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING:
                container = state.get("name", "")
                issues.append(
                    PodIssue(
                        name,
                        waiting["reason"],
                        waiting.get("message", ""),
                        container,
                        state.get("image", ""),
                    )
                )
    return tuple(issues)
