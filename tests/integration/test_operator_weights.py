"""The weights step of hub models on the real API server: one download per model and
revision, the revision resolved to a commit that the cache key uses, the hub's refusals in
status, and a moved branch as a deliberate, visible event. The weights pods are played
(spyre_devcluster.simulate); tests/runtime/test_runtime_weights.py runs the real
download against a local hub, tests/node the whole flow with real pods."""

from __future__ import annotations

import json
from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.weights_job import weights_job_name

pytestmark = pytest.mark.integration

MAIN = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"  # what "main" resolves to here
MOVED = "fedcba9876543210fedcba9876543210fedcba98"


def at_main(namespace: str, name: str, **source: Any) -> dict[str, Any]:
    doc = sim.model(namespace, name)
    doc["spec"]["model"].pop("revision")
    if source:
        doc["spec"]["model"]["source"] = {"hub": source}
    return doc


def env_of(workload: dict[str, Any]) -> dict[str, Any]:
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def weights_mount(workload: dict[str, Any]) -> dict[str, Any]:
    mounts = workload["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    (found,) = [m for m in mounts if m.get("subPath")]
    return dict(found)


def test_one_download_for_two_models_then_compile_and_serve_from_it(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    first, second = at_main(namespace, "a"), at_main(namespace, "b")
    sim.create(kube, first)
    sim.create(kube, second)
    spec = parse(first).spec
    weights = weights_job_name(spec)
    st = sim.wait_phase(kube, namespace, "a", "Downloading")
    assert sim.condition(st, "CacheReady")[:2] == ("False", "Downloading")
    assert st["weights"]["state"] == "Downloading" and "targetCacheKey" not in st
    sim.wait_for(
        lambda: sim.job_owners(kube, namespace, weights) == {"a", "b"}, "both own the download"
    )
    assert kube.list("Job", namespace, "app.kubernetes.io/component=compile") == []

    sim.download(kube, first, MAIN)
    key = cache_key(spec, MAIN)
    for name in ("a", "b"):
        st = sim.wait_phase(kube, namespace, name, "Compiling", targetCacheKey=key)
        assert st["weights"] | {"seconds": 0} == {
            "jobName": weights,
            "modelId": spec.model.id,
            "revision": "main",
            "state": "Ready",
            "commit": MAIN,
            "sizeBytes": 2**30,
            "files": 7,
            "downloaded": True,
            "seconds": 0,
        }
    compile_job = sim.wait_for(
        lambda: kube.get("Job", namespace, meta.compile_job_name(key)), "the compile Job"
    )
    subpath = f"weights/{spec.model.id}/{MAIN}"
    assert weights_mount(compile_job) == {
        "name": "graph-cache",
        "mountPath": f"/models/{spec.model.id}",
        "subPath": subpath,
        "readOnly": True,
    }
    assert env_of(compile_job)["HF_HUB_OFFLINE"] == "1"

    simulate.complete_job(kube, namespace, compile_job["metadata"]["name"])
    sim.spec_patch(kube, namespace, "a", {"replicas": 3})
    deploy = sim.wait_for(
        lambda: (d := kube.get("Deployment", namespace, "a")) and d["spec"]["replicas"] == 3 and d,
        "the Deployment with 3 replicas",
    )
    assert weights_mount(deploy)["subPath"] == subpath
    simulate.make_deployment_available(kube, namespace, "a")
    sim.wait_phase(kube, namespace, "a", "Ready", readyReplicas=3)
    # Replicas, like the second model, never download: still the one Job, no new pod.
    weights_jobs = kube.list("Job", namespace, "app.kubernetes.io/component=weights")
    assert [j["metadata"]["name"] for j in weights_jobs] == [weights]
    assert len(kube.list("Pod", namespace, f"job-name={weights}")) == 1
    assert ("Normal", "CreatedWeightsJob") not in sim.events_for(kube, namespace, "b")


def test_a_gated_model_fails_at_once_and_a_token_fixes_it(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = at_main(namespace, "gated")
    sim.create(kube, doc)
    weights = weights_job_name(parse(doc).spec)
    sim.wait_for(lambda: kube.get("Job", namespace, weights), "the weights Job")
    refusal = {
        "ok": False,
        "reason": "GatedModel",
        "message": "ibm-granite/x is gated: set spec.model.source.hub.tokenSecret",
    }
    # The first pod is refused; the Job itself would retry, the status says it now.
    simulate.finish_job(
        kube,
        namespace,
        weights,
        exit_code=2,
        reason="Error",
        message=json.dumps(refusal),
        retrying=True,
    )
    st = sim.wait_phase(kube, namespace, "gated", "Failed")
    assert st["weights"]["state"] == "Failed"
    status_, reason, message = sim.condition(st, "Degraded")
    assert (status_, reason) == ("True", "GatedModel")
    assert "is gated: set spec.model.source.hub.tokenSecret" in message
    assert f"kubectl delete job {weights}" in message
    sim.wait_for(
        lambda: ("Warning", "GatedModel") in sim.events_for(kube, namespace, "gated"), "the Event"
    )

    token = {"tokenSecret": {"name": "hf", "key": "token"}}
    sim.spec_patch(kube, namespace, "gated", {"model": {"source": {"hub": token}}})
    fixed = sim.get(kube, namespace, "gated")
    retry = weights_job_name(parse(fixed).spec)
    assert retry != weights
    job = sim.wait_for(
        lambda: kube.get("Job", namespace, retry), "a new weights Job, with the token"
    )
    assert env_of(job)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    sim.download(kube, fixed, MAIN)
    st = sim.wait_phase(kube, namespace, "gated", "Compiling")
    compile_job = kube.get("Job", namespace, meta.compile_job_name(st["targetCacheKey"]))
    assert compile_job is not None and "HF_TOKEN" not in env_of(compile_job)


def test_a_revision_that_does_not_exist_fails_with_the_hubs_reason(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = at_main(namespace, "typo")
    doc["spec"]["model"]["revision"] = "mian"
    sim.create(kube, doc)
    weights = weights_job_name(parse(doc).spec)
    sim.wait_for(lambda: kube.get("Job", namespace, weights), "the weights Job")
    refusal = {"ok": False, "reason": "RevisionNotFound", "message": "no revision 'mian'"}
    simulate.finish_job(
        kube, namespace, weights, exit_code=2, reason="Error", message=json.dumps(refusal)
    )
    st = sim.wait_phase(kube, namespace, "typo", "Failed")
    assert (st["weights"]["reason"], sim.condition(st, "CacheReady")[1]) == (
        "RevisionNotFound",
        "RevisionNotFound",
    )
    assert "no revision 'mian'" in st["weights"]["message"]
    assert kube.list("Job", namespace, "app.kubernetes.io/component=compile") == []


def test_a_moved_branch_is_resolved_again_only_when_asked_and_said(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = at_main(namespace, "follow")
    sim.create(kube, doc)
    sim.download(kube, doc, MAIN)
    st = sim.wait_phase(kube, namespace, "follow", "Compiling")
    simulate.complete_job(kube, namespace, meta.compile_job_name(st["targetCacheKey"]))
    sim.wait_for(lambda: kube.get("Deployment", namespace, "follow"), "the Deployment")
    simulate.make_deployment_available(kube, namespace, "follow")
    old_key = sim.wait_phase(kube, namespace, "follow", "Ready")["activeCacheKey"]

    # main moves on at the hub: nothing happens until the user asks for it again.
    weights = weights_job_name(parse(doc).spec)
    kube.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/{weights}",
        query={"propagationPolicy": "Background"},
    )
    st = sim.wait_phase(kube, namespace, "follow", "Downloading")
    assert (st["activeCacheKey"], st["weights"]["commit"]) == (old_key, MAIN)
    assert sim.condition(st, "Available")[0] == "True"
    assert sim.deployment_key(kube, namespace, "follow") == old_key

    sim.download(kube, sim.get(kube, namespace, "follow"), MOVED)
    new_key = cache_key(parse(doc).spec, MOVED)
    st = sim.wait_phase(kube, namespace, "follow", "Compiling", targetCacheKey=new_key)
    assert st["activeCacheKey"] == old_key and st["weights"]["commit"] == MOVED
    sim.wait_for(
        lambda: ("Normal", "RevisionMoved") in sim.events_for(kube, namespace, "follow"),
        "the RevisionMoved Event",
    )
    simulate.complete_job(kube, namespace, meta.compile_job_name(new_key))
    sim.wait_for(
        lambda: sim.deployment_key(kube, namespace, "follow") == new_key, "the Deployment rolls"
    )
    assert sim.status(kube, namespace, "follow")["weights"]["commit"] == MOVED
