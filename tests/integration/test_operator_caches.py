"""SpyreCache: a configuration compiled ahead of demand (issue 15). A SpyreCache with a
SpyreModel's spec downloads and compiles it, and nothing else, with no SpyreModel; a
SpyreModel with that spec later joins the finished Job and serves without a compile of
its own; a SpyreCache waits in the same compile queue as SpyreModels."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.names import API_VERSION, CACHE_KIND
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration

COMPILES = "app.kubernetes.io/component=compile"


def precompile(namespace: str, name: str, spec_of: dict[str, Any]) -> dict[str, Any]:
    """A SpyreCache with a SpyreModel's spec, copied as it is."""
    return {
        "apiVersion": API_VERSION,
        "kind": CACHE_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": copy.deepcopy(spec_of["spec"]),
    }


def cache_status(kube: Kube, namespace: str, name: str, phase: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = kube.get(CACHE_KIND, namespace, name) or {}
        st = obj.get("status") or {}
        fresh = st.get("observedGeneration") == obj.get("metadata", {}).get("generation")
        return st if fresh and st.get("phase") == phase else None

    found: dict[str, Any] = sim.wait_for(probe, f"SpyreCache {name} is {phase}")
    return found


def test_a_precompile_makes_a_key_ready_and_a_later_model_creates_no_job(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    served = sim.model(namespace, "later")  # the SpyreModel that will come
    sim.create(kube, precompile(namespace, "ahead", served))
    st = cache_status(kube, namespace, "ahead", "Downloading")
    assert sim.condition(st, "Ready")[:2] == ("False", "Downloading")
    sim.download(kube, served)
    st = cache_status(kube, namespace, "ahead", "Compiling")
    job = sim.job_name(served)
    assert st["targetCacheKey"] and st["cache"]["jobName"] == job
    entry = sim.entry_name(served)  # the key's inventory entry, made with the Job, joins it
    sim.wait_for(
        lambda: sim.job_owners(kube, namespace, job) == {"ahead", entry}, "ahead and the entry"
    )
    live = kube.get("Job", namespace, job) or {}
    owners = {(o["kind"], o["name"], o["controller"]) for o in live["metadata"]["ownerReferences"]}
    assert owners == {(CACHE_KIND, "ahead", False), (CACHE_KIND, entry, False)}

    simulate.complete_job(kube, namespace, job, seconds=30, size=5 * 2**30)
    st = cache_status(kube, namespace, "ahead", "Ready")
    assert sim.condition(st, "Ready")[:2] == ("True", "Compiled")
    assert (st["cache"]["ok"], st["cache"]["bytes"]) == (True, 5 * 2**30)
    for kind in ("Deployment", "Service", "NetworkPolicy"):  # it compiles, it never serves
        assert kube.list(kind, namespace, "app.kubernetes.io/managed-by=spyre-operator") == []
    sim.wait_for(
        lambda: ("Normal", "Ready") in sim.events_for(kube, namespace, "ahead"), "its Event"
    )

    # The SpyreModel with that spec joins the finished Job: no second compile.
    sim.create(kube, served)
    sim.wait_for(lambda: kube.get("Deployment", namespace, "later"), "the Deployment exists")
    st = sim.wait_phase(kube, namespace, "later", "Starting")
    assert st["cache"]["ok"] is True and st["cache"]["jobName"] == job
    assert [j["metadata"]["name"] for j in kube.list("Job", namespace, COMPILES)] == [job]
    assert sim.job_owners(kube, namespace, job) == {"ahead", "later", entry}


def test_an_invalid_precompile_is_said_like_an_invalid_model(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    bad = precompile(namespace, "bad", sim.example(env=[{"name": "VLLM_PLUGINS", "value": "x"}]))
    sim.create(kube, bad)
    st = cache_status(kube, namespace, "bad", "Invalid")
    assert sim.condition(st, "Degraded")[1] == "InvalidSpec"
    assert "spec.env[0].name" in sim.condition(st, "Degraded")[2]
    assert kube.list("Job", namespace, "app.kubernetes.io/managed-by=spyre-operator") == []


@pytest.fixture
def one_at_once(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[sim.Operator]:
    log = tmp_path / "operator.log"
    with sim.running_operator(kubeconfig, namespace, log, 300.0, "--max-compiles", "1") as op:
        yield op


def test_a_precompile_waits_in_the_compile_queue_with_the_models(
    kube: Kube, namespace: str, one_at_once: sim.Operator
) -> None:
    on_a_pvc = {
        "id": "ibm-ai-platform/micro-g3.3-8b-instruct-1b",
        "path": "/models/micro",
        "source": {"pvc": {"claimName": "models"}},
    }
    first = sim.model(namespace, "first", sim.example(model=on_a_pvc))
    sim.create(kube, first)
    sim.wait_phase(kube, namespace, "first", "Compiling")
    sim.wait_for(lambda: kube.get("Job", namespace, sim.job_name(first)), "the model's Job exists")
    other = sim.example(model=on_a_pvc)
    other["spec"]["batching"]["continuous"]["maxNumSeqs"] = 2  # another key
    sim.create(kube, precompile(namespace, "next", other))

    def cache_reason(reason: str) -> dict[str, Any] | None:
        st = (kube.get(CACHE_KIND, namespace, "next") or {}).get("status") or {}
        return st if sim.condition(st, "CacheReady")[1] == reason else None

    st = sim.wait_for(lambda: cache_reason("Queued"), "the SpyreCache waits for a compile slot")
    assert (
        "1st of 1 waiting; 1 compile running (at most 1 at once)"
        in sim.condition(st, "CacheReady")[2]
    )
    assert len(kube.list("Job", namespace, COMPILES)) == 1
    simulate.complete_job(kube, namespace, sim.job_name(first))
    sim.wait_for(lambda: cache_reason("Compiling"), "the SpyreCache's compile starts")
    assert len(kube.list("Job", namespace, COMPILES)) == 2
    # the first's own reconcile of its Job's end may come after the queue moved
    sim.wait_for(
        lambda: sim.status(kube, namespace, "first")["cache"].get("ok") is True,
        "the model's status says its compile succeeded",
    )


def test_the_fleet_example_applies_and_shares_one_download(
    kube: Kube, namespace: str, operator: sim.Operator, kubectl: Any
) -> None:
    fleet = Path(__file__).resolve().parents[2] / "examples/caches/micro-granite-fleet.yaml"
    kubectl("apply", "-n", namespace, "-f", str(fleet))  # as docs/api.md says
    for name in ("micro-granite-2k", "micro-granite-4k"):
        cache_status(kube, namespace, name, "Downloading")
    (weights,) = kube.list("Job", namespace, "app.kubernetes.io/component=weights")
    owners = {(o["kind"], o["name"]) for o in weights["metadata"]["ownerReferences"]}
    assert owners == {(CACHE_KIND, "micro-granite-2k"), (CACHE_KIND, "micro-granite-4k")}
