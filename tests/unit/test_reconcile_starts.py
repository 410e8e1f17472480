"""Did each serving replica start from the cache? The operator reads a ready serving pod's
compile report once (reconcile/starts.py) and says it in status, an Event and a metric."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import urllib3
from test_reconcile_decide import body, cond, ready_state, step

from spyre_operator.kube.client import ApiError
from spyre_operator.reconcile.conditions import find
from spyre_operator.reconcile.observe import read_starts
from spyre_operator.reconcile.starts import Start, StartReader
from spyre_runtime.contract import CompileCounts

pytestmark = pytest.mark.unit

MODEL = ("ns", "m")


def report(pid: int, hit: int, miss: int, ms: int = 1500) -> str:
    return CompileCounts(pid, 3, hit, miss, 0, hit, miss, 0, ms, warmed=1).line()


class Logs:
    def __init__(self, **logs: str) -> None:
        self.logs, self.reads = logs, 0
        self.refuse: Exception | None = None

    def log_tail(
        self, namespace: str, pod: str, container: str, lines: int | None, limit: int, t: float
    ) -> str:
        self.reads += 1
        assert lines is None and container == "vllm"  # from its start, the serving container
        if self.refuse is not None:
            raise self.refuse
        return self.logs[pod]


def reader(logs: Logs) -> StartReader:
    return StartReader(logs)


def test_a_pod_is_read_once_and_its_report_says_whether_it_compiled() -> None:
    logs = Logs(
        cached=f"INFO vllm starting\n(EngineCore pid=9) {report(9, hit=3, miss=0)}\n",
        compiled=f"{report(9, hit=0, miss=2, ms=41700)}\n{report(10, hit=1, miss=0)}\n",
        old="INFO an image without a compile report\n",
    )
    read = reader(logs)
    assert read(MODEL, ("cached", "T")) == Start("cached", False, 0, 1.5)
    assert read(MODEL, ("compiled", "T")) == Start("compiled", True, 2, 43.2)
    assert read(MODEL, ("old", "T")) == Start("old", None)
    assert read(MODEL, ("cached", "T")) == Start("cached", False, 0, 1.5)
    assert logs.reads == 3  # each pod once
    read.forget(MODEL, {("cached", "T")})
    read(MODEL, ("compiled", "T"))
    assert logs.reads == 4  # forgotten: read again


@pytest.mark.parametrize(
    "failure",
    [
        ApiError(503, "ServiceUnavailable", {"message": "no kubelet"}),
        urllib3.exceptions.ReadTimeoutError(None, "/log", "read timed out"),  # type: ignore[arg-type]
    ],
)
def test_a_log_that_cannot_be_read_is_tried_again_later_and_said_once(
    failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal or a timeout (urllib3's own error: one attempt) never fails the reconcile."""
    caplog.set_level(logging.WARNING, "spyre_operator.reconcile.starts")
    logs = Logs(p=report(1, 1, 0), q=report(1, 1, 0))
    logs.refuse = failure
    read = reader(logs)
    assert read(MODEL, ("p", "T")) is None and read(MODEL, ("q", "T")) is None
    assert len(caplog.records) == 1 and "start-up report" in caplog.records[0].getMessage()
    logs.refuse = None
    assert read(MODEL, ("p", "T")) == Start("p", False, 0, 1.5)


def pod(name: str, ready: bool) -> dict[str, Any]:
    status = {"containerStatuses": [{"name": "vllm", "ready": ready}]}
    return {"metadata": {"name": name, "creationTimestamp": "T"}, "status": status}


def test_only_ready_serving_pods_are_read() -> None:
    logs = Logs(a=report(1, 1, 0), b=report(1, 1, 0))
    starts = read_starts(reader(logs), MODEL, [pod("b", True), pod("a", True), pod("c", False)])
    assert [s.pod for s in starts] == ["a", "b"] and logs.reads == 2


def test_status_counts_the_replicas_started_from_the_cache_and_warns_of_one_that_compiled() -> None:
    kwargs, status = ready_state({"replicas": 2})
    cached = (Start("p-1", False), Start("p-2", False))
    plan = step(body({"replicas": 2}, **status), **(kwargs | {"starts": cached}))
    assert plan.status.to_k8s()["replicasFromCache"] == 2
    assert cond(plan, "Degraded") == ("False", "AsExpected") and plan.events == []
    compiled = (Start("p-1", False), Start("p-2", True, 2, 41.7))
    written = plan.status.to_k8s()
    warned = step(body({"replicas": 2}, **written), **(kwargs | {"starts": compiled}))
    assert warned.status.to_k8s()["replicasFromCache"] == 1
    assert cond(warned, "Degraded") == ("False", "ReplicaCompiled")
    message = find(warned.status.to_k8s()["conditions"], "Degraded")["message"]
    assert "p-2 (2 graphs, 42s in torch.compile)" in message
    assert [(e.type, e.reason) for e in warned.events] == [("Warning", "ReplicaCompiled")]
    assert warned.status.to_k8s()["phase"] == "Ready"  # it serves: a warning, no failure
    again = step(body({"replicas": 2}, **warned.status.to_k8s()), **(kwargs | {"starts": compiled}))
    assert again.events == []  # said once
