"""The list bounds of the placement fields (tight, for the API server's sake: docs/api.md
"The schema protects the API server") still take what a production spec asks for, and one
item more is refused with the bound and what to do."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import ROOT, with_spec

from spyre_operator.api.k8s_types import REQUIREMENTS, SELECTOR_LABELS, TERMS, VALUES
from spyre_operator.api.validation import validate

pytestmark = pytest.mark.unit

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f"]
# A production placement, rich by today's standards: a node pool, zones and instance types
# (an In list as long as a region's zones), a preferred pool, replicas kept apart per node
# and spread over zones, the platform's taints, a mesh and two client namespaces.
PRODUCTION: dict[str, Any] = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ZONES},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In",
                     "values": ["s390x-spyre-4", "s390x-spyre-8", "ppc64le-spyre-8"]},
                    {"key": "ibm.com/spyre.present", "operator": "Exists"},
                    {"key": "node-role.kubernetes.io/infra", "operator": "DoesNotExist"},
                ]},
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["burst"]}]},
            ]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 80, "preference": {"matchExpressions": [
                    {"key": "pool", "operator": "In", "values": ["reserved"]}]}},
                {"weight": 20, "preference": {"matchExpressions": [
                    {"key": "spyre.ibm.com/firmware", "operator": "In",
                     "values": ["1.4", "1.5"]}]}},
            ],
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "chat",
                                                      "app.kubernetes.io/component": "server"}},
                    "matchLabelKeys": ["pod-template-hash"]}},
            ],
        },
    },
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
         "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3,
         "matchLabelKeys": ["pod-template-hash"]},
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
         "whenUnsatisfiable": "ScheduleAnyway"},
    ],
    "tolerations": [
        {"key": "ibm.com/spyre_pf", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
    ],
    "service": {"allowFrom": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-system"}},
         "podSelector": {"matchLabels": {"app": "istio-ingressgateway"}}},
        {"namespaceSelector": {"matchExpressions": [
            {"key": "team", "operator": "In", "values": ["search", "support", "docs"]}]}},
        {"ipBlock": {"cidr": "10.0.0.0/8"}},
    ]},
    "env": [{"name": f"VLLM_SETTING_{i}", "value": "1"} for i in range(40)],
}  # fmt: skip


def test_a_production_placement_fits_the_bounds() -> None:
    assert validate(with_spec(PRODUCTION)) == []


def test_a_zone_list_one_value_over_the_bound_says_the_bound() -> None:
    terms = PRODUCTION["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (first, *_) = terms["nodeSelectorTerms"]
    requirement = first["matchExpressions"][0] | {"values": [f"z{i}" for i in range(VALUES + 1)]}
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}}}  # fmt: skip
    (problem,) = validate(with_spec(spec))
    assert problem.path.endswith("nodeSelectorTerms[0].matchExpressions[0].values")
    assert problem.message.startswith(f"must have at most {VALUES} items, got {VALUES + 1}")


def test_docs_state_the_bounds() -> None:
    text = " ".join((ROOT / "docs" / "api.md").read_text().split())
    for stated in (
        f"{TERMS} terms per list",
        f"{REQUIREMENTS} requirements (`matchExpressions`",
        f"{VALUES} values per requirement",
        f"{SELECTOR_LABELS} `matchLabels` per",
    ):
        assert stated in text, f"docs/api.md should say {stated!r}"
