"""Pull instead of compile, on a real API server with the operator running (the tests play
the kubelet and the Job controller): with --cache-registry a key's pull Job comes first;
a pull that succeeded serves the key and no compile Job is ever made, and the key is in the
namespace's inventory as pulled; a miss compiles and the compile's Event and status say
why, and its publish is recorded; a failed pull older than its retry period, with the
key's compile Job gone, asks the registry again; the metrics count hits, misses and the
pulls' seconds."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.names import CACHE_KIND
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.reconcile.pull import RETRY_SECONDS
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key

pytestmark = pytest.mark.integration

REGISTRY = "127.0.0.1:5000/spyre/caches"


@pytest.fixture
def sharing_operator(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[sim.Operator]:
    flags = ("--cache-registry", REGISTRY, "--cache-registry-secret", "registry-creds")
    log = tmp_path / "operator.log"
    with sim.running_operator(kubeconfig, namespace, log, 300.0, *flags) as running:
        yield running


def pull_name(doc: dict[str, Any]) -> str:
    return meta.pull_job_name(cache_key(parse(doc).spec))


def said(kube: Kube, namespace: str, text: str) -> list[str]:
    """The messages of the namespace's Events that hold `text` (a write's Event is folded
    into the message of its pass's transition, conditions.announce)."""
    items = kube.request("GET", f"/api/v1/namespaces/{namespace}/events").get("items", [])
    return [e["message"] for e in items if text in e["message"]]


def pulling(kube: Kube, doc: dict[str, Any]) -> str:
    """Create the SpyreModel, play its download; the pull Job, once it is there."""
    namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    sim.create(kube, doc)
    sim.download(kube, doc)
    pull = pull_name(doc)
    sim.wait_for(lambda: kube.get("Job", namespace, pull), f"the pull Job {pull} exists")
    st = sim.wait_phase(kube, namespace, name, "Compiling")
    assert sim.condition(st, "CacheReady")[:2] == ("False", "Pulling")
    return pull


def missed(kube: Kube, doc: dict[str, Any]) -> tuple[str, str, str]:
    """Create the SpyreModel, its pull Job misses (NotInRegistry), the compile Job comes;
    (the pull Job, the key, the compile Job)."""
    namespace = doc["metadata"]["namespace"]
    pull = pulling(kube, doc)
    no = {"ok": False, "reason": "NotInRegistry", "message": f"{REGISTRY} has no cache"}
    simulate.finish_job(kube, namespace, pull, exit_code=1, message=json.dumps(no), reason="Error")
    compile_job = sim.job_name(doc)
    sim.wait_for(lambda: kube.get("Job", namespace, compile_job), f"the compile Job {compile_job}")
    return pull, cache_key(parse(doc).spec), compile_job


