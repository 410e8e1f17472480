"""Pull instead of compile, on a real API server with the operator running (the tests play
the kubelet and the Job controller): with --cache-registry a key's pull Job comes first;
a pull that succeeded serves the key and no compile Job is ever made; a miss compiles and
the compile's Event and status say why, and its publish is recorded; the metrics count
hits, misses and the pulls' seconds."""

# ruff: noqa: F811 (test arguments named after the fixtures imported from cluster_sim)
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_sim import (  # noqa: F401 (fixtures)
    Operator,
    condition,
    create,
    download,
    job_name,
    kube,
    model,
    operator,
    running_operator,
    wait_for,
    wait_phase,
)

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key

pytestmark = pytest.mark.integration

REGISTRY = "127.0.0.1:5000/spyre/caches"


@pytest.fixture
def sharing_operator(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    flags = ("--cache-registry", REGISTRY, "--cache-registry-secret", "registry-creds")
    log = tmp_path / "operator.log"
    with running_operator(kubeconfig, namespace, log, 300.0, *flags) as running:
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
    create(kube, doc)
    download(kube, doc)
    pull = pull_name(doc)
    wait_for(lambda: kube.get("Job", namespace, pull), f"the pull Job {pull} exists")
    st = wait_phase(kube, namespace, name, "Compiling")
    assert condition(st, "CacheReady")[:2] == ("False", "Pulling")
    return pull


def test_a_pulled_key_serves_and_no_compile_job_is_made(
    kube: Kube, namespace: str, sharing_operator: Operator
) -> None:
    doc = model(namespace, "pulled")
    pull = pulling(kube, doc)
    job = (kube.get("Job", namespace, pull) or {})["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["pull"]
    key = cache_key(parse(doc).spec)
    reference = f"{REGISTRY}:{key}-amd64"
    summary = {
        "ok": True,
        "cacheKey": key,
        "seconds": 3.5,
        "pulled": {"reference": reference, "digest": "sha256:ab", "bytes": 9000, "seconds": 3.1},
    }
    simulate.finish_job(
        kube, namespace, pull, exit_code=0, message=json.dumps(summary), reason="Completed"
    )
    wait_for(lambda: kube.get("Deployment", namespace, "pulled"), "the Deployment exists")
    simulate.make_deployment_available(kube, namespace, "pulled")
    st = wait_phase(kube, namespace, "pulled", "Ready")
    assert st["cache"]["pulledFrom"] == reference and st["cache"]["bytesMoved"] == 9000
    assert condition(st, "CacheReady")[:2] == ("True", "Pulled")
    assert kube.get("Job", namespace, job_name(doc)) is None
    assert said(kube, namespace, f"pulling cache {key[:12]} from {REGISTRY}")
    got = sharing_operator.metrics()
    assert got['spyre_operator_cache_pulls_total{result="hit"}'] == 1
    assert got['spyre_operator_cache_pulls_total{result="miss"}'] == 0
    assert got["spyre_operator_pull_duration_seconds_sum"] == 3.5
    assert got["spyre_operator_compile_duration_seconds_count"] == 0


def test_a_miss_compiles_says_why_and_records_the_publish(
    kube: Kube, namespace: str, sharing_operator: Operator
) -> None:
    doc = model(namespace, "missed")
    pull = pulling(kube, doc)
    key = cache_key(parse(doc).spec)
    missed = {"ok": False, "reason": "NotInRegistry", "message": f"{REGISTRY} has no cache"}
    simulate.finish_job(
        kube, namespace, pull, exit_code=1, message=json.dumps(missed), reason="Error"
    )
    compile_job = job_name(doc)
    wait_for(lambda: kube.get("Job", namespace, compile_job), f"the compile Job {compile_job}")
    why = f"the registry's copy was not used: NotInRegistry: {REGISTRY} has no cache"
    told = f"compiling cache {key[:12]} in Job {compile_job}; {why}"
    wait_for(lambda: said(kube, namespace, told), "an Event says why it compiles")
    env = simulate.env_of(kube.get("Job", namespace, compile_job) or {})
    assert env["SPYRE_SERVING_CACHE_REGISTRY"] == REGISTRY
    published = {"reference": f"{REGISTRY}:{key}-amd64", "digest": "sha256:cd", "bytes": 7000}
    summary = {"ok": True, "cacheKey": key, "seconds": 50.0, "bytes": 6900, "published": published}
    simulate.finish_job(
        kube, namespace, compile_job, exit_code=0, message=json.dumps(summary), reason="Completed"
    )
    wait_for(lambda: kube.get("Deployment", namespace, "missed"), "the Deployment exists")
    simulate.make_deployment_available(kube, namespace, "missed")
    st = wait_phase(kube, namespace, "missed", "Ready")
    assert (
        st["cache"]["publishedTo"] == published["reference"] and st["cache"]["bytesMoved"] == 7000
    )
    assert condition(st, "CacheReady")[:2] == ("True", "Compiled")
    assert st["cache"]["notPulled"] == f"NotInRegistry: {REGISTRY} has no cache"
    got = sharing_operator.metrics()
    assert got['spyre_operator_cache_pulls_total{result="miss"}'] == 1
    assert got['spyre_operator_cache_pulls_total{result="hit"}'] == 0
    assert got["spyre_operator_compile_duration_seconds_sum"] == 50.0


def test_a_registry_in_the_spec_is_checked_by_the_api_server_and_used(
    kube: Kube, namespace: str, operator: Operator
) -> None:
    """The operator without --cache-registry: a model's own spec.cache.registry pulls."""
    wrong = model(namespace, "wrong")
    wrong["spec"]["cache"] = {"registry": {"repository": "https://r.example/Caches"}}
    with pytest.raises(ApiError) as refused:
        create(kube, wrong)
    assert refused.value.status == 422 and "spec.cache.registry.repository" in str(refused.value)
    own = model(namespace, "own")
    own["spec"]["cache"] = {"registry": {"repository": "r.example:5000/team/caches"}}
    pull = pulling(kube, own)
    env = simulate.env_of(kube.get("Job", namespace, pull) or {})
    assert env["SPYRE_SERVING_CACHE_REGISTRY"] == "r.example:5000/team/caches"
