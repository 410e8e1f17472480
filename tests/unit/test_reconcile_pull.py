"""Pull instead of compile (reconcile/pull.py in decide): with a cache registry the key's
pull Job comes first and no compile Job is made while it runs; a pull that succeeded
serves the key with no compile at all; a miss or a refusal compiles as without a
registry, and the compile's Event says why. Without a registry nothing changes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from test_reconcile_decide import T0, body, complete, cond, failed, job, observed_as, pod, step

from spyre_operator.api.names import CACHE_KIND
from spyre_operator.api.validation import parse
from spyre_operator.reconcile.decide import Plan, decide
from spyre_operator.reconcile.pull import RETRY_SECONDS
from spyre_operator.reconcile.views import job_view
from spyre_operator.reconcile.weights_status import pinned_weights
from spyre_operator.render import meta
from spyre_operator.settings import Settings

pytestmark = pytest.mark.unit

SHARING = Settings(cache_registry="registry.example.com/spyre/caches", cache_registry_secret="reg")
REFERENCE = "registry.example.com/spyre/caches:<key>-amd64"
PULLED = {  # the summary of a pull Job that succeeded
    "ok": True,
    "cacheKey": "k",
    "seconds": 4.2,
    "bytes": 120000,  # the key's size, from the READY record the pull verified
    "pulled": {"reference": REFERENCE, "digest": "sha256:ab", "bytes": 123456, "seconds": 4.0},
}


def created(plan: Plan) -> list[tuple[str, str]]:
    return [(a.reason, a.obj["metadata"]["name"]) for a in plan.actions if a.verb == "create"]


def pull_job(obj: dict[str, Any], **state: Any) -> dict[str, Any]:
    """The pull Job as the API server returns it, with a status."""
    first = step(obj, SHARING, pvc_exists=True)
    manifest = next(a.obj for a in first.actions if a.reason == "CreatedPullJob")
    live = copy.deepcopy(manifest)
    live["status"] = state
    return live


def finished_pull(obj: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """Observed fields once the pull Job ended with `summary` (its pod's termination)."""
    live = pull_job(obj, **(complete("p") if summary["ok"] else failed()))
    code = 0 if summary["ok"] else 1
    pods = [pod("p-0", "Completed" if code == 0 else "Error", code, json.dumps(summary), "pull")]
    return {"pvc_exists": True, "pull_job": job_view(live, pods, "pull")}


def at(seconds: float) -> str:
    """T0 (2030-01-01T00:00:00Z) plus seconds, under a day."""
    whole = int(seconds)
    return f"2030-01-01T{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}Z"


def test_the_pull_job_comes_first_and_no_compile_job_while_it_runs() -> None:
    obj = body()
    plan = step(obj, SHARING, pvc_exists=True)
    (pull,) = [a for a in plan.actions if a.reason == "CreatedPullJob"]
    assert pull.obj["metadata"]["name"].startswith("spyre-pull-")
    assert pull.message.endswith("from registry.example.com/spyre/caches")
    assert not [a for a in plan.actions if a.reason == "CreatedCompileJob"]
    assert cond(plan, "CacheReady") == ("False", "Pulling")
    assert (
        plan.status.cache is not None and plan.status.cache.job_name == pull.obj["metadata"]["name"]
    )
    running = step(obj, SHARING, pvc_exists=True, pull_job=job_view(pull_job(obj, active=1), []))
    assert created(running) == [] and cond(running, "CacheReady") == ("False", "Pulling")


def test_a_pulled_key_serves_with_no_compile_job() -> None:
    obj = body()
    summary = PULLED
    plan = step(obj, SHARING, **finished_pull(obj, summary))
    assert created(plan) == []
    assert [a.reason for a in plan.actions if a.obj["kind"] == "Deployment"] == [
        "CreatedDeployment"
    ]
    status = plan.status.to_k8s()
    assert status["cache"] | {"jobName": "-"} == {
        "jobName": "-",
        "cacheKey": status["targetCacheKey"],
        "ok": True,
        "seconds": 4.2,
        "bytes": 120000,
        "pulledFrom": REFERENCE,
        "bytesMoved": 123456,
    }
    assert cond(plan, "CacheReady") == ("True", "Pulled")
    # the next pass: the recorded summary stands for the pull (the Job may be gone)
    again = step(body(**{"cache": status["cache"]}), SHARING, pvc_exists=True)
    assert created(again) == [] and cond(again, "CacheReady") == ("True", "Pulled")


@pytest.mark.parametrize(
    ("summary", "said"),
    [
        (
            {"ok": False, "reason": "NotInRegistry", "message": "r has no cache of key k"},
            "the registry's copy was not used: NotInRegistry: r has no cache of key k",
        ),
        (
            {"ok": False, "reason": "ArtifactRefused", "message": "the layer holds a link"},
            "the registry's copy was not used: ArtifactRefused: the layer holds a link",
        ),
    ],
)
def test_a_miss_or_a_refusal_compiles_and_says_why(summary: dict[str, Any], said: str) -> None:
    obj = body()
    plan = step(obj, SHARING, **finished_pull(obj, summary))
    (compile_job,) = [a for a in plan.actions if a.reason == "CreatedCompileJob"]
    assert compile_job.message.endswith(said)
    assert cond(plan, "CacheReady") == ("False", "Compiling")
    recorded = plan.status.to_k8s()["cache"]
    assert recorded["notPulled"] == said.removeprefix("the registry's copy was not used: ")
    # kept while the compile runs (the pull Job is no longer read)
    live = copy.deepcopy(compile_job.obj)
    live["status"] = {"active": 1}
    running = step(body(cache=recorded), SHARING, pvc_exists=True, job=job_view(live, []))
    assert running.status.to_k8s()["cache"]["notPulled"] == recorded["notPulled"]
    # and CacheReady says it, where `kubectl get` and `kubectl wait` users look
    (ready,) = [c for c in running.status.conditions if c.type == "CacheReady"]
    assert (ready.reason, ready.message.split("; ")[-1]) == ("Compiling", said)


def test_a_pull_job_that_died_without_a_summary_compiles_too() -> None:
    obj = body()
    live = pull_job(obj, **failed("DeadlineExceeded"))
    plan = step(obj, SHARING, pvc_exists=True, pull_job=job_view(live, []))
    (compile_job,) = [a for a in plan.actions if a.reason == "CreatedCompileJob"]
    assert "Job has reached DeadlineExceeded" in compile_job.message


def test_an_existing_compile_job_wins_and_its_publish_is_recorded() -> None:
    obj = body()
    summary = {
        "ok": True,
        "seconds": 61.2,
        "bytes": 5000,
        "published": {"reference": REFERENCE, "digest": "sha256:ab", "bytes": 5100, "seconds": 1},
    }
    missed = {"ok": False, "reason": "NotInRegistry", "message": "none"}
    after_miss = step(obj, SHARING, **finished_pull(obj, missed))
    done = copy.deepcopy(next(a.obj for a in after_miss.actions if a.reason == "CreatedCompileJob"))
    done["status"] = complete("c")
    pods = [pod("c-0", "Completed", 0, json.dumps(summary), "precompile")]
    plan = step(obj, SHARING, pvc_exists=True, job=job_view(done, pods))
    assert not [a for a in plan.actions if a.reason == "CreatedPullJob"]
    cache = plan.status.to_k8s()["cache"]
    assert (cache["publishedTo"], cache["bytesMoved"], cache["bytes"]) == (REFERENCE, 5100, 5000)
    assert cond(plan, "CacheReady") == ("True", "Compiled")


def test_without_a_registry_no_pull_job() -> None:
    plan = step(body(), pvc_exists=True)
    assert [reason for reason, _ in created(plan)] == ["CreatedCompileJob"]


def test_a_registry_in_the_spec_pulls_without_the_operators_and_one_turned_off_compiles() -> None:
    own = {"cache": {"registry": {"repository": "other.example/team/caches"}}}
    plan = step(body(own), pvc_exists=True)
    assert [reason for reason, _ in created(plan)] == ["CreatedPullJob"]
    off = {"cache": {"registry": {"enabled": False}}}
    plan = step(body(off), SHARING, pvc_exists=True)
    assert [reason for reason, _ in created(plan)] == ["CreatedCompileJob"]


def failed_pull_at(obj: dict[str, Any], when: str) -> dict[str, Any]:
    """Observed fields: the pull Job failed at `when` (NotInRegistry)."""
    live = pull_job(obj, **failed())
    live["status"]["conditions"][0]["lastTransitionTime"] = when
    live["metadata"]["resourceVersion"] = "7"
    said = json.dumps({"ok": False, "reason": "NotInRegistry", "message": "none"})
    pods = [pod("p-0", "Error", 1, said, "pull")]
    return {"pvc_exists": True, "pull_job": job_view(live, pods, "pull")}


def test_a_failed_pull_answers_for_its_retry_period_then_the_registry_is_asked_again() -> None:
    """A miss compiles at once and looks again when the answer gets old; a key that still
    has no compile Job then (it waits in the compile queue, or its Job was deleted) deletes
    the failed pull Job, guarded by the version it saw, and the next pass pulls again; a
    compile Job of the key is left to run."""
    obj = body()
    fresh = step(obj, SHARING, at(60), **failed_pull_at(obj, T0))
    assert [r for r, _ in created(fresh)] == ["CreatedCompileJob"]
    assert fresh.requeue_after == RETRY_SECONDS - 60
    old = step(obj, SHARING, at(RETRY_SECONDS), **failed_pull_at(obj, T0))
    assert created(old) == []
    (retry,) = [a for a in old.actions if a.verb == "delete"]
    assert retry.reason == "RetryingPull" and retry.obj["kind"] == "Job"
    assert retry.obj["metadata"]["name"].startswith("spyre-pull-")
    assert retry.obj["metadata"]["resourceVersion"] == "7"
    assert retry.message.startswith("asking registry.example.com/spyre/caches again for cache ")
    assert f"failed at {T0}, over 600s ago" in retry.message
    assert cond(old, "CacheReady") == ("False", "Pulling")
    gone = step(obj, SHARING, at(RETRY_SECONDS + 1), pvc_exists=True)
    assert [r for r, _ in created(gone)] == ["CreatedPullJob"]
    compiling = job_view(job(obj, active=1), [])
    left = step(obj, SHARING, at(3600), job=compiling, **failed_pull_at(obj, T0))
    assert not [a for a in left.actions if a.verb in ("delete", "create")]
    assert left.requeue_after is None


def test_a_pulled_key_is_in_the_inventory_and_its_users_own_the_pull_job() -> None:
    """A key only pulled gets its inventory entry, held by the pull Job (a compile Job's
    role): a second SpyreModel of the key joins the Job as an owner, the entry joins it
    too, is Ready with reason Pulled and says who uses the key, and its clean-up marks the
    pull Job."""
    first = body()
    summary = PULLED
    seen = finished_pull(first, summary)
    second = copy.deepcopy(first)
    second["metadata"] |= {"name": "second", "uid": "uid-b"}
    plan = step(second, SHARING, **seen)
    joins = [a for a in plan.actions if a.obj["metadata"]["name"].startswith("spyre-pull-")]
    assert [(a.reason, a.obj["metadata"]["name"]) for a in joins] == [
        ("SharedPullJob", seen["pull_job"].name)
    ]
    (made,) = [a.obj for a in plan.deferred if a.reason == "CreatedCacheEntry"]
    key = plan.status.to_k8s()["targetCacheKey"]
    assert made["metadata"]["name"] == meta.inventory_name(key)

    entry = copy.deepcopy(made) | {"metadata": made["metadata"] | {"uid": "uid-e"}}
    parsed = parse(entry, kind=CACHE_KIND)
    weights = pinned_weights(parsed.spec)  # an entry's commit is pinned: no download
    listed = decide(
        observed_as(parsed, entry, inventory=True, weights=weights, **seen), parsed, T0, SHARING
    )
    assert [a.reason for a in listed.actions] == ["SharedPullJob"]  # the entry joins it
    status = listed.status.to_k8s()
    assert status["phase"] == "Ready" and cond(listed, "Ready") == ("True", "Pulled")
    assert status["cache"]["pulledFrom"] == REFERENCE and status["cache"]["bytesMoved"] == 123456
    assert status["cache"]["bytes"] == 120000  # the BYTES column of `kubectl get scache`
    assert status["usedBy"] == [first["metadata"]["name"]]  # the pull Job's SpyreModel owner

    # no SpyreModel left, the retention over: the clean-up marks the pull Job
    unused = copy.deepcopy(pull_job(first, **complete("p")))
    unused["status"]["completionTime"] = T0
    unused["metadata"]["ownerReferences"] = [
        {"kind": CACHE_KIND, "name": made["metadata"]["name"], "uid": "uid-e"}
    ]
    unused["metadata"]["resourceVersion"] = "9"
    pods = [pod("p-0", "Completed", 0, json.dumps(summary), "pull")]
    kept = entry | {"status": status | {"usedBy": [], "lastUsedAt": T0}}  # unused since T0
    later = decide(
        observed_as(
            parsed,
            kept,
            inventory=True,
            weights=weights,
            pvc_exists=True,
            pull_job=job_view(unused, pods, "pull"),
        ),
        parsed,
        at(3600),
        Settings(cache_registry=SHARING.cache_registry, cache_retention="60s"),
    )
    marks = [a for a in later.actions if a.verb == "mark"]
    assert [(a.obj["metadata"]["name"], a.obj["metadata"]["resourceVersion"]) for a in marks] == [
        (unused["metadata"]["name"], "9")
    ]
    assert [a.reason for a in later.actions if a.verb == "create"] == ["CreatedCleanupJob"]
