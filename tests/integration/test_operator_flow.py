"""The operator on a real control plane: create -> compile Job -> Deployment + Service ->
Ready, and spec changes (same cache key: in place; new key: compile, then roll)."""

from __future__ import annotations

from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import build_compile_job
from spyre_operator.render.weights_job import weights_job_name

pytestmark = pytest.mark.integration


def _env(obj: dict[str, object]) -> dict[str, str]:
    container = obj["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_create_compiles_then_serves(kube: Kube, namespace: str, operator: sim.Operator) -> None:
    doc = sim.model(namespace, "m1")
    spec = parse(doc).spec
    key, job = cache_key(spec), sim.job_name(doc)
    sim.create(kube, doc)

    st = sim.wait_phase(kube, namespace, "m1", "Downloading")
    assert sim.condition(st, "CacheReady")[:2] == ("False", "Downloading")
    assert "targetCacheKey" not in st and kube.get("Job", namespace, job) is None
    sim.download(kube, doc)
    st = sim.wait_phase(kube, namespace, "m1", "Compiling", targetCacheKey=key)
    assert sim.condition(st, "CacheReady")[:2] == ("False", "Compiling")
    live_job = sim.wait_for(lambda: kube.get("Job", namespace, job), "the compile Job exists")
    want = build_compile_job(spec, namespace)["spec"]["template"]["spec"]["containers"][0]
    got = live_job["spec"]["template"]["spec"]["containers"][0]
    assert (got["args"], got["env"]) == (want["args"], want["env"])
    entry = sim.entry_name(doc)  # the key's inventory entry joins the Job too
    sim.wait_for(lambda: sim.job_owners(kube, namespace, job) == {"m1", entry}, "m1 and the entry")
    live_job = kube.get("Job", namespace, job) or {}
    refs = {
        o["name"]: (o["kind"], o["controller"]) for o in live_job["metadata"]["ownerReferences"]
    }
    assert refs == {"m1": ("SpyreModel", False), entry: ("SpyreCache", False)}
    pvc = kube.get("PersistentVolumeClaim", namespace, spec.cache.volume.claim_name)
    assert pvc is not None and "ownerReferences" not in pvc["metadata"]
    assert kube.get("Deployment", namespace, "m1") is None

    simulate.complete_job(kube, namespace, job)
    st = sim.wait_phase(kube, namespace, "m1", "Starting")
    assert sim.condition(st, "CacheReady")[:2] == ("True", "Compiled")
    assert (st["cache"]["ok"], st["cache"]["seconds"], st["activeCacheKey"]) == (True, 42.0, key)
    assert st["cache"]["bytes"] == 3 * 2**30  # what the compile pod said it wrote
    deploy = kube.get("Deployment", namespace, "m1")
    assert deploy is not None
    env = _env(deploy)
    assert env["TORCH_SENDNN_CACHE_DIR"] == f"/var/cache/spyre/{key}"
    assert env["VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS"] == "1"
    assert kube.get("Service", namespace, "m1") is not None

    simulate.make_deployment_available(kube, namespace, "m1")
    st = sim.wait_phase(kube, namespace, "m1", "Ready")
    assert st["endpoint"] == f"http://m1.{namespace}.svc:8000/v1"
    assert (st["replicas"], st["readyReplicas"]) == (1, 1)
    assert sim.condition(st, "Available")[:2] == ("True", "MinimumReplicasAvailable")
    assert sim.condition(st, "Degraded")[:2] == ("False", "AsExpected")

    # One Event per transition, naming the children written on the way; the key's
    # inventory entry, made by a later pass (once the Job is seen), has its own.
    wanted = ["Compiling", "CreatedCacheEntry", "Downloading", "Ready", "Starting"]
    sim.wait_for(
        lambda: sorted(r for _, r in sim.events_for(kube, namespace, "m1")) == wanted,
        f"exactly the Events {wanted}",
    )
    items = kube.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    said = {e["reason"]: e["message"] for e in items if e["involvedObject"]["name"] == "m1"}
    assert f"in Job {weights_job_name(spec)}" in said["Downloading"], said
    assert f"in Job {job}" in said["Compiling"], said
    assert "created Service m1" in said["Starting"], said
    # kopf kept no state on the SpyreModel: the operator's status patches were its only writes.
    live = sim.get(kube, namespace, "m1")["metadata"]
    assert "finalizers" not in live and not live.get("annotations")
    managers = {f["manager"] for f in live["managedFields"]}
    assert "spyre-operator" in managers and not any("kopf" in m for m in managers), managers


def test_spec_changes_update_in_place_or_compile_then_roll(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "m2")
    old = sim.to_ready(kube, doc)
    old_key = old["activeCacheKey"]

    # Same key (replicas only): the Deployment is patched, no new Job.
    sim.spec_patch(kube, namespace, "m2", {"replicas": 2})
    sim.wait_for(
        lambda: (kube.get("Deployment", namespace, "m2") or {})["spec"]["replicas"] == 2,
        "the Deployment has 2 replicas",
    )
    assert sim.deployment_key(kube, namespace, "m2") == old_key
    assert len(kube.list("Job", namespace, "app.kubernetes.io/component=compile")) == 1
    simulate.make_deployment_available(kube, namespace, "m2")
    sim.wait_phase(kube, namespace, "m2", "Ready", readyReplicas=2)

    # New key (chunk size): a new Job; the Deployment stays on the old cache meanwhile.
    chunk = {"batching": {"continuous": {"maxNumBatchedTokens": 2048}}}
    sim.spec_patch(kube, namespace, "m2", chunk)
    changed = sim.get(kube, namespace, "m2")
    new_key, new_job = cache_key(parse(changed).spec), sim.job_name(changed)
    assert new_key != old_key
    st = sim.wait_phase(kube, namespace, "m2", "Compiling", targetCacheKey=new_key)
    assert st["activeCacheKey"] == old_key
    assert sim.condition(st, "Progressing")[:2] == ("True", "CompilingNewCache")
    assert sim.condition(st, "Available")[0] == "True" and st["endpoint"]
    sim.wait_for(lambda: kube.get("Job", namespace, new_job), "the new compile Job exists")
    assert sim.deployment_key(kube, namespace, "m2") == old_key

    simulate.complete_job(kube, namespace, new_job)
    sim.wait_for(
        lambda: sim.deployment_key(kube, namespace, "m2") == new_key, "the Deployment rolls"
    )
    simulate.make_deployment_available(kube, namespace, "m2")
    st = sim.wait_phase(kube, namespace, "m2", "Ready", activeCacheKey=new_key)
    assert st["targetCacheKey"] == new_key


def test_kubectl_wait_for_ready_and_scale_to_zero(
    kube: Kube, namespace: str, operator: sim.Operator, kubectl: Any
) -> None:
    """What scripts and GitOps pipelines run: kubectl wait on the Ready condition, and
    kubectl scale through the scale subresource."""
    doc = sim.model(namespace, "waited")
    sim.to_ready(kube, doc)
    done = kubectl("wait", "-n", namespace, "--for=condition=Ready", "sm/waited", "--timeout=60s")
    assert "condition met" in done.stdout
    kubectl("scale", "-n", namespace, "sm/waited", "--replicas=0")
    st = sim.wait_phase(kube, namespace, "waited", "ScaledToZero")
    assert sim.condition(st, "Ready")[:2] == ("False", "ScaledToZero")
    not_ready = kubectl(
        "wait", "-n", namespace, "--for=condition=Ready=false", "sm/waited", "--timeout=60s"
    )
    assert "condition met" in not_ready.stdout
