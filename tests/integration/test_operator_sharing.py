"""Two SpyreModels with the same compile config share one Job; deleting one leaves the
other serving, and the Job with its remaining owner."""

from __future__ import annotations

from functools import partial

import pytest
from cluster_sim import (
    Operator,
    create,
    download,
    entry_name,
    job_name,
    job_owners,
    model,
    status,
    wait_for,
    wait_phase,
)

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render.weights_job import weights_job_name

pytestmark = pytest.mark.integration


def test_same_key_one_job_and_deleting_one_keeps_the_other(
    kube: Kube, namespace: str, operator: Operator
) -> None:
    first, second = model(namespace, "a"), model(namespace, "b")
    create(kube, first)
    create(kube, second)
    weights = weights_job_name(parse(first).spec)
    wait_for(lambda: job_owners(kube, namespace, weights) == {"a", "b"}, "both own the download")
    download(kube, first)
    job = job_name(first)
    assert job_name(second) == job
    entry = entry_name(first)  # the key's inventory entry owns it too
    wait_for(lambda: job_owners(kube, namespace, job) == {"a", "b", entry}, "all own the one Job")
    jobs = kube.list("Job", namespace, "app.kubernetes.io/component=compile")
    assert [j["metadata"]["name"] for j in jobs] == [job]

    simulate.complete_job(kube, namespace, job)
    for name in ("a", "b"):
        wait_for(partial(kube.get, "Deployment", namespace, name), f"Deployment {name}")
        simulate.make_deployment_available(kube, namespace, name)
        wait_phase(kube, namespace, name, "Ready")
    before = status(kube, namespace, "b")

    kube.request("DELETE", f"/apis/serving.spyre.dev/v1alpha1/namespaces/{namespace}/spyremodels/a")
    wait_for(lambda: kube.get("SpyreModel", namespace, "a") is None, "a is deleted")
    wait_for(lambda: kube.get("Deployment", namespace, "a") is None, "GC removes a's Deployment")
    wait_for(lambda: job_owners(kube, namespace, job) == {"b", entry}, "the Job keeps b")
    assert kube.get("Deployment", namespace, "b") is not None
    assert status(kube, namespace, "b") == before
