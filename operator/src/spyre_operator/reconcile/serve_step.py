"""The serve step (pure): a SpyreModel's NetworkPolicy, Deployment, Service and
PodDisruptionBudget. A new key keeps the running Deployment on its old cache
(activeCacheKey) until the new compile succeeds, then rolls it; while the compile takes
cards the Deployment may hold, it is scaled down to free them (handoff.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spyre_operator.api.status import AVAILABLE, SpyreModelStatus
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.autoscale_step import AutoscaleStep
from spyre_operator.reconcile.compile_step import CompileStep
from spyre_operator.reconcile.conditions import render_conditions, transition_events
from spyre_operator.reconcile.drift import needs_apply
from spyre_operator.reconcile.handoff import serving_while_compiling
from spyre_operator.reconcile.model_status import model_conditions
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.plan import Action, Plan, apply_child, sooner
from spyre_operator.reconcile.route_step import RouteStep
from spyre_operator.reconcile.weights_step import revision_event
from spyre_operator.render import meta
from spyre_operator.render.cachekey import short_key
from spyre_operator.render.children import Desired
from spyre_operator.render.serving import endpoint_url


@dataclass(frozen=True)
class ServeStep:
    actions: list[Action]
    rolling: bool  # the Deployment is applied a new spec (or cache) this pass
    active_key: str | None  # the key the Deployment serves from


def serve_step(obs: Observed, model: SpyreModel, want: Desired, cache: CompileStep) -> ServeStep:
    assert want.network_policy is not None and want.service is not None
    deploy, key = obs.deployment, cache.key
    actions: list[Action] = []
    if cache.ready or deploy is not None:  # before the Deployment: no pod serves unguarded
        actions += apply_child(want.network_policy, obs.network_policy)
    rolling = False
    active_key = deploy.cache_key if deploy is not None else None
    if cache.ready:
        assert key is not None and want.deployment is not None
        if deploy is None or needs_apply(want.deployment, deploy.live):
            rolling = True
            what = _rollout(model, deploy is None, active_key, key)
            actions.append(Action("apply", want.deployment, *what))
        active_key = key
    elif deploy is not None:
        actions += _scale(obs, model, key, active_key)
    if active_key is not None:
        actions += apply_child(want.service, obs.service)
        actions += _budget(model, want.disruption_budget, obs.disruption_budget)
    return ServeStep(actions, rolling, active_key)


def _rollout(model: SpyreModel, new: bool, active_key: str | None, key: str) -> tuple[str, str]:
    """The Event of applying the Deployment (`new`: it does not exist yet)."""
    if new:
        return "CreatedDeployment", f"serving from cache {short_key(key)}"
    if active_key != key:
        return (
            "RollingToNewCache",
            f"rolling Deployment {model.name} from cache {short_key(active_key or '')} to "
            f"{short_key(key)}",
        )
    return "UpdatedDeployment", f"applied the spec to Deployment {model.name}"


def _scale(obs: Observed, model: SpyreModel, key: str | None, active: str | None) -> list[Action]:
    """The Deployment keeps its old cache while the new key is not ready: the spec's
    replicas, or fewer while the compile takes the cards of the others."""
    assert obs.deployment is not None
    spec = model.spec
    keep = serving_while_compiling(obs, model, key)
    replicas = spec.replicas if keep is None else keep
    if obs.deployment.spec_replicas == replicas:
        return []
    target = {
        "kind": "Deployment",
        "metadata": {"name": model.name, "namespace": model.namespace},
        "spec": {"replicas": replicas},
    }
    why = ("Scaled", f"scaled Deployment {model.name} to {replicas} replicas")
    if keep is not None:
        why = (
            "FreedCardsForCompile",
            f"scaled Deployment {model.name} (cache {short_key(active or '')}) to {replicas} "
            f"of {spec.replicas} replicas: the compile of cache {short_key(key or '')} takes "
            "the cards of the others until it is done",
        )
    return [Action("scale", target, *why)]


def _budget(
    model: SpyreModel, want: dict[str, Any] | None, live: dict[str, Any] | None
) -> list[Action]:
    """The PodDisruptionBudget of 2 or more replicas (a drain takes one at a time), gone
    below 2 (a budget of one replica would block a drain for ever, or allow it anyway)."""
    if want is not None:
        return apply_child(want, live)
    if live is None:
        return []
    me = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": model.name, "namespace": model.namespace},
    }
    said = f"deleted PodDisruptionBudget {model.name}: {model.spec.replicas} replica(s)"
    return [Action("delete", me, "DeletedPodDisruptionBudget", said)]


def model_plan(
    obs: Observed,
    model: SpyreModel,
    actions: list[Action],
    cache: CompileStep,
    serve: ServeStep,
    now: str,
    scale: AutoscaleStep,
    route: RouteStep,
) -> Plan:
    """A SpyreModel's plan: the steps' actions, its status and the Events of its changes."""
    status, deploy, key = obs.status, obs.deployment, cache.key
    conds, phase = model_conditions(
        obs,
        model,
        key,
        cache.cache,
        cache.ready,
        cache.failure,
        serve.rolling,
        cache.queued,
        cache.cleaning,
    )
    conds += [c for c in (scale.condition, route.condition) if c]
    generation = obs.generation
    available = next(c for c in conds if c.type == AVAILABLE).status == "True"
    new_status = SpyreModelStatus(
        observed_generation=generation,
        phase=phase,
        conditions=render_conditions(conds, status.get("conditions") or [], generation, now),
        active_cache_key=serve.active_key,
        target_cache_key=key,
        cache=cache.cache,
        weights=obs.weights,
        replicas=deploy.replicas if deploy else 0,
        ready_replicas=deploy.ready_replicas if deploy else 0,
        replicas_from_cache=sum(1 for s in obs.starts if s.compiled is False) if deploy else 0,
        unschedulable_replicas=len(obs.unschedulable) if deploy else 0,
        selector=meta.selector_string(model.name),
        endpoint=endpoint_url(model) if available else None,
        autoscaling=scale.status,
        routing=route.status,
    )
    events = transition_events(status, new_status) + revision_event(status, obs.weights)
    again = sooner(cache.requeue_after, obs.progress_seconds)
    return Plan(actions, new_status, events, again, cache.deferred)
