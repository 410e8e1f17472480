"""The decision (pure): observed cluster state + parsed spec -> actions, status, events.

The flow: cache PVC -> (hub models) the weights Job, which downloads the model into the
volume and resolves its revision to a commit -> compile Job of the spec's cache key ->
serving Deployment and Service once that key's cache is ready. A new key keeps the
running Deployment on its old cache (activeCacheKey) until the new compile succeeds,
then rolls it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kubernetes.utils.quantity import parse_quantity

from spyre_operator.api.known_configs import known_config_warning
from spyre_operator.api.names import KIND
from spyre_operator.api.problem import Problem
from spyre_operator.api.status import (
    AVAILABLE,
    CACHE_READY,
    DEGRADED,
    PROGRESSING,
    READY,
    CompileProgress,
    CompileStatus,
    CompileSummary,
    Phase,
    SpyreCacheStatus,
    SpyreModelStatus,
    WeightsSummary,
)
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile import inventory, options
from spyre_operator.reconcile.compiles import Turn, Want, turn
from spyre_operator.reconcile.conditions import (
    Cond,
    Event,
    clip,
    render_conditions,
    tail,
    transition_events,
)
from spyre_operator.reconcile.observe import JobView, Observed
from spyre_operator.reconcile.progress import Reading
from spyre_operator.reconcile.weights import weights_commit
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key, short_key
from spyre_operator.render.children import build_cleanup_job, desired, endpoint_url
from spyre_runtime.contract import CACHE_NOT_READY

TAIL_LINES = 5
PROGRESS_DETAIL_LIMIT = 300  # the warmup step's detail holds the whole vllm command line
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")

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


@dataclass(frozen=True)
class Failure:
    reason: str
    message: str


# ----- child manifests ---------------------------------------------------------------
def _same_scalar(want: Any, have: Any) -> bool:
    if want == have:
        return True
    if isinstance(want, bool) or isinstance(have, bool):
        return False
    if isinstance(want, int | str) and isinstance(have, int | str):
        try:  # quantities: "2000m" is stored as "2"
            return bool(parse_quantity(want) == parse_quantity(have))
        except ValueError:
            return False
    return False


def differs(want: Any, have: Any) -> bool:
    """True when `have` lacks or changed something `want` sets. Extra fields, and extra
    items in lists of objects (env, volumes, tolerations, ...), are fine: the API server
    adds defaults, and server-side apply leaves what other field managers set alone."""
    if isinstance(want, dict):
        return not isinstance(have, dict) or any(differs(v, have.get(k)) for k, v in want.items())
    if not isinstance(want, list):
        return not _same_scalar(want, have)
    if not isinstance(have, list):
        return True
    if want and all(isinstance(w, dict) for w in want):
        return any(all(differs(w, h) for h in have) for w in want)
    return len(want) != len(have) or any(
        not _same_scalar(w, h) for w, h in zip(want, have, strict=True)
    )


def needs_apply(manifest: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Anything to write? The manifest's hash annotation changes with every change of the
    desired object (removed fields too); the rest catches edits of the live object."""
    if live is None:
        return True
    return differs({"metadata": manifest["metadata"], "spec": manifest["spec"]}, live)


# ----- compile outcome -----------------------------------------------------------------
def compile_failure(job: JobView) -> Failure:
    """Why the compile Job failed, and what to do about it."""
    retry = (
        f" To retry the same configuration delete the Job (kubectl delete job {job.name}); "
        "a spec change that changes the cache key starts a new compile."
    )
    done = job.terminated
    summary = done.summary if done else None
    if done is not None and done.reason == "OOMKilled":
        return Failure(
            "OOMKilled",
            f"the compile pod {done.pod} ran out of memory (OOMKilled, exit code "
            f"{done.exit_code}): raise spec.cache.compile.resources.limits.memory." + retry,
        )
    if job.failed_reason == "DeadlineExceeded":
        return Failure(
            "DeadlineExceeded",
            f"Job {job.name} ran longer than its activeDeadlineSeconds "
            f"({job.active_deadline_seconds}s): raise spec.cache.compile.activeDeadlineSeconds."
            + retry,
        )
    if summary is not None and summary.get("ok") is False:
        reason = str(summary.get("reason") or "CompileFailed")
        reason = reason if _REASON.match(reason) else "CompileFailed"
        return Failure(reason, f"{summary.get('message', '')}".strip() + "." + retry)
    if done is not None:
        lines = tail(done.message, TAIL_LINES) or "(no termination message)"
        return Failure(
            "CompileFailed",
            f"the compile pod {done.pod} exited with code {done.exit_code} ({done.reason}): "
            f"{lines}." + retry,
        )
    detail = job.failed_message or job.failed_reason or "failed"
    return Failure("CompileFailed", f"Job {job.name}: {detail}." + retry)


