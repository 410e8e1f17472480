"""The operator's decision (pure): observed cluster state + spec -> actions, status, events."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from apilib import example, merge

from spyre_operator.api.names import CACHE_KIND
from spyre_operator.api.runtimes import Platform
from spyre_operator.api.validation import SpyreModel, parse, validate
from spyre_operator.reconcile.cache_status import duration, pending_seconds
from spyre_operator.reconcile.conditions import Event, announce, find, status_patch
from spyre_operator.reconcile.decide import (
    Plan,
    decide,
    decide_invalid,
)
from spyre_operator.reconcile.drift import differs, needs_apply
from spyre_operator.reconcile.observe import Later, Observed, spec_key
from spyre_operator.reconcile.pods import pod_issues, unschedulable
from spyre_operator.reconcile.progress import Reading
from spyre_operator.reconcile.views import deployment_view, job_view
from spyre_operator.reconcile.weights_status import pinned_weights, weights_commit, weights_summary
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.weights_job import weights_job_name
from spyre_operator.settings import Settings
from spyre_runtime.contract import VOLUME_STEP, Step

pytestmark = pytest.mark.unit

T0, T1 = "2030-01-01T00:00:00Z", "2030-01-01T00:05:00Z"
UID = "uid-a"
COMMIT = "6e9c6465a9d7e5e9fa35004a29f0c90befa7d23f"  # the example's pinned revision
COMPILE = "spyre-compile-"
WEIGHTS_OK = {"ok": True, "commit": COMMIT, "bytes": 2048, "files": 5, "downloaded": True}


DEFAULTS = Settings()


def body(spec_patch: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    obj = merge(example("micro-granite-cpu"), {"spec": spec_patch or {}})
    obj["metadata"] |= {"uid": UID, "generation": 1, "resourceVersion": "1"}
    obj["status"] = status
    return obj


def job(obj: dict[str, Any], settings: Settings = DEFAULTS, **state: Any) -> dict[str, Any]:
    """The compile Job as the API server returns it, with optional status and owners."""
    plan = step(obj, settings, pvc_exists=True)
    manifest = next(a.obj for a in plan.actions if a.obj["metadata"]["name"].startswith(COMPILE))
    live = copy.deepcopy(manifest)
    live["metadata"]["ownerReferences"] = state.pop("owners", live["metadata"]["ownerReferences"])
    live["status"] = state
    return live


def complete(name: str) -> dict[str, Any]:
    return {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}


def failed(reason: str = "BackoffLimitExceeded") -> dict[str, Any]:
    return {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": reason,
                "message": f"Job has reached {reason}",
            }
        ]
    }


def pod(name: str, reason: str, exit_code: int, message: str, container: str) -> dict[str, Any]:
    terminated = {"reason": reason, "exitCode": exit_code, "message": message}
    return {
        "metadata": {"name": name, "creationTimestamp": T0},
        "status": {"containerStatuses": [{"name": container, "state": {"terminated": terminated}}]},
    }


def served(live: dict[str, Any], available: bool = True) -> dict[str, Any]:
    """A Deployment as the API server stores it (defaults, string quantities) + status."""
    out = copy.deepcopy(live)
    out["metadata"]["generation"] = 1
    out["spec"]["revisionHistoryLimit"] = 10
    container = out["spec"]["template"]["spec"]["containers"][0]
    container["terminationMessagePath"] = "/dev/termination-log"
    limits = container["resources"]["limits"]
    limits["cpu"] = str(limits["cpu"])
    replicas = out["spec"]["replicas"]
    ready = replicas if available else 0
    out["status"] = {
        "observedGeneration": 1,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable",
            }
        ],
    }
    return out


def weights_done(obj: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """Observed fields of a hub model whose weights Job finished with `summary`."""
    spec = parse(obj).spec
    name = weights_job_name(spec)
    live = {
        "metadata": {"name": name, "ownerReferences": [{"uid": UID}]},
        "status": complete(name) if summary.get("ok") else failed(),
    }
    pods = [pod(f"{name}-0", "Completed", 0, json.dumps(summary), "weights")]
    view = job_view(live, pods, "weights")
    return {"weights_job": view, "weights": weights_summary(spec, view, {})}


def observed_as(model: SpyreModel, obj: dict[str, Any], **observed: Any) -> Observed:
    """What observe shows of `obj`: `observed` with the spec's key (observe computes it)."""
    key = spec_key(model.spec, weights_commit(observed.get("weights")))
    return Observed(body=obj, key=key, **observed)


def step(
    obj: dict[str, Any], settings: Settings = DEFAULTS, now: str = T0, **observed: Any
) -> Plan:
    """decide() at `now`; a hub model's weights are on the volume unless `observed` says
    otherwise."""
    if parse(obj).spec.model.from_hub and "weights" not in observed:
        observed |= weights_done(obj, WEIGHTS_OK)
    model = parse(obj)
    return decide(observed_as(model, obj, **observed), model, now, settings)


def applied(plan: Plan, kind: str) -> dict[str, Any]:
    return next(a.obj for a in plan.actions if a.obj["kind"] == kind and a.verb == "apply")


def cond(plan: Plan, kind: str) -> tuple[str, str]:
    found = find(plan.status.to_k8s()["conditions"], kind)
    return found["status"], found["reason"]


