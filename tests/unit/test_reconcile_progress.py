"""Reading a running compile's progress from its pod's log (reconcile/progress.py): the
newest step, bounded, at most once per interval per Job, and a failure is no progress,
said once. The log lines are made with the runtime's own format (report.LOG_FORMAT,
contract.step_line), never copied by hand."""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

import pytest
import urllib3
from apilib import example
from kubernetes import client
from test_reconcile_engine import NS, FakeKube, Sink, finish, finish_weights

from spyre_operator.api.names import KIND
from spyre_operator.controller.echoes import Echoes
from spyre_operator.controller.failures import complain
from spyre_operator.controller.kinds import Controller
from spyre_operator.controller.workqueue import WorkQueue
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.progress import LIMIT_BYTES, TAIL_LINES, ProgressReader, Reading
from spyre_operator.reconcile.shared import Shared
from spyre_runtime.contract import Step, step_line
from spyre_runtime.report import LOG_FORMAT

pytestmark = pytest.mark.unit

JOB = "spyre-compile-abc"


def log_line(step: Step) -> str:
    """A line exactly as the compile pod writes it."""
    record = logging.makeLogRecord(
        {"msg": step_line(step), "levelname": "INFO", "levelno": logging.INFO}
    )
    return logging.Formatter(LOG_FORMAT).format(record)


def pod(name: str, phase: str, created: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created, "labels": {"job-name": JOB}},
        "status": {"phase": phase},
    }


class PodLogs(Kube):
    """The pods of one Job and their logs; `fail` makes every log read raise it."""

    def __init__(self, pods: list[dict[str, Any]], log: str) -> None:
        super().__init__(api=None)
        self.pods, self.log = pods, log
        self.fail: Exception | None = None
        self.asked: list[tuple[str, str, str, int, int, float]] = []

    def list(
        self, kind: str, namespace: str, selector: str, consistent: bool = False
    ) -> list[dict[str, Any]]:
        assert kind == "Pod" and selector.startswith("job-name=spyre-compile-")
        return self.pods

    def log_tail(
        self, namespace: str, pod: str, container: str, lines: int, limit: int, timeout: float
    ) -> str:
        self.asked.append((namespace, pod, container, lines, limit, timeout))
        if self.fail is not None:
            raise self.fail
        return self.log


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


VLLM_NOISE = "INFO 11-25 17:47:44 [core.py:100] init engine (profile, create kv cache) took 3 s"


def test_the_newest_running_pods_last_step_is_read_bounded_once_per_interval() -> None:
    text = "\n".join(
        [
            log_line(Step("warmup", 0.4, "cache /cache/abc; vllm serve /models/m")),
            log_line(Step("engine", 2.1, "loading the model and warming up")),
            VLLM_NOISE,
            log_line(Step("engine", 242.0, "still running: [WARMUP] (2/3) for prompt length 64")),
            VLLM_NOISE,
        ]
    )
    pods = [pod("c-0", "Failed", "T0"), pod("c-1", "Running", "T1"), pod("c-2", "Pending", "T2")]
    kube, clock = PodLogs(pods, text), Clock()
    reader = ProgressReader(kube, 60, clock)
    expected = Reading(
        "c-1", Step("engine", 242.0, "still running: [WARMUP] (2/3) for prompt length 64")
    )
    assert reader("ns", JOB) == expected
    ((namespace, name, container, lines, limit, timeout),) = kube.asked
    assert (namespace, name, container) == ("ns", "c-1", "precompile")
    assert (lines, limit) == (TAIL_LINES, LIMIT_BYTES) and timeout <= 5
    clock.now += 50  # other events reconcile its owners: the reading is reused
    assert reader("ns", JOB) == expected and len(kube.asked) == 1
    clock.now += 10  # the heartbeat's reconcile, one interval after the first read
    kube.log = log_line(Step("engine", 302.0, "still running"))
    assert reader("ns", JOB) == Reading("c-1", Step("engine", 302.0, "still running"))
    assert len(kube.asked) == 2 and reader.reads == 2


