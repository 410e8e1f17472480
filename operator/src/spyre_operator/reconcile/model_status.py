"""A SpyreModel's conditions and phase (pure): from what decide found (the cache, the
serving Deployment and its pods, a failure), in the words `kubectl describe` shows; and
the status of a spec that is invalid or that the API server refused."""

from __future__ import annotations

from typing import Any

from spyre_operator.api.known_configs import known_config_warning
from spyre_operator.api.status import (
    AVAILABLE,
    CACHE_READY,
    DEGRADED,
    PROGRESSING,
    READY,
    CompileStatus,
    CompileSummary,
    Phase,
)
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.cache_status import (
    Failure,
    cache_condition,
    image_failure,
    stuck_pod,
    waits,
)
from spyre_operator.reconcile.compile_queue import Turn
from spyre_operator.reconcile.conditions import (
    REPLICA_COMPILED,
    UNSCHEDULABLE,
    Cond,
    render_conditions,
)
from spyre_operator.reconcile.handoff import serving_while_compiling
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.starts import Start
from spyre_operator.render.cachekey import short_key
from spyre_runtime.contract import CACHE_NOT_READY, IMAGE_UNUSABLE


def serving_failure(obs: Observed) -> Failure | None:
    deploy = obs.deployment
    if deploy is None:
        return None
    for issue in obs.pod_issues:
        if issue.reason == CACHE_NOT_READY:
            return Failure(
                "CacheRejected",
                f"serving pod {issue.pod} refused the compiled cache: {issue.message}",
            )
    for issue in obs.pod_issues:
        unusable = issue.fault
        if unusable is not None:
            return Failure(IMAGE_UNUSABLE, f"serving pod {issue.pod}: {unusable}")
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


def model_conditions(
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
    failure = failure or image_failure(obs, key)
    serving_old = deploy is not None and deploy.cache_key not in (None, key) and not cache_ready
    downloading = key is None
    cache_cond = cache_condition(model, obs, key, cache, cache_ready, failure, queued, cleaning)
    ready_of = f"{deploy.ready_replicas if deploy else 0}/{spec.replicas} replicas ready"
    unplaced = (
        f"; {len(obs.unschedulable)} {waits(obs.unschedulable[0])}" if obs.unschedulable else ""
    )
    serving_problem = serving_failure(obs)
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
    elif serving_problem is not None:
        available = Cond(AVAILABLE, "False", serving_problem.reason, serving_problem.message)
    elif obs.unschedulable:
        available = Cond(AVAILABLE, "False", UNSCHEDULABLE, ready_of + unplaced)
    else:
        available = Cond(
            AVAILABLE,
            "False",
            "Starting",
            f"{deploy.ready_replicas if deploy else 0}/{spec.replicas} replicas ready; "
            "serving pods load the compiled graphs",
        )

    failed = failure if failure is not None else serving_problem
    if failed is not None:
        progressing = Cond(PROGRESSING, "False", failed.reason, failed.message)
    elif not cache_ready:
        reason = "Downloading" if downloading else "Queued" if queued else "Compiling"
        reason = reason.replace("ing", "ingNewCache", 1) if serving_old else reason
        reason = "CleaningUp" if cleaning else reason
        reason = UNSCHEDULABLE if cache_cond.reason == UNSCHEDULABLE else reason
        reason = stuck.reason if (stuck := stuck_pod(obs, key)) else reason
        where = ""
        if serving_old and deploy:
            where = f"; Deployment keeps serving cache {short_key(deploy.cache_key or '')}"
            where += _cards_for_compile(obs, model, key)
        progressing = Cond(PROGRESSING, "True", reason, cache_cond.message + where)
    elif obs.unschedulable:  # replicas asked for that no node takes (yet)
        progressing = Cond(PROGRESSING, "True", UNSCHEDULABLE, ready_of + unplaced)
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
    compiled = [s for s in obs.starts if s.compiled]
    if failed is not None:
        degraded = Cond(DEGRADED, "True", failed.reason, failed.message)
    elif compiled:  # it serves, but its start-up paid the compile the cache should save
        degraded = Cond(DEGRADED, "False", REPLICA_COMPILED, _compiled_message(compiled))
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


def _compiled_message(compiled: list[Start]) -> str:
    pods = ", ".join(
        f"{s.pod} ({s.misses} graphs, {s.seconds:.0f}s in torch.compile)" for s in compiled
    )
    return (
        f"warning: serving pods compiled at start-up instead of loading the cache: {pods}; "
        "its key's cache lacks graphs they need (docs/operations.md, compiled at start-up)"
    )


def _cards_for_compile(obs: Observed, model: SpyreModel, key: str | None) -> str:
    """What the compile's cards cost the old key's replicas, or why it waits for them."""
    floor = model.spec.cache.compile.min_serving_replicas
    keep = serving_while_compiling(obs, model, key)
    if keep is not None:
        return (
            f" with {keep} of {model.spec.replicas} replicas until it is compiled: the compile "
            f"has the cards of the others (spec.cache.compile.minServingReplicas {floor})"
        )
    if obs.job is not None and obs.job.unschedulable is not None:
        return (
            f"; no replica above spec.cache.compile.minServingReplicas ({floor}) to free "
            "cards for the compile: lower it, free cards elsewhere, or compile on CPU "
            "(spec.cache.compile.backend sendnn_compile_only, sendnn-inference)"
        )
    return ""


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
    reason = UNSCHEDULABLE if explaining.reason == UNSCHEDULABLE else phase
    return Cond(READY, "False", reason, explaining.message)


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
