"""Many SpyreModels at once reach Ready, and an idle resync writes nothing."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render.weights_job import weights_job_name

pytestmark = pytest.mark.integration

MODELS = 50
KEYS = 5  # 10 SpyreModels share each compile Job


def _phases(kube: Kube, namespace: str) -> dict[str, str]:
    items = kube.request(
        "GET", f"/apis/serving.spyre.dev/v1alpha1/namespaces/{namespace}/spyremodels"
    )["items"]
    return {i["metadata"]["name"]: (i.get("status") or {}).get("phase", "") for i in items}


def _versions(kube: Kube, namespace: str) -> dict[str, str]:
    """resourceVersion of every object the operator could write, and the Event count."""
    out: dict[str, str] = {}
    for prefix, plural in [
        ("apis/serving.spyre.dev/v1alpha1", "spyremodels"),
        ("apis/batch/v1", "jobs"),
        ("apis/apps/v1", "deployments"),
        ("api/v1", "services"),
        ("api/v1", "persistentvolumeclaims"),
    ]:
        items = kube.request("GET", f"/{prefix}/namespaces/{namespace}/{plural}")["items"]
        for item in items:
            out[f"{plural}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    events = kube.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    out["events"] = str(len(events))
    return out


def _few_reads(operator: Any) -> bool:
    """Over two resync passes or more, the operator's API reads are a fifth of its
    reconciles at most (with a GET per reconcile they would be as many)."""
    before = operator.metrics()
    count, reads = "spyre_operator_reconciles_total", "spyre_operator_api_reads_total"
    sim.wait_for(lambda: operator.metrics()[count] >= before[count] + 2 * MODELS, "two passes")
    after = operator.metrics()
    return after[reads] - before[reads] < (after[count] - before[count]) / 5


def test_fifty_models_reach_ready_and_idle_resync_writes_nothing(
    kube: Kube, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    docs: list[dict[str, Any]] = []
    for i in range(MODELS):
        doc = sim.example()
        doc["spec"]["batching"]["continuous"]["maxNumSeqs"] = 1 + i % KEYS
        docs.append(sim.model(namespace, f"m{i:02d}", doc))
    resync = 3.0
    log, flags = tmp_path / "operator.log", ("--max-compiles", str(KEYS))  # all at once
    with sim.running_operator(kubeconfig, namespace, log, resync, *flags) as operator:
        for doc in docs:
            sim.create(kube, doc)
        # One download for all: the same model and revision.
        (weights,) = {weights_job_name(parse(doc).spec) for doc in docs}
        sim.wait_for(
            lambda: len(sim.job_owners(kube, namespace, weights)) == MODELS,
            "all own the download",
            180,
        )
        sim.download(kube, docs[0])
        jobs = sorted({sim.job_name(doc) for doc in docs})
        assert len(jobs) == KEYS
        for job in jobs:
            sim.wait_for(partial(kube.get, "Job", namespace, job), f"Job {job}", timeout=180)
        sim.wait_for(
            lambda: set(_phases(kube, namespace).values()) == {"Compiling"},
            "all Compiling",
            timeout=180,
        )
        # Not Ready: the resync's copies come from its LISTs, not a GET per object. Polled:
        # the first passes may still meet the changes the creates left (each with its GET).
        sim.wait_for(lambda: _few_reads(operator), "two resync passes without a GET each", 180)
        for job in jobs:
            owners = sim.job_owners(kube, namespace, job)  # the key's models and its entry
            assert len(owners - {f"spyre-cache-{job[-12:]}"}) == MODELS // KEYS, owners
            simulate.complete_job(kube, namespace, job)
        for doc in docs:
            name = doc["metadata"]["name"]
            sim.wait_for(
                partial(kube.get, "Deployment", namespace, name),
                f"Deployment {name}",
                timeout=180,
            )
            simulate.make_deployment_available(kube, namespace, name)
        sim.wait_for(
            lambda: set(_phases(kube, namespace).values()) == {"Ready"}, "all Ready", timeout=180
        )

        # Idle: two full resync passes over every model without one write. Polled,
        # because Events of the last transitions may still be in flight at first.
        def idle_pass() -> bool:
            versions, metrics = _versions(kube, namespace), operator.metrics()
            reconciles = metrics["spyre_operator_reconciles_total"]
            sim.wait_for(
                lambda: (
                    operator.metrics()["spyre_operator_reconciles_total"] >= reconciles + 2 * MODELS
                ),
                "two resync passes",
            )
            after = operator.metrics()
            writes = "spyre_operator_api_writes_total"
            return after[writes] == metrics[writes] and _versions(kube, namespace) == versions

        sim.wait_for(idle_pass, "an idle resync pass that writes nothing", timeout=180)
        sim.wait_for(lambda: _few_reads(operator), "two idle passes without a GET each", 180)
        # Each pass queued every SpyreModel and every key's inventory entry, spread over
        # the period (a sweep would take a fraction of a second).
        got = operator.metrics()
        assert got["spyre_operator_resync_passes_total"] >= 2
        assert got["spyre_operator_resync_pass_objects"] == MODELS + KEYS
        objects = MODELS + KEYS
        assert got["spyre_operator_resync_pass_seconds"] >= resync * (objects - 1) / objects
