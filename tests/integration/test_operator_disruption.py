"""A model of 2 or more replicas has a PodDisruptionBudget (a drain takes one replica at a
time), in the version of the policy API the cluster serves (policy/v1; v1beta1 on 1.20),
kept as written, and removed below 2 replicas."""

from __future__ import annotations

from typing import Any

import cluster_sim as sim
import pytest

from spyre_operator.kube.client import Kube, policy_version

pytestmark = pytest.mark.integration


def budgets(kube: Kube, namespace: str) -> str:
    return f"/apis/{policy_version(kube)}/namespaces/{namespace}/poddisruptionbudgets/m"


def budget(kube: Kube, namespace: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kube.request("GET", budgets(kube, namespace))
    except Exception as err:  # 404: none
        if getattr(err, "not_found", False):
            return None
        raise
    return found


def test_two_replicas_have_a_budget_kept_as_written_and_gone_at_one(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "m")
    doc["spec"]["replicas"] = 2
    sim.to_ready(kube, doc)
    found = sim.wait_for(lambda: budget(kube, namespace), "the PodDisruptionBudget")
    assert found["spec"]["maxUnavailable"] == 1
    assert found["spec"]["selector"]["matchLabels"]["serving.spyre.dev/model"] == "m"
    assert found["metadata"]["ownerReferences"][0]["name"] == "m"
    # someone lets a drain take every replica: taken back
    kube.request(
        "PATCH",
        budgets(kube, namespace),
        {"spec": {"maxUnavailable": 2}},
        content_type="application/merge-patch+json",
    )
    sim.wait_for(
        lambda: ((b := budget(kube, namespace)) and b["spec"]["maxUnavailable"] == 1) or None,
        "the budget as written",
    )
    sim.spec_patch(kube, namespace, "m", {"replicas": 1})
    sim.wait_for(lambda: budget(kube, namespace) is None or None, "no budget at 1 replica")
