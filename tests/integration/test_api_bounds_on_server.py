"""The CRD's size bounds on the real API server agree with `validate`: the largest spec
`validate` takes (every list of objects at its bound: benchmarks/crd_cost.py, docs/api.md
"The schema protects the API server") is stored as sent, and one item more in a list that
multiplies is refused by both, naming the list."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from cluster_sim import kube_for

from spyre_devcluster import simulate
from spyre_operator.api.k8s_types import REQUIREMENTS, SELECTOR_LABELS, TERMS, VALUES
from spyre_operator.api.validation import validate
from spyre_operator.kube.client import ApiError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import crd_specs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def crd(kubeconfig: Path) -> None:
    simulate.install_crds(kube_for(kubeconfig))


def test_the_largest_spec_validate_takes_is_stored_as_sent(
    crd: None, kubeconfig: Path, namespace: str
) -> None:
    """Nothing pruned, nothing refused (a toleration's tolerationSeconds was refused by
    every API server while its maximum was int64's: read as a float, it overflowed)."""
    body = crd_specs.document("largest", crd_specs.largest_spec())
    assert validate(body) == []
    body["metadata"]["namespace"] = namespace
    stored = kube_for(kubeconfig).create(body)
    assert stored["spec"] == body["spec"] | {"replicas": 1}


def required_nodes(terms: int, requirements: int, values: int) -> dict[str, Any]:
    requirement = {"key": "k", "operator": "In", "values": ["v"] * values}
    term = {"matchExpressions": [requirement] * requirements}
    required = {"nodeSelectorTerms": [term] * terms}
    nodes = {"requiredDuringSchedulingIgnoredDuringExecution": required}
    return {"affinity": {"nodeAffinity": nodes}}


NODE_TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
SPREAD = {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway"}
ONE_MORE = {
    "node selector terms": (
        required_nodes(TERMS + 1, 1, 1),
        f"{NODE_TERMS}.nodeSelectorTerms",
        TERMS,
    ),
    "requirements of a term": (
        required_nodes(1, REQUIREMENTS + 1, 1),
        f"{NODE_TERMS}.nodeSelectorTerms[0].matchExpressions",
        REQUIREMENTS,
    ),
    "values of a requirement": (
        required_nodes(1, 1, VALUES + 1),
        f"{NODE_TERMS}.nodeSelectorTerms[0].matchExpressions[0].values",
        VALUES,
    ),
    "matchLabels of a selector": (
        {"service": {"allowFrom": [
            {"podSelector": {"matchLabels": {f"l{i}": "v" for i in range(SELECTOR_LABELS + 1)}}}
        ]}},
        "spec.service.allowFrom[0].podSelector.matchLabels",
        SELECTOR_LABELS,
    ),
    "spread constraints": (
        {"topologySpreadConstraints": [SPREAD | {"topologyKey": f"z{i}"} for i in range(5)]},
        "spec.topologySpreadConstraints",
        4,
    ),
}  # fmt: skip


@pytest.mark.parametrize(("spec", "path", "most"), ONE_MORE.values(), ids=ONE_MORE.keys())
def test_one_item_more_is_refused_by_the_server_and_by_validate(
    crd: None, kubeconfig: Path, namespace: str, spec: dict[str, Any], path: str, most: int
) -> None:
    body = crd_specs.document("over", crd_specs.PLAIN | spec)
    problems = validate(body)
    assert [p.path for p in problems] == [path], problems
    body["metadata"]["namespace"] = namespace
    with pytest.raises(ApiError) as refused:
        kube_for(kubeconfig).create(body)
    # the API server names a list item by its index (1.20: by its field only); the wording
    # is its version's ("should have at most 4 items" in 1.20, "must have at most 4 items" later)
    assert refused.value.status == 422
    general = path.split("[")[0] + "".join(p.split("]", 1)[1] for p in path.split("[")[1:])
    message = str(refused.value)
    assert f"{path}: " in message or f"{general}: " in message, message
    assert f"have at most {most} " in message, message
