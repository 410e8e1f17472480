"""The work queue (coalescing, one run per key at a time, retries with back-off, fairness,
shutdown) and the resync spread over its period."""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

import pytest

from spyre_operator.api.names import API_VERSION, CACHE_KIND, KIND
from spyre_operator.controller import triggers, workqueue
from spyre_operator.controller.echoes import Echoes
from spyre_operator.controller.kinds import Controller
from spyre_operator.controller.metrics import Metrics, exposition
from spyre_operator.controller.metrics_server import parse
from spyre_operator.controller.triggers import Resync, watched_count
from spyre_operator.controller.workqueue import Key, WorkQueue
from spyre_operator.kube.backoff import retry_delay
from spyre_operator.kube.client import METADATA_ONLY, ApiError, Kube
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.result import Result
from spyre_operator.render import meta

pytestmark = pytest.mark.unit

A, B, C, D = (("SpyreModel", "ns", n) for n in "abcd")
WAIT = 30.0  # seconds a test waits for the state it expects (a loaded machine)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A handler that records its runs (keys) and fails while told to."""

    def __init__(self) -> None:
        self.runs: list[Key] = []
        self.failing: dict[Key, int] = {}  # key -> failures still to come
        self.said: list[tuple[Key, float, str | None]] = []  # (key, delay, said before)

    def __call__(self, key: Key) -> None:
        self.runs.append(key)
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


def test_a_key_queued_twice_runs_once_in_its_first_place() -> None:
    rec = Recorder()
    q = queue(rec)
    q.add(A)
    q.add(B)
    q.add(A)
    q.add(A)
    drain(q)
    assert rec.runs == [A, B]  # A keeps its place, runs once


def test_a_key_added_while_it_runs_runs_once_more_after_behind_the_others() -> None:
    rec = Recorder()
    q = queue(rec)

    def handler(key: Key) -> None:
        rec(key)
        if len(rec.runs) == 1:  # while A runs: A three times, then B
            for _ in range(3):
                q.add(A)
            q.add(B)

    q.handle = handler
    q.add(A)
    drain(q)
    assert rec.runs == [A, B, A]


def test_one_key_never_runs_twice_at_once_and_never_blocks_the_others() -> None:
    """Real worker threads: A is held in its run while it is added again and B comes and
    goes; when A's run ends, A runs once more, and no two runs of A ever overlapped."""
    lock = threading.Condition()
    running: collections.Counter[Key] = collections.Counter()
    runs: collections.Counter[Key] = collections.Counter()
    overlap: list[Key] = []
    release = threading.Event()

    def handler(key: Key) -> None:
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
    q.add(A)  # its spec changed: no reason to wait
    assert q.process(block=False)
    assert rec.runs == [A, A] and q.retry_in(A) is None
    clock.now += 60
    assert not q.process(block=False)  # the retry is gone


def test_a_deleted_key_loses_its_retry_and_a_queued_run_finds_it_gone() -> None:
    q, rec, clock = failed_once()
    q.add(A)
    q.forget(A)  # its DELETED event
    assert (q.retry_in(A), q.failures(A)) == (None, 0)
    drain(q)
    clock.now += 60
    drain(q)
    assert rec.runs == [A, A]


def test_a_run_that_asks_to_run_again_is_queued_then_not_before() -> None:
    """A running compile's progress: the reconcile returns when it wants to run again."""
    clock, runs = Clock(), []

    def handle(key: Key) -> Result:
        runs.append(clock.now)
        return Result(60.0 if len(runs) < 3 else None)

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
    """A run that decides nothing (it started before what made the other ask) does not
    cancel the retention's or the progress' run; a success cancels a retry."""
    clock, answers = Clock(), [Result(3600.0), Result()]

    def handle(key: Key) -> Result:
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

    def handler(key: Key) -> None:
        rec(key)
        if key == A:
            q.add(A)
            q.add(A)

    q.handle = handler
    q.add(A)
    q.add(B)
    q.add(C)
    for _ in range(7):
        q.process(block=False)
    assert rec.runs == [A, B, C, A, A, A, A]
    q.add(B)  # a newcomer runs right after the hot key's current turn
    q.process(block=False)
    q.process(block=False)
    assert rec.runs[-2:] == [A, B]


