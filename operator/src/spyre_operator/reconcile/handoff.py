"""Cards for a compile while the old key serves (pure).

A new cache key of a model whose compile runs on cards needs them while the replicas of
the old key hold them; on a full node the compile pod waits for ever (and is failed by
its deadline). When it waits for a node, the operator hands it cards: it scales the
Deployment still serving the old key down by the replicas whose cards the compile needs,
never below spec.cache.compile.minServingReplicas, and keeps it there until the new key
is compiled; the rollout to the new key then brings spec.replicas back. docs/operator.md,
"Cards".
"""

from __future__ import annotations

import math

from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.observe import Observed
from spyre_operator.render.pod import CONTAINER_NAMES, cards


def replica_cards(obs: Observed, resource: str) -> int:
    """The cards each replica of the live Deployment holds (its serving container's limit)."""
    assert obs.deployment is not None
    pod = obs.deployment.live.get("spec", {}).get("template", {}).get("spec", {})
    for container in pod.get("containers") or []:
        if container.get("name") == CONTAINER_NAMES["serve"]:
            limit = (container.get("resources") or {}).get("limits", {}).get(resource, 0)
            return int(limit)
    return 0


def serving_while_compiling(obs: Observed, model: SpyreModel, key: str | None) -> int | None:
    """The replicas the Deployment of the old key keeps while `key` compiles on the cards
    of the others; None when nothing is handed over (no old key serving, a compile that
    holds no cards, one that found free cards, or no replica to spare above the floor).
    Once handed over (the Deployment below spec.replicas while the compile runs), it stays
    so until the compile ends, so the compile never loses its cards to a replica."""
    deploy, job, spec = obs.deployment, obs.job, model.spec
    if deploy is None or key is None or deploy.cache_key in (None, key):
        return None
    if job is None or job.succeeded or job.failed:
        return None
    need, each = cards(spec, "precompile"), replica_cards(obs, spec.accelerator.resource_name)
    if need == 0 or each == 0:
        return None
    keep = max(spec.cache.compile.min_serving_replicas, spec.replicas - math.ceil(need / each))
    if keep >= spec.replicas:
        return None
    if job.unschedulable is None and deploy.spec_replicas >= spec.replicas:
        return None  # the compile found cards of its own
    return keep
