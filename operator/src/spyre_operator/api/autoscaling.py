"""spec.autoscaling: the replicas an autoscaler gives a SpyreModel on vLLM's own load (the
operator makes a KEDA ScaledObject of it: reconcile/autoscale_step.py; its rules are in
autoscaling_rules.py).

What each target measures is vLLM's metric summed over the model's replicas (the queries
are in render/autoscaler.py): the autoscaler keeps the sum per replica near the target.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from spyre_operator.api.base import ApiModel

Metric = Literal["waitingRequests", "kvCacheUsagePercent"]
FIELD = "spec.autoscaling"
DEFAULT_WAITING = 4  # waiting requests per replica when no target is set


class AutoscalingTarget(ApiModel):
    """The load per replica the autoscaler keeps: exactly one of the two."""

    waiting_requests: Annotated[int, Field(ge=1, le=10_000)] | None = None
    """Requests waiting in vLLM's queue per replica (vllm:num_requests_waiting): one
    replica more for each this many."""
    kv_cache_usage_percent: Annotated[int, Field(ge=1, le=100)] | None = None
    """Percent of the KV cache in use per replica (vllm:kv_cache_usage_perc); continuous
    batching with chunked prefill only (the only mode where vLLM-Spyre measures it)."""


class Autoscaling(ApiModel):
    """Replicas by vLLM's load: the operator makes a KEDA ScaledObject that scales this
    SpyreModel (its scale subresource) between minReplicas and maxReplicas; the autoscaler
    then owns spec.replicas (leave it out of manifests kept in Git)."""

    min_replicas: Annotated[int, Field(ge=0, le=1000)] = 1
    """Fewest replicas; 0 scales an idle model to zero (no request wakes it yet:
    docs/install.md, Autoscaling)."""
    max_replicas: Annotated[int, Field(ge=1, le=1000)]
    """Most replicas; the operator gives the autoscaler no more than the nodes' cards hold
    (status.autoscaling)."""
    target: AutoscalingTarget | None = None
    """The load per replica; unset: 4 waiting requests."""
    scale_down_delay_seconds: Annotated[int, Field(ge=0, le=86_400)] = 300
    """How long the load must stay low before a replica goes (and before the last one
    goes, with minReplicas 0)."""
    polling_seconds: Annotated[int, Field(ge=5, le=3600)] = 15
    """How often the autoscaler reads the load."""

    @property
    def metric(self) -> tuple[Metric, int]:
        """The target's metric and its value per replica."""
        target = self.target or AutoscalingTarget()
        if target.kv_cache_usage_percent is not None:
            return "kvCacheUsagePercent", target.kv_cache_usage_percent
        return "waitingRequests", target.waiting_requests or DEFAULT_WAITING