def test_shutdown_lets_the_run_in_progress_finish_and_stops_the_workers() -> None:
    entered, release = threading.Event(), threading.Event()
    done: list[Key] = []

    def handler(key: Key) -> None:
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


def listed_body(kind: str, namespace: str, name: str) -> dict[str, Any]:
    metadata = {"namespace": namespace, "name": name, "resourceVersion": "7"}
    return {"kind": kind, "metadata": metadata | {"managedFields": [{"manager": "x"}]}}


class Lister:
    """An API server for the resync's LISTs: `objects` by URL, `page` at a time at most
    (the resync's limit, unless smaller), continue tokens "<url>@<offset>"; `expire`: the
    tokens answered with 410 (and the token of an inconsistent continuation, or none)."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]], page: int = 10**9) -> None:
        self.objects, self.page = objects, page
        self.queries: list[tuple[str, dict[str, str]]] = []
        self.expire: dict[str, str | None] = {}
        self.on_list: Any = None  # called before each answer

    def request(
        self, method: str, url: str, query: dict[str, str], accept: str = ""
    ) -> dict[str, Any]:
        assert method == "GET" and accept == METADATA_ONLY  # the pages carry no bodies
        self.queries.append((url, query))
        if self.on_list is not None:
            self.on_list()
        token = query.get("continue", "")
        if token in self.expire:
            new = self.expire.pop(token)
            raise ApiError(410, "Gone", {"metadata": {"continue": new} if new else {}})
        offset = int(token.rsplit("@", 1)[1]) if token else 0
        size = min(int(query["limit"]), self.page)
        items = self.objects[url][offset : offset + size]
        more = offset + size < len(self.objects[url])
        return {"metadata": {"continue": f"{url}@{offset + size}" if more else ""}, "items": items}


class Lane:
    """The queue's resync side, recorded: (seconds since the start, key) per key, and the
    resourceVersion the LIST brought of each (`seen`)."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.start = clock, clock.now
        self.added: list[tuple[float, Key]] = []
        self.versions: list[tuple[Key, str]] = []
        self.waiting = 0

    def resync(self, key: Key) -> None:
        self.added.append((self.clock.now - self.start, key))

    def seen(self, key: Key, version: str) -> None:
        self.versions.append((key, version))

    def resyncs_waiting(self) -> int:
        return self.waiting


MODELS_URL, CACHES_URL = (
    "/apis/serving.spyre.dev/v1alpha1/spyremodels",
    ("/apis/serving.spyre.dev/v1alpha1/spyrecaches"),
)


def run_resync(
    lister: Lister, lane: Any, clock: Clock, period: float, passes: int, count: int = 4, **kw: Any
) -> Resync:
    start = clock.now

    def wait(seconds: float) -> bool:  # stopped after `passes` passes
        clock.now += seconds
        return clock.now >= start + (passes + 1) * period

    kube: Any = lister
    kw.setdefault("seen", lane.seen)
    resync = Resync(kube, lane, lambda: count, period, clock=clock, wait=wait, **kw)
    resync.run()
    return resync


def test_the_resync_lists_in_pages_and_spreads_each_pass_over_its_period() -> None:
    clock = Clock()
    models = [listed_body(KIND, "ns", f"m{i}") for i in range(3)]
    lister = Lister({MODELS_URL: models, CACHES_URL: [listed_body(CACHE_KIND, "ns", "c")]}, 2)
    lane = Lane(clock)
    run_resync(lister, lane, clock, 100, passes=2)
    keys = [(KIND, "ns", f"m{i}") for i in range(3)] + [(CACHE_KIND, "ns", "c")]
    assert lane.added == [(p * 100 + 25 * i, k) for p in (1, 2) for i, k in enumerate(keys)]
    # Each key only (its run reads the watch store), the version listed told first: a
    # store that missed an event is read around.
    assert lane.versions == [(k, "7") for k in keys] * 2
    assert lister.queries[:3] == [
        (MODELS_URL, {"limit": str(triggers.PAGE)}),
        (MODELS_URL, {"limit": str(triggers.PAGE), "continue": f"{MODELS_URL}@2"}),
        (CACHES_URL, {"limit": str(triggers.PAGE)}),
    ]