def ready_state(spec_patch: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(observed kwargs, stored status) of a Ready SpyreModel."""
    obj = body(spec_patch)
    summary = json.dumps({"ok": True, "seconds": 61.2, "versions": {"vllm": "0.17.1"}})
    done = job(obj, **complete("x"))
    pods = [pod("c-0", "Completed", 0, summary, "precompile")]
    first = step(obj, pvc_exists=True, job=job_view(done, pods))
    live = served(applied(first, "Deployment"))
    service = copy.deepcopy(applied(first, "Service"))
    service["spec"]["clusterIP"] = "10.0.0.7"
    kwargs = {
        "pvc_exists": True,
        **weights_done(obj, WEIGHTS_OK),
        "job": job_view(done, []),
        "service": service,
        "network_policy": copy.deepcopy(applied(first, "NetworkPolicy")),
        "deployment": deployment_view(live),
        "disruption_budget": next(
            (copy.deepcopy(a.obj) for a in first.actions if a.obj["kind"] == "PodDisruptionBudget"),
            None,
        ),
    }
    status = step(body(spec_patch, **first.status.to_k8s()), **kwargs).status.to_k8s()
    return kwargs, status


def test_create_makes_pvc_and_job_and_waits_for_the_cache() -> None:
    obj = body()
    plan = step(obj, pvc_exists=False)
    kinds = [(a.verb, a.obj["kind"]) for a in plan.actions]
    assert kinds == [("create", "PersistentVolumeClaim"), ("create", "Job")]
    assert plan.deferred == []  # the inventory entry: once the Job is seen
    pvc, compile_job = (a.obj for a in plan.actions)
    assert "ownerReferences" not in pvc["metadata"]  # the cache outlives every SpyreModel
    seen = step(obj, pvc_exists=True, job=job_view(job(obj), []))
    assert seen.actions == []
    (entry,) = (a.obj for a in seen.deferred)
    # the key's inventory entry: owned by no one, it outlives the SpyreModel too
    assert "ownerReferences" not in entry["metadata"] and meta.is_inventory(entry)
    (ref,) = compile_job["metadata"]["ownerReferences"]
    assert (ref["uid"], ref["controller"]) == (UID, False)  # shared: not a controller
    key = cache_key(parse(obj).spec)
    assert compile_job["metadata"]["name"] == meta.compile_job_name(key)
    status = plan.status.to_k8s()
    assert (status["phase"], status["targetCacheKey"]) == ("Compiling", key)
    assert "activeCacheKey" not in status and "endpoint" not in status
    assert cond(plan, "CacheReady") == ("False", "Compiling")
    assert cond(plan, "Progressing") == ("True", "Compiling")
    assert cond(plan, "Available") == ("False", "WaitingForCache")
    assert [e.reason for e in plan.events] == ["Compiling"]


def test_what_a_decision_asked_for_decides_it() -> None:
    """The facts read once a first decision asks (a dry run's answer, the deferred
    actions' context) feed the same decide: the engine carries out what it returns."""
    obj = body()
    refused = step(obj, pvc_exists=False, refusal="the API server refuses Deployment x")
    assert refused.actions == [] and refused.status.phase == "Invalid"
    assert cond(refused, "Ready") == ("False", "Refused")
    seen = {"pvc_exists": True, "job": job_view(job(obj), [])}
    (entry,) = (a.obj for a in step(obj, **seen).deferred)
    assert step(obj, **seen, refusal="no Job started: not asked").deferred != []
    entry_ref = (CACHE_KIND, entry["metadata"]["namespace"], entry["metadata"]["name"])
    none: frozenset[Any] = frozenset()
    busy = step(obj, **seen, later=Later(True, none, none))
    assert (busy.deferred, busy.later) == ([], True)  # it waits, and runs again later
    idle = step(obj, **seen, later=Later(False, none, none))
    assert ([a.obj for a in idle.deferred], idle.later) == ([entry], False)
    made = step(obj, **seen, later=Later(False, none, frozenset({entry_ref})))
    unserved = step(obj, **seen, later=Later(True, frozenset({CACHE_KIND}), none))
    assert (made.deferred, made.later, unserved.deferred, unserved.later) == ([], False, [], False)


def test_a_running_compile_shows_its_progress_and_asks_to_be_read_again() -> None:
    obj = body()
    running = job_view(job(obj, active=1), [])
    detail = "still running: [WARMUP] (2/3) for prompt length 64 with batch size 1..."
    reading = Reading("c-0", Step("engine", 252.4, detail))
    plan = step(obj, pvc_exists=True, job=running, progress=reading, progress_seconds=60.0)
    status = plan.status.to_k8s()
    assert status["cache"]["progress"] == {
        "step": "engine",
        "elapsedSeconds": 252.4,
        "detail": detail,
        "pod": "c-0",
    }
    message = find(status["conditions"], "CacheReady")["message"]
    assert message == (
        f"Job {running.name} is compiling cache {running.name[len(COMPILE) :]}: "
        f"step engine at 4m12s ({detail})"
    )
    assert find(status["conditions"], "Ready")["message"] == message
    assert (
        plan.requeue_after == 60.0
        and plan.actions == []
        and plan.events == [Event("Normal", "Compiling", message)]
    )
    # A newer step is a change of status (a write), with no Event: the phase is the same.
    newer = Reading("c-0", Step("engine", 312.0, "still running"))
    again = step(
        body(**status), pvc_exists=True, job=running, progress=newer, progress_seconds=60.0
    )
    assert again.status.to_k8s()["cache"]["progress"]["elapsedSeconds"] == 312.0
    assert again.events == [] and again.requeue_after == 60.0
    # Not read (the log could not be read, or no step yet): no progress, still asked again.
    unread = step(obj, pvc_exists=True, job=running, progress_seconds=60.0)
    assert "progress" not in unread.status.to_k8s()["cache"]
    assert find(unread.status.to_k8s()["conditions"], "CacheReady")["message"].endswith(
        "is compiling cache " + running.name[len(COMPILE) :]
    )
    # The detail of the first step holds the whole command line: clipped.
    long = Reading("c-0", Step("warmup", 0.4, "cache /c; vllm serve " + "--x " * 500))
    clipped = step(obj, pvc_exists=True, job=running, progress=long, progress_seconds=60.0)
    assert len(clipped.status.to_k8s()["cache"]["progress"]["detail"]) == 300


def test_a_finished_or_idle_compile_has_no_progress_and_no_requeue() -> None:
    obj = body()
    stored = {"step": "engine", "elapsedSeconds": 60.0, "pod": "c-0"}
    summary = json.dumps({"ok": True, "seconds": 61.2})
    pods = [pod("c-0", "Completed", 0, summary, "precompile")]
    done = job_view(job(obj, **complete("x")), pods)
    plan = step(obj, pvc_exists=True, job=done)
    assert "progress" not in plan.status.to_k8s()["cache"] and plan.requeue_after is None
    stored_cache = {"jobName": done.name, "cacheKey": done.cache_key, "progress": stored}
    plan = step(body(cache=stored_cache), pvc_exists=True, job=done)
    assert "progress" not in plan.status.to_k8s()["cache"]
    assert step(obj, pvc_exists=False).requeue_after is None  # no Job yet: it is created


@pytest.mark.parametrize(
    ("seconds", "said"), [(0.4, "0s"), (42.9, "42s"), (252.4, "4m12s"), (3900, "1h05m")]
)
def test_durations_read_like_kubectl(seconds: float, said: str) -> None:
    assert duration(seconds) == said


def test_succeeded_job_records_summary_and_creates_deployment_and_service() -> None:
    obj = body()
    summary = json.dumps({"ok": True, "seconds": 61.2, "versions": {"vllm": "0.17.1"}})
    pods = [pod("c-0", "Completed", 0, summary, "precompile")]
    plan = step(obj, pvc_exists=True, job=job_view(job(obj, **complete("x")), pods))
    assert [(a.verb, a.obj["kind"]) for a in plan.actions] == [
        ("apply", "NetworkPolicy"),  # before any serving pod exists
        ("apply", "Deployment"),
        ("apply", "Service"),
    ]
    deploy = applied(plan, "Deployment")
    env = {
        e["name"]: e.get("value")
        for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    key = cache_key(parse(obj).spec)
    assert env["TORCH_SENDNN_CACHE_DIR"].endswith(key)
    assert env["VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS"] == "1"
    assert deploy["metadata"]["ownerReferences"][0]["controller"] is True
    assert plan.status.to_k8s()["cache"] == {
        "jobName": meta.compile_job_name(key),
        "cacheKey": key,
        "ok": True,
        "seconds": 61.2,
        "versions": {"vllm": "0.17.1"},
    }
    assert plan.status.to_k8s()["activeCacheKey"] == key
    assert cond(plan, "CacheReady")[0] == "True"
    assert plan.status.to_k8s()["phase"] == "Starting"


@pytest.mark.parametrize(("platform", "fs_group"), [("kubernetes", 2000), ("openshift", None)])
def test_the_operators_platform_shapes_the_pods_it_creates(
    platform: Platform, fs_group: int | None
) -> None:
    obj = body()
    config = Settings(platform=platform)  # as `run --platform` makes it
    created = job(obj, config)
    done = job_view(job(obj, config, **complete("x")), [])
    plan = step(obj, config, pvc_exists=True, job=done)
    pods = [
        created["spec"]["template"]["spec"],
        applied(plan, "Deployment")["spec"]["template"]["spec"],
    ]
    assert [p["securityContext"].get("fsGroup") for p in pods] == [fs_group, fs_group]


def test_available_deployment_is_ready_with_endpoint_and_idle_pass_changes_nothing() -> None:
    kwargs, status = ready_state()
    again = step(body(**status), **kwargs)
    assert status["phase"] == "Ready"
    assert status["endpoint"] == "http://micro-granite-cpu.default.svc:8000/v1"
    assert (status["replicas"], status["readyReplicas"]) == (1, 1)
    assert cond(again, "Available") == ("True", "MinimumReplicasAvailable")
    assert cond(again, "Progressing") == ("False", "Complete")
    # Level-based and idempotent: nothing to write, nothing to announce.
    assert again.actions == []
    assert status_patch(status, again.status.to_k8s()) is None
    assert again.events == []


def test_condition_times_move_only_when_status_flips() -> None:
    kwargs, status = ready_state()
    later = decide(
        observed_as(parse(body()), body(**status), **kwargs), parse(body()), T1, Settings()
    )
    assert later.status.to_k8s() == status
    scaled = body({"replicas": 3}, **status)
    scaled["metadata"]["generation"] = 2
    plan = decide(observed_as(parse(scaled), scaled, **kwargs), parse(scaled), T1, Settings())
    available = find(plan.status.to_k8s()["conditions"], "Available")
    progressing = find(plan.status.to_k8s()["conditions"], "Progressing")
    assert available["lastTransitionTime"] == T0  # still True
    assert progressing["lastTransitionTime"] == T1  # False -> True: rolling out
    assert {c["observedGeneration"] for c in plan.status.to_k8s()["conditions"]} == {2}


def test_replicas_change_patches_the_deployment_in_place() -> None:
    kwargs, status = ready_state()
    plan = step(body({"replicas": 3}, **status), **kwargs)
    kinds = [(a.verb, a.obj["kind"]) for a in plan.actions]
    assert kinds == [("apply", "Deployment"), ("apply", "PodDisruptionBudget")]
    deploy = applied(plan, "Deployment")
    assert deploy["spec"]["replicas"] == 3
    assert plan.actions[0].reason == "UpdatedDeployment"
    assert plan.status.to_k8s()["activeCacheKey"] == status["activeCacheKey"]


def test_new_cache_key_compiles_while_the_old_deployment_keeps_serving() -> None:
    kwargs, status = ready_state()
    changed = body({"batching": {"continuous": {"maxNumBatchedTokens": 2048}}}, **status)
    new_key = cache_key(parse(changed).spec)
    plan = step(changed, **(kwargs | {"job": None}))
    kinds = [(a.verb, a.obj["kind"]) for a in plan.actions]
    assert kinds == [("create", "Job")]
    assert plan.status.to_k8s()["activeCacheKey"] == status["activeCacheKey"] != new_key
    assert plan.status.to_k8s()["targetCacheKey"] == new_key
    assert cond(plan, "Progressing") == ("True", "CompilingNewCache")
    assert cond(plan, "Available")[0] == "True"
    assert plan.status.to_k8s()["endpoint"] == status["endpoint"]
    # The autoscaler moves spec.replicas meanwhile: the old Deployment follows it.
    scaled = step(merge(changed, {"spec": {"replicas": 2}}), **(kwargs | {"job": None}))
    scale = [a for a in scaled.actions if a.verb == "scale"]
    assert [a.obj["spec"] for a in scale] == [{"replicas": 2}]
    # Once the new Job succeeded the Deployment rolls to the new key.
    done = job(changed, **complete("x"))
    rolled = step(changed, **(kwargs | {"job": job_view(done, [])}))
    deploy = applied(rolled, "Deployment")
    assert deploy["metadata"]["annotations"][meta.CACHE_KEY_ANNOTATION] == new_key
    assert rolled.actions[0].reason == "RollingToNewCache"
    assert rolled.status.to_k8s()["activeCacheKey"] == new_key


@pytest.mark.parametrize(
    ("terminated", "job_reason", "reason", "words"),
    [
        (("OOMKilled", 137, "Killed"), "BackoffLimitExceeded", "OOMKilled", "memory"),
        (None, "DeadlineExceeded", "DeadlineExceeded", "activeDeadlineSeconds (10800s)"),
        (
            ("Error", 1, "loading\nTraceback\nRuntimeError: boom"),
            "BackoffLimitExceeded",
            "CompileFailed",
            "exited with code 1 (Error): loading | Traceback | RuntimeError: boom",
        ),
        (
            ("Error", 2, '{"ok": false, "reason": "ModelNotFound", "message": "no config.json"}'),
            "BackoffLimitExceeded",
            "ModelNotFound",
            "no config.json",
        ),
    ],
)
def test_compile_failures_are_explained(
    terminated: tuple[str, int, str] | None, job_reason: str, reason: str, words: str
) -> None:
    obj = body()
    pods = [pod("c-0", *terminated, "precompile")] if terminated else []
    live = job(obj, **failed(job_reason))
    live["spec"]["activeDeadlineSeconds"] = 10800  # the Job's own, as older operators made it
    plan = step(obj, pvc_exists=True, job=job_view(live, pods))
    assert plan.actions == []  # no retry storm: the Job's backoffLimit was the retry policy
    assert plan.status.to_k8s()["phase"] == "Failed"
    assert cond(plan, "CacheReady") == ("False", reason)
    assert cond(plan, "Degraded") == ("True", reason)
    message = find(plan.status.to_k8s()["conditions"], "Degraded")["message"]
    assert words in message and "kubectl delete job" in message
    assert (
        plan.status.to_k8s()["cache"]["ok"] is False
        and plan.status.to_k8s()["cache"]["reason"] == reason
    )
    (event,) = plan.events
    assert (event.type, event.reason) == ("Warning", reason)


def test_failed_new_key_keeps_serving_old_cache_as_degraded() -> None:
    kwargs, status = ready_state()
    changed = body({"batching": {"continuous": {"maxNumBatchedTokens": 2048}}}, **status)
    broken = job_view(job(changed, **failed()), [pod("c-0", "OOMKilled", 137, "", "precompile")])
    plan = step(changed, **(kwargs | {"job": broken}))
    assert plan.status.to_k8s()["phase"] == "Degraded"
    assert cond(plan, "Available")[0] == "True"
    assert plan.status.to_k8s()["activeCacheKey"] == status["activeCacheKey"]


def test_invalid_spec_reports_every_problem_and_touches_nothing() -> None:
    obj = body({"batching": {"continuous": {"maxNumBatchedTokens": 1000}}})
    problems = validate(obj)
    plan = decide_invalid(obj, [p for p in problems], T0)
    assert plan.actions == []
    assert plan.status.to_k8s()["phase"] == "Invalid"
    degraded = find(plan.status.to_k8s()["conditions"], "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert (
        "spec.batching.continuous.maxNumBatchedTokens: must be a multiple of 64"
        in (degraded["message"])
    )
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "InvalidSpec")]


def test_second_spyremodel_with_the_same_key_joins_the_job() -> None:
    obj = body()
    other = [
        {
            "apiVersion": "serving.spyre.dev/v1alpha1",
            "kind": "SpyreModel",
            "name": "other",
            "uid": "uid-b",
            "controller": False,
        }
    ]
    plan = step(obj, pvc_exists=True, job=job_view(job(obj, owners=other), []))
    (action,), (entry,) = plan.actions, plan.deferred
    assert action.verb == "add-owner"
    assert action.obj["ref"]["uid"] == UID and action.obj["ref"]["controller"] is False
    assert "resourceVersion" not in action.obj["metadata"]  # compiling: no clean-up near
    assert (entry.verb, entry.obj["kind"]) == ("create", "SpyreCache")
    # once the entry owns the Job, joining it is all
    listed = [*other, {"kind": "SpyreCache", "name": entry.obj["metadata"]["name"], "uid": "c"}]
    plan = step(obj, pvc_exists=True, job=job_view(job(obj, owners=listed), []))
    assert [a.verb for a in plan.actions] == ["add-owner"] and plan.deferred == []


def test_recorded_cache_survives_a_deleted_job() -> None:
    kwargs, status = ready_state()
    plan = step(body(**status), **(kwargs | {"job": None}))
    assert plan.actions == [] and plan.status.to_k8s() == status


def test_drift_is_detected_and_server_defaults_are_not() -> None:
    kwargs, _ = ready_state()
    live = kwargs["deployment"].live
    desired = copy.deepcopy(live)
    del desired["status"], desired["spec"]["revisionHistoryLimit"]
    assert not needs_apply(desired, live)
    edited = copy.deepcopy(live)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "evil:latest"
    assert needs_apply(desired, edited)
    assert not differs({"cpu": "2000m", "n": 4}, {"cpu": "2", "n": "4"})
    assert differs({"cpu": "2"}, {"cpu": "3"})
    assert differs([1, 2], [1])
    assert differs(["--a", "--b"], ["--b", "--a"])  # args: the order matters


def test_drift_ignores_what_other_managers_add_to_lists_of_objects() -> None:
    """Server-side apply leaves another manager's env var or toleration alone, so the
    decision must not see it as drift (else every pass would write again)."""
    want = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert not differs(
        want, [{"name": "B", "value": "2"}, {"name": "X"}, {"name": "A", "value": "1"}]
    )
    assert differs(want, [{"name": "A", "value": "1"}])  # ours was removed
    assert differs(want, [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}])  # edited
    assert differs([{"name": "A"}], None)
    assert not differs([], [])


