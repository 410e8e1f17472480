"""The decision (pure): observed cluster state + parsed spec -> actions, status, events.

One step after the other, each a pure function with a result of its own: the weights
(weights_step.py: the cache volume, a hub model's download, which resolves its revision
to a commit) -> the compile (compile_step.py: the cache of the spec's key, pulled from the
cache registry first, pull.py, else compiled once the compile queue gives it a turn) ->
the serving objects (serve_step.py) -> the autoscaler of spec.autoscaling
(autoscale_step.py) -> the routing of spec.routing (route_step.py), or, for a SpyreCache,
its use and clean-up (spyrecache_step.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from spyre_operator.api.problem import Problem
from spyre_operator.api.status import (
    AVAILABLE,
    CACHE_READY,
    DEGRADED,
    PROGRESSING,
    READY,
    SpyreModelStatus,
)
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.autoscale_step import autoscale_step
from spyre_operator.reconcile.compile_step import compile_step
from spyre_operator.reconcile.conditions import Cond, render_conditions, transition_events
from spyre_operator.reconcile.observe import Observed, object_ref
from spyre_operator.reconcile.plan import Plan, starts_job
from spyre_operator.reconcile.route_step import route_step
from spyre_operator.reconcile.serve_step import model_plan, serve_step
from spyre_operator.reconcile.spyrecache_step import spyrecache_plan
from spyre_operator.reconcile.weights_status import weights_commit
from spyre_operator.reconcile.weights_step import weights_step
from spyre_operator.render.children import desired
from spyre_operator.render.sharing import sharing_for
from spyre_operator.settings import Settings


def decide(obs: Observed, model: SpyreModel, now: str, settings: Settings) -> Plan:
    """Everything comes in as arguments: what the cluster showed (with the spec's cache
    key, observe's), the parsed spec, the time and the operator's settings (the platform,
    the images, the cache registry, the retention of unused keys)."""
    sharing = sharing_for(model.spec, settings.cache_sharing)
    commit = weights_commit(obs.weights)
    images = settings.runtime_images
    want = desired(model, obs.uid, settings.platform, commit, images, sharing, obs.key)
    weights = weights_step(obs, model, want)
    cache = compile_step(obs, model, want, weights, sharing, now)
    actions = weights.actions + cache.actions
    if not model.serves:
        return answered(obs, spyrecache_plan(obs, model, actions, cache, settings, now), now)
    serve = serve_step(obs, model, want, cache)
    scale = autoscale_step(obs, model, want, cache.key, cache.ready, settings.prometheus_address)
    route = route_step(obs, model, settings.picker_image, settings.picker_cluster_role)
    actions += serve.actions + scale.actions + route.actions
    return answered(obs, model_plan(obs, model, actions, cache, serve, now, scale, route), now)


def answered(obs: Observed, plan: Plan, now: str) -> Plan:
    """The plan as the facts read for it say (Observed.refusal and .later): a spec whose
    children the API server refuses starts no Job (Invalid, Refused); the deferred actions
    of a kind not served are left out, all of them wait while a reconcile a trigger asked
    for does, and one made already (it has not joined the Job yet) is not made again."""
    if obs.refusal is not None and starts_job(plan):
        return decide_invalid(obs.body, [Problem("", obs.refusal)], now, reason="Refused")
    later = obs.later
    if later is None or not plan.deferred:
        return plan
    wanted = [a for a in plan.deferred if a.obj["kind"] not in later.unserved]
    if wanted and later.busy:
        return replace(plan, deferred=[], later=True)
    return replace(plan, deferred=[a for a in wanted if object_ref(a.obj) not in later.exist])


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
