"""Who may reach a model, on the real API server: the operator writes the NetworkPolicy
child with the Deployment, follows service.allowFrom, restores a hand edit, and the
garbage collector removes it with the SpyreModel; an API key reaches the serving pods
only as a reference to its Secret."""

from __future__ import annotations

from typing import Any

import cluster_sim as sim
import pytest

from spyre_operator.kube.client import Kube, path
from spyre_operator.render import meta

pytestmark = pytest.mark.integration

PORT = [{"protocol": "TCP", "port": 8000}]


def _peers(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]] | None:
    policy = kube.get("NetworkPolicy", namespace, name)
    if policy is None:
        return None
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == PORT
    peers: list[dict[str, Any]] = rule.get("from", [])  # none: from anywhere
    return peers


def test_the_policy_follows_allow_from_and_goes_with_the_model(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "guarded")
    doc["spec"]["service"] = {"apiKeySecret": {"name": "llm-api-key"}}
    sim.to_ready(kube, doc)

    policy = kube.get("NetworkPolicy", namespace, "guarded")
    assert policy is not None
    (owner,) = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("SpyreModel", "guarded", True)
    assert policy["spec"]["podSelector"] == {"matchLabels": meta.server_selector("guarded")}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert _peers(kube, namespace, "guarded") == [{"podSelector": {}}]  # this namespace

    # The API key: a reference to the Secret in the serving pods, its value nowhere.
    deploy = kube.get("Deployment", namespace, "guarded")
    assert deploy is not None
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    (key,) = [e for e in container["env"] if e["name"] == "VLLM_API_KEY"]
    assert key == {
        "name": "VLLM_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "llm-api-key", "key": "api-key"}},
    }

    peers = [
        {"namespaceSelector": {"matchLabels": {"team": "chat"}}, "podSelector": {}},
        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
    ]
    sim.spec_patch(kube, namespace, "guarded", {"service": {"allowFrom": peers}})
    sim.wait_for(
        lambda: _peers(kube, namespace, "guarded") == peers or None,
        "the policy admits the new peers",
    )

    # A hand edit that opens the model to everybody is taken back.
    opened = [{"op": "replace", "path": "/spec/ingress/0/from", "value": []}]
    kube.request(
        "PATCH",
        path("NetworkPolicy", namespace, "guarded"),
        opened,
        content_type="application/json-patch+json",
    )
    sim.wait_for(
        lambda: _peers(kube, namespace, "guarded") == peers or None,
        "the operator restored the policy",
    )

    kube.request("DELETE", path("SpyreModel", namespace, "guarded"))
    sim.wait_for(
        lambda: sim.gone(kube, "NetworkPolicy", namespace, "guarded") or None,
        "the garbage collector removed the policy with its SpyreModel",
    )
