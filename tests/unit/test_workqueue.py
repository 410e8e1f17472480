"""The work queue (coalescing, one run per key at a time, retries with back-off, fairness,
shutdown) and the resync spread over its period."""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

import pytest

from spyre_operator.api.names import API_VERSION, CACHE_KIND, KIND
from spyre_operator.reconcile import triggers, workqueue
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.kube import Kube
from spyre_operator.reconcile.triggers import Resync, watched_keys
from spyre_operator.reconcile.workqueue import Copy, Key, WorkQueue
from spyre_operator.render import meta

pytestmark = pytest.mark.unit

A, B, C = (("SpyreModel", "ns", n) for n in "abc")
WAIT = 30.0  # seconds a test waits for the state it expects (a loaded machine)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A handler that records its runs (key, copy) and fails while told to."""

    def __init__(self) -> None:
        self.runs: list[tuple[Key, Copy]] = []
        self.failing: dict[Key, int] = {}  # key -> failures still to come
        self.said: list[tuple[Key, float, str | None]] = []  # (key, delay, said before)

    def __call__(self, key: Key, copy: Copy) -> None:
        self.runs.append((key, copy))
        if self.failing.get(key):
            self.failing[key] -= 1
            raise RuntimeError(f"failure {len(self.runs)}")

    def complain(self, key: Key, err: Exception, delay: float, before: str | None) -> str:
        self.said.append((key, delay, before))
        return str(err)


def queue(handler: Recorder, clock: Clock | None = None) -> WorkQueue:
    return WorkQueue(handler, handler.complain, clock=clock or Clock())


def drain(q: WorkQueue) -> None:
    while q.process(block=False):
        pass


def test_a_key_queued_twice_runs_once_with_the_latest_copy() -> None:
    rec = Recorder()
    q = queue(rec)
    q.add(A, {"v": 1})
    q.add(B)
    q.add(A, {"v": 2})
    q.add(A, {"v": 3})
    drain(q)
    assert rec.runs == [(A, {"v": 3}), (B, None)]  # A keeps its place, runs once


def test_a_trigger_without_a_copy_makes_the_run_read_afresh() -> None:
    """A copy could be the echo of the reconciler's own status write (skipped); a child's
    event coalesced with it must still run the reconcile."""
    rec = Recorder()
    q = queue(rec)
    q.add(A, {"v": 1})
    q.add(A)  # a child changed
    q.add(A, {"v": 2})  # a later event of A itself
    drain(q)
    assert rec.runs == [(A, None)]


def test_a_key_added_while_it_runs_runs_once_more_after_behind_the_others() -> None:
    rec = Recorder()
    q = queue(rec)

    def handler(key: Key, copy: Copy) -> None:
        rec(key, copy)
        if len(rec.runs) == 1:  # while A runs: A three times, then B
            for c in ({"v": 1}, {"v": 2}, {"v": 3}):
                q.add(A, c)
            q.add(B)

    q.handle = handler
    q.add(A)
    drain(q)
    assert rec.runs == [(A, None), (B, None), (A, {"v": 3})]


def test_one_key_never_runs_twice_at_once_and_never_blocks_the_others() -> None:
    """Real worker threads: A is held in its run while it is added again and B comes and
    goes; when A's run ends, A runs once more, and no two runs of A ever overlapped."""
    lock = threading.Condition()
    running: collections.Counter[Key] = collections.Counter()
    runs: collections.Counter[Key] = collections.Counter()
    overlap: list[Key] = []
    release = threading.Event()

    def handler(key: Key, copy: Copy) -> None:
        with lock:
            running[key] += 1
            runs[key] += 1
            if running[key] > 1:
                overlap.append(key)
            lock.notify_all()
        if key == A and runs[A] == 1:
            assert release.wait(WAIT)
        with lock:
            running[key] -= 1
            lock.notify_all()

    q = WorkQueue(handler, Recorder().complain)
    q.start(4)
    try:
        q.add(A)
        with lock:
            assert lock.wait_for(lambda: running[A] == 1, WAIT)
        for _ in range(5):
            q.add(A)
        q.add(B)
        with lock:  # B ran on another worker while A's run is held
            assert lock.wait_for(lambda: runs[B] == 1 and running[B] == 0, WAIT)
            assert (runs[A], running[A]) == (1, 1)
        release.set()
        with lock:
            assert lock.wait_for(lambda: runs[A] == 2 and running[A] == 0, WAIT)
    finally:
        release.set()
        q.shutdown(WAIT)
    assert (runs[A], overlap) == (2, [])  # the five adds while it ran: one more run


