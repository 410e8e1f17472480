"""What the route step reads of spec.routing's objects: whether the API server serves
InferencePools and HTTPRoutes (a 404 without details: the CRD is not installed), the
model's pool, route and endpoint picker, and whether the named Gateway exists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spyre_operator.api.routing import GatewayRef
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.render.meta import picker_name


@dataclass(frozen=True)
class Router:
    pools_served: bool
    pool: dict[str, Any] | None
    picker: dict[str, Any] | None  # the picker's Deployment
    routes_served: bool = True  # True too when no route was read
    route: dict[str, Any] | None = None
    gateway: bool | None = None  # the Gateway exists; None: not read, or not readable


def _read(kube: Kube, kind: str, namespace: str, name: str) -> tuple[bool, dict[str, Any] | None]:
    """(is the kind served, the object or None)."""
    try:
        return True, kube.request("GET", kube.path(kind, namespace, name))
    except ApiError as err:
        if not err.not_found:
            raise
        return not err.kind_unserved, None


def read_router(
    kube: Kube, namespace: str, name: str, gateway: GatewayRef | None, routed: bool
) -> Router:
    """`gateway`: spec.routing.gateway; `routed`: status says an HTTPRoute was made (it is
    read until it is gone)."""
    pools_served, pool = _read(kube, "InferencePool", namespace, name)
    picker = kube.get("Deployment", namespace, picker_name(name))
    if gateway is None and not routed:
        return Router(pools_served, pool, picker)
    routes_served, route = _read(kube, "HTTPRoute", namespace, name)
    exists = None
    if gateway is not None and routes_served:
        try:
            found = kube.get("Gateway", gateway.namespace or namespace, gateway.name)
            exists = found is not None
        except ApiError as err:
            if err.status != 403:  # a Gateway in a namespace the operator may not read
                raise
    return Router(pools_served, pool, picker, routes_served, route, exists)
