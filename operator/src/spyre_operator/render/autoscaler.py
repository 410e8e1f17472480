"""The KEDA ScaledObject of spec.autoscaling (pure): it scales the SpyreModel itself
(its scale subresource: spec.replicas, which the operator carries to the Deployment) on
vLLM's own metrics as Prometheus scrapes them from the serving pods.

QUERIES is the one source of the PromQL: docs/install.md's hand-written ScaledObject uses
the same query (tests/unit/test_render_autoscaler.py reads it there)."""

from __future__ import annotations

from typing import Any

from spyre_operator.api.autoscaling import Metric
from spyre_operator.api.names import API_VERSION, KIND
from spyre_operator.api.validation import SpyreModel
from spyre_operator.render import meta
from spyre_operator.render.children import manifest_hash

KEDA_API_VERSION = "keda.sh/v1alpha1"
SCALED_OBJECT = "ScaledObject"
# A serving pod is named <model>-<ReplicaSet hash>-<suffix>: exactly two parts after the
# model's name, so model "a" never counts the pods of model "a-b" (PromQL regexes are
# anchored at both ends).
PODS = '{{namespace="{namespace}",pod=~"{name}-[a-z0-9]+-[a-z0-9]+"}}'
# Summed over the model's serving pods: KEDA's AverageValue target divides the sum by the
# threshold, so the replicas it asks for keep the load per replica near the target.
QUERIES: dict[Metric, str] = {
    "waitingRequests": "sum(vllm:num_requests_waiting" + PODS + ")",
    "kvCacheUsagePercent": "100 * sum(vllm:kv_cache_usage_perc" + PODS + ")",
}


def query(metric: Metric, namespace: str, name: str) -> str:
    """The PromQL of `metric` for the serving pods of SpyreModel `namespace`/`name`."""
    return QUERIES[metric].format(namespace=namespace, name=name)


def scaled_object(
    model: SpyreModel, uid: str | None, prometheus: str, max_replicas: int
) -> dict[str, Any]:
    """The ScaledObject of `model` (spec.autoscaling set), owned by it (given its uid);
    `prometheus`: the server's address (the operator's setting); `max_replicas`: the
    maximum the cards allow (never above spec.autoscaling.maxReplicas)."""
    scaling = model.spec.autoscaling
    assert scaling is not None
    metric, per_replica = scaling.metric
    delay = scaling.scale_down_delay_seconds
    obj: dict[str, Any] = {
        "apiVersion": KEDA_API_VERSION,
        "kind": SCALED_OBJECT,
        "metadata": meta.object_metadata(
            model.name, model.namespace, meta.labels("autoscaler", model.name)
        ),
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND, "name": model.name},
            "minReplicaCount": min(scaling.min_replicas, max_replicas),
            "maxReplicaCount": max_replicas,
            "pollingInterval": scaling.polling_seconds,
            "cooldownPeriod": delay,  # the last replica's (minReplicas 0)
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": delay}}
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "name": metric,
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": prometheus,
                        "query": query(metric, model.namespace, model.name),
                        "threshold": str(per_replica),
                    },
                }
            ],
        },
    }
    if uid is not None:
        obj["metadata"]["ownerReferences"] = [meta.owner_reference(model.name, uid)]
    obj["metadata"]["annotations"] = {meta.APPLIED_ANNOTATION: manifest_hash(obj)}
    return obj
