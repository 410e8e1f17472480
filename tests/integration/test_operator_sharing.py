"""Two SpyreModels with the same compile config share one Job; deleting one leaves the
other serving, and the Job with its remaining owner."""

from __future__ import annotations

from functools import partial

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render.weights_job import weights_job_name

pytestmark = pytest.mark.integration


def test_same_key_one_job_and_deleting_one_keeps_the_other(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    first, second = sim.model(namespace, "a"), sim.model(namespace, "b")
    sim.create(kube, first)
    sim.create(kube, second)
    weights = weights_job_name(parse(first).spec)
    sim.wait_for(
        lambda: sim.job_owners(kube, namespace, weights) == {"a", "b"}, "both own the download"
    )
    sim.download(kube, first)
    job = sim.job_name(first)
    assert sim.job_name(second) == job
    entry = sim.entry_name(first)  # the key's inventory entry owns it too
    sim.wait_for(
        lambda: sim.job_owners(kube, namespace, job) == {"a", "b", entry}, "all own the one Job"
    )
    jobs = kube.list("Job", namespace, "app.kubernetes.io/component=compile")
    assert [j["metadata"]["name"] for j in jobs] == [job]

    simulate.complete_job(kube, namespace, job)
    for name in ("a", "b"):
        sim.wait_for(partial(kube.get, "Deployment", namespace, name), f"Deployment {name}")
        simulate.make_deployment_available(kube, namespace, name)
        sim.wait_phase(kube, namespace, name, "Ready")
    before = sim.status(kube, namespace, "b")

    kube.request("DELETE", f"/apis/serving.spyre.dev/v1alpha1/namespaces/{namespace}/spyremodels/a")
    sim.wait_for(lambda: kube.get("SpyreModel", namespace, "a") is None, "a is deleted")
    sim.wait_for(
        lambda: kube.get("Deployment", namespace, "a") is None, "GC removes a's Deployment"
    )
    sim.wait_for(lambda: sim.job_owners(kube, namespace, job) == {"b", entry}, "the Job keeps b")
    assert kube.get("Deployment", namespace, "b") is not None
    assert sim.status(kube, namespace, "b") == before
