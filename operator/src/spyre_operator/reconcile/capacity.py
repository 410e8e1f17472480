"""Cards first (pure): how many replicas of a SpyreModel the nodes' Spyre cards hold, in
all and now, and why no more.

A node counts when a serving pod could go there: Ready, not cordoned, with the pod's
nodeSelector among its labels, every NoSchedule/NoExecute taint tolerated by the pod, and
at least one replica's cards allocatable. What is free on it is its allocatable cards
minus those the operator's pods placed there hold (pods the operator did not make are not
watched: the scheduler's refusal of a replica says when they hold the rest). Affinity
and topology spread are not weighed. A replica the scheduler refuses is not capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CardsOf = Mapping[str, int]  # node -> cards of one resource that pods hold there


@dataclass(frozen=True)
class Capacity:
    per_replica: int  # cards one replica holds
    on_nodes: int  # replicas the eligible nodes' cards hold in all
    now: int  # replicas placed, plus those the free cards hold
    why: str  # what limits `now` and `on_nodes`, in words


def _tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    """Kubernetes' toleration matching (core/v1 Toleration.ToleratesTaint)."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol["key"] == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def eligible(node: Mapping[str, Any], pod: Mapping[str, Any], resource: str) -> int | None:
    """The node's allocatable cards of `resource` if a pod with spec `pod` may go there."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    labels = node["metadata"].get("labels") or {}
    if spec.get("unschedulable") or not status.get("ready"):
        return None
    if not (pod.get("nodeSelector") or {}).items() <= labels.items():
        return None
    tolerations = pod.get("tolerations") or []
    for taint in spec.get("taints") or []:
        hard = taint.get("effect") in ("NoSchedule", "NoExecute")
        if hard and not _tolerated(taint, tolerations):
            return None
    return int((status.get("cards") or {}).get(resource, "0"))


def held(pods: Iterable[Mapping[str, Any]], resource: str) -> dict[str, int]:
    """The cards of `resource` the operator's running pods hold, by node."""
    out: dict[str, int] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node, cards = spec.get("nodeName"), (spec.get("cards") or {}).get(resource, 0)
        done = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if node and cards and not done:
            out[node] = out.get(node, 0) + cards
    return out


def capacity(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    pod: Mapping[str, Any],
    resource: str,
    per_replica: int,
    placed: int,
    refused: int,
) -> Capacity:
    """`pod`: the serving pod's spec (its nodeSelector and tolerations); `placed`: this
    model's replicas on a node (already in `pods`' count), `refused`: its replicas the
    scheduler refuses (the free cards are fewer than seen, or others hold them)."""
    used = held(pods, resource)
    on_nodes = free = 0
    fitting = []
    for node in nodes:
        cards = eligible(node, pod, resource)
        if cards is None or cards < per_replica:
            continue
        name = node["metadata"]["name"]
        on_nodes += cards // per_replica
        free += max(0, cards - used.get(name, 0)) // per_replica
        fitting.append(name)
    now = placed if refused else placed + free
    if not fitting:
        why = f"no Ready node the serving pods may use has {per_replica} {resource} allocatable"
    else:
        why = (
            f"{len(fitting)} node(s) the serving pods may use hold {on_nodes} replica(s) of "
            f"{per_replica} {resource} in all; {placed} placed, "
            + (f"{refused} refused by the scheduler" if refused else f"room for {free} more")
        )
    return Capacity(per_replica, on_nodes, min(now, on_nodes) if fitting else 0, why)
