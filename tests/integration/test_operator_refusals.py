"""A spec the cluster refuses (a resource quota, a limit range) never starts a download or a
compile: the operator dry-runs the children that come after them, the serving Deployment
included, and says the API server's reason."""

from __future__ import annotations

import cluster_sim as sim
import pytest

from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration


def children(kube: Kube, namespace: str) -> list[str]:
    return [
        f"{kind} {obj['metadata']['name']}"
        for kind in ("Job", "PersistentVolumeClaim", "Deployment", "Service", "NetworkPolicy")
        for obj in kube.list(kind, namespace, "app.kubernetes.io/managed-by=spyre-operator")
    ]


def touch(kube: Kube, namespace: str, name: str) -> None:
    """A change of the SpyreModel (a label): the operator reconciles it again."""
    patch = {"metadata": {"labels": {"touched": "yes"}}}
    kube.patch("SpyreModel", namespace, name, patch)


def test_a_quota_that_refuses_the_deployment_stops_the_compile_before_it_starts(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    quotas = f"/api/v1/namespaces/{namespace}/resourcequotas"
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-deployments"},
        "spec": {"hard": {"count/deployments.apps": "0"}},
    }
    kube.request("POST", quotas, quota)
    # The quota controller (not run here) publishes what is hard and used; admission reads it.
    hard = {
        "status": {"hard": {"count/deployments.apps": "0"}, "used": {"count/deployments.apps": "0"}}
    }
    kube.request("PATCH", f"{quotas}/no-deployments/status", hard,
                 content_type="application/merge-patch+json")  # fmt: skip

    sim.create(kube, sim.model(namespace, "quota"))
    st = sim.wait_phase(kube, namespace, "quota", "Invalid")
    status, reason, message = sim.condition(st, "Degraded")
    assert (status, reason) == ("True", "Refused")
    assert message.startswith("the API server refuses Deployment quota (a dry run; nothing")
    assert "exceeded quota: no-deployments" in message
    assert children(kube, namespace) == []  # no download, no compile, no volume
    sim.wait_for(
        lambda: ("Warning", "Refused") in sim.events_for(kube, namespace, "quota"), "Event"
    )

    # The quota is lifted: the next reconcile (a change here, or the resync) goes on.
    kube.request("DELETE", f"{quotas}/no-deployments")
    touch(kube, namespace, "quota")
    sim.wait_phase(kube, namespace, "quota", "Downloading")
    assert any(c.startswith("Job spyre-weights-") for c in children(kube, namespace))
    assert operator.metrics()['spyre_operator_dry_runs_total{kind="Deployment"}'] >= 2


def test_a_limit_range_that_refuses_the_cache_volume_stops_before_the_download(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    """The volume is the reconcile's own first write: its refusal is said (Degraded
    ApplyFailed, with the server's reason) and nothing after it is written."""
    limits = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "small-volumes"},
        "spec": {"limits": [{"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}}]},
    }
    kube.request("POST", f"/api/v1/namespaces/{namespace}/limitranges", limits)
    volume = {"size": "50Gi", "accessMode": "ReadWriteOnce"}
    doc = sim.model(namespace, "big", sim.example(cache={"volume": volume}))
    sim.create(kube, doc)
    st = sim.wait_phase(kube, namespace, "big", "Degraded")
    reason, message = sim.condition(st, "Degraded")[1:]
    assert reason == "ApplyFailed" and message.startswith("writing PersistentVolumeClaim ")
    assert "maximum storage usage per PersistentVolumeClaim is 1Gi" in message
    assert children(kube, namespace) == []