def test_a_removed_field_is_a_new_manifest_applied_whole() -> None:
    """Removing spec fields changes the applied hash, so the Deployment is applied again,
    without them (server-side apply then drops them from the live object)."""
    placed = {
        "nodeSelector": {"zone": "a"},
        "schedulerName": "spyre-scheduler",
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        "env": [{"name": "VLLM_LOG_STATS_INTERVAL", "value": "30"}],
    }
    obj = body(placed)
    summary = json.dumps({"ok": True, "seconds": 1})
    done = job(obj, **complete("x"))
    first = step(
        obj,
        pvc_exists=True,
        job=job_view(done, [pod("c-0", "Completed", 0, summary, "precompile")]),
    )
    live = served(applied(first, "Deployment"))
    pod_spec = live["spec"]["template"]["spec"]
    assert (
        pod_spec["nodeSelector"] == {"zone": "a"} and pod_spec["schedulerName"] == "spyre-scheduler"
    )
    kwargs: dict[str, Any] = {
        "pvc_exists": True,
        "job": job_view(done, []),
        "deployment": deployment_view(live),
        "network_policy": applied(first, "NetworkPolicy"),
    }
    assert not [
        a
        for a in step(body(placed, **first.status.to_k8s()), **kwargs).actions
        if a.obj["kind"] == "Deployment"
    ]

    plan = step(body(**first.status.to_k8s()), **kwargs)
    deploy = applied(plan, "Deployment")
    new_pod = deploy["spec"]["template"]["spec"]
    assert "nodeSelector" not in new_pod and "schedulerName" not in new_pod
    assert "tolerations" not in new_pod
    assert "VLLM_LOG_STATS_INTERVAL" not in {e["name"] for e in new_pod["containers"][0]["env"]}
    assert plan.actions[0].reason == "UpdatedDeployment"


