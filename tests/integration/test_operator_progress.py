"""A running compile's progress on a control plane without a kubelet: the compile pod
runs (as the tests play it) but its log cannot be read, so the model shows no progress,
keeps reconciling each progress interval without writing, says so once in its log, and
goes on to its cache when the Job completes. (With a kubelet the progress is real:
tests/node/test_node_stories.py.)"""

from __future__ import annotations

from pathlib import Path

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration

WARNING = "compile progress of Job"
RECONCILES, WRITES = "spyre_operator_reconciles_total", "spyre_operator_status_writes_total"


def quiet(op: sim.Operator, reconciles: int) -> dict[str, float] | None:
    """The metrics after `reconciles` more reconciles, or None when they wrote status."""
    before = op.metrics()
    goal = before[RECONCILES] + reconciles

    def reached() -> dict[str, float] | None:
        now = op.metrics()
        return now if now[RECONCILES] >= goal else None

    now = sim.wait_for(reached, f"{reconciles} more reconciles")
    return now if now[WRITES] == before[WRITES] else None


def test_an_unreadable_compile_log_is_no_progress_no_error_and_said_once(
    kube: Kube, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    log = tmp_path / "operator.log"
    with sim.running_operator(kubeconfig, namespace, log, 300.0, "--progress-seconds", "1") as op:
        doc = sim.model(namespace, "m1")
        sim.create(kube, doc)
        sim.download(kube, doc)
        sim.wait_phase(kube, namespace, "m1", "Compiling")
        job = sim.job_name(doc)
        sim.wait_for(lambda: kube.get("Job", namespace, job), "the compile Job exists")
        simulate.start_job_pod(kube, namespace, job)
        # The pod's start may be written (the seconds it waited for a node): count from
        # when the operator has seen it, two reconciles in a row that wrote nothing.
        sim.wait_for(lambda: quiet(op, 2), "two reconciles in a row that wrote nothing")

        # The heartbeat reconciles it every second; each reads (and fails to read) the log.
        now = quiet(op, 5)
        sim.wait_for(lambda: WARNING in log.read_text(), "the failed read is said")
        assert now is not None, "a status write with nothing new to say"
        assert now.get("spyre_operator_reconcile_errors_total", 0) == 0
        assert now["spyre_operator_reconcile_retries_total"] == 0
        st = kube.get("SpyreModel", namespace, "m1")["status"]
        assert st["phase"] == "Compiling" and "progress" not in st["cache"]
        assert sim.condition(st, "Degraded")[:2] == ("False", "AsExpected")
        (said,) = [line for line in log.read_text().splitlines() if WARNING in line]
        assert job in said, said

        simulate.complete_job(kube, namespace, job)
        st = sim.wait_phase(kube, namespace, "m1", "Starting")
        assert st["cache"]["ok"] is True and "progress" not in st["cache"]
        assert log.read_text().count(WARNING) == 1
