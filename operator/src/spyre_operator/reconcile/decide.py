"""The decision (pure): observed cluster state + parsed spec -> actions, status, events.

The flow: cache PVC -> (hub models) the weights Job, which downloads the model into the
volume and resolves its revision to a commit -> compile Job of the spec's cache key ->
serving Deployment and Service once that key's cache is ready. A new key keeps the
running Deployment on its old cache (activeCacheKey) until the new compile succeeds,
then rolls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from spyre_operator.api.names import KIND
from spyre_operator.api.problem import Problem
from spyre_operator.api.runtimes import CacheSharing
from spyre_operator.api.status import (
    AVAILABLE,
    CACHE_READY,
    DEGRADED,
    PROGRESSING,
    READY,
    CompileStatus,
    CompileSummary,
    Phase,
    SpyreCacheStatus,
    SpyreModelStatus,
    WeightsSummary,
)
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile import inventory
from spyre_operator.reconcile.cache_status import Failure, cache_condition, cache_summary
from spyre_operator.reconcile.compile_queue import Turn, Want, turn
from spyre_operator.reconcile.conditions import (
    Cond,
    Event,
    render_conditions,
    transition_events,
)
from spyre_operator.reconcile.drift import needs_apply
from spyre_operator.reconcile.handoff import serving_while_compiling
from spyre_operator.reconcile.model_status import model_conditions
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.pull import (
    OFF,
    carry_miss,
    key_holder,
    not_used,
    pull_step,
    pulling,
    retry_action,
)
from spyre_operator.reconcile.views import JobView
from spyre_operator.reconcile.weights_status import weights_commit
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key, short_key
from spyre_operator.render.children import build_cleanup_job, desired, endpoint_url
from spyre_operator.render.sharing import sharing_for
from spyre_operator.settings import Settings

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
    reconcile does (`deferred`: the key's inventory entry, written after `actions`)."""

    actions: list[Action]
    status: CompileStatus  # a SpyreModel's (SpyreModelStatus) or a SpyreCache's
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None  # reconcile again in this many seconds
    deferred: list[Action] = field(default_factory=list)


# ----- the decision --------------------------------------------------------------------


def _shared_job(
    model: SpyreModel,
    uid: str,
    job: JobView | None,
    manifest: dict[str, Any],
    created: tuple[str, str],
    shared: tuple[str, str],
) -> list[Action]:
    """Create a Job shared by SpyreModels (first writer wins), or join it as an owner."""
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


def _pull_job(
    model: SpyreModel,
    obs: Observed,
    manifest: dict[str, Any] | None,
    key: str,
    sharing: CacheSharing | None,
) -> list[Action]:
    """Create the key's pull Job, or join it as one more user of the key."""
    assert manifest is not None and sharing is not None  # a pull step: sharing is on
    return _shared_job(
        model,
        obs.uid,
        obs.pull_job,
        manifest,
        ("CreatedPullJob", f"pulling cache {short_key(key)} from {sharing.repository}"),
        ("SharedPullJob", f"uses Job {manifest['metadata']['name']} of another SpyreModel "
         "with the same key"),
    )  # fmt: skip


def _apply(want: dict[str, Any], live: dict[str, Any] | None) -> list[Action]:
    """Server-side apply of an owned child (Service, NetworkPolicy) when it differs."""
    if not needs_apply(want, live):
        return []
    kind, name = want["kind"], want["metadata"]["name"]
    if live is None:
        return [Action("apply", want, f"Created{kind}", f"created {kind} {name}")]
    return [Action("apply", want, f"Updated{kind}", f"applied the spec to {kind} {name}")]


def _budget(
    model: SpyreModel, want: dict[str, Any] | None, live: dict[str, Any] | None
) -> list[Action]:
    """The PodDisruptionBudget of 2 or more replicas (a drain takes one at a time), gone
    below 2 (a budget of one replica would block a drain for ever, or allow it anyway)."""
    if want is not None:
        return _apply(want, live)
    if live is None:
        return []
    me = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": model.name, "namespace": model.namespace},
    }
    said = f"deleted PodDisruptionBudget {model.name}: {model.spec.replicas} replica(s)"
    return [Action("delete", me, "DeletedPodDisruptionBudget", said)]


