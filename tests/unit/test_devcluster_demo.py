"""What the node demo says while it waits (spyre_devcluster/node_demo.py): one line per
subject that changed, never one for a clock that moved."""

from __future__ import annotations

from typing import Any

import pytest

from spyre_devcluster.node_demo import describe, pod_state

pytestmark = pytest.mark.unit


def pod(name: str, phase: str, **containers: dict[str, Any]) -> dict[str, Any]:
    statuses = [{"name": n, **c} for n, c in containers.items()]
    return {"metadata": {"name": name}, "status": {"phase": phase, "containerStatuses": statuses}}


def test_a_pod_says_its_phase_and_each_containers_state() -> None:
    assert pod_state({"metadata": {"name": "p"}, "status": {}}) == "Unknown"
    waiting = {"state": {"waiting": {"reason": "ContainerCreating"}}}
    assert (
        pod_state(pod("p", "Pending", serve=waiting))
        == "Pending: serve waiting (ContainerCreating)"
    )
    running = {"state": {"running": {"startedAt": "t"}}, "ready": False}
    ready = {"state": {"running": {"startedAt": "t"}}, "ready": True}
    done = {"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}
    assert pod_state(pod("p", "Running", a=running, b=ready)) == "Running: a running, b ready"
    assert (
        pod_state(pod("p", "Succeeded", precompile=done)) == "Succeeded: precompile Completed (0)"
    )


def test_a_state_that_only_counts_seconds_says_nothing_new() -> None:
    """The compile's seconds, in its progress and in the conditions' messages, tick on
    their own: two looks a minute apart at the same step are the same states."""

    def status(seconds: int) -> dict[str, Any]:
        message = f"Job c is compiling: step warmup at {seconds}s"
        conditions = [
            {"type": kind, "status": "False", "reason": "Compiling", "message": message}
            for kind in ("Ready", "CacheReady", "Reconciling")
        ]
        progress = {"step": "warmup", "detail": "still running", "elapsedSeconds": seconds}
        return {"phase": "Compiling", "conditions": conditions, "cache": {"progress": progress}}

    pods = [pod("c-0", "Running", precompile={"state": {"running": {}}, "ready": True})]
    first, later = describe(status(60), pods), describe(status(120), pods)
    assert {k: state for k, (state, _) in first.items()} == {
        k: state for k, (state, _) in later.items()
    }
    assert first == {
        "tiny-granite phase": ("Compiling", "Compiling"),
        "  Ready": ("False Compiling", "False Compiling: Job c is compiling: step warmup at 60s"),
        "  CacheReady": (
            "False Compiling",
            "False Compiling: Job c is compiling: step warmup at 60s",
        ),
        "  compile step": ("warmup", "warmup (still running)"),
        "pod c-0": ("Running: precompile ready", "Running: precompile ready"),
    }
