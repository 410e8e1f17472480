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


def test_only_what_changes_by_itself_is_left_out() -> None:
    """The compile's seconds and the conditions' times tick on their own: two looks a
    minute apart at the same state say the same."""

    def status(seconds: int, time: str) -> dict[str, Any]:
        return {
            "phase": "Compiling",
            "conditions": [
                {
                    "type": "CacheReady",
                    "status": "False",
                    "reason": "Compiling",
                    "message": "compiling",
                    "lastTransitionTime": time,
                }
            ],
            "cache": {
                "progress": {"step": "warmup", "detail": "still running", "elapsedSeconds": seconds}
            },
        }

    pods = [pod("c-0", "Running", precompile={"state": {"running": {}}, "ready": True})]
    first = describe(status(60, "t1"), pods)
    assert first == describe(status(120, "t2"), pods)
    assert first == {
        "tiny-granite phase": "Compiling",
        "  CacheReady": "False Compiling: compiling",
        "  compile step": "warmup (still running)",
        "pod c-0": "Running: precompile ready",
    }
