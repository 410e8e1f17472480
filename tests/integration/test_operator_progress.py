"""A running compile's progress on a control plane without a kubelet: the compile pod
runs (as the tests play it) but its log cannot be read, so the model shows no progress,
keeps reconciling each progress interval without writing, says so once in its log, and
goes on to its cache when the Job completes. (With a kubelet the progress is real:
tests/node/test_node_stories.py.)"""

# ruff: noqa: F811 (test arguments named after the fixtures imported from cluster_sim)
from __future__ import annotations

from pathlib import Path

import pytest
from cluster_sim import (  # noqa: F401 (fixtures)
    condition,
    create,
    download,
    job_name,
    kube,
    model,
    running_operator,
    wait_for,
    wait_phase,
)

from spyre_devcluster import simulate
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration

WARNING = "compile progress of Job"


def test_an_unreadable_compile_log_is_no_progress_no_error_and_said_once(
    kube: Kube, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    log = tmp_path / "operator.log"
    with running_operator(kubeconfig, namespace, log, 300.0, "--progress-seconds", "1") as op:
        doc = model(namespace, "m1")
        create(kube, doc)
        download(kube, doc)
        wait_phase(kube, namespace, "m1", "Compiling")
        job = job_name(doc)
        wait_for(lambda: kube.get("Job", namespace, job), "the compile Job exists")
        simulate.start_job_pod(kube, namespace, job)

        # The heartbeat reconciles it every second; each reads (and fails to read) the log.
        start = op.metrics()
        wait_for(
            lambda: (
                op.metrics()["spyre_operator_reconciles_total"]
                >= start["spyre_operator_reconciles_total"] + 5
            ),
            "five more reconciles, from the progress interval alone",
        )
        wait_for(lambda: WARNING in log.read_text(), "the failed read is said")
        now = op.metrics()
        assert (
            now["spyre_operator_status_writes_total"] == start["spyre_operator_status_writes_total"]
        )
        assert now.get("spyre_operator_reconcile_errors_total", 0) == 0
        assert now["spyre_operator_reconcile_retries_total"] == 0
        st = kube.get("SpyreModel", namespace, "m1")["status"]
        assert st["phase"] == "Compiling" and "progress" not in st["cache"]
        assert condition(st, "Degraded")[:2] == ("False", "AsExpected")
        (said,) = [line for line in log.read_text().splitlines() if WARNING in line]
        assert job in said, said

        simulate.complete_job(kube, namespace, job)
        st = wait_phase(kube, namespace, "m1", "Starting")
        assert st["cache"]["ok"] is True and "progress" not in st["cache"]
        assert log.read_text().count(WARNING) == 1
