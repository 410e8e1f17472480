"""The inventory of the cache volumes (pure): one SpyreCache per cache key, who uses the
key, and its clean-up once no one has for the retention period.

A SpyreModel whose compile Job has no SpyreCache owner makes the key's inventory entry
(`spyre-cache-<short key>`, label serving.spyre.dev/inventory=true), once the Job is seen
and no triggered reconcile waits (engine.py, `Plan.deferred`): a SpyreCache with the
model's spec, its hub revision pinned to the commit the model compiled, so it computes the
same key and joins the Job as an owner; the Job (and its summary) then outlives the
models. The compile Job's owners say who uses the key: its SpyreModels (usedBy) and any
SpyreCache of a user (a precompile request). An entry whose key no SpyreModel and no other
SpyreCache uses, and that is not compiling, starts the clean-up after the retention: it
marks the compile Job (a patch guarded by the resourceVersion it decided from, so a
SpyreModel joining at the same moment makes one of the two writes fail and decide again)
and creates the clean-up Job, which removes only the key's directory; once that succeeded
the entry deletes itself and the garbage collector takes both Jobs. A SpyreModel never
joins a marked Job: it waits for the clean-up, then compiles the key again.
"""

from __future__ import annotations

import copy
import datetime
from dataclasses import dataclass
from typing import Any

from spyre_operator.api.names import API_VERSION, CACHE_KIND, KIND
from spyre_operator.api.status import CompileSummary
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.views import JobView
from spyre_operator.render import meta
from spyre_operator.render.cachekey import short_key

# A SpyreModel waiting for its key's clean-up looks again this often (the clean-up Job's
# events go to the entry that owns it, not to the SpyreModel).
CLEANUP_POLL_SECONDS = 10.0


def entry_manifest(body: dict[str, Any], model: SpyreModel, key: str, commit: str | None) -> Any:
    """The key's inventory entry, made by a SpyreModel (`body`) that compiles or uses it:
    the model's spec, with a hub revision pinned to `commit` (the same key: the commit
    takes the revision's place in it)."""
    spec = copy.deepcopy(body["spec"])
    if model.spec.model.from_hub:
        spec["model"]["revision"] = commit
    labels = {
        "app.kubernetes.io/part-of": "spyre-serving",
        "app.kubernetes.io/managed-by": "spyre-operator",
        meta.INVENTORY_LABEL: "true",
        meta.CACHE_KEY_LABEL: short_key(key),
    }
    return {
        "apiVersion": API_VERSION,
        "kind": CACHE_KIND,
        "metadata": {
            "name": meta.inventory_name(key),
            "namespace": model.namespace,
            "labels": labels,
            "annotations": {meta.CACHE_KEY_ANNOTATION: key},
        },
        "spec": spec,
    }


def needs_entry(key: str, job: JobView | None) -> bool:
    """The key's inventory entry does not own its compile Job (yet)."""
    return job is None or (CACHE_KIND, meta.inventory_name(key)) not in job.owners


@dataclass(frozen=True)
class Usage:
    used_by: list[str]  # SpyreModels sharing the compile Job
    shared_with: list[str]  # other SpyreCaches owning it (a user's precompile request)
    compiled_at: str | None
    last_used_at: str | None


def usage(job: JobView | None, name: str, stored: dict[str, Any], now: str) -> Usage:
    """Who uses the key (the compile Job's owners) and since when; `stored` is the stored
    status. lastUsedAt moves only when usedBy changes, so an idle pass writes nothing."""
    owners = job.owners if job else ()
    used_by = sorted(n for kind, n in owners if kind == KIND)
    shared_with = sorted(n for kind, n in owners if kind == CACHE_KIND and n != name)
    last_used = stored.get("lastUsedAt")
    if set(used_by) != set(stored.get("usedBy") or []):
        last_used = now
    compiled_at = (job.finished_at if job else None) or stored.get("compiledAt")
    return Usage(used_by, shared_with, compiled_at, last_used)


def runtime(model: SpyreModel, cache: CompileSummary | None) -> str:
    """`<flavour> <plugin version>`: what compiled the key, or else what will."""
    spec = model.spec
    found = (cache.versions or {}).get(spec.flavour.module) if cache else None
    return f"{spec.runtime.flavour} {found or spec.runtime_version}"


def epoch_seconds(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Cleanup:
    """What the entry does about its key's clean-up."""

    step: str  # Kept, Waiting (the retention runs), Start, Running, Done, Failed
    message: str
    requeue_after: float | None = None  # seconds until the retention expires


def cleanup_step(
    key: str,
    job: JobView | None,
    cleanup_job: JobView | None,
    use: Usage,
    retention: int,
    now: str,
) -> Cleanup:
    """The clean-up of an inventory entry's key: never while a SpyreModel or another
    SpyreCache uses it, while it compiles, or without its compile Job (the lock); else
    once the retention passed since the last use (or the compile)."""
    short = short_key(key)
    if cleanup_job is not None:
        if cleanup_job.succeeded:
            return Cleanup("Done", f"Job {cleanup_job.name} removed cache {short}")
        if cleanup_job.failed:
            done = cleanup_job.terminated
            said = done.summary if done else None
            why = (said.get("message") if said else None) or cleanup_job.failed_message
            why = why or "failed"
            return Cleanup(
                "Failed",
                f"the clean-up Job {cleanup_job.name} failed: {why}. Delete this SpyreCache to "
                "let a SpyreModel compile the key again",
            )
        return Cleanup("Running", f"Job {cleanup_job.name} is removing cache {short}")
    if job is None or not (job.succeeded or job.failed):
        return Cleanup("Kept", "the key is compiling, or its compile Job is gone")
    if use.used_by or use.shared_with:
        users = [*use.used_by, *(f"SpyreCache {n}" for n in use.shared_with)]
        return Cleanup("Kept", f"in use by {', '.join(users)}")
    if job.cleanup is not None:  # marked, the Job not created yet (a restart in between)
        return Cleanup("Start", f"removing cache {short}: unused since {job.cleanup}")
    if retention <= 0:
        return Cleanup("Kept", "the retention is 0: unused keys are kept")
    since = max(t or "" for t in (use.last_used_at, use.compiled_at, job.finished_at))
    left = epoch_seconds(since) + retention - epoch_seconds(now) if since else 0.0
    if left > 0:
        return Cleanup("Waiting", f"unused since {since}", requeue_after=left)
    return Cleanup("Start", f"removing cache {short}: unused since {since or 'its compile'}")