def test_a_failing_key_is_retried_with_a_doubling_pause_reset_by_a_success(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, rec = Clock(), Recorder()
    q = queue(rec, clock)
    rec.failing[A] = 7
    q.add(A)
    delays = []
    for _ in range(7):
        assert q.process(block=False)  # runs, fails
        delay = q.retry_in(A)
        assert delay is not None
        delays.append(delay)
        clock.now += delay - 0.001
        assert not q.process(block=False)  # not before its time
        clock.now += 0.001
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert q.failures(A) == 7 and q.stats["retries"] == 6
    # what was said of each failure is handed to the next complaint (the log says a
    # failure that repeats more quietly)
    assert [before for _, _, before in rec.said] == [None] + [f"failure {n}" for n in range(1, 7)]
    caplog.set_level(logging.INFO, logger=workqueue.__name__)
    assert q.process(block=False)  # the retry, which passes now
    assert (q.failures(A), q.retry_in(A), q.stats["retries"]) == (0, None, 7)
    assert caplog.messages == ["ns/a: recovered after 7 failed attempts"]
    rec.failing[A] = 1  # a new failure starts from the first pause again
    q.add(A)
    q.process(block=False)
    assert q.retry_in(A) == 10 and rec.said[-1][2] is None


def failed_once() -> tuple[WorkQueue, Recorder, Clock]:
    """A queue whose key A failed once (its retry due in 10 s)."""
    clock, rec = Clock(), Recorder()
    q = queue(rec, clock)
    rec.failing[A] = 1
    q.add(A)
    q.process(block=False)
    assert q.retry_in(A) == 10
    return q, rec, clock


def test_an_event_runs_a_failing_key_at_once_and_its_success_cancels_the_retry() -> None:
    q, rec, clock = failed_once()
    q.add(A, {"v": 2})  # its spec changed: no reason to wait
    assert q.process(block=False)
    assert rec.runs[-1] == (A, {"v": 2}) and q.retry_in(A) is None
    clock.now += 60
    assert not q.process(block=False)  # the retry is gone


def test_a_deleted_key_loses_its_retry_and_a_queued_run_reads_afresh() -> None:
    q, rec, clock = failed_once()
    q.add(A, {"v": 1})
    q.forget(A)  # its DELETED event
    assert (q.retry_in(A), q.failures(A)) == (None, 0)
    drain(q)
    clock.now += 60
    drain(q)
    assert rec.runs == [(A, None), (A, None)]


def test_a_run_that_asks_to_run_again_is_queued_then_not_before() -> None:
    """A running compile's progress: the reconcile returns when it wants to run again."""
    clock, runs = Clock(), []

    def handle(key: Key, copy: Copy) -> float | None:
        runs.append(clock.now)
        return 60.0 if len(runs) < 3 else None

    q = WorkQueue(handle, Recorder().complain, clock=clock)
    q.add(A)
    drain(q)
    assert runs == [1000.0] and q.retry_in(A) == 60.0 and q.failures(A) == 0
    clock.now += 59
    drain(q)
    assert runs == [1000.0]
    q.add(A)  # an event meanwhile runs at once; the sooner run asked for stays
    drain(q)
    assert runs == [1000.0, 1059.0] and q.retry_in(A) == 1.0
    clock.now += 1
    drain(q)
    assert runs == [1000.0, 1059.0, 1060.0] and q.stats["requeues"] == 1
    assert q.retry_in(A) is None  # it asked for nothing more


def test_a_run_that_asks_for_nothing_keeps_the_run_asked_for_before() -> None:
    """The echo of a status write (a run that decides nothing) does not cancel the
    retention's or the progress' run; a success cancels a retry."""
    clock, answers = Clock(), [3600.0, None]

    def handle(key: Key, copy: Copy) -> float | None:
        return answers.pop(0)

    q = WorkQueue(handle, Recorder().complain, clock=clock)
    q.add(A)
    drain(q)
    q.add(A)
    drain(q)
    assert q.retry_in(A) == 3600.0


def test_a_hot_key_does_not_starve_the_others() -> None:
    """A key re-added during each of its runs goes behind every key that waited."""
    rec = Recorder()
    q = queue(rec)

    def handler(key: Key, copy: Copy) -> None:
        rec(key, copy)
        if key == A:
            q.add(A)
            q.add(A)

    q.handle = handler
    q.add(A)
    q.add(B)
    q.add(C)
    for _ in range(7):
        q.process(block=False)
    assert [key for key, _ in rec.runs] == [A, B, C, A, A, A, A]
    q.add(B)  # a newcomer runs right after the hot key's current turn
    q.process(block=False)
    q.process(block=False)
    assert [key for key, _ in rec.runs[-2:]] == [A, B]


def test_shutdown_lets_the_run_in_progress_finish_and_stops_the_workers() -> None:
    entered, release = threading.Event(), threading.Event()
    done: list[Key] = []

    def handler(key: Key, copy: Copy) -> None:
        entered.set()
        assert release.wait(WAIT)
        done.append(key)

    q = WorkQueue(handler, Recorder().complain)
    q.start(2)
    q.add(A)
    assert entered.wait(WAIT)
    stopper = threading.Thread(target=q.shutdown, args=(WAIT,))
    stopper.start()
    release.set()
    stopper.join(WAIT)
    assert not stopper.is_alive() and done == [A]
    assert not any(t.is_alive() for t in q._workers)
    q.add(B)  # after shutdown: nothing runs it
    assert not q.process(block=False) and done == [A]


def test_the_resync_spreads_each_pass_over_its_period() -> None:
    clock = Clock()
    start = clock.now
    added: list[tuple[float, Any]] = []
    keys = [("SpyreModel", "ns", f"m{i}") for i in range(4)]

    def wait(seconds: float) -> bool:  # stopped after two passes
        clock.now += seconds
        return clock.now >= start + 300

    resync = Resync(lambda: keys, lambda k: added.append((clock.now - start, k)), 100, clock, wait)
    resync.run()
    assert added == [(100 + 25 * i, k) for i, k in enumerate(keys)] + [
        (200 + 25 * i, k) for i, k in enumerate(keys)
    ]


def test_ten_thousand_models_resync_at_under_fifty_per_second_by_default() -> None:
    clock = Clock()
    start = clock.now
    period = 300.0  # options.DEFAULT_RESYNC
    per_second: collections.Counter[int] = collections.Counter()
    keys = [("SpyreModel", f"ns{i % 7}", f"m{i}") for i in range(10_000)]

    def wait(seconds: float) -> bool:
        clock.now += seconds
        return clock.now >= start + 2 * period

    Resync(
        lambda: keys, lambda _: per_second.update([int(clock.now - start)]), period, clock, wait
    ).run()
    assert sum(per_second.values()) == 10_000
    assert max(per_second.values()) <= 34  # 10,000 / 300 s = 33.3 per second


def test_the_resync_walks_both_kinds_in_a_stable_order() -> None:
    watched = {"SpyreModel": {("b", "x"): [], ("a", "y"): []}, "SpyreCache": {("a", "z"): []}}
    assert watched_keys(watched) == [
        ("SpyreCache", "a", "z"),
        ("SpyreModel", "a", "y"),
        ("SpyreModel", "b", "x"),
    ]


def test_the_pause_doubles_up_to_five_minutes() -> None:
    delay = workqueue.retry_delay
    assert [delay(10, n) for n in (1, 2, 3, 5, 6, 10_000)] == [10, 20, 40, 160, 300, 300]
    assert (delay(0.01, 1), delay(600, 3)) == (0.01, 600)  # a first pause above the cap stays


def test_the_triggers_only_queue_a_model_with_its_copy_or_for_a_fresh_read() -> None:
    rec = Recorder()
    q = queue(rec)
    kube = Kube(api=None)  # type: ignore[arg-type]  # never called: nothing runs here
    reconcilers = {
        kind: Reconciler(kube, lambda *_: None, kind=kind, queue=q) for kind in (KIND, CACHE_KIND)
    }
    body = {"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "7"}}
    triggers.model_event(reconcilers[KIND], "MODIFIED", body)
    triggers.model_event(reconcilers[CACHE_KIND], "ADDED", body | {"kind": CACHE_KIND})
    owner = {"apiVersion": API_VERSION, "kind": KIND, "name": "b", "uid": "u"}
    service = {"metadata": {"namespace": "ns", "name": "b", "ownerReferences": [owner]}}
    triggers.child_changed(reconcilers, "ADDED", service)  # made by the reconciler: nothing
    triggers.child_changed(reconcilers, "MODIFIED", service)
    drain(q)
    assert rec.runs == [
        (A, body),
        (("SpyreCache", "ns", "a"), body | {"kind": CACHE_KIND}),
        (B, None),
    ]
    triggers.model_event(reconcilers[KIND], "MODIFIED", body)
    triggers.model_event(reconcilers[KIND], "DELETED", body)  # still queued: reads afresh
    drain(q)
    assert rec.runs[-1] == (A, None)


def test_the_resync_waits_for_what_triggers_queued_and_leaves_queued_keys_alone() -> None:
    rec = Recorder()
    q = queue(rec)
    q.resync(A)
    q.resync(B)
    q.add(C)
    q.resync(C)  # queued already: that run is as good
    q.add(B, {"v": 1})  # a trigger: B runs with the others, not as a resync
    drain(q)
    assert rec.runs == [(C, None), (B, {"v": 1}), (A, None)]

    def handler(key: Key, copy: Copy) -> None:
        rec(key, copy)
        q.resync(key)  # while it runs: nothing more

    q.handle = handler
    q.resync(A)
    q.resync(A)
    q.forget(B)
    q.resync(B)
    q.forget(B)  # deleted meanwhile: not run
    drain(q)
    assert rec.runs[3:] == [(A, None)]


def test_a_key_put_later_waits_for_the_triggered_ones_and_runs_after_its_own_run() -> None:
    """The low lane for a key's inventory entry: behind every key a trigger queued; a
    key put there while it runs runs once more after (that run decided before)."""
    rec = Recorder()
    q = queue(rec)
    q.later(A)
    q.add(B)
    assert not q.idle()
    q.add(C, {"v": 1})
    q.later(C)  # queued already: that run is as good
    drain(q)
    assert rec.runs == [(B, None), (C, {"v": 1}), (A, None)] and q.idle()

    def handler(key: Key, copy: Copy) -> None:
        rec(key, copy)
        if len(rec.runs) == 4:  # while A runs: A later, and B by a trigger
            q.later(A)
            q.add(B)

    q.handle = handler
    q.add(A)
    drain(q)
    assert rec.runs[3:] == [(A, None), (B, None), (A, None)]  # A again, after B

    def added_meanwhile(key: Key, copy: Copy) -> None:
        rec(key, copy)
        if len(rec.runs) == 7:
            q.later(A)
            q.add(A, {"v": 2})  # a trigger as well: one run more, not two

    q.handle = added_meanwhile
    q.add(A)
    drain(q)
    assert rec.runs[6:] == [(A, None), (A, {"v": 2})]
    q.handle = handler
    q.later(B)
    q.forget(B)  # deleted meanwhile: not run
    drain(q)
    assert len(rec.runs) == 8


def test_a_new_compile_job_without_its_entry_has_its_owners_reconciled_later() -> None:
    rec = Recorder()
    q = queue(rec)
    kube = Kube(api=None)  # type: ignore[arg-type]  # never called: nothing runs here
    reconcilers = {
        kind: Reconciler(kube, lambda *_: None, kind=kind, queue=q) for kind in (KIND, CACHE_KIND)
    }
    owner = {"apiVersion": API_VERSION, "kind": KIND, "name": "a", "uid": "u"}
    labels = {meta.COMPONENT_LABEL: meta.COMPILE}
    annotations = {meta.CACHE_KEY_ANNOTATION: "k" * 64}
    job = {
        "kind": "Job",
        "metadata": {
            "namespace": "ns",
            "name": "spyre-compile-x",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
    }
    triggers.child_changed(reconcilers, "ADDED", job)
    q.add(B)  # a trigger's key runs first
    drain(q)
    assert rec.runs == [(B, None), (A, None)]
    entry = owner | {"kind": CACHE_KIND, "name": meta.inventory_name("k" * 64)}
    job["metadata"]["ownerReferences"] = [owner, entry]
    triggers.child_changed(reconcilers, "ADDED", job)  # owned by its entry: nothing
    drain(q)
    assert rec.runs == [(B, None), (A, None)]
