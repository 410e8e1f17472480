"""The compile queue (pure): may a cache key's compile Job start now, and if not, where is
it in the line?

Facts come from the cluster (kube/indexed.py reads them from the watched Jobs and
SpyreModels), so the queue survives a restart: the compile Jobs that run, and the
SpyreModels whose key has no compile Job yet. A Job is shared by the SpyreModels of one
key in a namespace, so the line holds keys, each at the place of its oldest SpyreModel.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from spyre_operator.api.names import KIND
from spyre_operator.api.problem import InvalidSpec
from spyre_operator.api.runtimes import DEFAULT_IMAGES, RuntimeImages
from spyre_operator.api.status import DEGRADED
from spyre_operator.api.validation import parse
from spyre_operator.reconcile.conditions import find
from spyre_operator.reconcile.weights_status import weights_commit
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key

JobRef = tuple[str, str]  # (namespace, name) of a compile Job


@dataclass(frozen=True)
class Limits:
    """Compile Jobs running at once; 0 is unlimited."""

    cluster: int = 0
    namespace: int = 0


@dataclass(frozen=True)
class Want:
    """A SpyreModel whose cache key has no compile Job yet."""

    created: str  # the SpyreModel's creationTimestamp (RFC 3339 in UTC: sorts as text)
    namespace: str
    name: str
    job: str  # the key's compile Job (meta.compile_job_name)
    kind: str = KIND  # or a SpyreCache's (a precompile)

    @property
    def who(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)

    @property
    def ref(self) -> JobRef:
        return (self.namespace, self.job)


@dataclass(frozen=True)
class Queue:
    limits: Limits
    running: frozenset[JobRef]  # compile Jobs neither complete nor failed
    wanting: tuple[Want, ...]  # SpyreModels whose key has no compile Job
    known: frozenset[JobRef] = frozenset()  # every compile Job the operator sees

    def with_started(self, started: frozenset[JobRef]) -> Queue:
        """Jobs created a moment ago, not yet seen by the watch, count as running."""
        return replace(
            self,
            running=self.running | started,
            wanting=tuple(w for w in self.wanting if w.ref not in started),
        )


@dataclass(frozen=True)
class Turn:
    start: bool
    position: int = 0  # 1-based place among the waiting keys
    waiting: int = 0
    running: int = 0
    limits: Limits = Limits()

    @property
    def message(self) -> str:
        caps = [f"{self.limits.cluster} at once"] if self.limits.cluster else []
        if self.limits.namespace:
            caps.append(f"{self.limits.namespace} per namespace")
        plural = "compile" if self.running == 1 else "compiles"
        return (
            f"{ordinal(self.position)} of {self.waiting} waiting; {self.running} {plural} "
            f"running (at most {', '.join(caps)})"
        )


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def fair(want: Want) -> tuple[str, str, str, str]:
    """The order of the line: the oldest SpyreModel (or SpyreCache) first, then
    namespace/name."""
    return (want.created, want.namespace, want.name, want.kind)


def line(wanting: tuple[Want, ...] | list[Want]) -> list[Want]:
    """The keys in fair order, each at the place of its oldest SpyreModel."""
    seen: set[JobRef] = set()
    out = []
    for want in sorted(wanting, key=fair):
        if want.ref not in seen:
            seen.add(want.ref)
            out.append(want)
    return out


def turn(queue: Queue, me: Want) -> Turn:
    """Start `me`'s compile Job now? Yes when its key already runs (it joins the Job) or
    when the free slots reach it in the line; a key whose namespace is full waits without
    holding up the keys of other namespaces behind it."""
    if me.ref in queue.running:
        return Turn(start=True)
    others = [w for w in queue.wanting if w.who != me.who]
    limits = queue.limits
    total = len(queue.running)
    per_namespace = Counter(ns for ns, _ in queue.running)
    waiting: list[JobRef] = []
    for want in line([*others, me]):
        if want.ref in queue.running:
            continue  # stale: the Job exists meanwhile
        fits = (not limits.cluster or total < limits.cluster) and (
            not limits.namespace or per_namespace[want.namespace] < limits.namespace
        )
        if fits:
            if want.ref == me.ref:
                return Turn(start=True)
            total += 1
            per_namespace[want.namespace] += 1
        else:
            waiting.append(want.ref)
    return Turn(
        start=False,
        position=waiting.index(me.ref) + 1,
        waiting=len(waiting),
        running=len(queue.running),
        limits=limits,
    )


def is_compile_start(verb: str, obj: dict[str, Any]) -> bool:
    """A create of a compile Job (what the queue admits)."""
    return verb == "create" and meta.component(obj) == meta.COMPILE


def wanted(body: dict[str, Any], images: RuntimeImages = DEFAULT_IMAGES) -> Want | None:
    """The compile Job a SpyreModel wants, from its spec and stored status; None when it
    wants none (invalid, deleted, weights not downloaded yet, or its key compiled), or
    when the API server refused what it wrote last (it keeps no place ahead of others).
    kopf's index asks at every event of the object: the key a reconcile decided from this
    spec is its status' targetCacheKey, so it is computed here only for a spec no status
    was decided from yet (a new object, a spec changed), which `images` (the operator's
    serving images) judge as the reconcile does."""
    metadata = body["metadata"]
    status = body.get("status") or {}
    reason = find(status.get("conditions") or [], DEGRADED).get("reason")
    refused = reason in ("ApplyFailed", "Refused")
    if metadata.get("deletionTimestamp") or refused:
        return None
    kind = body.get("kind") or KIND
    if status.get("observedGeneration") == metadata.get("generation", 1):
        key = None if status.get("phase") == "Invalid" else status.get("targetCacheKey")
    else:
        key = spec_key(body, kind, status, images)
    if key is None:
        return None
    cache = status.get("cache") or {}
    if cache.get("cacheKey") == key and cache.get("ok") is True:
        return None
    created = metadata.get("creationTimestamp", "")
    job = meta.compile_job_name(key)
    namespace = metadata.get("namespace") or "default"  # as parse() has it (a file's object)
    return Want(created, namespace, metadata["name"], job, kind)


def spec_key(
    body: dict[str, Any], kind: str, status: dict[str, Any], images: RuntimeImages
) -> str | None:
    """The cache key of the object's spec (None: invalid, or a hub model's weights not
    downloaded yet)."""
    try:
        spec = parse(body, kind=kind, images=images).spec
    except InvalidSpec:
        return None
    commit = weights_commit(status.get("weights"))
    if spec.model.from_hub and commit is None:
        return None
    return cache_key(spec, commit)
