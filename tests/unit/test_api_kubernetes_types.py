"""The pass-through fields follow the current Kubernetes schema (issue 31): the copies of
core/v1 and networking/v1 types in api/spec.py have the fields of the newest release the
kubernetes client knows (or say why a field is not passed on), and the fields newer than
Kubernetes 1.20 are checked with the rules Kubernetes applies to them."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import pinned, with_spec
from kubernetes import client
from pydantic import BaseModel

from spyre_operator.api import k8s_types as api
from spyre_operator.api.placement_rules import SERVING_SELECTOR_KEYS
from spyre_operator.api.validation import parse, validate
from spyre_operator.render import meta
from spyre_operator.render.children import desired

pytestmark = pytest.mark.unit

# Each copy, the client's type it copies, and the client's fields it leaves out (with why).
NOT_PASSED_ON = {
    "claims": "names the pod's resourceClaims (dynamic resource allocation), which a "
    "SpyreModel does not declare",
    "fileKeyRef": "reads a file of an emptyDir volume the pod would need (alpha in 1.34)",
    "resourceFieldRef": "the container's own limits: the operator renders them",
}
COPIES: dict[type[BaseModel], tuple[type[Any], set[str]]] = {
    api.Toleration: (client.V1Toleration, set()),
    api.Resources: (client.V1ResourceRequirements, {"claims"}),
    api.Affinity: (client.V1Affinity, set()),
    api.NodeAffinity: (client.V1NodeAffinity, set()),
    api.NodeSelector: (client.V1NodeSelector, set()),
    api.NodeSelectorTerm: (client.V1NodeSelectorTerm, set()),
    api.NodeSelectorRequirement: (client.V1NodeSelectorRequirement, set()),
    api.PreferredSchedulingTerm: (client.V1PreferredSchedulingTerm, set()),
    api.PodAffinity: (client.V1PodAffinity, set()),
    api.PodAffinityTerm: (client.V1PodAffinityTerm, set()),
    api.WeightedPodAffinityTerm: (client.V1WeightedPodAffinityTerm, set()),
    api.TopologySpreadConstraint: (client.V1TopologySpreadConstraint, set()),
    api.LabelSelector: (client.V1LabelSelector, set()),
    api.LabelSelectorRequirement: (client.V1LabelSelectorRequirement, set()),
    api.EnvVar: (client.V1EnvVar, set()),
    api.EnvVarSource: (client.V1EnvVarSource, {"fileKeyRef", "resourceFieldRef"}),
    api.EnvKeyRef: (client.V1SecretKeySelector, set()),
    api.EnvFieldRef: (client.V1ObjectFieldSelector, set()),
    api.IpBlock: (client.V1IPBlock, set()),
    api.NetworkPeer: (client.V1NetworkPolicyPeer, set()),
    api.LocalObjectReference: (client.V1LocalObjectReference, set()),
}


def wire_names(model: type[Any]) -> set[str]:
    """The JSON field names of a kubernetes client model (pydantic from client 37 on)."""
    return {str(f.serialization_alias or name) for name, f in model.model_fields.items()}


@pytest.mark.parametrize("copy", COPIES, ids=lambda m: m.__name__)
def test_each_copy_has_the_fields_of_the_newest_kubernetes_the_client_knows(
    copy: type[BaseModel],
) -> None:
    upstream, left_out = COPIES[copy]
    ours = {str(info.alias) for info in copy.model_fields.values()}
    missing = wire_names(upstream) - ours - left_out
    assert not missing, (
        f"{upstream.__name__} has {sorted(missing)}, which api/spec.py's {copy.__name__} "
        "lacks: add them (with their Kubernetes rules in api/rules.py) or say in "
        "NOT_PASSED_ON why not"
    )
    assert ours <= wire_names(upstream), f"{copy.__name__} has fields Kubernetes lacks"
    assert left_out <= set(NOT_PASSED_ON)


def test_the_default_spread_selector_is_the_one_rendered() -> None:
    assert set(SERVING_SELECTOR_KEYS) == set(meta.server_selector("m"))


SPREAD = {
    "maxSkew": 1,
    "topologyKey": "topology.kubernetes.io/zone",
    "whenUnsatisfiable": "DoNotSchedule",
    "minDomains": 3,
    "matchLabelKeys": ["pod-template-hash"],
    "nodeAffinityPolicy": "Ignore",
    "nodeTaintsPolicy": "Honor",
}
TERM = {
    "labelSelector": {"matchLabels": {"app": "chat"}},
    "namespaceSelector": {"matchLabels": {"team": "ai"}},
    "topologyKey": "kubernetes.io/hostname",
    "matchLabelKeys": ["pod-template-hash"],
    "mismatchLabelKeys": ["tenant"],
}
CURRENT = {
    "topologySpreadConstraints": [SPREAD],
    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]}},
}


def test_fields_of_current_kubernetes_are_accepted_and_reach_the_pods() -> None:
    doc = with_spec(CURRENT)
    assert validate(doc) == []
    deployment = desired(parse(pinned(doc)), "0a0a0a0a").deployment
    pod = deployment["spec"]["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread == SPREAD | {"labelSelector": {"matchLabels": meta.server_selector("demo")}}
    assert pod["affinity"] == CURRENT["affinity"]


def spread(**fields: Any) -> dict[str, Any]:
    return {"topologySpreadConstraints": [SPREAD | fields]}


def term(**fields: Any) -> dict[str, Any]:
    terms = [{k: v for k, v in (TERM | fields).items() if v is not None}]
    return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}}


SPREAD_PATH = "spec.topologySpreadConstraints[0]"
TERM_PATH = "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
REFUSED = {
    "minDomains 0": (
        spread(minDomains=0),
        f"{SPREAD_PATH}.minDomains",
        "must be at least 1, got 0",
    ),
    "minDomains with ScheduleAnyway": (
        spread(whenUnsatisfiable="ScheduleAnyway"),
        f"{SPREAD_PATH}.minDomains",
        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway: set "
        "whenUnsatisfiable: DoNotSchedule, or remove minDomains",
    ),
    "matchLabelKeys not a label key": (
        spread(matchLabelKeys=["pod template hash"]),
        f"{SPREAD_PATH}.matchLabelKeys[0]",
        "'pod template hash' is not a label key: an optional DNS subdomain prefix",
    ),
    "matchLabelKeys also in the labelSelector": (
        spread(labelSelector={"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
               matchLabelKeys=["tier"]),
        f"{SPREAD_PATH}.matchLabelKeys[0]",
        "'tier' exists in both matchLabelKeys and labelSelector: remove it from one",
    ),
    "matchLabelKeys also in the default selector": (
        spread(matchLabelKeys=["app.kubernetes.io/component"]),
        f"{SPREAD_PATH}.matchLabelKeys[0]",
        "'app.kubernetes.io/component' exists in both matchLabelKeys and labelSelector (unset: "
        "this SpyreModel's serving pods): remove it from one",
    ),
    "nodeTaintsPolicy unknown": (
        spread(nodeTaintsPolicy="Respect"),
        f"{SPREAD_PATH}.nodeTaintsPolicy",
        "must be one of 'Honor' or 'Ignore', got 'Respect'",
    ),
    "term keys without a labelSelector": (
        term(labelSelector=None, mismatchLabelKeys=None),
        f"{TERM_PATH}.matchLabelKeys",
        "must not be specified when labelSelector is not set",
    ),
    "term key matched and mismatched": (
        term(mismatchLabelKeys=["pod-template-hash"]),
        f"{TERM_PATH}.matchLabelKeys[0]",
        "'pod-template-hash' exists in both matchLabelKeys and mismatchLabelKeys",
    ),
    "term namespaceSelector key": (
        term(namespaceSelector={"matchLabels": {"team/": "ai"}}),
        f'{TERM_PATH}.namespaceSelector.matchLabels["team/"]',
        "'team/' is not a label key",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("patch", "path", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_their_values_are_checked_with_the_rules_of_kubernetes(
    patch: dict[str, Any], path: str, message: str
) -> None:
    problems = validate(with_spec(patch))
    assert [p.path for p in problems] == [path], problems
    assert problems[0].message.startswith(message), problems[0].message