def _revision_event(old: dict[str, Any], weights: WeightsSummary | None) -> list[Event]:
    """The revision now names another commit than the one compiled before: said once.
    `old` is the stored status."""
    before = (old.get("weights") or {}).get("commit")
    commit = weights_commit(weights)
    if weights is None or commit is None or before in (None, commit):
        return []
    return [
        Event(
            "Normal",
            "RevisionMoved",
            f"{weights.model_id} revision {weights.revision} is now commit {commit[:12]} "
            f"(was {before[:12]}): a new cache key; the Deployment keeps the old one until "
            "it is compiled",
        )
    ]


def _queued(obs: Observed, model: SpyreModel, job_name: str) -> Turn | None:
    """The compile queue's answer when this key's Job does not exist: None to start it."""
    if obs.queue is None:
        return None
    created = obs.body["metadata"].get("creationTimestamp", "")
    answer = turn(obs.queue, Want(created, model.namespace, model.name, job_name, model.kind))
    return None if answer.start else answer


def decide(obs: Observed, model: SpyreModel, now: str, settings: Settings) -> Plan:
    """Everything comes in as arguments: what the cluster showed, the parsed spec, the
    time and the operator's settings (the platform, the retention of unused keys)."""
    spec, uid, status = model.spec, obs.uid, obs.status
    weights = obs.weights
    commit = weights_commit(weights)
    weights_ready = not spec.model.from_hub or commit is not None
    sharing = sharing_for(spec, settings.cache_sharing)
    want = desired(model, uid, settings.platform, commit, settings.runtime_images, sharing)
    actions: list[Action] = []
    deferred: list[Action] = []

    if want.pvc is not None and obs.pvc_exists is False:
        actions.append(
            Action(
                "create",
                want.pvc,
                "CreatedCacheVolume",
                f"created PersistentVolumeClaim {spec.cache.volume.claim_name}",
            )
        )

    if want.weights is not None and not obs.inventory:  # an entry's commit is pinned
        name = want.weights["metadata"]["name"]
        hub_model = f"{spec.model.id} at revision {spec.model.hub_revision}"
        actions += _shared_job(
            model,
            uid,
            obs.weights_job,
            want.weights,
            ("CreatedWeightsJob", f"downloading {hub_model} in Job {name}"),
            ("SharedWeightsJob", f"uses Job {name} of another SpyreModel downloading {hub_model}"),
        )

    job = obs.job
    holder: JobView | None = None  # the Job that holds the key in the inventory
    pull = OFF
    key: str | None = None
    failure: Failure | None = None
    queued: Turn | None = None
    cleaning: str | None = None  # the key's clean-up Job, which this one waits for
    cache: CompileSummary | None = None
    if not weights_ready:
        if status.get("cache"):  # of the running Deployment's key
            cache = CompileSummary.model_validate(status["cache"], extra="ignore")
            cache.progress = None  # of a compile this spec no longer waits for
        cache_ready = False
        if weights is not None and weights.state == "Failed":
            failure = Failure(weights.reason or "", weights.message or "")
    else:
        assert want.job is not None
        key = cache_key(spec, commit)
        name = meta.compile_job_name(key)
        holder = key_holder(job, obs.pull_job)
        if holder is not None and holder.cleanup is not None and not obs.inventory:
            cleaning = meta.cleanup_job_name(key)  # never joined: compiled again after it
            cache, cache_ready = CompileSummary(job_name=name, cache_key=key), False
        else:
            cache = cache_summary(key, job, status.get("cache") or {}, now, obs.progress)
            cache_ready = cache.ok is True
        ready_or_cleaning = cache_ready or cleaning is not None
        pull = (
            OFF
            if ready_or_cleaning
            else pull_step(sharing is not None, key, job, obs.pull_job, now)
        )
        if pull.pulled is not None:
            cache, cache_ready = pull.pulled, True
        carry_miss(cache, pull, status.get("cache") or {})
        # From the summary (recorded once the pods were read: they may be gone later).
        if cache.ok is False:
            failure = Failure(cache.reason or "", cache.message or "")
        if job is None and not cache_ready and not pull.wait:
            queued = _queued(obs, model, name)
        if pull.retry:
            assert obs.pull_job is not None and sharing is not None
            cache = pulling(key)
            target, said = retry_action(obs.pull_job, key, model.namespace, sharing.repository)
            actions.append(Action("delete", target, "RetryingPull", said))
        elif pull.wait:
            cache = pulling(key)
            actions += _pull_job(model, obs, want.pull, key, sharing)
        elif (not cache_ready or job is not None) and queued is None and cleaning is None:
            unused = not_used(pull.missed)
            joins = _shared_job(
                model,
                uid,
                job,
                want.job,
                ("CreatedCompileJob", f"compiling cache {short_key(key)} in Job {name}{unused}"),
                ("SharedCompileJob", f"uses Job {name} of another SpyreModel with the same key"),
            )
            actions += joins
        elif pull.pulled is not None:  # a user of the key: an owner of its pull Job
            actions += _pull_job(model, obs, want.pull, key, sharing)
        # Once the Job is seen (its watch event brings this pass: triggers.py), so the
        # pass that creates it writes nothing more before it.
        listing = holder is not None and not obs.inventory and cleaning is None
        if listing and inventory.needs_entry(key, holder):
            entry = inventory.entry_manifest(obs.body, model, key, commit)
            listed = f"SpyreCache {entry['metadata']['name']} lists cache {short_key(key)}"
            deferred.append(Action("create", entry, "CreatedCacheEntry", listed))
    requeue = _sooner(inventory.CLEANUP_POLL_SECONDS if cleaning else None, pull.retry_in)

    if not model.serves:
        cache_cond = cache_condition(model, obs, key, cache, cache_ready, failure, queued, cleaning)
        plan = _compile_only(
            obs, model, actions, key, holder, cache, cache_cond, failure, now, settings
        )
        return replace(plan, requeue_after=_sooner(requeue, plan.requeue_after), deferred=deferred)
    assert want.network_policy is not None and want.service is not None
    deploy = obs.deployment
    if cache_ready or deploy is not None:  # before the Deployment: no pod serves unguarded
        actions += _apply(want.network_policy, obs.network_policy)
    rolling = False
    active_key = deploy.cache_key if deploy is not None else None
    if cache_ready:
        assert key is not None and want.deployment is not None
        if deploy is None or needs_apply(want.deployment, deploy.live):
            rolling = True
            if deploy is None:
                what = ("CreatedDeployment", f"serving from cache {short_key(key)}")
            elif active_key != key:
                what = (
                    "RollingToNewCache",
                    f"rolling Deployment {model.name} from cache "
                    f"{short_key(active_key or '')} to {short_key(key)}",
                )
            else:
                what = ("UpdatedDeployment", f"applied the spec to Deployment {model.name}")
            actions.append(Action("apply", want.deployment, *what))
        active_key = key
    elif deploy is not None:
        keep = serving_while_compiling(obs, model, key)
        replicas = spec.replicas if keep is None else keep
        if deploy.spec_replicas != replicas:
            target = {
                "kind": "Deployment",
                "metadata": {"name": model.name, "namespace": model.namespace},
                "spec": {"replicas": replicas},
            }
            why = ("Scaled", f"scaled Deployment {model.name} to {replicas} replicas")
            if keep is not None:
                why = (
                    "FreedCardsForCompile",
                    f"scaled Deployment {model.name} (cache {short_key(active_key or '')}) "
                    f"to {replicas} of {spec.replicas} replicas: the compile of cache "
                    f"{short_key(key or '')} takes the cards of the others until it is done",
                )
            actions.append(Action("scale", target, *why))

    if active_key is not None:
        actions += _apply(want.service, obs.service)
        actions += _budget(model, want.disruption_budget, obs.disruption_budget)

    conds, phase = model_conditions(
        obs, model, key, cache, cache_ready, failure, rolling, queued, cleaning
    )
    generation = obs.generation
    available = next(c for c in conds if c.type == AVAILABLE).status == "True"
    new_status = SpyreModelStatus(
        observed_generation=generation,
        phase=phase,
        conditions=render_conditions(conds, status.get("conditions") or [], generation, now),
        active_cache_key=active_key,
        target_cache_key=key,
        cache=cache,
        weights=weights,
        replicas=deploy.replicas if deploy else 0,
        ready_replicas=deploy.ready_replicas if deploy else 0,
        replicas_from_cache=sum(1 for s in obs.starts if s.compiled is False) if deploy else 0,
        unschedulable_replicas=len(obs.unschedulable) if deploy else 0,
        selector=meta.selector_string(model.name),
        endpoint=endpoint_url(model) if available else None,
    )
    events = transition_events(status, new_status) + _revision_event(status, weights)
    return Plan(actions, new_status, events, _sooner(requeue, obs.progress_seconds), deferred)


