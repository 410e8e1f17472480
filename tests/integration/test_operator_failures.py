"""Failures are explained: invalid spec, compile OOM / error / deadline, serving pods
that reject the cache; a spec fix or deleting the failed Job recovers."""

from __future__ import annotations

import json

import pytest
from cluster_sim import (
    Operator,
    condition,
    create,
    download,
    events_for,
    example,
    get,
    job_name,
    model,
    spec_patch,
    wait_for,
    wait_phase,
)

from spyre_devcluster import simulate
from spyre_operator.api.validation import validate
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration


def _compiling_job(kube: Kube, namespace: str, name: str) -> str:
    download(kube, get(kube, namespace, name))
    wait_phase(kube, namespace, name, "Compiling")
    job = job_name(get(kube, namespace, name))
    wait_for(lambda: kube.get("Job", namespace, job), f"Job {job} exists")
    return job


def test_invalid_spec_is_reported_and_fixed(kube: Kube, namespace: str, operator: Operator) -> None:
    doc = model(namespace, "bad", example(env=[{"name": "VLLM_PLUGINS", "value": "x"}]))
    create(kube, doc)
    st = wait_phase(kube, namespace, "bad", "Invalid")
    status, reason, message = condition(st, "Degraded")
    assert (status, reason) == ("True", "InvalidSpec")
    assert "spec.env[0].name" in message and "VLLM_PLUGINS" in message
    assert kube.list("Job", namespace, "app.kubernetes.io/component=compile") == []
    wait_for(
        lambda: ("Warning", "InvalidSpec") in events_for(kube, namespace, "bad"),
        "a Warning Event InvalidSpec",
    )
    spec_patch(kube, namespace, "bad", {"env": []})
    _compiling_job(kube, namespace, "bad")


def test_a_spec_that_crashed_validation_is_reported_invalid(
    kube: Kube, namespace: str, operator: Operator
) -> None:
    """The fuzz run's poison objects (issue 18) got no status and a traceback per retry."""
    limits = {"cpu": "1e400", "memory": "16Gi"}
    create(kube, model(namespace, "poison", example(resources={"limits": limits})))
    st = wait_phase(kube, namespace, "poison", "Invalid")
    message = condition(st, "Degraded")[2]
    assert message == "; ".join(str(p) for p in validate(get(kube, namespace, "poison")))
    assert message.startswith("spec.resources.limits.cpu: 1e400 is more than Kubernetes counts")
    assert kube.list("Job", namespace, "app.kubernetes.io/component=compile") == []


def test_compile_oom_then_a_spec_fix_recovers(
    kube: Kube, namespace: str, operator: Operator
) -> None:
    create(kube, model(namespace, "oom"))
    job = _compiling_job(kube, namespace, "oom")
    simulate.finish_job(kube, namespace, job, exit_code=137, reason="OOMKilled", message="")
    st = wait_phase(kube, namespace, "oom", "Failed")
    assert condition(st, "CacheReady")[:2] == ("False", "OOMKilled")
    status, reason, message = condition(st, "Degraded")
    assert (status, reason) == ("True", "OOMKilled") and "memory" in message
    assert (st["cache"]["ok"], st["cache"]["reason"]) == (False, "OOMKilled")
    wait_for(
        lambda: ("Warning", "OOMKilled") in events_for(kube, namespace, "oom"),
        "a Warning Event OOMKilled",
    )

    spec_patch(kube, namespace, "oom", {"batching": {"continuous": {"maxModelLen": 1024}}})
    new_job = _compiling_job(kube, namespace, "oom")
    assert new_job != job
    simulate.complete_job(kube, namespace, new_job)
    st = wait_phase(kube, namespace, "oom", "Starting")
    assert condition(st, "Degraded")[:2] == ("False", "AsExpected")


def test_plain_failure_shows_the_log_tail_and_deleting_the_job_retries(
    kube: Kube, namespace: str, operator: Operator
) -> None:
    create(kube, model(namespace, "err"))
    job = _compiling_job(kube, namespace, "err")
    first_uid = kube.get("Job", namespace, job)["metadata"]["uid"]
    log = "loading weights\nwarming up\nRuntimeError: sendnn compile failed"
    simulate.finish_job(kube, namespace, job, exit_code=1, reason="Error", message=log)
    st = wait_phase(kube, namespace, "err", "Failed")
    status, reason, message = condition(st, "Degraded")
    assert (status, reason) == ("True", "CompileFailed")
    assert "exited with code 1" in message and "RuntimeError: sendnn compile failed" in message
    assert f"kubectl delete job {job}" in message

    kube.request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}")
    wait_for(
        lambda: (
            (kube.get("Job", namespace, job) or {}).get("metadata", {}).get("uid")
            not in (None, first_uid)
        ),
        "a new Job with the same name",
    )
    wait_phase(kube, namespace, "err", "Compiling")


def test_deadline_exceeded(kube: Kube, namespace: str, operator: Operator) -> None:
    """The compile pod's deadline (not the Job's: it counts from the pod's start on a
    node), as the kubelet ends it: the pod's reason, its container killed."""
    create(kube, model(namespace, "slow"))
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
    st = wait_phase(kube, namespace, "slow", "Failed")
    status, reason, message = condition(st, "Degraded")
    assert (status, reason) == ("True", "DeadlineExceeded")
    assert "activeDeadlineSeconds (10800s from its start on a node" in message


def test_serving_pods_rejecting_the_cache(kube: Kube, namespace: str, operator: Operator) -> None:
    create(kube, model(namespace, "rej"))
    job = _compiling_job(kube, namespace, "rej")
    simulate.complete_job(kube, namespace, job)
    wait_phase(kube, namespace, "rej", "Starting")
    refusal = {
        "ok": False,
        "reason": "CacheNotReady",
        "cacheKey": "k",
        "message": "maxModelLen: READY has 256, this pod has 2048",
    }
    simulate.crash_serving_pod(kube, namespace, "rej", json.dumps(refusal), exit_code=3)
    st = wait_phase(kube, namespace, "rej", "Degraded")
    status, reason, message = condition(st, "Degraded")
    assert (status, reason) == ("True", "CacheRejected")
    assert "READY has 256, this pod has 2048" in message
    assert condition(st, "Available")[0] == "False"
