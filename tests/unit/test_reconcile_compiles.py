"""The compile queue (pure): limits, fair order, positions, shared keys, and what a
SpyreModel wants; and decide() holding a Job back while its key waits."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import example, merge
from test_reconcile_engine import keys_computed

from spyre_operator.api.status import WeightsSummary
from spyre_operator.api.validation import parse
from spyre_operator.reconcile.compile_queue import Limits, Queue, Want, line, ordinal, turn, wanted
from spyre_operator.reconcile.conditions import find
from spyre_operator.reconcile.decide import decide
from spyre_operator.reconcile.observe import Observed
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.settings import Settings

pytestmark = pytest.mark.unit


def want(name: str, second: int = 0, namespace: str = "a", job: str | None = None) -> Want:
    return Want(f"2030-01-01T00:00:{second:02d}Z", namespace, name, job or f"job-{name}")


def queue(
    *wanting: Want, running: tuple[tuple[str, str], ...] = (), cluster: int = 2, per_ns: int = 0
) -> Queue:
    return Queue(Limits(cluster, per_ns), frozenset(running), wanting)


def test_ordinals() -> None:
    numbers = (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112)
    words = ("1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st")
    assert [ordinal(n) for n in numbers] == [*words, "111th", "112th"]


def test_the_oldest_start_while_slots_are_free_the_rest_wait_in_order() -> None:
    # Created out of name order; equal timestamps fall back to namespace/name.
    models = [want("e", 3), want("b", 1), want("d", 2), want("a", 0), want("c", 1)]
    q = queue(*models)
    assert [w.name for w in line(models)] == ["a", "b", "c", "d", "e"]
    assert [turn(q, m).start for m in (models[3], models[1])] == [True, True]
    waits = {m.name: turn(q, m) for m in models if m.name in "cde"}
    assert {n: (t.start, t.position, t.waiting) for n, t in waits.items()} == {
        "c": (False, 1, 3),
        "d": (False, 2, 3),
        "e": (False, 3, 3),
    }
    assert waits["e"].message == "3rd of 3 waiting; 0 compiles running (at most 2 at once)"


def test_running_jobs_take_the_slots() -> None:
    q = queue(want("a"), want("b", 1), running=(("a", "job-x"),))
    assert turn(q, want("a")).start
    late = turn(q, want("b", 1))
    assert (late.start, late.position, late.running) == (False, 1, 1)
    assert late.message == "1st of 1 waiting; 1 compile running (at most 2 at once)"


def test_a_key_that_already_runs_is_joined_not_queued() -> None:
    full = queue(want("x", 5, job="shared"), running=(("a", "j1"), ("a", "j2"), ("a", "shared")))
    assert turn(full, want("x", 5, job="shared")).start
    # In another namespace the same name is another Job: it waits.
    assert not turn(full, want("y", 5, namespace="b", job="shared")).start


def test_models_sharing_a_key_hold_one_place_in_line() -> None:
    models = [want("a", 0, job="k1"), want("b", 1, job="k2"), want("c", 2, job="k1")]
    models += [want("d", 3, job="k3")]
    q = queue(*models, cluster=1)
    assert turn(q, models[0]).start and turn(q, models[2]).start  # both the first key
    late = [turn(q, m) for m in models[1::2]]
    assert [(t.position, t.waiting) for t in late] == [(1, 2), (2, 2)]


def test_a_full_namespace_does_not_hold_up_other_namespaces() -> None:
    models = [want("a1", 0), want("a2", 1), want("b1", 2, namespace="b"), want("b2", 3, "b")]
    q = queue(*models, running=(("a", "job-r"),), cluster=3, per_ns=1)
    answers = {m.name: turn(q, m) for m in models}
    assert [n for n, t in answers.items() if t.start] == ["b1"]
    assert [(answers[n].position, answers[n].waiting) for n in ("a1", "a2", "b2")] == [
        (1, 3),
        (2, 3),
        (3, 3),
    ]
    assert answers["b2"].message.endswith("(at most 3 at once, 1 per namespace)")


def test_no_limits_never_wait() -> None:
    models = [want(str(n), n) for n in range(10)]
    q = queue(*models, running=tuple(("a", f"r{n}") for n in range(50)), cluster=0)
    assert all(turn(q, m).start for m in models)


def test_me_counts_even_when_the_index_has_not_seen_my_key_yet() -> None:
    """The reconciling SpyreModel's own answer replaces its (maybe stale) entry."""
    q = queue(want("a", 0, job="old-key"), want("b", 1), cluster=1)
    assert turn(q, want("a", 0, job="new-key")).start
    assert turn(q, want("b", 1)).position == 1


