"""The children's watches are filtered by the API server: objects without the operator's
label never reach it, in a watched namespace or another; each watched namespace has its
watches; a user's existing (unlabelled) cache claim is found by a GET, not created."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration

MANAGED = {"app.kubernetes.io/managed-by": "spyre-operator"}
RECEIVED = "spyre_operator_watch_events_total"
KINDS = ("Pod", "Job", "PersistentVolumeClaim")


@pytest.fixture
def namespaces(kube: Kube, namespace: str) -> Iterator[list[str]]:
    """The test's namespace and two more: [watched, also watched, not watched]."""
    names = [namespace, f"{namespace}-b", f"{namespace}-c"]
    for name in names[1:]:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        kube.request("POST", "/api/v1/namespaces", body)
    for name in names:
        simulate.ensure_service_account(kube, name)
    yield names
    for name in names[1:]:
        kube.request("DELETE", f"/api/v1/namespaces/{name}")


def received(metrics: dict[str, float]) -> dict[str, float]:
    """The objects the watches received, of the kinds they received any of."""
    return {k: v for k, v in metrics.items() if k.startswith(RECEIVED) and v}


def test_unlabelled_objects_never_reach_the_operator(
    kube: Kube, namespaces: list[str], kubeconfig: Path, tmp_path: Path
) -> None:
    watched, also, other = namespaces
    log, flags = tmp_path / "operator.log", ("--namespace", also)
    with sim.running_operator(kubeconfig, watched, log, 300.0, *flags) as operator:
        assert sum(received(operator.metrics()).values()) == 0
        for i, ns in enumerate([watched, also, other] * 10):
            for kind in KINDS:
                sim.create(kube, simulate.unrelated_object(kind, ns, f"u{i}", {"app": "unrelated"}))
        # Then one labelled object of each kind in each watched namespace: once the
        # operator has them, it has what the API server sent before them (in order).
        for ns in (watched, also):
            for kind in KINDS:
                sim.create(kube, simulate.unrelated_object(kind, ns, "marker", MANAGED))
        expected = {f'{RECEIVED}{{kind="{kind}"}}': 2.0 for kind in KINDS}
        sim.wait_for(lambda: received(operator.metrics()) == expected, "the six labelled objects")

        # The second namespace's watches carry the model through: its compile Job's
        # completion (a watch event; the resync is 5 min away) brings the Deployment.
        source = {"id": "m", "path": "/models/m", "source": {"hostPath": {"path": "/srv/m"}}}
        doc = sim.model(also, "m", sim.example(model=source))
        sim.create(kube, doc)
        job = sim.wait_for(lambda: kube.get("Job", also, sim.job_name(doc)), "the compile Job")
        simulate.complete_job(kube, also, job["metadata"]["name"])
        sim.wait_for(lambda: kube.get("Deployment", also, "m"), "the Deployment")
        assert operator.metrics()["spyre_operator_reconcile_retries_total"] == 0


def test_an_existing_unlabelled_claim_is_used_not_created(
    kube: Kube, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    sim.create(kube, simulate.unrelated_object("PersistentVolumeClaim", namespace, "mine", {}))
    doc = sim.model(namespace, "m", sim.example())
    doc["spec"]["cache"] = {"volume": {"claimName": "mine", "create": True}}
    with sim.running_operator(kubeconfig, namespace, tmp_path / "operator.log") as operator:
        sim.create(kube, doc)
        sim.wait_phase(kube, namespace, "m", "Downloading")
        metrics = operator.metrics()
        assert (
            'spyre_operator_api_requests_total{verb="POST",kind="PersistentVolumeClaim"}'
            not in (metrics)
        )
        assert f'{RECEIVED}{{kind="PersistentVolumeClaim"}}' not in received(metrics)
