"""The kstatus rules the tests apply (tests/kstatus_rules.py), on hand-made objects: each
rule of the cli-utils README can decide."""

from __future__ import annotations

from typing import Any

import pytest

from kstatus_rules import kstatus

pytestmark = pytest.mark.unit


def obj(generation: int = 1, observed: int | None = 1, **conditions: str) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": t, "status": s} for t, s in conditions.items()]
    }
    if observed is not None:
        status["observedGeneration"] = observed
    return {"metadata": {"generation": generation}, "status": status}


def test_each_rule() -> None:
    assert kstatus(obj(2, 1, Reconciling="False", Stalled="False")) == "InProgress"
    assert kstatus(obj(Reconciling="True", Stalled="False")) == "InProgress"
    assert kstatus(obj(Reconciling="False", Stalled="True")) == "Failed"
    assert kstatus(obj(Reconciling="False", Stalled="False", Ready="False")) == "Current"
    assert kstatus(obj(Ready="False")) == "InProgress"  # the Ready fallback
    assert kstatus(obj(Ready="True")) == "Current"
    assert kstatus(obj(observed=None)) == "Current"  # no status yet: unknown resources are
    terminating = obj()
    terminating["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert kstatus(terminating) == "Terminating"
