"""spec.routing: the model's serving pods as a Gateway API Inference Extension
`InferencePool` with its endpoint picker, and an `HTTPRoute` from a Gateway the user names
(the operator makes them: reconcile/route_step.py, render/router.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from spyre_operator.api.base import DNS_LABEL, ApiModel, ObjectName

FIELD = "spec.routing"
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
# The Gateway API's Hostname: a DNS name, its first label may be a wildcard.
HOSTNAME = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
Hostname = Annotated[str, Field(min_length=1, max_length=253, pattern=HOSTNAME)]


class GatewayRef(ApiModel):
    """A Gateway (gateway.networking.k8s.io/v1) whose listener admits this namespace's
    routes."""

    name: ObjectName
    """The Gateway's name."""
    namespace: DnsLabel | None = None
    """Its namespace; unset: the SpyreModel's."""
    section_name: DnsLabel | None = None
    """One listener of the Gateway (its name); unset: every listener that admits the
    route."""
    hostnames: Annotated[list[Hostname], Field(max_length=16)] = Field(default_factory=list)
    """Host headers the route answers (the HTTPRoute's hostnames); unset: every host the
    listener takes. Two models on one listener need hostnames (or listeners) of their
    own: each route sends every path to its pool."""


class Routing(ApiModel):
    """Requests routed by each serving pod's load and prefix cache: the operator makes an
    InferencePool of the serving pods, its endpoint picker (a Deployment, Service and
    ServiceAccount), and with a gateway an HTTPRoute that sends the Gateway's requests to
    the pool (the Routing condition says how far it got)."""

    gateway: GatewayRef | None = None
    """The Gateway to route from; unset: the pool and its picker only (for routes of your
    own)."""
    failure_mode: Literal["FailOpen", "FailClose"] = "FailOpen"
    """When the picker does not answer: the gateway picks a serving pod itself (FailOpen)
    or refuses the request (FailClose)."""