def test_the_next_page_is_listed_only_when_the_last_one_is_queued() -> None:
    clock = Clock()
    lister = Lister({MODELS_URL: [listed_body(KIND, "ns", f"m{i}") for i in range(4)]}, 2)
    lane = Lane(clock)
    seen: list[int] = []
    lister.on_list = lambda: seen.append(len(lane.added))
    run_resync(lister, lane, clock, 100, passes=1, kinds=[KIND])
    assert seen == [0, 2]  # the second page when the first two objects were queued


def test_the_resync_waits_while_the_queue_holds_a_page_of_its_keys() -> None:
    clock = Clock()
    lister = Lister({MODELS_URL: [listed_body(KIND, "ns", f"m{i}") for i in range(2)]})
    lane = Lane(clock)
    looks: list[float] = []

    def waiting() -> int:  # the workers take the lane's keys 10 s into the pass
        looks.append(clock.now - lane.start)
        return triggers.PAGE if clock.now - lane.start < 110 else 0

    lane.resyncs_waiting = waiting  # type: ignore[method-assign]
    run_resync(lister, lane, clock, 100, passes=1, kinds=[KIND], count=2)
    # the second object as far after the first as the spread says, less the CATCH_UP
    assert [when for when, _ in lane.added] == [110, 160 - triggers.CATCH_UP]
    assert looks[0] == 100 and looks[-1] == 160 - triggers.CATCH_UP