def compile_progress(reading: Reading | None) -> CompileProgress | None:
    if reading is None:
        return None
    step = reading.step
    return CompileProgress(
        step=step.name,
        elapsed_seconds=step.elapsed,
        detail=clip(step.detail, PROGRESS_DETAIL_LIMIT) or None,
        pod=reading.pod,
    )


def duration(seconds: float) -> str:
    """4m12s, 1h05m, 42s."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def cache_summary(
    key: str, job: JobView | None, recorded: dict[str, Any], progress: Reading | None = None
) -> CompileSummary:
    """status.cache for the target key: the Job's termination summary once it finished,
    its progress while it runs. `recorded` is the stored status.cache."""
    stored = CompileSummary.model_validate(recorded, extra="ignore")
    if job is None:
        if stored.cache_key == key and stored.ok:
            return stored  # compiled earlier; the Job was deleted since
        return CompileSummary(job_name=meta.compile_job_name(key), cache_key=key)
    if not (job.succeeded or job.failed):
        return CompileSummary(job_name=job.name, cache_key=key, progress=compile_progress(progress))
    if stored.job_name == job.name and stored.ok is job.succeeded:
        return stored  # the pods may be gone by now; keep what was read from them
    if job.succeeded:
        said = (job.terminated.summary if job.terminated else None) or {"ok": True}
        return CompileSummary(
            job_name=job.name,
            cache_key=key,
            ok=True,
            seconds=said.get("seconds"),
            versions=said.get("versions"),
            bytes=said.get("bytes"),
        )
    failure = compile_failure(job)
    return CompileSummary(
        job_name=job.name,
        cache_key=key,
        ok=False,
        reason=failure.reason,
        message=clip(failure.message, 2000),
    )


# ----- the decision --------------------------------------------------------------------
def _serving_failure(obs: Observed) -> Failure | None:
    deploy = obs.deployment
    if deploy is None:
        return None
    for issue in obs.pod_issues:
        if issue.reason == CACHE_NOT_READY:
            return Failure(
                "CacheRejected",
                f"serving pod {issue.pod} refused the compiled cache: {issue.message}",
            )
    progressing = deploy.condition("Progressing")
    if progressing[0] == "False" and progressing[1] == "ProgressDeadlineExceeded":
        return Failure(
            "ProgressDeadlineExceeded",
            f"Deployment {deploy.live['metadata']['name']}: {progressing[2]}",
        )
    replica_failure = deploy.condition("ReplicaFailure")
    if replica_failure[0] == "True":
        return Failure("ReplicaFailure", replica_failure[2] or replica_failure[1])
    if obs.pod_issues:
        issue = obs.pod_issues[0]
        message = f"serving pod {issue.pod}: {issue.reason}"
        return Failure(issue.reason, message + (f": {issue.message}" if issue.message else ""))
    return None


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


def _apply(want: dict[str, Any], live: dict[str, Any] | None) -> list[Action]:
    """Server-side apply of an owned child (Service, NetworkPolicy) when it differs."""
    if not needs_apply(want, live):
        return []
    kind, name = want["kind"], want["metadata"]["name"]
    if live is None:
        return [Action("apply", want, f"Created{kind}", f"created {kind} {name}")]
    return [Action("apply", want, f"Updated{kind}", f"applied the spec to {kind} {name}")]


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


def decide(obs: Observed, model: SpyreModel, now: str) -> Plan:
    spec, uid, status = model.spec, obs.uid, obs.status
    weights = obs.weights
    commit = weights_commit(weights)
    weights_ready = not spec.model.from_hub or commit is not None
    want = desired(model, uid, options.platform(), commit, options.runtime_images())
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
        if job is not None and job.cleanup is not None and not obs.inventory:
            cleaning = meta.cleanup_job_name(key)  # never joined: compiled again after it
            cache, cache_ready = CompileSummary(job_name=name, cache_key=key), False
        else:
            cache = cache_summary(key, job, status.get("cache") or {}, obs.progress)
            cache_ready = cache.ok is True
        # From the summary (recorded once the pods were read: they may be gone later).
        if cache.ok is False:
            failure = Failure(cache.reason or "", cache.message or "")
        if job is None and not cache_ready:
            queued = _queued(obs, model, name)
        if (not cache_ready or job is not None) and queued is None and cleaning is None:
            joins = _shared_job(
                model,
                uid,
                job,
                want.job,
                ("CreatedCompileJob", f"compiling cache {short_key(key)} in Job {name}"),
                ("SharedCompileJob", f"uses Job {name} of another SpyreModel with the same key"),
            )
            actions += joins
            # Once the Job is seen (its watch event brings this pass: triggers.py), so the
            # pass that creates it writes nothing more before it.
            if job is not None and not obs.inventory and inventory.needs_entry(key, job):
                entry = inventory.entry_manifest(obs.body, model, key, commit)
                listed = f"SpyreCache {entry['metadata']['name']} lists cache {short_key(key)}"
                deferred.append(Action("create", entry, "CreatedCacheEntry", listed))
    requeue = inventory.CLEANUP_POLL_SECONDS if cleaning else None

    if not model.serves:
        cache_cond = _cache_condition(
            model, key, cache, cache_ready, failure, queued, weights, cleaning
        )
        plan = _compile_only(obs, model, actions, key, cache, cache_cond, failure, now)
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
    elif deploy is not None and deploy.spec_replicas != spec.replicas:
        target = {
            "kind": "Deployment",
            "metadata": {"name": model.name, "namespace": model.namespace},
            "spec": {"replicas": spec.replicas},
        }
        actions.append(
            Action(
                "scale",
                target,
                "Scaled",
                f"scaled Deployment {model.name} to {spec.replicas} replicas",
            )
        )

    if active_key is not None:
        actions += _apply(want.service, obs.service)

    conds, phase = _conditions(
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
    cache: CompileSummary | None,
    cache_cond: Cond,
    failure: Failure | None,
    now: str,
) -> Plan:
    """A SpyreCache: the download and the compile, Ready once the cache is; the key's use
    and, for an inventory entry, its clean-up (reconcile/inventory.py)."""
    status, generation = obs.status, obs.generation
    use = inventory.usage(obs.job, model.name, status, now)
    step = None
    if obs.inventory and key is not None:
        retention = options.cache_retention()
        step = inventory.cleanup_step(key, obs.job, obs.cleanup_job, use, retention, now)
        actions = actions + _cleanup_actions(obs, model, step, now)
    phase: Phase
    if step is not None and step.step == "Failed":
        failure = Failure("CleanupFailed", step.message)
        phase, ready = "Failed", Cond(READY, "False", failure.reason, failure.message)
    elif step is not None and step.step in ("Start", "Running", "Done"):
        phase, ready = "CleaningUp", Cond(READY, "False", "CleaningUp", step.message)
        cache_cond = Cond(CACHE_READY, "False", "CleaningUp", step.message)
    elif cache_cond.status == "True":
        phase, ready = "Ready", Cond(READY, "True", "Compiled", cache_cond.message)
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
    obs: Observed, model: SpyreModel, step: inventory.Cleanup, now: str
) -> list[Action]:
    """Mark the compile Job and create the clean-up Job (Start), or go (Done)."""
    if step.step == "Done":
        me = {"kind": model.kind, "metadata": {"name": model.name, "namespace": model.namespace}}
        return [Action("delete", me, "CleanedUp", step.message)]
    if step.step != "Start":
        return []
    assert obs.job is not None
    out = []
    if obs.job.cleanup is None:
        target = {
            "kind": "Job",
            "metadata": {
                "name": obs.job.name,
                "namespace": model.namespace,
                "resourceVersion": obs.job.resource_version,
                "annotations": {meta.CLEANUP_ANNOTATION: now},
            },
        }
        out.append(Action("mark", target, "MarkedForCleanup", step.message))
    commit = weights_commit(obs.weights)
    job = build_cleanup_job(model, obs.uid, options.platform(), commit, options.runtime_images())
    name = job["metadata"]["name"]
    out.append(Action("create", job, "CreatedCleanupJob", f"{step.message} (Job {name})"))
    return out


def _cache_condition(
    model: SpyreModel,
    key: str | None,
    cache: CompileSummary | None,
    cache_ready: bool,
    failure: Failure | None,
    queued: Turn | None,
    weights: WeightsSummary | None,
    cleaning: str | None = None,
) -> Cond:
    """CacheReady: compiled, failed, or on its way (downloading, queued, compiling, or
    waiting for the key's clean-up to finish before compiling it again)."""
    spec = model.spec
    if cache_ready:
        assert key is not None and cache is not None
        took = f" in {cache.seconds:.0f}s" if cache.seconds is not None else ""
        cache_cond = Cond(
            CACHE_READY,
            "True",
            "Compiled",
            f"cache {short_key(key)} compiled by Job {cache.job_name}{took}",
        )
    elif failure is not None:
        cache_cond = Cond(CACHE_READY, "False", failure.reason, failure.message)
    elif key is None:
        job = weights.job_name if weights else None
        cache_cond = Cond(
            CACHE_READY,
            "False",
            "Downloading",
            f"Job {job} is downloading {spec.model.id} at revision "
            f"{spec.model.hub_revision} into the cache volume; the compile follows",
        )
    elif cleaning is not None:
        assert key is not None
        cache_cond = Cond(
            CACHE_READY,
            "False",
            "CleaningUp",
            f"Job {cleaning} is removing the unused cache {short_key(key)} from the volume; "
            "it is compiled again once that finished",
        )
    elif queued is not None:
        assert key is not None
        cache_cond = Cond(
            CACHE_READY,
            "False",
            "Queued",
            f"the compile of cache {short_key(key)} waits for a free slot: {queued.message}",
        )
    else:
        assert key is not None
        progress = cache.progress if cache is not None else None
        cache_cond = Cond(
            CACHE_READY,
            "False",
            "Compiling",
            f"Job {meta.compile_job_name(key)} is compiling cache {short_key(key)}"
            + (f": {progress_message(progress)}" if progress is not None else ""),
        )
    return cache_cond


def progress_message(progress: CompileProgress) -> str:
    """step engine at 4m12s (still running: [WARMUP] (2/3) ...)"""
    detail = f" ({progress.detail})" if progress.detail else ""
    return f"step {progress.step} at {duration(progress.elapsed_seconds)}{detail}"


def _conditions(
    obs: Observed,
    model: SpyreModel,
    key: str | None,
    cache: CompileSummary | None,
    cache_ready: bool,
    failure: Failure | None,
    rolling: bool,
    queued: Turn | None,
    cleaning: str | None,
) -> tuple[list[Cond], Phase]:
    deploy, spec = obs.deployment, model.spec
    serving_old = deploy is not None and deploy.cache_key not in (None, key) and not cache_ready
    downloading = key is None
    cache_cond = _cache_condition(
        model, key, cache, cache_ready, failure, queued, obs.weights, cleaning
    )
    serving_failure = _serving_failure(obs)
    if deploy is None and not cache_ready:
        available = Cond(
            AVAILABLE,
            "False",
            "WaitingForCache",
            "the serving Deployment is created once the cache is compiled"
            + (" (after the weights are downloaded)" if downloading else ""),
        )
    elif spec.replicas == 0:
        available = Cond(AVAILABLE, "False", "ScaledToZero", "spec.replicas is 0")
    elif deploy and deploy.condition("Available")[0] == "True" and deploy.ready_replicas > 0:
        available = Cond(
            AVAILABLE,
            "True",
            "MinimumReplicasAvailable",
            f"{deploy.ready_replicas}/{spec.replicas} replicas ready",
        )
    elif serving_failure is not None:
        available = Cond(AVAILABLE, "False", serving_failure.reason, serving_failure.message)
    else:
        available = Cond(
            AVAILABLE,
            "False",
            "Starting",
            f"{deploy.ready_replicas if deploy else 0}/{spec.replicas} replicas ready; "
            "serving pods load the compiled graphs",
        )

    failed = failure if failure is not None else serving_failure
    if failed is not None:
        progressing = Cond(PROGRESSING, "False", failed.reason, failed.message)
    elif not cache_ready:
        reason = "Downloading" if downloading else "Queued" if queued else "Compiling"
        reason = reason.replace("ing", "ingNewCache", 1) if serving_old else reason
        reason = "CleaningUp" if cleaning else reason
        where = (
            f"; Deployment keeps serving cache {short_key(deploy.cache_key or '')}"
            if (serving_old and deploy)
            else ""
        )
        progressing = Cond(PROGRESSING, "True", reason, cache_cond.message + where)
    elif rolling or deploy is None or not deploy.rolled_out:
        progressing = Cond(
            PROGRESSING,
            "True",
            "RollingOut",
            f"Deployment {model.name} is rolling out cache {short_key(key or '')}",
        )
    else:
        progressing = Cond(PROGRESSING, "False", "Complete", "every replica runs the current spec")

    warning = known_config_warning(spec)
    if failed is not None:
        degraded = Cond(DEGRADED, "True", failed.reason, failed.message)
    elif warning:
        degraded = Cond(DEGRADED, "False", "UnknownConfig", f"warning: {warning}")
    else:
        degraded = Cond(DEGRADED, "False", "AsExpected", "no failures")

    is_available = available.status == "True"
    phase: Phase
    if failure is not None and not is_available:
        phase = "Failed"
    elif failed is not None:
        phase = "Degraded"
    elif not cache_ready:
        phase = "Downloading" if downloading else "Compiling"
    elif spec.replicas == 0:
        phase = "ScaledToZero"
    elif not is_available:
        phase = "Starting"
    else:
        phase = "Ready"
    ready = _ready(phase, [cache_cond, available, progressing, degraded])
    return [ready, cache_cond, available, progressing, degraded], phase


def _ready(phase: Phase, conds: list[Cond]) -> Cond:
    """True once the current spec is served and rolled out; else why not, in the words of
    the condition that explains it."""
    by_type = {c.type: c for c in conds}
    progressing, degraded = by_type[PROGRESSING], by_type[DEGRADED]
    if phase == "Ready" and progressing.status == "False":
        return Cond(READY, "True", "Serving", by_type[AVAILABLE].message)
    if phase in ("Failed", "Degraded"):
        return Cond(READY, "False", degraded.reason, degraded.message)
    if phase == "Ready":
        return Cond(READY, "False", progressing.reason, progressing.message)
    if phase == "ScaledToZero":
        return Cond(READY, "False", "ScaledToZero", "spec.replicas is 0")
    explaining = by_type[AVAILABLE] if phase == "Starting" else by_type[CACHE_READY]
    return Cond(READY, "False", phase, explaining.message)


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


def with_apply_failure(
    status: CompileStatus, old: dict[str, Any], message: str, now: str
) -> CompileStatus:
    """`status` (as decided) when the API server refused a child, e.g. an invalid manifest.
    `old` is the stored status, for lastTransitionTime."""
    kept = [
        Cond(c.type, c.status, c.reason, c.message)
        for c in status.conditions
        if c.type not in (DEGRADED, PROGRESSING, READY)
    ]
    conds = [
        *kept,
        Cond(READY, "False", "ApplyFailed", message),
        Cond(PROGRESSING, "False", "ApplyFailed", message),
        Cond(DEGRADED, "True", "ApplyFailed", message),
    ]
    generation = status.observed_generation
    assert generation is not None  # decide sets it
    failed = status.model_copy()
    failed.phase = "Degraded"
    failed.conditions = render_conditions(conds, old.get("conditions") or [], generation, now)
    return failed
