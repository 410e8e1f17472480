"""benchmarks/crd_cost.py keeps measuring what it says: its "before" CRD keeps unknown
fields where the old one did, its plain and oversized SpyreModels are valid, and `validate`
names the unknown fields of the others (what the API server now prunes). The figures are
the benchmark's (docs/api.md)."""

from __future__ import annotations

import sys

import pytest
from apilib import ROOT

from spyre_operator.api.crd import build_crd
from spyre_operator.api.validation import validate

sys.path.insert(0, str(ROOT / "benchmarks"))
import crd_cost

pytestmark = pytest.mark.unit


def test_the_old_crd_keeps_unknown_fields_in_the_spec_but_affinity() -> None:
    spec = crd_cost.kept_unknown(build_crd())["spec"]["versions"][0]["schema"]
    props = spec["openAPIV3Schema"]["properties"]["spec"]
    assert props["x-kubernetes-preserve-unknown-fields"] is True
    assert props["properties"]["resources"]["x-kubernetes-preserve-unknown-fields"] is True
    toleration = props["properties"]["tolerations"]["items"]
    assert toleration["x-kubernetes-preserve-unknown-fields"] is True
    assert "x-kubernetes-preserve-unknown-fields" not in props["properties"]["affinity"]
    assert "x-kubernetes-preserve-unknown-fields" not in str(build_crd())


def test_validate_refuses_the_unknown_fields_and_takes_the_rest() -> None:
    """Nested maps and unknown keys are fields the schema lacks (pruned by the API server);
    the plain create and the 1 MB of fields at their bounds are valid SpyreModels."""
    for case, (spec, _) in crd_cost.cases(depth=16).items():
        problems = validate(crd_cost.document("m", spec()))
        unknown = "deep" in case or "unknown" in case
        assert bool(problems) == unknown, (case, problems[:2])
        assert all(p.message.startswith("unknown field") for p in problems[:1]), problems[:2]


def test_a_same_size_config_map_has_the_size_asked_for() -> None:
    body = crd_cost.config_map("c", 10_000)
    assert abs(len(crd_cost.json.dumps(body)) - 10_000) < 20