def test_no_running_pod_or_no_step_yet_is_no_progress() -> None:
    kube = PodLogs([pod("c-0", "Pending", "T0")], "")
    assert ProgressReader(kube, 60, Clock())("ns", JOB) is None
    assert kube.asked == []  # a pending pod has no log to read
    kube = PodLogs([pod("c-0", "Running", "T0")], VLLM_NOISE)
    assert ProgressReader(kube, 60, Clock())("ns", JOB) is None


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (ApiError(403, "Forbidden", {"message": 'cannot get resource "pods/log"'}), "pods/log"),
        (ApiError(400, "Bad Request", {"message": "pod c-0 does not have a host"}), "host"),
        (urllib3.exceptions.ReadTimeoutError(None, "/log", "read timed out"), "timed out"),  # type: ignore[arg-type]
        (ConnectionRefusedError(111, "Connection refused"), "refused"),
    ],
)
def test_a_failed_read_is_no_progress_said_once(
    failure: Exception, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    kube, clock = PodLogs([pod("c-0", "Running", "T0")], ""), Clock()
    kube.fail = failure
    reader = ProgressReader(kube, 60, clock)
    caplog.set_level(logging.WARNING, "spyre_operator.reconcile.progress")
    for _ in range(3):
        assert reader("ns", JOB) is None
        assert reader("ns", "spyre-compile-other") is None
        clock.now += 60
    (record,) = caplog.records
    assert said in record.getMessage() and "left out" in record.getMessage()
    assert reader.reads == 6  # tried again each interval: a permission may be granted later


def test_readings_of_jobs_nobody_asks_about_are_forgotten() -> None:
    kube, clock = PodLogs([pod("c-0", "Running", "T0")], log_line(Step("engine", 1.0))), Clock()
    reader = ProgressReader(kube, 60, clock)
    reader("ns", JOB)
    clock.now += 60 * 11
    reader("ns", "spyre-compile-other")
    assert list(reader._readings) == [("ns", "spyre-compile-other")]


MODEL = "micro-granite-cpu"


def test_a_running_compile_is_reconciled_again_for_its_progress_an_idle_model_is_not() -> None:
    kube, clock = FakeKube(), Clock()
    model = example(MODEL)
    model["metadata"] |= {"uid": "uid-m", "generation": 1, "namespace": NS}
    kube._store(model)
    progress = ProgressReader(kube, 60, clock)
    rec = Reconciler(kube, Sink(), shared=Shared(progress=progress, clock=lambda: "T"))
    assert rec.reconcile(NS, MODEL).requeue_after is None  # the weights Job
    finish_weights(kube)
    assert rec.reconcile(NS, MODEL).requeue_after is None  # the compile Job is created: no pod yet
    assert rec.reconcile(NS, MODEL).requeue_after is None  # the Job seen: its key's inventory entry
    (job,) = [o for (k, _, n), o in kube.objects.items() if k == "Job" and "-compile-" in n]
    job["status"] = {"active": 1}
    name = job["metadata"]["name"]
    kube._store(
        {
            "kind": "Pod",
            "metadata": {"name": f"{name}-x", "namespace": NS, "labels": {"job-name": name}},
            "status": {"phase": "Running"},
        }
    )

    def stored() -> dict[str, Any]:
        return kube.get("SpyreModel", NS, MODEL)["status"]["cache"]  # type: ignore[index]

    kube.logs[f"{name}-x"] = log_line(Step("engine", 120.0, "still running"))
    writes = kube.total_writes()
    assert rec.reconcile(NS, MODEL).requeue_after == 60
    assert stored()["progress"] == {
        "step": "engine",
        "elapsedSeconds": 120.0,
        "detail": "still running",
        "pod": f"{name}-x",
    }
    assert kube.total_writes() == writes + 1
    clock.now += 30  # another event: the same reading, nothing to write
    assert rec.reconcile(NS, MODEL).requeue_after == 60
    assert kube.total_writes() == writes + 1 and progress.reads == 1
    clock.now += 30  # the heartbeat
    kube.logs[f"{name}-x"] = log_line(Step("engine", 180.0, "still running"))
    assert rec.reconcile(NS, MODEL).requeue_after == 60
    assert stored()["progress"]["elapsedSeconds"] == 180.0
    assert kube.total_writes() == writes + 2

    # the work queue keeps the promise: one run pending in 60 s, cancelled when forgotten
    ctl: Controller
    queue = WorkQueue(lambda k: ctl.reconcile(k[1], k[2]), complain, clock)
    ctl = Controller(rec, queue, Echoes())
    ctl.enqueue(NS, MODEL)
    assert queue.process(block=False)
    key = (KIND, NS, MODEL)
    assert queue.retry_in(key) == 60 and queue.failures(key) == 0
    clock.now += 60
    assert queue.process(block=False) and queue.stats["requeues"] == 1
    assert progress.reads == 3  # the heartbeat's run read the log again
    ctl.forget(NS, MODEL)
    assert queue.retry_in(key) is None

    finish(kube, "compile", {"ok": True, "seconds": 200})  # the Job completes
    assert rec.reconcile(NS, MODEL).requeue_after is None
    assert "progress" not in stored() and stored()["ok"] is True
    writes = kube.total_writes()
    clock.now += 600
    for _ in range(3):  # idle: nothing read, written or asked
        assert rec.reconcile(NS, MODEL).requeue_after is None
    assert kube.total_writes() == writes and progress.reads == 3


@pytest.mark.timeout(60)  # a hang guard: the read times out after 0.5 s, or never
def test_a_log_read_that_hangs_costs_one_timeout_not_four() -> None:
    """A kubelet that does not answer: the API server holds the GET open. The read is one
    attempt (the client's pool would retry a timed-out GET three times)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:  # closed
                return

    threading.Thread(target=accept, daemon=True).start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.getsockname()[1]}"
    kube = Kube(client.ApiClient(configuration))
    try:
        with pytest.raises(urllib3.exceptions.HTTPError):
            kube.log_tail("ns", "c-0", "precompile", TAIL_LINES, LIMIT_BYTES, 0.5)
    finally:
        server.close()
        for conn in accepted:
            conn.close()
    assert len(accepted) == 1
