"""The SpyreCache step (pure): a SpyreCache compiles only, Ready once its key's cache is;
an inventory entry (inventory.py) also records the key's use and, once unused for the
retention, removes the key from the volume (the clean-up Job) and then itself."""

from __future__ import annotations

from spyre_operator.api.status import CACHE_READY, DEGRADED, READY, Phase, SpyreCacheStatus
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile import inventory
from spyre_operator.reconcile.cache_status import Failure, cache_condition, image_failure
from spyre_operator.reconcile.compile_step import CompileStep
from spyre_operator.reconcile.conditions import Cond, render_conditions, transition_events
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.plan import Action, Plan, sooner
from spyre_operator.reconcile.weights_status import weights_commit
from spyre_operator.reconcile.weights_step import revision_event
from spyre_operator.render import meta
from spyre_operator.render.children import build_cleanup_job
from spyre_operator.settings import Settings


def spyrecache_plan(
    obs: Observed,
    model: SpyreModel,
    actions: list[Action],
    cache: CompileStep,
    settings: Settings,
    now: str,
) -> Plan:
    """`actions`: the steps' before this one (the volume, the download, the compile)."""
    status, generation, key = obs.status, obs.generation, cache.key
    failure = cache.failure or image_failure(obs, key)
    cache_cond = cache_condition(
        model, obs, key, cache.cache, cache.ready, failure, cache.queued, cache.cleaning
    )
    use = inventory.usage(cache.holder, model.name, status, now)
    step = None
    if obs.inventory and key is not None:
        retention = settings.cache_retention_seconds
        step = inventory.cleanup_step(key, cache.holder, obs.cleanup_job, use, retention, now)
        actions = actions + _cleanup_actions(obs, model, cache, step, now, settings)
    phase: Phase
    if step is not None and step.step == "Failed":
        failure = Failure("CleanupFailed", step.message)
        phase, ready = "Failed", Cond(READY, "False", failure.reason, failure.message)
    elif step is not None and step.step in ("Start", "Running", "Done"):
        phase, ready = "CleaningUp", Cond(READY, "False", "CleaningUp", step.message)
        cache_cond = Cond(CACHE_READY, "False", "CleaningUp", step.message)
    elif cache_cond.status == "True":
        phase, ready = "Ready", Cond(READY, "True", cache_cond.reason, cache_cond.message)
    else:
        phase = "Failed" if failure else "Downloading" if key is None else "Compiling"
        ready = Cond(READY, "False", cache_cond.reason, cache_cond.message)
    degraded = (
        Cond(DEGRADED, "True", failure.reason, failure.message)
        if failure
        else Cond(DEGRADED, "False", "AsExpected", "no failures")
    )
    conditions = [ready, cache_cond, degraded]
    new_status = SpyreCacheStatus(
        observed_generation=generation,
        phase=phase,
        conditions=render_conditions(conditions, status.get("conditions") or [], generation, now),
        target_cache_key=key,
        cache=cache.cache,
        weights=obs.weights,
        runtime=inventory.runtime(model, cache.cache),
        used_by=use.used_by,
        compiled_at=use.compiled_at,
        last_used_at=use.last_used_at,
    )
    events = transition_events(status, new_status) + revision_event(status, obs.weights)
    again = sooner(cache.requeue_after, step.requeue_after if step else None, obs.progress_seconds)
    return Plan(actions, new_status, events, again, cache.deferred)


def _cleanup_actions(
    obs: Observed,
    model: SpyreModel,
    cache: CompileStep,
    step: inventory.Cleanup,
    now: str,
    settings: Settings,
) -> list[Action]:
    """Mark the Job that holds the key and create the clean-up Job (Start), or go
    (Done)."""
    if step.step == "Done":
        me = {"kind": model.kind, "metadata": {"name": model.name, "namespace": model.namespace}}
        return [Action("delete", me, "CleanedUp", step.message)]
    if step.step != "Start":
        return []
    holder = cache.holder
    assert holder is not None
    out = []
    if holder.cleanup is None:
        target = {
            "kind": "Job",
            "metadata": {
                "name": holder.name,
                "namespace": model.namespace,
                "resourceVersion": holder.resource_version,
                "annotations": {meta.CLEANUP_ANNOTATION: now},
            },
        }
        out.append(Action("mark", target, "MarkedForCleanup", step.message))
    commit = weights_commit(obs.weights)
    job = build_cleanup_job(model, obs.uid, settings.platform, commit, settings.runtime_images)
    name = job["metadata"]["name"]
    out.append(Action("create", job, "CreatedCleanupJob", f"{step.message} (Job {name})"))
    return out
