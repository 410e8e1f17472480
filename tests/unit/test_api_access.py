"""Who may reach a model (service.allowFrom -> the NetworkPolicy child) and the API key
(service.apiKeySecret -> VLLM_API_KEY from the Secret): checked as Kubernetes checks them,
rendered where they apply, outside the cache key."""

from __future__ import annotations

import json
from typing import Any

import pytest
from apilib import example, merge, pinned, with_spec

from spyre_operator.api.validation import parse, validate
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import desired

pytestmark = pytest.mark.unit

MICRO = example("micro-granite-cpu")
PEERS: list[dict[str, Any]] = [
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}},
    {
        "namespaceSelector": {},
        "podSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["ui"]}]},
    },
    {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
    {"ipBlock": {"cidr": "fd00::/8"}},
]
API_KEY = {"name": "llm-api-key", "key": "token"}


def _with_service(service: dict[str, Any]) -> dict[str, Any]:
    return merge(MICRO, {"spec": {"service": service}})


def _policy(doc: dict[str, Any]) -> dict[str, Any]:
    return desired(parse(doc, "ai"), uid="u-1").network_policy


def _env(doc: dict[str, Any], role: str) -> list[dict[str, Any]]:
    want = desired(parse(pinned(doc), "ai"))
    owner = {"weights": want.weights, "precompile": want.job, "serve": want.deployment}[role]
    assert owner is not None
    env: list[dict[str, Any]] = owner["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


def test_by_default_only_the_models_namespace_reaches_the_serving_port() -> None:
    policy = _policy(MICRO)
    assert (policy["kind"], policy["metadata"]["name"]) == ("NetworkPolicy", "micro-granite-cpu")
    assert policy["metadata"]["namespace"] == "ai"
    assert policy["metadata"]["ownerReferences"] == [
        meta.owner_reference("micro-granite-cpu", "u-1")
    ]
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "spyre-operator"
    assert policy["spec"] == {
        # the serving pods only: compile and weights pods are not selected
        "podSelector": {"matchLabels": meta.server_selector("micro-granite-cpu")},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 8000}]}],
    }  # fmt: skip


def test_allow_from_becomes_the_peers_of_the_policy_as_written() -> None:
    policy = _policy(_with_service({"allowFrom": PEERS}))
    assert policy["spec"]["ingress"] == [
        {"from": PEERS, "ports": [{"protocol": "TCP", "port": 8000}]}
    ]
    assert validate(_with_service({"allowFrom": PEERS})) == []


@pytest.mark.parametrize("kind", ["NodePort", "LoadBalancer"])
def test_a_service_exposed_outside_the_cluster_admits_every_source_by_default(kind: str) -> None:
    """Unset allowFrom on a NodePort or LoadBalancer Service: no `from` (every source), or
    the clients it was exposed for would be cut off; a list still narrows it."""
    policy = _policy(_with_service({"type": kind}))
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8000}]}]
    narrowed = _policy(_with_service({"type": kind, "allowFrom": PEERS[2:]}))
    assert narrowed["spec"]["ingress"][0]["from"] == PEERS[2:]


def test_the_policy_selects_the_pods_the_deployment_makes() -> None:
    want = desired(parse(MICRO))
    assert want.deployment is not None
    labels = want.deployment["spec"]["template"]["metadata"]["labels"]
    selector = want.network_policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert want.objects().index(want.network_policy) < want.objects().index(want.deployment)


def test_the_serving_container_gets_the_key_from_the_secret_and_nothing_else_does() -> None:
    doc = merge(
        example("granite-3.3-8b-instruct"), {"spec": {"service": {"apiKeySecret": API_KEY}}}
    )
    key = [e for e in _env(doc, "serve") if e["name"] == "VLLM_API_KEY"]
    assert key == [{"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": API_KEY}}]
    for role in ("precompile", "weights"):
        assert "VLLM_API_KEY" not in {e["name"] for e in _env(doc, role)}, role
    without = merge(doc, {"spec": {"service": {"apiKeySecret": None}}})
    assert "VLLM_API_KEY" not in {e["name"] for e in _env(without, "serve")}


def test_the_secret_key_defaults_to_api_key_and_the_value_is_never_rendered() -> None:
    doc = _with_service({"apiKeySecret": {"name": "llm-api-key"}})
    (ref,) = [e for e in _env(doc, "serve") if e["name"] == "VLLM_API_KEY"]
    assert ref["valueFrom"]["secretKeyRef"] == {"name": "llm-api-key", "key": "api-key"}
    assert "value" not in ref


