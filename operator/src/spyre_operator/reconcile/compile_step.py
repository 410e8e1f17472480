"""The compile step (pure): the cache of the spec's key, ready on the volume, pulled from
the cache registry (pull.py), or compiled by the key's Job, shared by every SpyreModel
with that key, once the compile queue gives it a turn; and the key's inventory entry."""

from __future__ import annotations

from dataclasses import dataclass, field

from spyre_operator.api.runtimes import CacheSharing
from spyre_operator.api.status import CompileSummary
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile import inventory, pull
from spyre_operator.reconcile.cache_status import Failure, cache_summary
from spyre_operator.reconcile.compile_queue import Turn, Want, turn
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.plan import Action, shared_job, sooner
from spyre_operator.reconcile.views import JobView
from spyre_operator.reconcile.weights_step import WeightsStep
from spyre_operator.render import meta
from spyre_operator.render.cachekey import short_key
from spyre_operator.render.children import Desired


@dataclass(frozen=True)
class CompileStep:
    key: str | None  # the spec's cache key; None while the weights' commit is not known
    cache: CompileSummary | None  # status.cache
    ready: bool  # the key's cache is on the volume
    failure: Failure | None = None  # the compile (or the download before it) failed
    queued: Turn | None = None  # the compile waits for its turn
    cleaning: str | None = None  # the key's clean-up Job, which the compile waits for
    holder: JobView | None = None  # the Job that holds the key in the inventory
    actions: list[Action] = field(default_factory=list)
    deferred: list[Action] = field(default_factory=list)  # the key's inventory entry
    requeue_after: float | None = None


def compile_step(
    obs: Observed,
    model: SpyreModel,
    want: Desired,
    weights: WeightsStep,
    sharing: CacheSharing | None,
    now: str,
) -> CompileStep:
    status = obs.status
    if not weights.ready:
        cache = None
        if status.get("cache"):  # of the running Deployment's key
            cache = CompileSummary.model_validate(status["cache"], extra="ignore")
            cache.progress = None  # of a compile this spec no longer waits for
        return CompileStep(None, cache, False, weights.failure)
    key, job = obs.key, obs.job
    assert key is not None and want.job is not None
    name = meta.compile_job_name(key)
    holder = pull.key_holder(job, obs.pull_job)
    cleaning = None
    if holder is not None and holder.cleanup is not None and not obs.inventory:
        cleaning = meta.cleanup_job_name(key)  # never joined: compiled again after it
        cache, ready = CompileSummary(job_name=name, cache_key=key), False
    else:
        cache = cache_summary(key, job, status.get("cache") or {}, now, obs.progress)
        ready = cache.ok is True
    step = pull.OFF
    if not ready and cleaning is None:
        step = pull.pull_step(sharing is not None, key, job, obs.pull_job, now)
    if step.pulled is not None:
        cache, ready = step.pulled, True
    pull.carry_miss(cache, step, status.get("cache") or {})
    # From the summary (recorded once the pods were read: they may be gone later).
    failure = Failure(cache.reason or "", cache.message or "") if cache.ok is False else None
    queued = None
    if job is None and not ready and not step.wait:
        queued = _queued(obs, model, name)
    actions = pull.pull_actions(model, obs, want.pull, key, sharing, step)
    if step.pulling:
        cache = pull.pulling(key)
    elif (not ready or job is not None) and queued is None and cleaning is None:
        unused = pull.not_used(step.missed)
        actions += shared_job(
            model,
            obs.uid,
            job,
            want.job,
            ("CreatedCompileJob", f"compiling cache {short_key(key)} in Job {name}{unused}"),
            ("SharedCompileJob", f"uses Job {name} of another SpyreModel with the same key"),
        )
    # Once the Job is seen (its watch event brings this pass: triggers.py), so the pass
    # that creates it writes nothing more before it.
    deferred = []
    listing = holder is not None and not obs.inventory and cleaning is None
    if listing and inventory.needs_entry(key, holder):
        entry = inventory.entry_manifest(obs.body, model, key, weights.commit)
        listed = f"SpyreCache {entry['metadata']['name']} lists cache {short_key(key)}"
        deferred.append(Action("create", entry, "CreatedCacheEntry", listed))
    requeue = sooner(inventory.CLEANUP_POLL_SECONDS if cleaning else None, step.retry_in)
    return CompileStep(
        key, cache, ready, failure, queued, cleaning, holder, actions, deferred, requeue
    )


def _queued(obs: Observed, model: SpyreModel, job_name: str) -> Turn | None:
    """The compile queue's answer when this key's Job does not exist: None to start it."""
    if obs.queue is None:
        return None
    created = obs.body["metadata"].get("creationTimestamp", "")
    answer = turn(obs.queue, Want(created, model.namespace, model.name, job_name, model.kind))
    return None if answer.start else answer