def test_a_pulled_key_serves_no_compile_job_is_made_and_the_inventory_lists_it(
    kube: Kube, namespace: str, sharing_operator: sim.Operator, kubectl: Any
) -> None:
    doc = sim.model(namespace, "pulled")
    pull = pulling(kube, doc)
    job = (kube.get("Job", namespace, pull) or {})["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["pull"]
    key = cache_key(parse(doc).spec)
    reference = f"{REGISTRY}:{key}-amd64"
    summary = {
        "ok": True,
        "cacheKey": key,
        "seconds": 3.5,
        "bytes": 8800,
        "pulled": {"reference": reference, "digest": "sha256:ab", "bytes": 9000, "seconds": 3.1},
    }
    simulate.finish_job(
        kube, namespace, pull, exit_code=0, message=json.dumps(summary), reason="Completed"
    )
    sim.wait_for(lambda: kube.get("Deployment", namespace, "pulled"), "the Deployment exists")
    simulate.make_deployment_available(kube, namespace, "pulled")
    st = sim.wait_phase(kube, namespace, "pulled", "Ready")
    assert st["cache"]["pulledFrom"] == reference and st["cache"]["bytesMoved"] == 9000
    assert sim.condition(st, "CacheReady")[:2] == ("True", "Pulled")
    assert kube.get("Job", namespace, sim.job_name(doc)) is None
    assert said(kube, namespace, f"pulling cache {key[:12]} from {REGISTRY}")
    got = sharing_operator.metrics()
    assert got['spyre_operator_cache_pulls_total{result="hit"}'] == 1
    assert got['spyre_operator_cache_pulls_total{result="miss"}'] == 0
    assert got["spyre_operator_pull_duration_seconds_sum"] == 3.5
    assert got["spyre_operator_compile_duration_seconds_count"] == 0

    # The key's inventory entry: held by the pull Job (no compile Job), which it joins.
    entry = sim.entry_name(doc)

    def listed() -> dict[str, Any] | None:
        found = (kube.get(CACHE_KIND, namespace, entry) or {}).get("status") or {}
        return found if found.get("usedBy") == ["pulled"] and found.get("phase") else None

    st = sim.wait_for(listed, f"the inventory entry {entry} says who uses the key")
    assert st["phase"] == "Ready" and sim.condition(st, "CacheReady")[:2] == ("True", "Pulled")
    assert st["cache"]["pulledFrom"] == reference and st["cache"]["bytesMoved"] == 9000
    assert st["cache"]["jobName"] == pull
    sim.wait_for(
        lambda: sim.job_owners(kube, namespace, pull) == {"pulled", entry}, "the entry joins"
    )
    row = kubectl("get", "scache", "-n", namespace, entry, "--no-headers").stdout.split()
    assert row[:3] == [entry, "Ready", "Pulled"], row
    assert "8800" in row, row  # BYTES: the key's size the pull Job's verified record says


def test_a_miss_compiles_says_why_and_records_the_publish(
    kube: Kube, namespace: str, sharing_operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "missed")
    _, key, compile_job = missed(kube, doc)
    why = f"the registry's copy was not used: NotInRegistry: {REGISTRY} has no cache"
    told = f"compiling cache {key[:12]} in Job {compile_job}; {why}"
    sim.wait_for(lambda: said(kube, namespace, told), "an Event says why it compiles")
    env = simulate.env_of(kube.get("Job", namespace, compile_job) or {})
    assert env["SPYRE_SERVING_CACHE_REGISTRY"] == REGISTRY
    published = {"reference": f"{REGISTRY}:{key}-amd64", "digest": "sha256:cd", "bytes": 7000}
    summary = {"ok": True, "cacheKey": key, "seconds": 50.0, "bytes": 6900, "published": published}
    simulate.finish_job(
        kube, namespace, compile_job, exit_code=0, message=json.dumps(summary), reason="Completed"
    )
    sim.wait_for(lambda: kube.get("Deployment", namespace, "missed"), "the Deployment exists")
    simulate.make_deployment_available(kube, namespace, "missed")
    st = sim.wait_phase(kube, namespace, "missed", "Ready")
    assert (
        st["cache"]["publishedTo"] == published["reference"] and st["cache"]["bytesMoved"] == 7000
    )
    assert sim.condition(st, "CacheReady")[:2] == ("True", "Compiled")
    assert st["cache"]["notPulled"] == f"NotInRegistry: {REGISTRY} has no cache"
    got = sharing_operator.metrics()
    assert got['spyre_operator_cache_pulls_total{result="miss"}'] == 1
    assert got['spyre_operator_cache_pulls_total{result="hit"}'] == 0
    assert got["spyre_operator_compile_duration_seconds_sum"] == 50.0


def test_a_registry_in_the_spec_is_checked_by_the_api_server_and_used(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    """The operator without --cache-registry: a model's own spec.cache.registry pulls."""
    wrong = sim.model(namespace, "wrong")
    wrong["spec"]["cache"] = {"registry": {"repository": "https://r.example/Caches"}}
    with pytest.raises(ApiError) as refused:
        sim.create(kube, wrong)
    assert refused.value.status == 422 and "spec.cache.registry.repository" in str(refused.value)
    own = sim.model(namespace, "own")
    own["spec"]["cache"] = {"registry": {"repository": "r.example:5000/team/caches"}}
    pull = pulling(kube, own)
    env = simulate.env_of(kube.get("Job", namespace, pull) or {})
    assert env["SPYRE_SERVING_CACHE_REGISTRY"] == "r.example:5000/team/caches"


def test_a_stale_failed_pull_does_not_block_asking_again(
    kube: Kube, namespace: str, sharing_operator: sim.Operator
) -> None:
    """A miss compiles; once the failed pull is older than its retry period and the key has
    no compile Job (deleted here, as a clean-up or a user would), the operator deletes the
    failed pull Job and makes a new one: the registry is asked again, and a hit serves."""
    doc = sim.model(namespace, "again")
    pull, key, compile_job = missed(kube, doc)
    first = (kube.get("Job", namespace, pull) or {})["metadata"]["uid"]
    # the failed pull's answer, dated past its retry period
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=RETRY_SECONDS + 60)
    when = old.strftime("%Y-%m-%dT%H:%M:%SZ")
    # both of the pair the Job ends with (1.3x refuses to drop FailureTarget)
    dated = {"status": "True", "reason": "BackoffLimitExceeded"}
    dated |= {"lastProbeTime": when, "lastTransitionTime": when}
    failed = [{"type": kind, **dated} for kind in ("FailureTarget", "Failed")]
    kube.patch("Job", namespace, pull, {"status": {"conditions": failed}}, sub="status")
    kube.delete("Job", namespace, compile_job)

    def asked_again() -> str | None:
        job = kube.get("Job", namespace, pull)
        uid: str | None = job["metadata"]["uid"] if job else None
        return uid if uid not in (None, first) else None

    sim.wait_for(asked_again, "a new pull Job")
    sim.wait_for(
        lambda: said(kube, namespace, f"asking {REGISTRY} again for cache {key[:12]}"),
        "an Event says the registry is asked again",
    )
    st = sim.wait_phase(kube, namespace, "again", "Compiling")
    assert sim.condition(st, "CacheReady")[:2] == ("False", "Pulling")
    reference = f"{REGISTRY}:{key}-amd64"
    hit = {"ok": True, "cacheKey": key, "seconds": 2.0, "pulled": {"reference": reference}}
    simulate.finish_job(
        kube, namespace, pull, exit_code=0, message=json.dumps(hit), reason="Completed"
    )
    sim.wait_for(lambda: kube.get("Deployment", namespace, "again"), "the Deployment exists")
    simulate.make_deployment_available(kube, namespace, "again")
    st = sim.wait_phase(kube, namespace, "again", "Ready")
    assert st["cache"]["pulledFrom"] == reference
    assert kube.get("Job", namespace, compile_job) is None