def _sooner(*delays: float | None) -> float | None:
    """The soonest of the re-runs asked for (a clean-up to wait for, a compile's progress
    to read); None: none."""
    asked = [d for d in delays if d is not None]
    return min(asked) if asked else None


def _compile_only(
    obs: Observed,
    model: SpyreModel,
    actions: list[Action],
    key: str | None,
    holder: JobView | None,
    cache: CompileSummary | None,
    cache_cond: Cond,
    failure: Failure | None,
    now: str,
    settings: Settings,
) -> Plan:
    """A SpyreCache: the download and the compile, Ready once the cache is; the key's use
    and, for an inventory entry, its clean-up (reconcile/inventory.py); `holder` is the
    Job that holds the key (its compile's, or the pull's that fetched it)."""
    status, generation = obs.status, obs.generation
    use = inventory.usage(holder, model.name, status, now)
    step = None
    if obs.inventory and key is not None:
        retention = settings.cache_retention_seconds
        step = inventory.cleanup_step(key, holder, obs.cleanup_job, use, retention, now)
        actions = actions + _cleanup_actions(obs, model, holder, step, now, settings)
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
        cache=cache,
        weights=obs.weights,
        runtime=inventory.runtime(model, cache),
        used_by=use.used_by,
        compiled_at=use.compiled_at,
        last_used_at=use.last_used_at,
    )
    events = transition_events(status, new_status) + _revision_event(status, obs.weights)
    again = _sooner(step.requeue_after if step else None, obs.progress_seconds)
    return Plan(actions, new_status, events, again)


def _cleanup_actions(
    obs: Observed,
    model: SpyreModel,
    holder: JobView | None,
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


def decide_invalid(
    body: dict[str, Any], problems: list[Problem], now: str, reason: str = "InvalidSpec"
) -> Plan:
    """An invalid spec (or one the API server refuses, reason Refused): no children are
    touched, the problems are in the conditions."""
    old: dict[str, Any] = body.get("status") or {}
    generation = int(body["metadata"].get("generation", 1))
    message = "; ".join(str(p) for p in problems)
    new_status = SpyreModelStatus.model_validate(old, extra="ignore")
    available = new_status.condition(AVAILABLE)
    conds = [
        Cond(READY, "False", reason, message),
        Cond(CACHE_READY, "Unknown", reason, "the spec is invalid"),
        Cond(
            AVAILABLE,
            available.status if available else "Unknown",
            reason,
            "the spec is invalid; a running Deployment is left as it is",
        ),
        Cond(PROGRESSING, "False", reason, message),
        Cond(DEGRADED, "True", reason, message),
    ]
    new_status.observed_generation = generation
    new_status.phase = "Invalid"
    new_status.conditions = render_conditions(conds, old.get("conditions") or [], generation, now)
    return Plan([], new_status, transition_events(old, new_status))
