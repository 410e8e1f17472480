"""The inventory of caches and their clean-up (issue 15, items 2 and 4): each compiled key
gets a SpyreCache entry that says who uses it, `kubectl get scache` lists them, and a key
no SpyreModel and no SpyreCache of a user uses is removed by a clean-up Job after the
retention (a few seconds here), a used or asked-for one never."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import cluster_sim as sim
import pytest
from test_operator_caches import precompile

from spyre_devcluster import simulate
from spyre_operator.api.crd import build_cache_crd
from spyre_operator.api.names import CACHE_KIND
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key

pytestmark = pytest.mark.integration

RETENTION = 3  # seconds


@pytest.fixture
def short_retention(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[sim.Operator]:
    log = tmp_path / "operator.log"
    flags = ("--cache-retention", f"{RETENTION}s")
    with sim.running_operator(kubeconfig, namespace, log, 300.0, *flags) as op:
        yield op


def entry_of(doc: dict[str, Any]) -> str:
    return meta.inventory_name(cache_key(parse(doc).spec))


def entry_status(kube: Kube, namespace: str, name: str, **fields: Any) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        st = (kube.get(CACHE_KIND, namespace, name) or {}).get("status") or {}
        return st if st and all(st.get(k) == v for k, v in fields.items()) else None

    found: dict[str, Any] = sim.wait_for(probe, f"SpyreCache {name} has {fields}")
    return found


def other_key(doc: dict[str, Any], seqs: int) -> dict[str, Any]:
    doc["spec"]["batching"]["continuous"]["maxNumSeqs"] = seqs
    return doc


def test_an_unused_key_is_cleaned_after_the_retention_a_used_or_asked_for_one_never(
    kube: Kube, namespace: str, short_retention: sim.Operator, kubectl: Any
) -> None:
    kept, gone = (
        sim.model(namespace, "kept"),
        sim.model(namespace, "gone", other_key(sim.example(), 2)),
    )
    asked = sim.model(
        namespace, "mine", other_key(sim.example(), 3)
    )  # the spec a SpyreCache asks for
    sim.to_ready(kube, kept)
    sim.to_ready(kube, gone)
    sim.create(kube, precompile(namespace, "mine", asked))
    sim.download(kube, asked)
    sim.wait_for(lambda: kube.get("Job", namespace, sim.job_name(asked)), "the precompile's Job")
    simulate.complete_job(kube, namespace, sim.job_name(asked), size=7)
    entries = {doc["metadata"]["name"]: entry_of(doc) for doc in (kept, gone, asked)}
    assert len(set(entries.values())) == 3  # three keys, three entries

    st = entry_status(kube, namespace, entries["kept"], usedBy=["kept"], phase="Ready")
    assert (st["cache"]["bytes"], st["runtime"]) == (3 * 2**30, "vllm-spyre 1.10.0")
    assert st["compiledAt"] and st["lastUsedAt"]
    assert sim.job_owners(kube, namespace, sim.job_name(kept)) == {"kept", entries["kept"]}
    entry = kube.get(CACHE_KIND, namespace, entries["kept"])
    assert entry is not None and meta.is_inventory(entry)
    assert "ownerReferences" not in entry["metadata"]  # it outlives the SpyreModels
    entry_status(kube, namespace, entries["mine"], usedBy=[], phase="Ready")
    table = kubectl("get", "scache", "-n", namespace).stdout.splitlines()
    assert table[0].split() == [
        "NAME", "PHASE", "CACHE", "MODEL", "RUNTIME", "BYTES", "USED-BY", "LAST-USED", "AGE",
    ]  # fmt: skip
    row = next(line.split() for line in table if line.startswith(entries["kept"]))
    assert row[1:7] == [
        "Ready", "Compiled", "ibm-ai-platform/micro-g3.3-8b-instruct-1b", "vllm-spyre",
        "1.10.0", str(3 * 2**30),
    ]  # fmt: skip
    assert row[7] == '["kept"]'

    # The SpyreModel of one key goes: its entry keeps the Job, then cleans up.
    kube.request(
        "DELETE", f"/apis/serving.spyre.dev/v1alpha1/namespaces/{namespace}/spyremodels/gone"
    )
    st = entry_status(kube, namespace, entries["gone"], usedBy=[])
    cleanup = meta.cleanup_job_name(cache_key(parse(gone).spec))
    job = sim.wait_for(lambda: kube.get("Job", namespace, cleanup), "the clean-up Job", timeout=60)
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["clean"]
    compile_job = kube.get("Job", namespace, sim.job_name(gone)) or {}
    marked = compile_job["metadata"]["annotations"][meta.CLEANUP_ANNOTATION]
    assert marked >= st["lastUsedAt"]  # after the retention, from the last use
    (ref,) = job["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"]) == (CACHE_KIND, entries["gone"])
    entry_status(kube, namespace, entries["gone"], phase="CleaningUp")
    freed = json.dumps({"ok": True, "cacheKey": cache_key(parse(gone).spec), "bytes": 3 * 2**30})
    simulate.finish_job(kube, namespace, cleanup, exit_code=0, message=freed, reason="Completed")
    sim.wait_for(lambda: kube.get(CACHE_KIND, namespace, entries["gone"]) is None, "the entry goes")

    def job_gone(name: str) -> bool:
        return kube.get("Job", namespace, name) is None

    for name in (cleanup, sim.job_name(gone)):  # the garbage collector takes both Jobs
        sim.wait_for(partial(job_gone, name), f"Job {name} is gone")

    # Long past the retention, the used key and the asked-for key have no clean-up Job.
    for doc in (kept, asked):
        name = meta.cleanup_job_name(cache_key(parse(doc).spec))
        assert kube.get("Job", namespace, name) is None
        assert kube.get("Job", namespace, sim.job_name(doc)) is not None
    assert kube.get(CACHE_KIND, namespace, "mine") is not None
    sim.wait_phase(kube, namespace, "kept", "Ready")


@pytest.fixture
def without_the_cache_crd(kube: Kube) -> Iterator[None]:
    """The SpyreModel CRD only (an upgrade that skipped the SpyreCache CRD); both again
    after the test, for the others sharing the control plane."""
    simulate.install_crds(kube)
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    kube.request("DELETE", f"{crds}/{build_cache_crd()['metadata']['name']}")

    def unserved() -> bool:
        try:
            kube.request("GET", "/apis/serving.spyre.dev/v1alpha1/spyrecaches")
        except ApiError as err:
            return err.not_found
        return False

    sim.wait_for(unserved, "SpyreCaches are no longer served")
    try:
        yield
    finally:
        simulate.install_crds(kube)


def test_without_the_spyrecache_crd_a_model_serves_said_once_never_degraded(
    kube: Kube, kubeconfig: Path, namespace: str, tmp_path: Path, without_the_cache_crd: None
) -> None:
    log = tmp_path / "operator.log"
    op = sim.Operator(kubeconfig, namespace, log, 300.0)
    try:
        first, second = (
            sim.model(namespace, "first"),
            sim.model(namespace, "second", other_key(sim.example(), 2)),
        )
        sim.to_ready(kube, first)
        sim.to_ready(kube, second)  # the kind is known missing: not tried again
        for name in ("first", "second"):
            assert ("Warning", "ApplyFailed") not in sim.events_for(kube, namespace, name)
            status = (kube.get("SpyreModel", namespace, name) or {})["status"]
            assert (
                next(c for c in status["conditions"] if c["type"] == "Degraded")["status"]
                == "False"
            )
            assert sim.job_owners(
                kube, namespace, sim.job_name(first if name == "first" else second)
            ) == {name}
        said = [line for line in op.output().splitlines() if "does not serve SpyreCache" in line]
        assert len(said) == 1 and "WARNING" in said[0]
    except BaseException:
        print(f"--- operator log ({log}) ---\n{op.output(80)}")
        raise
    finally:
        op.stop()