def test_a_slow_list_moves_the_rest_of_the_pass_back_and_an_overrun_the_next_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A LIST within CATCH_UP (5 s) is caught up; a slower one moves the rest back by
    the excess, and a pass longer than its period delays the next one (said once)."""
    clock = Clock()
    lister = Lister({MODELS_URL: [listed_body(KIND, "ns", f"m{i}") for i in range(2)]})

    def slow() -> None:  # the LISTs answer after 3 s, then 150 s, then 30 s
        clock.now += {1: 3, 2: 150}.get(len(lister.queries), 30)

    lister.on_list = slow
    lane, trims = Lane(clock), []
    with caplog.at_level(logging.WARNING):
        resync = run_resync(
            lister,
            lane,
            clock,
            100,
            passes=4,
            kinds=[KIND],
            count=2,
            after_pass=lambda: trims.append(1),
        )
    # 2nd pass: from 200 to 395, so the 3rd starts at 395, not at 300 (no pass at once)
    assert [when for when, _ in lane.added] == [103, 150, 350, 395, 425, 470]
    assert (resync.passes, resync.last_pass) == (3, (2, 75.0)) and len(trims) == 3
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "resync: a pass of 2 objects took 195 s, longer than its period of 100 s (the "
        "workers or the API server lag); the next one starts now"
    ]


def test_a_pass_keeps_pace_with_a_count_that_grows_while_it_runs() -> None:
    """A burst of creates during a pass: the spacing follows the count as it goes (with
    the count read once, this pass would have lasted twice its period)."""
    clock = Clock()
    lister = Lister({MODELS_URL: [listed_body(KIND, "ns", f"m{i}") for i in range(4)]})
    lane = Lane(clock)
    start = clock.now

    def wait(seconds: float) -> bool:
        clock.now += seconds
        return clock.now > start + 2 * 100  # one pass

    kube: Any = lister
    count = lambda: 2 if len(lane.added) < 2 else 4  # noqa: E731
    Resync(kube, lane, count, 100, kinds=[KIND], clock=clock, wait=wait).run()
    assert [when for when, _ in lane.added[:4]] == [100, 150, 175, 200]


def test_an_expired_continue_token_is_followed_by_the_one_its_410_brings() -> None:
    clock = Clock()
    lister = Lister({MODELS_URL: [listed_body(KIND, "ns", f"m{i}") for i in range(3)]}, 1)
    lister.expire[f"{MODELS_URL}@1"] = f"{MODELS_URL}@2"  # m1 changed meanwhile: skipped
    lane = Lane(clock)
    run_resync(lister, lane, clock, 100, passes=1, kinds=[KIND], count=3)
    assert [key[2] for _, key in lane.added] == ["m0", "m2"]
    assert [q.get("continue") for _, q in lister.queries] == [
        None,
        f"{MODELS_URL}@1",
        f"{MODELS_URL}@2",
    ]


def test_a_410_without_a_token_or_an_error_ends_the_pass_and_the_next_pass_lists_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    lister = Lister({MODELS_URL: [listed_body(KIND, "ns", f"m{i}") for i in range(2)]}, 1)
    lister.expire[f"{MODELS_URL}@1"] = None
    lane = Lane(clock)
    with caplog.at_level(logging.WARNING):
        run_resync(lister, lane, clock, 100, passes=2, kinds=[KIND], count=2)
    assert [(when, key[2]) for when, key in lane.added] == [
        (100, "m0"),
        (200, "m0"),
        (250, "m1"),
    ]
    assert "resync pass stopped: 410 Gone" in caplog.text


def test_a_namespaced_operator_lists_each_watched_namespace() -> None:
    clock = Clock()
    urls = [f"/apis/serving.spyre.dev/v1alpha1/namespaces/{ns}/spyremodels" for ns in "ab"]
    lister = Lister({url: [listed_body(KIND, url.split("/")[5], "m")] for url in urls})
    lane = Lane(clock)
    run_resync(lister, lane, clock, 100, passes=1, kinds=[KIND], namespaces=["a", "b"], count=2)
    assert [key for _, key in lane.added] == [(KIND, "a", "m"), (KIND, "b", "m")]


def test_ten_thousand_models_resync_at_under_fifty_requests_per_second_by_default() -> None:
    clock = Clock()
    period = 300.0  # options.DEFAULT_RESYNC
    n = 10_000
    models = [listed_body(KIND, f"ns{i % 7}", f"m{i}") for i in range(n)]
    caches = [listed_body(CACHE_KIND, f"ns{i % 7}", f"m{i}") for i in range(n)]
    lister = Lister({MODELS_URL: models, CACHES_URL: caches})
    lane = Lane(clock)
    run_resync(lister, lane, clock, period, passes=1, count=2 * n)
    per_second = collections.Counter(int(when) for when, _ in lane.added)
    assert sum(per_second.values()) == 2 * n and len(lister.queries) == 2 * n // triggers.PAGE
    # reconciles (no GET each) plus the LISTs: 20,000 / 300 s = 66.7 reconciles a second
    assert max(per_second.values()) <= 67 and len(lister.queries) / period < 0.2


def test_the_count_of_a_pass_is_the_size_of_the_indexes() -> None:
    watched: dict[str, dict[tuple[str, str], list[object]]] = {
        "SpyreModel": {("b", "x"): [], ("a", "y"): []},
        "SpyreCache": {("a", "z"): []},
    }
    assert watched_count(watched) == 3


def test_the_pause_doubles_up_to_five_minutes() -> None:
    def delay(first: float, failures: int) -> float:
        return retry_delay(first, failures, workqueue.MAX_RETRY_SECONDS)

    assert [delay(10, n) for n in (1, 2, 3, 5, 6, 10_000)] == [10, 20, 40, 160, 300, 300]
    assert (delay(0.01, 1), delay(600, 3)) == (0.01, 600)  # a first pause above the cap stays


def controllers(q: WorkQueue) -> dict[str, Controller]:
    """Both kinds' controllers, queuing into `q` (their client is never called here)."""
    kube = Kube(api=None)
    out = {}
    for kind in (KIND, CACHE_KIND):
        echoes = Echoes()
        out[kind] = Controller(Reconciler(kube, lambda *_: None, kind, echoes), q, echoes)
    return out


