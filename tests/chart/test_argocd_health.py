"""The Argo CD health check (deploy/argocd/spyremodel-health.lua) run by a real Lua
interpreter against SpyreModel status objects, and the argocd-cm snippet kept equal to it.

Argo CD runs health scripts with gopher-lua, a Lua 5.1: `obj` is a global holding the
resource, the script returns a table {status, message}. The tests use Debian's `lua5.1`,
the same language version.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chartlib import ARGOCD_CM_PATCH, HEALTH_LUA, run_health_check

pytestmark = pytest.mark.chart

HEALTH_KEY = "resource.customizations.health.serving.spyre.dev_SpyreModel"


def condition(
    type_: str, status: str, reason: str, message: str = "", observed: int | None = 3
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    if observed is not None:
        out["observedGeneration"] = observed
    return out


def model(
    generation: int = 3, status: dict[str, Any] | None = None, with_status: bool = True
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "serving.spyre.dev/v1alpha1",
        "kind": "SpyreModel",
        "metadata": {"name": "granite", "namespace": "llm", "generation": generation},
        "spec": {"model": {"id": "ibm-granite/granite-3.3-8b-instruct"}},
    }
    if with_status:
        obj["status"] = status if status is not None else {}
    return obj


READY = {
    "observedGeneration": 3,
    "phase": "Ready",
    "conditions": [
        condition("CacheReady", "True", "CacheReady", "graphs compiled"),
        condition("Available", "True", "MinimumReplicasAvailable", "1/1 replicas ready"),
        condition("Progressing", "False", "RolloutComplete", "serving the current spec"),
        condition("Degraded", "False", "AsExpected"),
    ],
}

CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("no status yet", model(with_status=False), "Progressing", "report a status"),
    ("empty status", model(status={}), "Progressing", "observe generation 3"),
    (
        "status of an older generation",
        model(generation=4, status=READY),
        "Progressing",
        "observe generation 4",
    ),
    (
        "a condition of an older generation",
        model(
            status={
                "observedGeneration": 3,
                "conditions": [
                    condition("Available", "True", "MinimumReplicasAvailable", observed=2)
                ],
            }
        ),
        "Progressing",
        "condition Available",
    ),
    (
        "compiling",
        model(
            status={
                "observedGeneration": 3,
                "phase": "Compiling",
                "conditions": [
                    condition("CacheReady", "False", "Compiling", "Job spyre-compile-abc running"),
                    condition("Available", "False", "CacheNotReady", "waiting for the cache"),
                    condition("Progressing", "True", "Compiling", "Job spyre-compile-abc running"),
                    condition("Degraded", "False", "AsExpected"),
                ],
            }
        ),
        "Progressing",
        "Compiling: Job spyre-compile-abc running",
    ),
    (
        "compile failed",
        model(
            status={
                "observedGeneration": 3,
                "phase": "Failed",
                "conditions": [
                    condition("CacheReady", "False", "CompileFailed", "OOMKilled"),
                    condition("Available", "False", "CacheNotReady"),
                    condition("Progressing", "False", "CompileFailed"),
                    condition("Degraded", "True", "CompileFailed", "the compile pod was OOMKilled"),
                ],
            }
        ),
        "Degraded",
        "CompileFailed: the compile pod was OOMKilled",
    ),
    (
        "degraded wins over progressing",
        model(
            status={
                "observedGeneration": 3,
                "conditions": [
                    condition("Progressing", "True", "Retrying", "retrying"),
                    condition("Degraded", "True", "InvalidSpec", "spec.batching: set one mode"),
                ],
            }
        ),
        "Degraded",
        "InvalidSpec: spec.batching: set one mode",
    ),
    ("ready", model(status=READY), "Healthy", "MinimumReplicasAvailable: 1/1 replicas ready"),
    (
        "rolling to a new cache while serving the old one",
        model(
            status={
                "observedGeneration": 3,
                "conditions": [
                    condition("Available", "True", "MinimumReplicasAvailable"),
                    condition("Progressing", "True", "Compiling", "compiling the new cache"),
                ],
            }
        ),
        "Progressing",
        "Compiling: compiling the new cache",
    ),
    (
        "observed but not available yet",
        model(
            status={
                "observedGeneration": 3,
                "conditions": [
                    condition("Available", "False", "ReplicasStarting", "0/1 replicas ready")
                ],
            }
        ),
        "Progressing",
        "ReplicasStarting: 0/1 replicas ready",
    ),
    (
        "scaled to zero",
        model(
            status={
                "observedGeneration": 3,
                "phase": "Ready",
                "conditions": [
                    condition("CacheReady", "True", "Compiled"),
                    condition("Available", "False", "ScaledToZero", "spec.replicas is 0"),
                    condition("Progressing", "False", "Complete"),
                    condition("Degraded", "False", "AsExpected"),
                ],
            }
        ),
        "Suspended",
        "ScaledToZero: spec.replicas is 0",
    ),
    (
        "an unknown config is a warning, not degraded",
        model(
            status={
                "observedGeneration": 3,
                "conditions": [
                    condition("Available", "True", "MinimumReplicasAvailable"),
                    condition("Degraded", "False", "UnknownConfig", "not in the registry"),
                ],
            }
        ),
        "Healthy",
        "MinimumReplicasAvailable",
    ),
    (
        "conditions without observedGeneration",
        model(
            status={
                "observedGeneration": 3,
                "conditions": [condition("Available", "True", "Ready", observed=None)],
            }
        ),
        "Healthy",
        "Ready",
    ),
]


@pytest.mark.parametrize(
    ("obj", "status", "message"),
    [pytest.param(obj, status, message, id=name) for name, obj, status, message in CASES],
)
def test_health_of_sample_objects(obj: dict[str, Any], status: str, message: str) -> None:
    health = run_health_check(obj)
    assert health["status"] == status, health
    assert message in health["message"], health


def test_argocd_cm_snippet_embeds_the_script_verbatim() -> None:
    data = yaml.safe_load(ARGOCD_CM_PATCH.read_text())["data"]
    assert list(data) == [HEALTH_KEY]
    assert data[HEALTH_KEY] == HEALTH_LUA.read_text(), (
        f"{ARGOCD_CM_PATCH} differs from {HEALTH_LUA}: copy the script into the snippet"
    )
