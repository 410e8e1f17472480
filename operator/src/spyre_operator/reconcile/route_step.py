"""The route step (pure): spec.routing as an InferencePool of the serving pods, its
endpoint picker and, with a gateway, an HTTPRoute from it (render/router.py); the Routing
condition and status.routing.

The picker's objects are owned by the pool, so they are made once the pool exists (its
uid) and go with it. Removed from the spec, the pool and the route are deleted
(status.routing says they were made); a deleted SpyreModel takes them along (their owner).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spyre_operator.api.status import ROUTING, RoutingStatus
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.conditions import Cond
from spyre_operator.reconcile.drift import needs_apply
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.plan import Action
from spyre_operator.reconcile.routes import Router
from spyre_operator.render.meta import picker_name
from spyre_operator.render.router import http_route, inference_pool, picker_objects

POOLS = "InferencePools (inferencepools.inference.networking.k8s.io, v1)"
ROUTES = "HTTPRoutes (httproutes.gateway.networking.k8s.io, v1)"


@dataclass(frozen=True)
class RouteStep:
    actions: list[Action]
    condition: Cond | None  # None: no spec.routing
    status: RoutingStatus | None


def route_step(obs: Observed, model: SpyreModel, image: str, cluster_role: str) -> RouteStep:
    """`image`, `cluster_role`: the operator's picker image and the ClusterRole its
    RoleBinding grants."""
    routing, found = model.spec.routing, obs.router
    if found is None:
        return RouteStep([], None, None)
    if routing is None:
        gone = [_delete(o, "spec.routing was removed") for o in (found.pool, found.route) if o]
        going = RoutingStatus(
            inference_pool=model.name if found.pool else None,
            http_route=model.name if found.route else None,
        )
        return RouteStep(gone, None, going if gone else None)
    if not found.pools_served:
        return RouteStep([], _not_installed(POOLS, "InferencePoolNotInstalled"), RoutingStatus())
    assert obs.uid
    actions = _applied(inference_pool(model, obs.uid), found.pool, "InferencePool")
    status = RoutingStatus(inference_pool=model.name)
    if found.pool is not None:
        uid = found.pool["metadata"]["uid"]
        objs = picker_objects(model, uid, image, cluster_role)
        if needs_apply(objs[-1], found.picker):
            actions += [_apply(o, found.picker is None) for o in objs]
        status = status.model_copy(update={"endpoint_picker": picker_name(model.name)})
    route = http_route(model, obs.uid)
    if route is None:
        if found.route is not None:
            actions.append(_delete(found.route, "spec.routing.gateway was removed"))
        return RouteStep(actions, _condition(model, found, image), status)
    if not found.routes_served:
        return RouteStep(actions, _not_installed(ROUTES, "GatewayAPINotInstalled"), status)
    actions += _applied(route, found.route, "HTTPRoute")
    status = status.model_copy(update={"http_route": model.name})
    return RouteStep(actions, _condition(model, found, image), status)


def _applied(manifest: dict[str, Any], live: dict[str, Any] | None, kind: str) -> list[Action]:
    if not needs_apply(manifest, live):
        return []
    return [_apply(manifest, live is None)]


def _apply(manifest: dict[str, Any], new: bool) -> Action:
    verb = "Created" if new else "Updated"
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    return Action("apply", manifest, f"{verb}{kind}", f"{verb.lower()} {kind} {name}")


def _delete(live: dict[str, Any], why: str) -> Action:
    kept = ("name", "namespace", "resourceVersion")
    kind = live["kind"]
    me = {"kind": kind, "metadata": {k: live["metadata"][k] for k in kept}}
    return Action("delete", me, f"Deleted{kind}", f"deleted {kind} {me['metadata']['name']}: {why}")


def _condition(model: SpyreModel, found: Router, image: str) -> Cond:
    routing = model.spec.routing
    assert routing is not None
    picker = picker_name(model.name)
    gateway = routing.gateway
    where = f"{gateway.namespace or model.namespace}/{gateway.name}" if gateway else ""
    if gateway is not None and found.gateway is False:
        return Cond(
            ROUTING,
            "False",
            "GatewayNotFound",
            f"Gateway {where} does not exist: create it, or name an existing one in "
            f"spec.routing.gateway (HTTPRoute {model.name} waits for it)",
        )
    refused = _refusal(found.pool) or _refusal(found.route)
    if refused:
        return Cond(ROUTING, "False", "NotAccepted", refused)
    deploy = found.picker
    if deploy is None or not (deploy.get("status") or {}).get("availableReplicas"):
        return Cond(
            ROUTING,
            "False",
            "PickerNotReady",
            f"endpoint picker {picker} ({image}) is not available yet "
            f"(kubectl describe deployment {picker})",
        )
    if gateway is None:
        return Cond(
            ROUTING,
            "True",
            "PoolReady",
            f"InferencePool {model.name} and its endpoint picker {picker} are ready: route to "
            "the pool from an HTTPRoute, or name a Gateway in spec.routing.gateway",
        )
    if not _accepted(found.route):
        return Cond(
            ROUTING,
            "False",
            "WaitingForGateway",
            f"Gateway {where} has not accepted HTTPRoute {model.name} yet (is its controller "
            "running, and does a listener admit routes from this namespace?)",
        )
    return Cond(
        ROUTING,
        "True",
        "Routed",
        f"Gateway {where} routes to InferencePool {model.name} through endpoint picker {picker}",
    )


def _parent_conditions(live: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """(parent's name, condition) of each parent in a pool's or route's status."""
    return [
        (str((p.get("parentRef") or {}).get("name", "?")), c)
        for p in ((live or {}).get("status") or {}).get("parents") or []
        for c in p.get("conditions") or []
    ]


def _refusal(live: dict[str, Any] | None) -> str | None:
    """What a parent (a Gateway) said against the pool or route: Accepted or ResolvedRefs
    False."""
    for parent, c in _parent_conditions(live):
        if c.get("status") == "False" and c.get("type") in ("Accepted", "ResolvedRefs"):
            assert live is not None
            detail = c.get("message") or c.get("reason", "")
            what = f"{live.get('kind', '')} {live['metadata']['name']}"
            return f"Gateway {parent} on {what}: {c['type']} False: {detail}"
    return None


def _accepted(live: dict[str, Any] | None) -> bool:
    return any(
        c.get("type") == "Accepted" and c.get("status") == "True"
        for _, c in _parent_conditions(live)
    )


def _not_installed(what: str, reason: str) -> Cond:
    crds = (
        "the Gateway API Inference Extension's CRDs (v1.x)"
        if reason == "InferencePoolNotInstalled"
        else "the Gateway API's standard CRDs and a Gateway controller"
    )
    return Cond(
        ROUTING,
        "False",
        reason,
        f"the API server does not serve {what}: install {crds} (docs/install.md, Routing); "
        "until then the model is reached through its Service only",
    )
