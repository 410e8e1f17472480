"""The rules of spec.autoscaling across fields (api/autoscaling.py has the fields)."""

from __future__ import annotations

from collections.abc import Iterator

from spyre_operator.api.autoscaling import FIELD
from spyre_operator.api.problem import Problem
from spyre_operator.api.spec import SpyreModelSpec


def autoscaling_rules(s: SpyreModelSpec) -> Iterator[Problem]:
    a = s.autoscaling
    if a is None:
        return
    if a.min_replicas > a.max_replicas:
        yield Problem(
            f"{FIELD}.minReplicas",
            f"{a.min_replicas} is above maxReplicas {a.max_replicas}: lower minReplicas or "
            "raise maxReplicas",
        )
    target = a.target
    if target is None:
        return
    if (target.waiting_requests is None) == (target.kv_cache_usage_percent is None):
        yield Problem(
            f"{FIELD}.target", "set exactly one of waitingRequests or kvCacheUsagePercent"
        )
        return
    continuous = s.batching.continuous
    if target.kv_cache_usage_percent is not None and not (
        continuous is not None and continuous.chunked_prefill
    ):
        mode = "static batching" if continuous is None else "chunkedPrefill false"
        yield Problem(
            f"{FIELD}.target.kvCacheUsagePercent",
            f"vLLM-Spyre does not measure KV-cache use with {mode} (only with continuous "
            "batching and chunked prefill): use target.waitingRequests",
        )
