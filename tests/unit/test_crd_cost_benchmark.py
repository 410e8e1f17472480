"""benchmarks/crd_cost.py keeps measuring what it says (its specs: crd_specs.py): its
"before" CRD keeps unknown fields where the old one did, its plain and oversized
SpyreModels are valid, and `validate` names the unknown fields of the others (what the API
server now prunes). The figures are the benchmark's (docs/api.md)."""

from __future__ import annotations

import json
import sys

import pytest
from apilib import ROOT
from test_api_crd import most_fields

from spyre_operator.api.crd import build_crd
from spyre_operator.api.k8s_types import REQUIREMENTS, SELECTOR_LABELS, TERMS, VALUES
from spyre_operator.api.validation import validate

sys.path.insert(0, str(ROOT / "benchmarks"))
import crd_specs

pytestmark = pytest.mark.unit


def test_the_old_crd_keeps_unknown_fields_in_the_spec_but_affinity() -> None:
    spec = crd_specs.kept_unknown(build_crd())["spec"]["versions"][0]["schema"]
    props = spec["openAPIV3Schema"]["properties"]["spec"]
    assert props["x-kubernetes-preserve-unknown-fields"] is True
    assert props["properties"]["resources"]["x-kubernetes-preserve-unknown-fields"] is True
    toleration = props["properties"]["tolerations"]["items"]
    assert toleration["x-kubernetes-preserve-unknown-fields"] is True
    assert "x-kubernetes-preserve-unknown-fields" not in props["properties"]["affinity"]
    assert "x-kubernetes-preserve-unknown-fields" not in str(build_crd())


def test_validate_refuses_the_unknown_fields_and_takes_the_rest() -> None:
    """Nested maps and unknown keys are fields the schema lacks (pruned by the API server);
    the plain create and the 1 MB ones of fields at their bounds (env values, affinity
    lists; with spec.rollout and cache.compile.minServingReplicas at theirs) are valid
    SpyreModels."""
    for case, (spec, _) in crd_specs.cases(depth=16).items():
        problems = validate(crd_specs.document("m", spec()))
        unknown = "deep" in case or "unknown" in case
        assert bool(problems) == unknown, (case, problems[:2])
        assert all(p.message.startswith("unknown field") for p in problems[:1]), problems[:2]


def test_a_same_size_flat_has_the_size_asked_for_and_the_flat_crd_one_string() -> None:
    body = crd_specs.flat("c", 10_000)
    assert abs(len(json.dumps(body)) - 10_000) < 20
    (version,) = crd_specs.FLAT_CRD["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec == {"type": "object", "properties": {"data": {"type": "string"}}}


def test_the_affinity_case_fills_every_list_to_the_crds_bound() -> None:
    affinity = crd_specs.affinity_at_bounds()
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert (len(terms["nodeSelectorTerms"]), len(expressions), len(expressions[0]["values"])) == (
        TERMS, REQUIREMENTS, VALUES)  # fmt: skip
    (pod_term, *_) = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    selector = pod_term["namespaceSelector"]["matchExpressions"]
    assert (len(selector), len(selector[0]["values"])) == (REQUIREMENTS, VALUES)


def test_the_largest_spec_fills_the_lists_of_objects_to_the_crds_bounds() -> None:
    spec = crd_specs.largest_spec()
    (term, *_) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(term["labelSelector"]["matchLabels"]) == SELECTOR_LABELS
    assert len(term["namespaces"]) == TERMS
    # (less than the CRD's most: validate takes one source per env entry, no ipBlock
    # beside selectors, no matchFields but metadata.name)
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields, most = crd_specs.fields(spec), most_fields(schema["properties"]["spec"])
    assert 0.75 * most < fields <= most, (fields, most)
