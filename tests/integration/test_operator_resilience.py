"""Drift and restarts: owned objects are restored, a killed operator continues from the
cluster's state, and replicas follow the scale subresource without a fight."""

from __future__ import annotations

from pathlib import Path

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.kube.client import STRATEGIC, Kube, path

pytestmark = pytest.mark.integration


def _uid(kube: Kube, kind: str, namespace: str, name: str) -> str | None:
    found = kube.get(kind, namespace, name)
    return found["metadata"]["uid"] if found else None


def test_deleted_or_edited_children_are_restored(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    sim.to_ready(kube, sim.model(namespace, "drift"))
    old = _uid(kube, "Deployment", namespace, "drift")
    kube.request("DELETE", f"/apis/apps/v1/namespaces/{namespace}/deployments/drift")
    sim.wait_for(
        lambda: _uid(kube, "Deployment", namespace, "drift") not in (None, old),
        "the Deployment is back",
    )
    image = _image(kube, namespace, "drift")
    # Someone edits fields the operator owns (as kubectl edit does: its own field manager).
    # Server-side apply takes them back; what another manager adds, it leaves alone.
    edits = {
        "Service": {"spec": {"ports": [{"port": 8000, "targetPort": 9999}]}},
        "Deployment": {
            "spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": "evil:1"}]}}}
        },
    }
    for kind, edit in edits.items():
        kube.request(
            "PATCH",
            path(kind, namespace, "drift"),
            edit,
            content_type=STRATEGIC,
            query={"fieldManager": "kubectl-edit"},
        )
    sim.wait_for(
        lambda: kube.get("Service", namespace, "drift")["spec"]["ports"][0]["targetPort"] == "http",
        "the Service's targetPort is restored",
    )
    sim.wait_for(
        lambda: _image(kube, namespace, "drift") == image, "the Deployment's image is back"
    )


def _image(kube: Kube, namespace: str, name: str) -> str | None:
    deploy = kube.get("Deployment", namespace, name)
    if deploy is None:
        return None
    image: str = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


PHASES = ("Downloading", "Compiling", "Starting", "Ready", "Degraded", "Failed")


def test_killed_operator_resumes_from_the_cluster(
    kube: Kube, namespace: str, operator: sim.Operator, kubeconfig: Path, tmp_path: Path
) -> None:
    doc = sim.model(namespace, "crash")
    sim.create(kube, doc)
    job = sim.compile_job(kube, doc)
    job_uid = _uid(kube, "Job", namespace, job)
    operator.kill()
    simulate.complete_job(kube, namespace, job)  # the compile finishes while it is down

    successor = sim.Operator(kubeconfig, namespace, tmp_path / "operator-2.log", resync=300.0)
    try:
        sim.wait_phase(kube, namespace, "crash", "Starting")
        simulate.make_deployment_available(kube, namespace, "crash")
        st = sim.wait_phase(kube, namespace, "crash", "Ready")
    except BaseException:
        print(successor.output(80))
        raise
    finally:
        successor.stop()
    assert _uid(kube, "Job", namespace, job) == job_uid  # the same Job, never a second
    jobs = kube.list("Job", namespace, "app.kubernetes.io/component=compile")
    assert len(jobs) == 1
    assert st["cache"]["ok"] is True
    # Starting was reached while no operator ran; each phase's Event is there once
    # (a transition's Event is posted before its status is written).
    phases = [r for _, r in sim.events_for(kube, namespace, "crash") if r in PHASES]
    assert phases == ["Downloading", "Compiling", "Starting", "Ready"], phases


def test_scale_subresource_drives_the_deployment(
    kube: Kube, namespace: str, operator: sim.Operator, kubectl: object
) -> None:
    sim.to_ready(kube, sim.model(namespace, "scaled"))
    run = kubectl  # the session fixture: kubectl against the test control plane
    run("scale", "-n", namespace, "spyremodel/scaled", "--replicas=3")  # type: ignore[operator]

    def replicas() -> int:
        return int((kube.get("Deployment", namespace, "scaled") or {})["spec"]["replicas"])

    sim.wait_for(lambda: replicas() == 3, "the Deployment follows the scale subresource")
    simulate.make_deployment_available(kube, namespace, "scaled")
    sim.wait_phase(kube, namespace, "scaled", "Ready", readyReplicas=3, replicas=3)
    scale = kube.request(
        "GET", f"/apis/serving.spyre.dev/v1alpha1/namespaces/{namespace}/spyremodels/scaled/scale"
    )
    assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 3
    assert "serving.spyre.dev/model=scaled" in scale["status"]["selector"]
    # Further reconciles (a spec-neutral label change triggers one) keep the HPA's number.
    before = operator.metrics()["spyre_operator_reconciles_total"]  # read first: no race
    kube.patch("SpyreModel", namespace, "scaled", {"metadata": {"labels": {"touched": "1"}}})
    sim.wait_for(
        lambda: operator.metrics()["spyre_operator_reconciles_total"] > before, "another reconcile"
    )
    assert replicas() == 3 and sim.get(kube, namespace, "scaled")["spec"]["replicas"] == 3