def test_the_triggers_only_queue_keys_and_an_echo_of_a_status_write_none() -> None:
    rec = Recorder()
    q = queue(rec)
    reconcilers = controllers(q)
    body = {"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "7"}}
    triggers.model_event(reconcilers[KIND], "MODIFIED", body)
    triggers.model_event(reconcilers[CACHE_KIND], "ADDED", body | {"kind": CACHE_KIND})
    owner = {"apiVersion": API_VERSION, "kind": KIND, "name": "b", "uid": "u"}
    service = {"metadata": {"namespace": "ns", "name": "b", "ownerReferences": [owner]}}
    triggers.child_changed(reconcilers, "ADDED", service)  # made by the reconciler: nothing
    triggers.child_changed(reconcilers, "MODIFIED", service)
    drain(q)
    assert rec.runs == [A, ("SpyreCache", "ns", "a"), B]
    # the endpoint picker's Deployment: owned by model c's InferencePool (spec.routing)
    pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "name": "c"}
    picker = {"metadata": {"namespace": "ns", "name": "c-epp", "ownerReferences": [pool]}}
    triggers.child_changed(reconcilers, "MODIFIED", picker)
    drain(q)
    assert rec.runs.pop() == (KIND, "ns", "c")
    reconcilers[KIND].echoes.wrote("ns", "a", "8")  # what its status write returned
    echo = {"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "8"}}
    triggers.model_event(reconcilers[KIND], "MODIFIED", echo)
    drain(q)
    assert len(rec.runs) == 3 and reconcilers[KIND].echoes.stats["echoes"] == 1
    triggers.model_event(reconcilers[KIND], "MODIFIED", body)  # not the echo: runs
    triggers.model_event(reconcilers[KIND], "DELETED", body)  # still queued: finds it gone
    drain(q)
    assert rec.runs[3:] == [A]


def test_the_resync_waits_for_what_triggers_queued_and_leaves_queued_keys_alone() -> None:
    rec = Recorder()
    q = queue(rec)
    q.resync(A)
    q.resync(B)
    q.add(C)
    q.resync(C)  # queued already: that run is as good
    q.add(B)  # a trigger: B runs with the others, not as a resync
    assert q.resyncs_waiting() == 1
    drain(q)
    assert rec.runs == [C, B, A]

    def handler(key: Key) -> None:
        rec(key)
        q.resync(key)  # while it runs: nothing more

    q.handle = handler
    q.resync(A)
    q.resync(A)
    q.forget(B)
    q.resync(B)
    q.forget(B)  # deleted meanwhile: not run
    assert q.resyncs_waiting() == 1
    drain(q)
    assert rec.runs[3:] == [A]


def test_a_key_put_later_waits_for_the_triggered_ones_and_runs_after_its_own_run() -> None:
    """The low lane for a key's inventory entry: behind every key a trigger queued; a
    key put there while it runs runs once more after (that run decided before)."""
    rec = Recorder()
    q = queue(rec)
    q.later(A)
    q.add(B)
    assert not q.idle()
    q.add(C)
    q.later(C)  # queued already: that run starts after this, as good
    q.resync(D)
    q.later(D)  # in the low lane already, as a resync key: one run
    q.add(D)  # a trigger: D runs now, with the triggered ones
    drain(q)
    assert rec.runs == [B, C, D, A] and q.idle()

    def handler(key: Key) -> None:
        rec(key)
        if len(rec.runs) == 5:  # while A runs: A later, and B by a trigger
            q.later(A)
            q.add(B)

    q.handle = handler
    q.add(A)
    drain(q)
    assert rec.runs[4:] == [A, B, A]  # A again, after B

    def added_meanwhile(key: Key) -> None:
        rec(key)
        if len(rec.runs) == 8:
            q.later(A)
            q.add(A)  # a trigger as well

    q.handle = added_meanwhile
    q.add(A)
    drain(q)
    assert rec.runs[7:] == [A, A]  # one run more, not two
    q.handle = handler
    q.later(B)
    q.forget(B)  # deleted meanwhile: not run
    drain(q)
    assert len(rec.runs) == 9


def test_a_new_compile_job_without_its_entry_has_its_owners_reconciled_later() -> None:
    rec = Recorder()
    q = queue(rec)
    reconcilers = controllers(q)
    owner = {"apiVersion": API_VERSION, "kind": KIND, "name": "a", "uid": "u"}
    labels = {meta.COMPONENT_LABEL: meta.COMPILE}
    annotations = {meta.CACHE_KEY_ANNOTATION: "k" * 64}
    job: dict[str, Any] = {
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
    assert rec.runs == [B, A]
    entry = owner | {"kind": CACHE_KIND, "name": meta.inventory_name("k" * 64)}
    job["metadata"]["ownerReferences"] = [owner, entry]
    triggers.child_changed(reconcilers, "ADDED", job)  # owned by its entry: nothing
    drain(q)
    assert rec.runs == [B, A]


def test_idle_while_fewer_triggered_keys_wait_than_there_are_workers() -> None:
    """A trickle of triggered keys does not hold off the low lane's entries for ever."""
    release, taken = threading.Event(), threading.Semaphore(0)

    def blocked(key: Key) -> None:
        taken.release()
        release.wait(30)

    q = WorkQueue(blocked, lambda *a: None)
    q.start(2)
    try:
        q.add(A)
        q.add(B)
        assert taken.acquire(timeout=30) and taken.acquire(timeout=30)  # both workers busy
        q.add(C)
        assert q.idle()  # one waits, two workers: no backlog
        q.add(D)
        assert not q.idle()
    finally:
        release.set()
        q.shutdown(timeout=30)


def test_a_pod_added_queues_its_model_the_start_up_listing_does_not() -> None:
    """A pod may reach the pods' store already ended, after its owner's reconcile of the
    change it caused ran without it: its ADDED event queues the owner again."""
    rec = Recorder()
    q = queue(rec)
    reconcilers = controllers(q)
    labels = {meta.COMPONENT_LABEL: meta.SERVER, meta.MODEL_LABEL: "a"}
    pod = {"kind": "Pod", "metadata": {"namespace": "ns", "name": "a-1", "labels": labels}}
    triggers.pod_changed(reconcilers, None, pod)
    drain(q)
    assert rec.runs == []
    triggers.pod_changed(reconcilers, "ADDED", pod)
    drain(q)
    assert rec.runs == [A]


def test_the_loop_shows_its_depth_wait_runs_and_results_on_metrics() -> None:
    """Keys waiting by lane, runs in flight, how long a key waited for a worker, and how
    runs ended, as /metrics shows them."""
    rec, clock = Recorder(), Clock()
    q = queue(rec, clock)
    rec.failing[B] = 1
    q.add(A)
    q.add(B)
    q.resync(C)
    stats = q.loop_stats()
    assert (stats.waiting, stats.running) == ({"trigger": 2, "low": 1}, 0)
    clock.now += 2.0
    assert q.take(block=False) == A
    assert q.loop_stats().running == 1
    q.done(A, None, Result(60.0))
    drain(q)  # B fails, C runs (waited 2 s too)
    text = "\n".join(
        exposition(collections.Counter(), Metrics(), {}, {}, 0, {}, loop=q.loop_stats())
    )
    found = parse(text)
    assert found['spyre_operator_workqueue_depth{lane="trigger"}'] == 0
    assert found["spyre_operator_workqueue_in_flight"] == 0
    assert found["spyre_operator_workqueue_wait_seconds_count"] == 3
    assert found['spyre_operator_workqueue_wait_seconds_bucket{le="1"}'] == 0
    assert found["spyre_operator_workqueue_wait_seconds_sum"] == 6.0
    results = {
        r: found[f'spyre_operator_reconcile_results_total{{result="{r}"}}']
        for r in ("success", "requeue", "error")
    }
    assert results == {"success": 1, "requeue": 1, "error": 1}
    # the runs the workers took (A was taken by hand): how long, and why one failed
    assert found["spyre_operator_reconcile_duration_seconds_count"] == 2
    assert found['spyre_operator_reconcile_errors_total{reason="RuntimeError"}'] == 1
