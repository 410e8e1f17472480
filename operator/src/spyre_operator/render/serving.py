"""The serving objects besides the Deployment: the Service, the NetworkPolicy that admits
its port, and the PodDisruptionBudget of 2 or more replicas."""

from __future__ import annotations

from typing import Any

from spyre_operator.api import runtimes
from spyre_operator.api.validation import SpyreModel
from spyre_operator.render import meta


def build_service(model: SpyreModel) -> dict[str, Any]:
    service = model.spec.service
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.object_metadata(
            model.name, model.namespace, meta.server_labels(model.name)
        ),
        "spec": {
            "type": service.type,
            "selector": meta.server_selector(model.name),
            "ports": [
                {"name": "http", "port": service.port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


# A drain (or any eviction) takes one serving replica at a time.
DISRUPTION_MAX_UNAVAILABLE = 1


def build_pod_disruption_budget(model: SpyreModel) -> dict[str, Any] | None:
    """The PodDisruptionBudget of a model with 2 or more replicas (None below: with one
    replica a budget of 1 would let a drain take it anyway, and 0 would block the drain
    for ever). In policy/v1; the client talks the version the cluster serves
    (kube/client.py: served)."""
    if model.spec.replicas < 2:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta.object_metadata(
            model.name, model.namespace, meta.server_labels(model.name)
        ),
        "spec": {
            "selector": {"matchLabels": meta.server_selector(model.name)},
            "maxUnavailable": DISRUPTION_MAX_UNAVAILABLE,
        },
    }


# Unset service.allowFrom: the pods of the SpyreModel's own namespace (a podSelector
# alone selects in the policy's namespace), or every source for a NodePort or
# LoadBalancer Service: it was exposed outside the cluster on purpose.
SAME_NAMESPACE: list[dict[str, Any]] = [{"podSelector": {}}]
EXPOSED = ("NodePort", "LoadBalancer")


def build_network_policy(model: SpyreModel) -> dict[str, Any]:
    """Admits the serving port of the serving pods from service.allowFrom only. Probes are
    not affected: NetworkPolicy does not apply to the kubelet."""
    service = model.spec.service
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": runtimes.SERVING_PORT}]}
    if service.allow_from is not None:
        rule["from"] = [peer.to_k8s() for peer in service.allow_from]
        if model.spec.routing is not None:  # the endpoint picker reads the pods' /metrics
            rule["from"].append({"podSelector": {"matchLabels": meta.picker_selector(model.name)}})
    elif service.type not in EXPOSED:
        rule["from"] = SAME_NAMESPACE
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta.object_metadata(
            model.name, model.namespace, meta.server_labels(model.name)
        ),
        "spec": {
            "podSelector": {"matchLabels": meta.server_selector(model.name)},
            "policyTypes": ["Ingress"],
            "ingress": [rule],
        },
    }


def endpoint_url(model: SpyreModel) -> str:
    """The OpenAI-compatible base URL inside the cluster (status.endpoint)."""
    return f"http://{model.name}.{model.namespace}.svc:{model.spec.service.port}/v1"