def test_serving_failures_are_surfaced() -> None:
    kwargs, status = ready_state()
    live = kwargs["deployment"].live
    stuck = served(live, available=False)
    stuck["status"]["conditions"] = [
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": 'ReplicaSet "x" has timed out progressing.',
        },
    ]
    plan = step(body(**status), **(kwargs | {"deployment": deployment_view(stuck)}))
    assert cond(plan, "Degraded") == ("True", "ProgressDeadlineExceeded")
    assert plan.status.to_k8s()["phase"] == "Degraded" and "endpoint" not in plan.status.to_k8s()
    refusal = json.dumps(
        {
            "ok": False,
            "reason": "CacheNotReady",
            "message": "maxModelLen: READY has 256, this pod has 512",
        }
    )
    issues = pod_issues([pod("srv-0", "Error", 3, refusal, "vllm")])
    plan = step(
        body(**status),
        **(kwargs | {"deployment": deployment_view(served(live, False)), "pod_issues": issues}),
    )
    assert cond(plan, "Degraded") == ("True", "CacheRejected")
    assert "READY has 256" in find(plan.status.to_k8s()["conditions"], "Degraded")["message"]


def test_known_config_warning_is_a_condition_message() -> None:
    obj = merge(example("granite-3.3-8b-instruct"), {"spec": {"replicas": 1}})
    obj["metadata"] |= {"uid": UID, "generation": 1}
    obj["spec"]["batching"]["continuous"]["maxNumSeqs"] = 3
    plan = step(obj, pvc_exists=True)
    degraded = find(plan.status.to_k8s()["conditions"], "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("False", "UnknownConfig")
    assert "known-config registry" in degraded["message"]


def test_status_patch_nulls_removed_fields_deeply() -> None:
    old = {"phase": "Ready", "endpoint": "x", "cache": {"ok": False, "reason": "OOMKilled"}}
    new = {"phase": "Compiling", "cache": {"jobName": "j"}}
    assert status_patch(old, new) == {
        "endpoint": None,
        "phase": "Compiling",
        "cache": {"ok": None, "reason": None, "jobName": "j"},
    }


def test_a_transition_event_names_what_the_pass_wrote() -> None:
    written = [Event("Normal", "CreatedDeployment", "serving from cache ab12"),
               Event("Normal", "CreatedService", "created Service m1")]  # fmt: skip
    starting = [Event("Normal", "Starting", "waiting for replicas")]
    assert announce(written, starting) == [
        Event(
            "Normal",
            "Starting",
            "waiting for replicas (serving from cache ab12; created Service m1)",
        )
    ]
    assert announce(written, []) == written  # drift repaired: one Event per child
    assert announce([], starting) == starting
    assert announce([], []) == []


# ----- the weights step of hub models -------------------------------------------------
GRANITE_MAIN = {"model": {"revision": None}}  # the example's model, at revision main


def running_weights(obj: dict[str, Any], pods: list[dict[str, Any]] | None = None) -> Any:
    spec = parse(obj).spec
    live = {
        "metadata": {"name": weights_job_name(spec), "ownerReferences": [{"uid": UID}]},
        "status": {"failed": len(pods or [])},
    }
    view = job_view(live, pods or [], "weights")
    recorded = obj["status"].get("weights") or {}
    return {"weights_job": view, "weights": weights_summary(spec, view, recorded)}


def test_a_hub_model_downloads_before_it_compiles() -> None:
    obj = body(GRANITE_MAIN)
    plan = step(obj, pvc_exists=False, **running_weights(obj) | {"weights_job": None})
    kinds = [(a.verb, a.obj["kind"], a.obj["metadata"]["name"][:14]) for a in plan.actions]
    assert kinds == [
        ("create", "PersistentVolumeClaim", "spyre-graph-ca"),
        ("create", "Job", "spyre-weights-"),
    ]
    assert plan.actions[1].reason == "CreatedWeightsJob"
    assert plan.status.to_k8s()["phase"] == "Downloading"
    assert cond(plan, "CacheReady") == ("False", "Downloading")
    assert cond(plan, "Progressing") == ("True", "Downloading")
    assert plan.status.to_k8s()["weights"]["state"] == "Downloading"
    assert "targetCacheKey" not in plan.status.to_k8s() and "cache" not in plan.status.to_k8s()

    running = step(
        body(GRANITE_MAIN, **plan.status.to_k8s()), pvc_exists=True, **running_weights(obj)
    )
    assert (running.actions, running.events) == ([], [])
    assert status_patch(plan.status.to_k8s(), running.status.to_k8s()) is None


def test_resolved_weights_compile_the_key_of_the_commit() -> None:
    obj = body(GRANITE_MAIN)
    plan = step(obj, pvc_exists=True)  # the weights Job said: commit COMMIT
    spec = parse(obj).spec
    key = cache_key(spec, COMMIT)
    assert key != cache_key(spec)  # the commit, not "main", is in the key
    (create,) = plan.actions
    assert create.obj["metadata"]["name"] == meta.compile_job_name(key)
    (entry,) = step(obj, pvc_exists=True, job=job_view(job(obj), [])).deferred
    assert entry.obj["spec"]["model"]["revision"] == COMMIT  # pinned: the same key
    assert plan.status.to_k8s()["weights"] == {
        "jobName": weights_job_name(spec),
        "modelId": spec.model.id,
        "revision": "main",
        "state": "Ready",
        "commit": COMMIT,
        "sizeBytes": 2048,
        "files": 5,
        "downloaded": True,
    }
    assert (plan.status.to_k8s()["phase"], plan.status.to_k8s()["targetCacheKey"]) == (
        "Compiling",
        key,
    )


@pytest.mark.parametrize(
    ("reason", "running"),
    [("GatedModel", True), ("RevisionNotFound", True), ("HubUnreachable", False)],
)
def test_a_refused_download_fails_at_once_and_says_why(reason: str, running: bool) -> None:
    obj = body(GRANITE_MAIN)
    summary = {"ok": False, "reason": reason, "message": f"the hub said {reason}"}
    pods = [pod("w-0", "Error", 2, json.dumps(summary), "weights")]
    plan = step(obj, pvc_exists=True, **running_weights(obj, pods))
    if not running:  # a hiccup: the Job retries, the model waits
        assert plan.status.to_k8s()["phase"] == "Downloading"
        return
    assert plan.actions == []
    assert plan.status.to_k8s()["phase"] == "Failed"
    assert plan.status.to_k8s()["weights"]["state"] == "Failed"
    assert cond(plan, "Degraded") == ("True", reason)
    message = find(plan.status.to_k8s()["conditions"], "Degraded")["message"]
    assert f"the hub said {reason}" in message and "kubectl delete job spyre-weights-" in message
    assert plan.events[0].type == "Warning" and plan.events[0].reason == reason


def test_a_finished_download_without_its_summary_is_not_guessed() -> None:
    obj = body(GRANITE_MAIN)
    plan = step(obj, pvc_exists=True, **weights_done(obj, {"ok": True}))
    assert (plan.status.to_k8s()["phase"], plan.status.to_k8s()["weights"]["reason"]) == (
        "Failed",
        "NoCommit",
    )
    assert plan.actions == []


def test_a_second_model_of_the_same_revision_joins_the_download() -> None:
    obj = body(GRANITE_MAIN)
    other = copy.deepcopy(obj)
    other["metadata"] |= {"name": "other", "uid": "uid-b"}
    plan = step(other, pvc_exists=True, **running_weights(obj))
    (share,) = plan.actions
    assert (share.verb, share.reason) == ("add-owner", "SharedWeightsJob")
    assert share.obj["ref"]["uid"] == "uid-b"


def test_a_moved_revision_is_resolved_again_only_on_request() -> None:
    """Deleting the weights Job resolves the revision again; the Deployment keeps serving
    its cache until the new commit's cache is compiled, and an Event says it moved."""
    kwargs, status = ready_state(GRANITE_MAIN)
    obj = body(GRANITE_MAIN, **status)
    ready = step(obj, **kwargs)  # main is COMMIT
    assert ready.status.to_k8s()["phase"] == "Ready" and ready.actions == []
    old = ready.status.to_k8s()
    # the user deleted the weights Job: a new one is created and runs
    gone = step(body(GRANITE_MAIN, **old), **kwargs | {"weights_job": None, "weights": None})
    assert [a.reason for a in gone.actions] == ["CreatedWeightsJob"]
    obj = body(GRANITE_MAIN, **old)
    again = step(obj, **kwargs | running_weights(obj))
    assert again.actions == []
    assert (again.status.to_k8s()["phase"], again.status.to_k8s()["activeCacheKey"]) == (
        "Downloading",
        old["activeCacheKey"],
    )
    assert cond(again, "Available") == ("True", "MinimumReplicasAvailable")
    # main has moved on
    moved = "f" * 40
    summary = WEIGHTS_OK | {"commit": moved, "downloaded": True}
    obj = body(GRANITE_MAIN, **again.status.to_k8s())
    plan = step(obj, **kwargs | weights_done(obj, summary) | {"job": None})
    (create,) = plan.actions
    assert create.obj["metadata"]["name"] == meta.compile_job_name(
        cache_key(parse(obj).spec, moved)
    )
    assert plan.status.to_k8s()["activeCacheKey"] == old["activeCacheKey"]
    assert again.status.to_k8s()["weights"]["commit"] == COMMIT  # the one being served, meanwhile
    assert plan.status.to_k8s()["phase"] == "Compiling"
    moved_event = plan.events[-1]
    assert (moved_event.type, moved_event.reason) == ("Normal", "RevisionMoved")
    assert f"revision main is now commit {moved[:12]} (was {COMMIT[:12]})" in moved_event.message
    # a resolve that finds the same commit says nothing and compiles nothing
    obj = body(GRANITE_MAIN, **again.status.to_k8s())
    same = step(obj, **kwargs | weights_done(obj, WEIGHTS_OK | {"downloaded": False}))
    assert same.actions == [] and "RevisionMoved" not in [e.reason for e in same.events]
    assert same.status.to_k8s()["phase"] == "Ready"


# ----- the Ready condition (kubectl wait --for=condition=Ready) ------------------------
def test_ready_means_the_current_spec_is_served_and_rolled_out() -> None:
    kwargs, status = ready_state()
    served = find(status["conditions"], "Ready")
    assert (served["status"], served["reason"]) == ("True", "Serving")
    assert status["conditions"][0]["type"] == "Ready"  # first, as kubectl describe shows it
    rolling = step(body({"replicas": 3}, **status), **kwargs)
    assert rolling.status.to_k8s()["phase"] == "Ready"  # still serving: the old replicas answer
    assert cond(rolling, "Ready") == ("False", "RollingOut")


def test_scaled_to_zero_is_its_own_phase_and_not_ready() -> None:
    kwargs, status = ready_state()
    plan = step(body({"replicas": 0}, **status), **kwargs)
    assert plan.status.to_k8s()["phase"] == "ScaledToZero"
    assert cond(plan, "Ready") == ("False", "ScaledToZero")
    assert cond(plan, "Available") == ("False", "ScaledToZero")


@pytest.mark.parametrize(
    ("observed", "phase", "reason"),
    [
        ({"pvc_exists": True, "weights": None}, "Downloading", "Downloading"),
        ({"pvc_exists": True}, "Compiling", "Compiling"),
    ],
)
def test_not_ready_says_which_step_it_waits_for(
    observed: dict[str, Any], phase: str, reason: str
) -> None:
    obj = body({"model": {"revision": None}} if phase == "Downloading" else None)
    plan = step(obj, **observed)
    assert (plan.status.to_k8s()["phase"], cond(plan, "Ready")) == (phase, ("False", reason))


def test_an_invalid_spec_is_not_ready() -> None:
    obj = body({"batching": {"continuous": {"maxNumBatchedTokens": 100}}})
    plan = decide_invalid(obj, validate(obj), T0)
    assert cond(plan, "Ready") == ("False", "InvalidSpec")


def test_a_changed_allow_from_updates_the_policy_and_nothing_else() -> None:
    kwargs, status = ready_state()
    peers = [{"namespaceSelector": {"matchLabels": {"team": "chat"}}}]
    plan = step(body({"service": {"allowFrom": peers}}, **status), **kwargs)
    (action,) = plan.actions
    assert (action.verb, action.reason) == ("apply", "UpdatedNetworkPolicy")
    assert action.obj["spec"]["ingress"][0]["from"] == peers
    assert plan.status.to_k8s() == status  # the Deployment and its pods are left as they are


def test_a_deleted_policy_is_made_again() -> None:
    kwargs, status = ready_state()
    plan = step(body(**status), **(kwargs | {"network_policy": None}))
    assert [(a.verb, a.reason) for a in plan.actions] == [("apply", "CreatedNetworkPolicy")]


def test_no_policy_while_nothing_serves() -> None:
    """The policy comes with the Deployment (and before it), not during the compile."""
    plan = step(body(), pvc_exists=True)
    assert "NetworkPolicy" not in [a.obj["kind"] for a in plan.actions]


@pytest.mark.parametrize("spec_patch", [GRANITE_MAIN, {}, {"model": {"revision": "v1.0"}}])
def test_the_inventory_entry_computes_the_key_of_the_model_that_made_it(
    spec_patch: dict[str, Any],
) -> None:
    """Its revision pinned to the commit the model compiled: the same key, the same Job,
    and no download of its own."""
    obj = body(spec_patch)
    plan = step(obj, pvc_exists=True, job=job_view(job(obj), []))
    (made,) = [a.obj for a in plan.deferred if a.obj["kind"] == CACHE_KIND]
    key = plan.status.to_k8s()["targetCacheKey"]
    assert made["metadata"]["name"] == meta.inventory_name(key)
    entry = copy.deepcopy(made) | {"metadata": made["metadata"] | {"uid": "uid-e"}}
    parsed = parse(entry, kind=CACHE_KIND)
    weights = pinned_weights(parsed.spec)
    assert cache_key(parsed.spec, weights_commit(weights)) == key
    again = decide(
        observed_as(parsed, entry, inventory=True, weights=weights), parsed, T0, Settings()
    )
    (create,) = again.actions  # the compile Job of the key, none for the weights
    assert create.obj["metadata"]["name"] == meta.compile_job_name(key)
    assert again.status.to_k8s()["targetCacheKey"] == key


SCHEDULER_SAYS = "0/1 nodes are available: 1 Insufficient ibm.com/spyre_pf."


def pending(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod the scheduler cannot place, as the API server stores it."""
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": SCHEDULER_SAYS,
        "lastTransitionTime": "2030-01-01T00:00:05Z",
    }
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"phase": "Pending", "conditions": [scheduled]},
    }


def test_a_compile_pod_no_node_takes_says_why_in_the_schedulers_words() -> None:
    obj = body()
    waiting = job_view(job(obj, active=1), [pending("c-0")])
    plan = step(obj, pvc_exists=True, job=waiting)
    status = plan.status.to_k8s()
    assert status["phase"] == "Compiling"  # on its way: nothing failed
    for kind in ("Ready", "CacheReady", "Progressing"):
        assert find(status["conditions"], kind)["reason"] == "Unschedulable", kind
    message = find(status["conditions"], "Ready")["message"]
    assert message.startswith("the compile of cache ")
    assert message.endswith(
        f"waits for a node since 2030-01-01T00:00:05Z: pod c-0: {SCHEDULER_SAYS}"
    )
    assert cond(plan, "Degraded") == ("False", "AsExpected")
    assert plan.events == [Event("Warning", "Unschedulable", message)]
    # said once: the next pass from the written status has no Event
    again = step(body(**status), pvc_exists=True, job=waiting)
    assert again.events == [] and again.status.to_k8s() == status
    # placed: compiling again, said as such
    running = job_view(job(obj, active=1), [])
    placed = step(body(**status), pvc_exists=True, job=running)
    assert cond(placed, "Ready") == ("False", "Compiling") and placed.events == []


def test_a_finished_pod_or_a_scheduled_one_is_not_waiting() -> None:
    done = pending("c-0")
    done["status"]["phase"] = "Failed"
    scheduled = pending("c-1")
    scheduled["status"]["conditions"][0]["status"] = "True"
    assert unschedulable([done, scheduled]) == ()
    assert [u.pod for u in unschedulable([pending("b"), pending("a")])] == ["a", "b"]


def test_replicas_no_node_takes_are_shown_as_waiting_not_as_a_failure() -> None:
    kwargs, status = ready_state({"replicas": 3})
    live = served(kwargs["deployment"].live)
    live["status"] |= {"readyReplicas": 2, "availableReplicas": 2}  # HPA asked 3, cards for 2
    waiting = unschedulable([pending("srv-2")])
    seen = kwargs | {"deployment": deployment_view(live), "unschedulable": waiting}
    plan = step(body({"replicas": 3}, **status), **seen)
    assert plan.status.to_k8s()["phase"] == "Ready"  # it serves, with 2 of 3
    assert cond(plan, "Available") == ("True", "MinimumReplicasAvailable")
    assert cond(plan, "Progressing") == ("True", "Unschedulable")
    assert cond(plan, "Ready") == ("False", "Unschedulable")
    assert cond(plan, "Degraded") == ("False", "AsExpected")
    message = find(plan.status.to_k8s()["conditions"], "Progressing")["message"]
    assert message.startswith("2/3 replicas ready; 1 waits for a node since ")
    assert message.endswith(f"pod srv-2: {SCHEDULER_SAYS}")
    assert plan.status.to_k8s()["unschedulableReplicas"] == 1  # the Unschedulable column
    assert [e.reason for e in plan.events] == ["Unschedulable"]
    # none ready: Available says why
    live["status"] |= {"readyReplicas": 0, "availableReplicas": 0}
    live["status"]["conditions"][0]["status"] = "False"
    seen |= {"deployment": deployment_view(live)}
    none = step(body({"replicas": 3}, **status), **seen)
    assert cond(none, "Available") == ("False", "Unschedulable")
    assert none.status.to_k8s()["phase"] == "Starting"


CARDS = {"backend": "sendnn", "replicas": 2}  # one card a replica, and one for its compile


def test_a_compile_that_waits_for_cards_gets_those_of_a_replica_of_the_old_key() -> None:
    kwargs, status = ready_state(CARDS)
    live = kwargs["deployment"].live
    assert (
        live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["ibm.com/spyre_pf"]
        == "1"
    )
    changed = body(CARDS | {"batching": {"continuous": {"maxNumBatchedTokens": 2048}}}, **status)
    created = job(changed, active=1)
    waiting = job_view(created, [pending("c-0")])
    plan = step(changed, **(kwargs | {"job": waiting}))
    (scale,) = plan.actions
    assert (scale.verb, scale.reason, scale.obj["spec"]) == (
        "scale", "FreedCardsForCompile", {"replicas": 1}
    )  # fmt: skip
    message = find(plan.status.to_k8s()["conditions"], "Progressing")["message"]
    assert "with 1 of 2 replicas until it is compiled" in message
    # handed over: the compile runs on that card, the Deployment stays at 1 until it is done
    handed = served(live)
    handed["spec"]["replicas"] = 1
    running = kwargs | {"job": job_view(created, []), "deployment": deployment_view(handed)}
    assert [a for a in step(changed, **running).actions if a.verb == "scale"] == []
    # compiled: the new key rolls out at spec.replicas
    done = kwargs | {"job": job_view(job(changed, **complete("x")), [])}
    done["deployment"] = deployment_view(handed)
    rolled = step(changed, **done)
    assert applied(rolled, "Deployment")["spec"]["replicas"] == 2


def test_the_floor_keeps_the_replicas_and_says_what_to_do() -> None:
    floor = CARDS | {"cache": {"compile": {"minServingReplicas": 2}}}
    kwargs, status = ready_state(floor)
    changed = body(floor | {"batching": {"continuous": {"maxNumBatchedTokens": 2048}}}, **status)
    waiting = job_view(job(changed, active=1), [pending("c-0")])
    plan = step(changed, **(kwargs | {"job": waiting}))
    assert plan.actions == []
    assert cond(plan, "Progressing") == ("True", "Unschedulable")
    message = find(plan.status.to_k8s()["conditions"], "Progressing")["message"]
    assert "no replica above spec.cache.compile.minServingReplicas (2)" in message
    # a compile that found free cards takes nothing
    running = job_view(job(changed, active=1), [])
    assert step(body(CARDS, **status), **(kwargs | {"job": running})).actions == []
    # a compile on CPU (sendnn_compile_only) holds no card: none is handed to it
    cpu = CARDS | {"runtime": {"flavour": "sendnn-inference"}}
    cpu |= {"cache": {"compile": {"backend": "sendnn_compile_only"}}}
    kwargs, status = ready_state(cpu)
    changed = body(cpu | {"batching": {"continuous": {"maxNumBatchedTokens": 2048}}}, **status)
    waiting = job_view(job(changed, active=1), [pending("c-0")])  # waits for CPU, say
    assert [a.verb for a in step(changed, **(kwargs | {"job": waiting})).actions] == []


def compile_pod(name: str, created: str, started: str | None, phase: str) -> dict[str, Any]:
    """A compile pod as the API server stores it: made at `created`, started on a node at
    `started` (the kubelet's startTime; None: still waiting for one)."""
    found = pending(name) if started is None else {"metadata": {"name": name}, "status": {}}
    found["metadata"]["creationTimestamp"] = created
    found["status"] |= {"phase": phase} | ({"startTime": started} if started else {})
    return found


def test_the_wait_for_a_node_is_the_pods_creation_to_their_start() -> None:
    obj = body()
    pods = [
        compile_pod("c-0", "2030-01-01T00:00:00Z", "2030-01-01T00:04:10Z", "Failed"),
        compile_pod("c-1", "2030-01-01T00:10:00Z", None, "Pending"),  # waits still
    ]
    running = job_view(job(obj, active=1), pods)
    assert pending_seconds(running, "2030-01-01T00:11:00Z") == 250 + 60
    # once the Job ended, a pod that never started counts to the Job's end, not to now
    ended = job_view(job(obj, **failed(), completionTime=None), pods)
    ended = replace(ended, finished_at="2030-01-01T00:10:30Z")
    assert pending_seconds(ended, "2030-01-01T05:00:00Z") == 250 + 30
    # a pod that ended without starting (deleted while it waited) waited no more
    gone = [compile_pod("c-2", "2030-01-01T00:00:00Z", None, "Failed")]
    assert pending_seconds(job_view(job(obj, active=1), gone), T1) is None
    assert pending_seconds(job_view(job(obj, active=1), []), T1) is None  # pods not read


def test_a_compile_that_waited_for_cards_says_how_long_and_its_deadline_does_not_count_it() -> None:
    obj = body()
    # The deadline is the pod's: the kubelet counts it from the pod's start on a node.
    manifest = job(obj)
    assert "activeDeadlineSeconds" not in manifest["spec"]
    assert manifest["spec"]["template"]["spec"]["activeDeadlineSeconds"] == 10800
    waiting = job_view(job(obj, active=1), [compile_pod("c-0", T0, None, "Pending")])
    status = step(obj, now=T1, pvc_exists=True, job=waiting).status.to_k8s()
    assert status["cache"]["pendingSeconds"] == 300  # so far
    message = find(status["conditions"], "CacheReady")["message"]
    assert "(its activeDeadlineSeconds counts from its start on a node) waits for a node" in (
        message
    )
    # started after 5 minutes: the wait is fixed, and said while it compiles
    started = job_view(job(obj, active=1), [compile_pod("c-0", T0, T1, "Running")])
    later = "2030-01-01T00:09:00Z"
    compiling = step(body(**status), now=later, pvc_exists=True, job=started).status.to_k8s()
    assert compiling["cache"]["pendingSeconds"] == 300
    assert find(compiling["conditions"], "CacheReady")["reason"] == "Compiling"
    assert find(compiling["conditions"], "CacheReady")["message"].endswith(
        ", with 5m00s waiting for a node"
    )
    # compiled: the summary keeps it beside the compile's own seconds
    summary = json.dumps({"ok": True, "seconds": 22.0})
    done = compile_pod("c-0", T0, T1, "Succeeded")
    done["status"]["containerStatuses"] = pod("c-0", "Completed", 0, summary, "precompile")[
        "status"
    ]["containerStatuses"]
    finished = job_view(job(obj, **complete("x")), [done])
    compiled = step(body(**compiling), now=later, pvc_exists=True, job=finished).status.to_k8s()
    assert (compiled["cache"]["seconds"], compiled["cache"]["pendingSeconds"]) == (22.0, 300)
    assert find(compiled["conditions"], "CacheReady")["message"].endswith(
        "in 22s, with 5m00s waiting for a node"
    )


def test_a_compile_pod_stopped_at_its_deadline_says_it_was_counted_from_its_start() -> None:
    obj = body()
    stopped = compile_pod("c-0", T0, T1, "Failed")
    stopped["status"]["reason"] = "DeadlineExceeded"  # the kubelet's
    stopped["spec"] = {"activeDeadlineSeconds": 10800}
    view = job_view(job(obj, **failed()), [stopped])  # the Job: BackoffLimitExceeded
    plan = step(obj, pvc_exists=True, job=view)
    assert cond(plan, "Degraded") == ("True", "DeadlineExceeded")
    message = find(plan.status.to_k8s()["conditions"], "Degraded")["message"]
    assert message.startswith(
        "the compile pod c-0 ran longer than its activeDeadlineSeconds (10800s from its start "
        "on a node; the wait for a node is not counted)"
    )


def test_two_replicas_or_more_have_a_disruption_budget_kept_as_written() -> None:
    kwargs, status = ready_state({"replicas": 2})
    budget = kwargs["disruption_budget"]
    assert budget["spec"] == {
        "selector": {"matchLabels": meta.server_selector("micro-granite-cpu")},
        "maxUnavailable": 1,
    }
    assert budget["metadata"]["ownerReferences"][0]["controller"] is True
    # kept: nothing to write; changed by someone: applied again
    assert step(body({"replicas": 2}, **status), **kwargs).actions == []
    edited = copy.deepcopy(budget)
    edited["spec"]["maxUnavailable"] = 0
    again = step(body({"replicas": 2}, **status), **(kwargs | {"disruption_budget": edited}))
    assert [(a.verb, a.obj["kind"]) for a in again.actions] == [("apply", "PodDisruptionBudget")]
    # one replica: no budget (it would block a drain, or allow it anyway)
    one = step(body({"replicas": 1}, **status), **kwargs)
    (gone,) = [a for a in one.actions if a.obj["kind"] == "PodDisruptionBudget"]
    assert (gone.verb, gone.reason) == ("delete", "DeletedPodDisruptionBudget")


def test_a_compile_whose_cache_volume_does_not_answer_says_so_naming_the_claim() -> None:
    """The compile pod's probe of its volume waits (a network filesystem's server gone):
    CacheReady's reason says so and names the claim; the phase is still Compiling."""
    obj = body()
    running = job_view(job(obj, active=1), [])
    detail = "the cache volume at /cache has not answered a write for 31s: ..."
    reading = Reading("c-0", Step(VOLUME_STEP, 95.0, detail))
    plan = step(obj, pvc_exists=True, job=running, progress=reading, progress_seconds=60.0)
    status = plan.status.to_k8s()
    assert status["phase"] == "Compiling"
    assert cond(plan, "CacheReady") == ("False", "CacheVolumeNotAnswering")
    message = find(status["conditions"], "CacheReady")["message"]
    assert message == (
        f"Job {running.name} is compiling cache {running.name[len(COMPILE) :]}: its cache "
        f"volume (claim spyre-graph-cache) does not answer: step {VOLUME_STEP} at 1m35s "
        f"({detail})"
    )
    # answered again: the warmup's step, and the reason is Compiling again
    back = Reading("c-0", Step("engine", 160.0, "still running"))
    plan = step(body(**status), pvc_exists=True, job=running, progress=back, progress_seconds=60.0)
    assert cond(plan, "CacheReady") == ("False", "Compiling")
