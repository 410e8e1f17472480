"""metav1.Conditions and the status patch (pure).

lastTransitionTime moves only when a condition's status flips; reason and message follow
the current state. The status is written only when it differs from what is stored: the
decided status (SpyreModelStatus, SpyreCacheStatus) is serialised (`to_k8s()`) and
compared with the stored JSON.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from spyre_operator.api.status import (
    AVAILABLE,
    CACHE_READY,
    CONDITION_TYPES,
    DEGRADED,
    PROGRESSING,
    READY,
    RECONCILING,
    STALLED,
    CompileStatus,
    Condition,
    ConditionStatus,
    ConditionType,
)

REPLICA_COMPILED = "ReplicaCompiled"  # a serving pod compiled at start-up: Degraded False
UNSCHEDULABLE = "Unschedulable"  # a pod no node takes (the scheduler's reason, and ours)
MESSAGE_LIMIT = 4000  # well below metav1.Condition's 32768, readable in `kubectl describe`


@dataclass(frozen=True)
class Cond:
    """One condition as decided: type, status, reason, message (render_conditions adds the
    times and the generation)."""

    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clip(message: str, limit: int = MESSAGE_LIMIT) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def tail(text: str, lines: int) -> str:
    """The last non-empty lines of a log or termination message, on one line."""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


def kstatus(conds: list[Cond]) -> list[Cond]:
    """Reconciling and Stalled, as kstatus reads them (kubernetes-sigs/cli-utils,
    pkg/kstatus/README.md), from Ready and Degraded: Stalled while something failed that
    needs a change of spec or cluster (Degraded: Invalid, Failed, Degraded, a refused
    write); else Reconciling while the spec is not yet served (Ready False, but for a
    SpyreModel scaled to zero, which is where its spec wants it). Neither: Current."""
    by_type = {c.type: c for c in conds}
    ready, degraded = by_type[READY], by_type.get(DEGRADED)
    if degraded is not None and degraded.status == "True":
        return [
            Cond(RECONCILING, "False", degraded.reason, "stalled: " + degraded.message),
            Cond(STALLED, "True", degraded.reason, degraded.message),
        ]
    done = ready.status == "True" or ready.reason == "ScaledToZero"
    return [
        Cond(RECONCILING, "False" if done else "True", ready.reason, ready.message),
        Cond(STALLED, "False", "AsExpected", "nothing needs a change to go on"),
    ]


def render_conditions(
    conds: list[Cond], old: list[dict[str, Any]], generation: int, now: str
) -> list[Condition]:
    """The status.conditions list, in CONDITION_TYPES order, with kstatus' two derived
    from the rest; `old` is the stored one. Messages are never empty: the API server
    (1.20) stores an empty string as null, which the schema refuses."""
    previous = {c.get("type"): c for c in old}
    out = []
    conds = [c for c in conds if c.type not in (RECONCILING, STALLED)]
    for cond in sorted(conds + kstatus(conds), key=lambda c: CONDITION_TYPES.index(c.type)):
        before = previous.get(cond.type)
        kept = before is not None and before.get("status") == cond.status
        out.append(
            Condition(
                type=cond.type,
                status=cond.status,
                reason=cond.reason,
                message=clip(cond.message) or cond.reason,
                last_transition_time=before.get("lastTransitionTime", now)
                if kept and before
                else now,
                observed_generation=generation,
            )
        )
    return out


def find(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """A condition of a stored status (JSON), or {}."""
    return next((c for c in conditions if c.get("type") == kind), {})


def transition_events(old: dict[str, Any], new: CompileStatus) -> list[Event]:
    """One Event when the phase changes, the Degraded reason changes (to a failure, or to
    a serving pod that compiled at start-up) or a pod starts waiting for a node (Ready's
    reason becomes Unschedulable); none otherwise.
    `old` is the stored status."""
    old_degraded = find(old.get("conditions") or [], DEGRADED)
    new_degraded = new.condition(DEGRADED)
    if (
        new_degraded is not None
        and new_degraded.status == "True"
        and (
            old_degraded.get("status") != "True"
            or old_degraded.get("reason") != new_degraded.reason
        )
    ):
        return [Event("Warning", new_degraded.reason, new_degraded.message)]
    if (
        new_degraded is not None
        and new_degraded.reason == REPLICA_COMPILED
        and old_degraded.get("reason") != REPLICA_COMPILED
    ):  # it serves, but a replica compiled what the cache should have held
        return [Event("Warning", REPLICA_COMPILED, new_degraded.message)]
    old_ready, new_ready = find(old.get("conditions") or [], READY), new.condition(READY)
    if (
        new_ready is not None
        and new_ready.reason == UNSCHEDULABLE
        and old_ready.get("reason") != UNSCHEDULABLE
    ):  # a pod waits for a node: said once, in the scheduler's words
        return [Event("Warning", UNSCHEDULABLE, new_ready.message)]
    phase = new.phase
    if phase != old.get("phase") and phase:
        warn = phase in ("Degraded", "Failed", "Invalid")
        return [Event("Warning" if warn else "Normal", phase, phase_message(new))]
    return []


def event_name(body: dict[str, Any], old_status: dict[str, Any], event: Event) -> str:
    """A transition's Event name: the same for every reconcile that decides it from the same
    stored status. The Event is posted before the status write, so an operator killed in
    between leaves the old status; the next one decides the same transition and posts it
    under the same name, and AlreadyExists says it was posted: once, never lost."""
    meta = body["metadata"]
    seed = json.dumps([meta.get("uid"), event.reason, old_status], sort_keys=True)
    digest = hashlib.sha256(seed.encode()).hexdigest()[:16]
    return event_object_name(meta["name"], digest)


def event_object_name(name: str, suffix: str) -> str:
    """kubectl's Event names: the object's name, a dot, a suffix (at most 253 in all)."""
    return f"{name[:236].rstrip('.-')}.{suffix}"


def announce(written: list[Event], transitions: list[Event]) -> list[Event]:
    """The Events of one reconcile: its transition, if any, with what was written on the
    way in its message (one Event, not one per child: Events cost the API server as much
    as the writes); without a transition, one per child written (drift repaired, scaled)."""
    if not transitions or not written:
        return transitions or written
    first, *rest = transitions
    done = "; ".join(event.message for event in written)
    return [Event(first.type, first.reason, f"{first.message} ({done})"), *rest]


def phase_message(status: CompileStatus) -> str:
    """The message of the condition that explains the phase best."""
    for kind in (DEGRADED, PROGRESSING, AVAILABLE, CACHE_READY):
        cond = status.condition(kind)
        if cond and (kind != DEGRADED or cond.status == "True") and cond.message:
            return cond.message
    return status.phase or ""


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch turning old into new (None deletes a field), or None when equal."""
    if old == new:
        return None
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if before == value:
            continue
        if isinstance(value, dict) and isinstance(before, dict):
            patch[key] = status_patch(before, value)
        else:
            patch[key] = value
    return patch