def test_jobs_just_started_count_as_running() -> None:
    q = queue(want("a"), want("b", 1), want("c", 2)).with_started(frozenset({("a", "job-a")}))
    assert [w.name for w in q.wanting] == ["b", "c"]
    assert turn(q, want("b", 1)).start and not turn(q, want("c", 2)).start


COMMIT = "6e9c6465a9d7e5e9fa35004a29f0c90befa7d23f"  # the example's pinned revision
WEIGHTS = {"state": "Ready", "commit": COMMIT}


def _body(**status: Any) -> dict[str, Any]:
    """The example (a hub model) with its weights downloaded, unless `status` says else."""
    obj = merge(example("micro-granite-cpu"), {})
    obj["metadata"] |= {"uid": "u", "creationTimestamp": "2030-01-01T00:00:30Z"}
    obj["status"] = {"weights": WEIGHTS} | status
    return obj


def test_what_a_spyremodel_wants() -> None:
    obj = _body()
    key = cache_key(parse(obj).spec, COMMIT)
    job = meta.compile_job_name(key)
    assert wanted(obj) == Want("2030-01-01T00:00:30Z", "default", obj["metadata"]["name"], job)
    assert wanted(_body(cache={"cacheKey": key, "ok": True})) is None  # compiled
    assert wanted(_body(cache={"cacheKey": key, "ok": False})) is not None  # a retry
    assert wanted(_body(weights={"state": "Downloading"})) is None  # the weights first
    assert wanted(merge(obj, {"metadata": {"deletionTimestamp": "x"}})) is None
    refused = {"type": "Degraded", "status": "True", "reason": "ApplyFailed"}
    assert wanted(_body(conditions=[refused])) is None  # holds up nobody
    assert wanted(merge(obj, {"spec": {"replicas": -1}})) is None  # invalid


def test_the_index_computes_a_key_only_for_a_spec_no_status_was_decided_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf's index asks at every event (each status write's echo too): a status decided
    from the spec (observedGeneration) has the key, its targetCacheKey."""
    computed = keys_computed(monkeypatch)
    new = _body()
    me = wanted(new)  # no status decided from its spec yet: computed
    assert me is not None and len(computed) == 1
    key = cache_key(parse(new).spec, COMMIT)
    assert me.job == meta.compile_job_name(key)
    computed.clear()
    decided = {"observedGeneration": 1, "targetCacheKey": key}
    assert (wanted(_body(**decided)), computed) == (me, [])
    assert wanted(_body(**decided, cache={"cacheKey": key, "ok": True})) is None  # compiled
    assert wanted(_body(observedGeneration=1)) is None  # no key yet (the weights)
    assert wanted(_body(**decided, phase="Invalid")) is None  # its old key, kept as it was
    assert computed == []
    edited = merge(_body(**decided), {"metadata": {"generation": 2}, "spec": {"replicas": 2}})
    assert wanted(edited) == me and len(computed) == 1  # a new spec: computed again


def test_decide_holds_the_job_back_and_says_where_it_waits() -> None:
    obj = _body()
    model = parse(obj)
    me = wanted(obj)
    assert me is not None
    q = queue(want("older", 0, namespace=me.namespace), me, running=(("x", "r"),), cluster=1)
    seen = {
        "key": cache_key(model.spec, COMMIT),
        "body": obj,
        "pvc_exists": True,
        "weights": WeightsSummary(state="Ready", commit=COMMIT),
    }
    plan = decide(Observed(**seen, queue=q), model, "2030-01-01T00:01:00Z", Settings())
    assert "CreatedCompileJob" not in [a.reason for a in plan.actions]
    status = plan.status.to_k8s()
    assert status["phase"] == "Compiling"
    cache = find(status["conditions"], "CacheReady")
    assert (cache["status"], cache["reason"]) == ("False", "Queued")
    assert "2nd of 2 waiting; 1 compile running (at most 1 at once)" in cache["message"]
    assert find(status["conditions"], "Progressing")["reason"] == "Queued"
    assert find(status["conditions"], "Ready")["message"] == cache["message"]
    free = queue(me, cluster=1)
    plan = decide(Observed(**seen, queue=free), model, "2030-01-01T00:01:00Z", Settings())
    assert "CreatedCompileJob" in [a.reason for a in plan.actions]