def test_neither_changes_the_cache_key() -> None:
    granite = example("granite-3.3-8b-instruct")
    other = merge(granite, {"spec": {"service": {"allowFrom": PEERS, "apiKeySecret": API_KEY}}})
    assert cache_key(parse(pinned(other)).spec) == cache_key(parse(pinned(granite)).spec)


BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "empty allowFrom": (
        {"allowFrom": []}, "spec.service.allowFrom",
        "[{namespaceSelector: {}}] every namespace's",
    ),
    "a peer with nothing in it": (
        {"allowFrom": [{}]}, "spec.service.allowFrom[0]",
        "set namespaceSelector and/or podSelector, or ipBlock",
    ),
    "ipBlock beside a selector": (
        {"allowFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]},
        "spec.service.allowFrom[0]", "ipBlock stands alone",
    ),
    "not a CIDR": (
        {"allowFrom": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]},
        "spec.service.allowFrom[0].ipBlock.cidr", "is not a CIDR",
    ),
    "except outside the cidr": (
        {"allowFrom": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]},
        "spec.service.allowFrom[0].ipBlock.except[0]", "must be a range inside cidr 10.0.0.0/8",
    ),
    "except of the other IP version": (
        {"allowFrom": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["::/0"]}}]},
        "spec.service.allowFrom[0].ipBlock.except[0]", "must be a range inside cidr",
    ),
    "except the whole cidr": (
        {"allowFrom": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}}]},
        "spec.service.allowFrom[0].ipBlock.except[0]", "must be a range inside cidr",
    ),
    "a bad label in a selector": (
        {"allowFrom": [{"namespaceSelector": {"matchLabels": {"team/": "x"}}}]},
        'spec.service.allowFrom[0].namespaceSelector.matchLabels["team/"]', "is not a label key",
    ),
    "In without values": (
        {"allowFrom": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
        "spec.service.allowFrom[0].podSelector.matchExpressions[0].values",
        "required with operator In",
    ),
    "a field of NetworkPolicyPeer's future": (
        {"allowFrom": [{"serviceAccountSelector": {}}]},
        "spec.service.allowFrom[0].serviceAccountSelector", "unknown field",
    ),
    "too many peers": (
        {"allowFrom": [{"podSelector": {}}] * 9}, "spec.service.allowFrom", "at most 8",
    ),
    "a Secret name that is no object name": (
        {"apiKeySecret": {"name": "LLM_key"}}, "spec.service.apiKeySecret.name",
        "a Kubernetes object name",
    ),
    "a Secret key with a slash": (
        {"apiKeySecret": {"name": "llm", "key": "a/b"}}, "spec.service.apiKeySecret.key",
        "a key of a Secret's data",
    ),
    "a Secret without a name": (
        {"apiKeySecret": {"key": "k"}}, "spec.service.apiKeySecret.name",
        "required field is missing",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("service", "path", "fragment"), BAD.values(), ids=BAD.keys())
def test_bad_values_name_the_field_the_rule_and_the_fix(
    service: dict[str, Any], path: str, fragment: str
) -> None:
    problems = validate(with_spec({"service": service}))
    assert [p.path for p in problems] == [path], problems
    assert fragment in problems[0].message, problems[0].message


SECRET_ENV = {"secretKeyRef": {"name": "k", "key": "k"}}
KEY_ELSEWHERE: dict[str, tuple[dict[str, Any], str, str]] = {
    "the key as a plain value": (
        {"env": [{"name": "VLLM_API_KEY", "value": "sk-1"}]},
        "spec.env[0].value", "plain text in the pod spec",
    ),
    "the key twice": (
        {"service": {"apiKeySecret": API_KEY},
         "env": [{"name": "VLLM_API_KEY", "valueFrom": SECRET_ENV}]},
        "spec.env[0].name", "comes from spec.service.apiKeySecret",
    ),
    "the key as an argument": (
        {"extraArgs": ["--api-key=sk-1"]}, "spec.extraArgs[0]", "spec.service.apiKeySecret",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("patch", "path", "fragment"), KEY_ELSEWHERE.values(), ids=KEY_ELSEWHERE)
def test_the_key_only_comes_from_a_secret(patch: dict[str, Any], path: str, fragment: str) -> None:
    problems = validate(with_spec(patch))
    assert [p.path for p in problems] == [path], problems
    assert fragment in problems[0].message, problems[0].message
    assert "sk-1" not in json.dumps([str(p) for p in problems])


def test_a_key_from_a_secret_in_env_stays_valid_without_api_key_secret() -> None:
    """What users wrote before apiKeySecret existed keeps working."""
    assert validate(with_spec({"env": [{"name": "VLLM_API_KEY", "valueFrom": SECRET_ENV}]})) == []
