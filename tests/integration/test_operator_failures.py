"""Failures are explained: invalid spec, compile OOM / error / deadline, serving pods
that reject the cache; a spec fix or deleting the failed Job recovers."""

from __future__ import annotations

import json

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.validation import validate
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration


def _compiling_job(kube: Kube, namespace: str, name: str) -> str:
    sim.download(kube, sim.get(kube, namespace, name))
    sim.wait_phase(kube, namespace, name, "Compiling")
    job = sim.job_name(sim.get(kube, namespace, name))
    sim.wait_for(lambda: kube.get("Job", namespace, job), f"Job {job} exists")
    return job


def test_invalid_spec_is_reported_and_fixed(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "bad", sim.example(env=[{"name": "VLLM_PLUGINS", "value": "x"}]))
    sim.create(kube, doc)
    st = sim.wait_phase(kube, namespace, "bad", "Invalid")
    status, reason, message = sim.condition(st, "Degraded")
    assert (status, reason) == ("True", "InvalidSpec")
    assert "spec.env[0].name" in message and "VLLM_PLUGINS" in message
    assert kube.list("Job", namespace, "app.kubernetes.io/component=compile") == []
    sim.wait_for(
        lambda: ("Warning", "InvalidSpec") in sim.events_for(kube, namespace, "bad"),
        "a Warning Event InvalidSpec",
    )
    sim.spec_patch(kube, namespace, "bad", {"env": []})
    _compiling_job(kube, namespace, "bad")


def test_a_spec_that_crashed_validation_is_reported_invalid(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    """The fuzz run's poison objects (issue 18) got no status and a traceback per retry."""
    limits = {"cpu": "1e400", "memory": "16Gi"}
    sim.create(kube, sim.model(namespace, "poison", sim.example(resources={"limits": limits})))
    st = sim.wait_phase(kube, namespace, "poison", "Invalid")
    message = sim.condition(st, "Degraded")[2]
    assert message == "; ".join(str(p) for p in validate(sim.get(kube, namespace, "poison")))
    assert message.startswith("spec.resources.limits.cpu: 1e400 is more than Kubernetes counts")
    assert kube.list("Job", namespace, "app.kubernetes.io/component=compile") == []


def test_compile_oom_then_a_spec_fix_recovers(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    sim.create(kube, sim.model(namespace, "oom"))
    job = _compiling_job(kube, namespace, "oom")
    simulate.finish_job(kube, namespace, job, exit_code=137, reason="OOMKilled", message="")
    st = sim.wait_phase(kube, namespace, "oom", "Failed")
    assert sim.condition(st, "CacheReady")[:2] == ("False", "OOMKilled")
    status, reason, message = sim.condition(st, "Degraded")
    assert (status, reason) == ("True", "OOMKilled") and "memory" in message
    assert (st["cache"]["ok"], st["cache"]["reason"]) == (False, "OOMKilled")
    sim.wait_for(
        lambda: ("Warning", "OOMKilled") in sim.events_for(kube, namespace, "oom"),
        "a Warning Event OOMKilled",
    )

    sim.spec_patch(kube, namespace, "oom", {"batching": {"continuous": {"maxModelLen": 1024}}})
    new_job = _compiling_job(kube, namespace, "oom")
    assert new_job != job
    simulate.complete_job(kube, namespace, new_job)
    st = sim.wait_phase(kube, namespace, "oom", "Starting")
    assert sim.condition(st, "Degraded")[:2] == ("False", "AsExpected")


def test_plain_failure_shows_the_log_tail_and_deleting_the_job_retries(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    sim.create(kube, sim.model(namespace, "err"))
    job = _compiling_job(kube, namespace, "err")
    first_uid = kube.get("Job", namespace, job)["metadata"]["uid"]
    log = "loading weights\nwarming up\nRuntimeError: sendnn compile failed"
    simulate.finish_job(kube, namespace, job, exit_code=1, reason="Error", message=log)
    st = sim.wait_phase(kube, namespace, "err", "Failed")
    status, reason, message = sim.condition(st, "Degraded")
    assert (status, reason) == ("True", "CompileFailed")
    assert "exited with code 1" in message and "RuntimeError: sendnn compile failed" in message
    assert f"kubectl delete job {job}" in message

    kube.request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}")
    sim.wait_for(
        lambda: (
            (kube.get("Job", namespace, job) or {}).get("metadata", {}).get("uid")
            not in (None, first_uid)
        ),
        "a new Job with the same name",
    )
    sim.wait_phase(kube, namespace, "err", "Compiling")


def test_deadline_exceeded(kube: Kube, namespace: str, operator: sim.Operator) -> None:
    """The compile pod's deadline (not the Job's: it counts from the pod's start on a
    node), as the kubelet ends it: the pod's reason, its container killed."""
    sim.create(kube, sim.model(namespace, "slow"))
    job = _compiling_job(kube, namespace, "slow")
    simulate.finish_job(
        kube,
        namespace,
        job,
        exit_code=137,
        reason="Error",
        message="",
        pod_reason="DeadlineExceeded",
    )
    st = sim.wait_phase(kube, namespace, "slow", "Failed")
    status, reason, message = sim.condition(st, "Degraded")
    assert (status, reason) == ("True", "DeadlineExceeded")
    assert "activeDeadlineSeconds (10800s from its start on a node" in message


def test_serving_pods_rejecting_the_cache(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    sim.create(kube, sim.model(namespace, "rej"))
    job = _compiling_job(kube, namespace, "rej")
    simulate.complete_job(kube, namespace, job)
    sim.wait_phase(kube, namespace, "rej", "Starting")
    refusal = {
        "ok": False,
        "reason": "CacheNotReady",
        "cacheKey": "k",
        "message": "maxModelLen: READY has 256, this pod has 2048",
    }
    simulate.crash_serving_pod(kube, namespace, "rej", json.dumps(refusal), exit_code=3)
    st = sim.wait_phase(kube, namespace, "rej", "Degraded")
    status, reason, message = sim.condition(st, "Degraded")
    assert (status, reason) == ("True", "CacheRejected")
    assert "READY has 256, this pod has 2048" in message
    assert sim.condition(st, "Available")[0] == "False"
