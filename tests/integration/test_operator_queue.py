"""The compile queue on a played cluster: never more compile Jobs at once than the limit,
the rest waiting in status in a fair order, each starting as one before it finishes; and
a restarted operator keeps the line (it is read from the cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.kube.client import Kube
from spyre_operator.reconcile.compile_queue import ordinal

pytestmark = pytest.mark.integration

ON_A_PVC = {  # no download: the compile is the first step
    "id": "ibm-ai-platform/micro-g3.3-8b-instruct-1b",
    "path": "/models/micro",
    "source": {"pvc": {"claimName": "models"}},
}


def doc(namespace: str, name: str, seqs: int) -> dict[str, Any]:
    """A SpyreModel with a cache key of its own (maxNumSeqs is part of the key)."""
    base = sim.example(model=ON_A_PVC)
    base["spec"]["batching"]["continuous"]["maxNumSeqs"] = seqs
    return sim.model(namespace, name, base)


def running_compiles(kube: Kube, namespace: str) -> set[str]:
    jobs = kube.list("Job", namespace, "app.kubernetes.io/component=compile")
    return {
        j["metadata"]["name"]
        for j in jobs
        if not any(
            c["type"] in ("Complete", "Failed") and c["status"] == "True"
            for c in j.get("status", {}).get("conditions") or []
        )
    }


def settled(
    kube: Kube,
    namespace: str,
    limit: int,
    running: list[dict[str, Any]],
    waiting: list[dict[str, Any]],
    exact_total: bool = True,
) -> None:
    """Wait until the Jobs of `running` (exactly) run and `waiting` wait in this order;
    at every look, never more than `limit` compile Jobs run."""

    def probe() -> bool | None:
        now = running_compiles(kube, namespace)
        assert len(now) <= limit, f"{sorted(now)} compile at once (limit {limit})"
        if now != {sim.job_name(d) for d in running}:
            return None
        for place, d in enumerate(waiting, 1):
            st = sim.status(kube, namespace, d["metadata"]["name"])
            _, reason, message = sim.condition(st, "CacheReady")
            total = f" of {len(waiting)}" if exact_total else " of "
            words = f"{ordinal(place)}{total}"
            if (st.get("phase"), reason) != ("Compiling", "Queued") or words not in message:
                return None
            if f"; {len(running)} compile" not in message:
                return None
        return True

    names = [d["metadata"]["name"] for d in running], [d["metadata"]["name"] for d in waiting]
    sim.wait_for(probe, f"{names[0]} compile, {names[1]} wait in this order")


def create_in_order(kube: Kube, docs: list[dict[str, Any]]) -> None:
    """One after the other, each seen by the operator first (creation order = line order)."""
    for d in docs:
        sim.create(kube, d)
        sim.wait_phase(kube, d["metadata"]["namespace"], d["metadata"]["name"], "Compiling")


def finish(kube: Kube, d: dict[str, Any]) -> None:
    """The compile succeeds; the SpyreModel serves."""
    namespace, name = d["metadata"]["namespace"], d["metadata"]["name"]
    simulate.complete_job(kube, namespace, sim.job_name(d))
    sim.wait_for(lambda: kube.get("Deployment", namespace, name), f"Deployment {name} exists")
    simulate.make_deployment_available(kube, namespace, name)
    sim.wait_phase(kube, namespace, name, "Ready")


@pytest.fixture
def two_at_once(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[sim.Operator]:
    log = tmp_path / "operator.log"
    with sim.running_operator(kubeconfig, namespace, log, 300.0, "--max-compiles", "2") as op:
        yield op


def test_at_most_two_compile_at_once_and_all_get_ready(
    kubeconfig: Path, namespace: str, two_at_once: sim.Operator
) -> None:
    kube = sim.kube_for(kubeconfig)
    docs = [doc(namespace, f"q{n}", n) for n in range(1, 6)]
    assert len({sim.job_name(d) for d in docs}) == 5
    create_in_order(kube, docs)
    # Arrivals behind do not refresh the count of those ahead: positions are exact, the
    # totals once the line moves.
    settled(kube, namespace, 2, docs[:2], docs[2:], exact_total=False)
    message = sim.condition(sim.status(kube, namespace, "q5"), "CacheReady")[2]
    assert "3rd of 3 waiting; 2 compiles running (at most 2 at once)" in message
    queued = f'spyre_operator_compile_queue_keys{{namespace="{namespace}"}}'
    sim.wait_for(lambda: two_at_once.metrics().get(queued) == 3, "3 keys queued in the metrics")
    finish(kube, docs[0])
    settled(kube, namespace, 2, docs[1:3], docs[3:])
    finish(kube, docs[1])
    settled(kube, namespace, 2, docs[2:4], docs[4:])
    finish(kube, docs[2])
    settled(kube, namespace, 2, docs[3:5], [])
    for d in docs[3:]:
        finish(kube, d)
    for d in docs:
        assert sim.status(kube, namespace, d["metadata"]["name"])["phase"] == "Ready"
    sim.wait_for(lambda: two_at_once.metrics().get(queued) == 0, "no key queued in the metrics")


def test_a_restarted_operator_keeps_the_line(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    kube = sim.kube_for(kubeconfig)
    docs = [doc(namespace, f"r{n}", n) for n in range(1, 4)]
    flags = ("--max-compiles", "1")
    with sim.running_operator(kubeconfig, namespace, tmp_path / "first.log", 300.0, *flags) as op:
        create_in_order(kube, docs)
        settled(kube, namespace, 1, docs[:1], docs[1:], exact_total=False)
        op.kill()
        simulate.complete_job(kube, namespace, sim.job_name(docs[0]))  # while it is down
    with sim.running_operator(kubeconfig, namespace, tmp_path / "second.log", 300.0, *flags):
        sim.wait_phase(kube, namespace, "r1", "Starting")
        settled(kube, namespace, 1, docs[1:2], docs[2:])  # r2 next, never r3 first
        finish(kube, docs[1])
        settled(kube, namespace, 1, docs[2:], [])
        finish(kube, docs[2])
