"""The work queue between the triggers and the reconciles: keys only.

The triggers (kopf's event handlers, the children's watches, the resync) only `add` a
key, which never blocks; a few worker threads take the keys in the order they came and
reconcile them, each reading its object from the watch store when its run starts (so a
run that starts after an `add` sees what that trigger saw, or newer). A key queued again
before it runs is not queued twice (the triggers coalesce); a key added while it is being
reconciled runs once more after that run, never two runs of one key at once. A run that
fails is retried after a pause that doubles with each failure in a row (10 s to 5 min,
`retry_delay`), reset by a success; an event in between runs the key at once all the
same (its data changed, so the reconcile may well pass now), and a success cancels the
retry.

The resync's keys, and the ones a run puts `later` (its key's inventory entry), wait in a
low lane: they run only when no key a trigger queued waits. The queue holds no object:
whether an event needs a run (not the echo of the reconciler's own status write) is
decided before the key is added (kinds.Controller.enqueue), so nothing owed is ever dropped
for a copy that turned out to be an echo.

This is the loop around the reconcilers, apart from them (as controller-runtime's
controller is): a run is `handle(key)`, which returns a reconcile.result.Result; the loop
catches what it raises (a worker never dies of it), says it (`complain`) and tries it again
after the pause, acts on the result (again in n seconds, again `later`), and keeps the
loop's metrics: keys waiting by lane, runs in flight, how long keys waited, how long runs
took, how they ended, and the failures by reason.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import NamedTuple

from spyre_operator.controller.failures import Complain, reason
from spyre_operator.controller.histogram import Histogram
from spyre_operator.kube.backoff import retry_delay
from spyre_operator.reconcile.result import Result

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (kind, namespace, name)

RETRY_SECONDS = 10.0  # pause before a failed run is retried, doubled per failure in a row
MAX_RETRY_SECONDS = 300.0
WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
# A reconcile is a few API reads and maybe a write; a compile takes minutes to hours.
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopStats(NamedTuple):
    """The queue as /metrics shows it (controller/metrics.py)."""

    waiting: dict[str, int]  # keys waiting for a worker, by lane: trigger, low
    running: int  # reconciles running now
    wait: Histogram  # how long a key waited before a worker took it
    results: dict[str, int]  # runs ended, by result: success, requeue, error
    durations: Histogram  # how long runs took
    errors: dict[str, int]  # failed runs, by reason (failures.reason)


class WorkQueue:
    """Keys in, one run per key at a time, fair (first come, first run), retries with back-off.

    `handle(key)` reconciles; raising means "try again later" (`complain` logs it); its
    Result (None: done) may ask to run again in a number of seconds (a running compile's
    progress) or `later`. Thread-safe; `clock` (seconds, monotonic) is injectable for
    tests, which may also drive the queue without worker threads (`process(block=False)`,
    or `take` and `done`)."""

    def __init__(
        self,
        handle: Callable[[Key], Result | None],
        complain: Complain,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.handle, self.complain, self.clock = handle, complain, clock
        # "reconciles": runs; "retries": retries whose time came; "requeues": runs asked
        # for by a run
        self.stats: Counter[str] = Counter()
        self._cond = threading.Condition()
        self._ready: deque[Key] = deque()  # queued by a trigger, first come first
        self._queued: set[Key] = set()  # the keys in _ready
        # the low lane (the resync's keys and the keys put `later`): run when none of
        # _ready waits; a key a trigger queues since leaves it (skipped when taken)
        self._low: deque[Key] = deque()
        self._lowered: set[Key] = set()  # the keys in _low still to run from there
        self._running: set[Key] = set()
        self._dirty: set[Key] = set()  # added while running: runs again after
        self._rerun: set[Key] = set()  # put `later` while running: the low lane after
        # failed runs in a row, and what the log said of the last one
        self._failures: dict[Key, tuple[int, str | None]] = {}
        self._due: dict[Key, float] = {}  # pending retries and requeues: key -> when
        self._timers: list[tuple[float, Key]] = []  # heap of (when, key); stale ones skipped
        self._closed = False
        self._workers: list[threading.Thread] = []
        self._since: dict[Key, float] = {}  # when a waiting key was queued
        self._wait = Histogram(WAIT_BUCKETS)
        self._results: Counter[str] = Counter()
        self._durations = Histogram(RECONCILE_BUCKETS)
        self._errors: Counter[str] = Counter()

    # ----- adding ------------------------------------------------------------------
    def add(self, key: Key) -> None:
        """Queue `key` (never blocks)."""
        with self._cond:
            self._add(key)

    def resync(self, key: Key) -> None:
        """Queue `key` for the resync (never blocks), behind every key a trigger queued: a
        worker takes it only when none of those waits, so the resync never slows what
        events ask for. A key already queued or running is left as it is (that run
        reconciles it as well)."""
        with self._cond:
            if key not in self._queued and key not in self._running:
                self._lane_low(key)

    def later(self, key: Key) -> None:
        """Queue `key` in the resync's lane (never blocks), for work that can wait until
        every key a trigger queued ran (a compile Job's inventory entry, so a burst's Jobs
        go first). Unlike the resync, a key being reconciled runs once more after that run
        (which may have decided before what asks for this), in that lane; a run already
        queued is as good (it starts after this, and reads the store then)."""
        with self._cond:
            if key in self._running:
                self._rerun.add(key)
            elif key not in self._queued:
                self._lane_low(key)

    def idle(self) -> bool:
        """Fewer keys a trigger queued wait than there are workers (none, without worker
        threads): no backlog a run could delay. Not "none waits": a steady trickle of
        triggered keys would put off what waits for idleness for ever."""
        with self._cond:
            return len(self._ready) < max(1, len(self._workers))

    def _lane_low(self, key: Key) -> None:
        if key not in self._lowered:
            self._since.setdefault(key, self.clock())
            self._lowered.add(key)
            self._low.append(key)
            self._cond.notify()

    def resyncs_waiting(self) -> int:
        """The keys in the low lane not taken yet (the resync's, and those put later)."""
        with self._cond:
            return len(self._lowered)

    def _add(self, key: Key) -> None:
        self._lowered.discard(key)  # a trigger's add takes its place among the others
        if key in self._running:
            self._dirty.add(key)
        elif key not in self._queued:
            self._since.setdefault(key, self.clock())
            self._queued.add(key)
            self._ready.append(key)
            self._cond.notify()

    def forget(self, key: Key) -> None:
        """The object is gone: no retry, nothing in the low lane; a run still queued
        finds it gone."""
        with self._cond:
            self._failures.pop(key, None)
            self._due.pop(key, None)
            self._lowered.discard(key)
            self._rerun.discard(key)
            if key not in self._queued:
                self._since.pop(key, None)

    # ----- running -----------------------------------------------------------------
    def process(self, block: bool = True) -> bool:
        """Run one key (waiting for one if `block`); False when there was none to run
        without waiting, or the queue is shut down."""
        key = self.take(block)
        if key is None:
            return False
        started = time.perf_counter()
        try:
            result = self.handle(key)
        except Exception as err:
            self._ran(started, reason(err))
            self.done(key, err)
        else:
            self._ran(started, None)
            self.done(key, None, result)
        return True

    def _ran(self, started: float, failed: str | None) -> None:
        with self._cond:
            self.stats["reconciles"] += 1
            self._durations.observe(time.perf_counter() - started)
            if failed is not None:
                self._errors[failed] += 1

    def take(self, block: bool = True) -> Key | None:
        """The next key to run, now running (None: none without waiting, or shut down);
        `done` when its run ends."""
        with self._cond:
            while not self._closed:
                self._start_due()
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    return self._started(key)
                while self._low:
                    key = self._low.popleft()
                    if key in self._lowered:  # else: a trigger queued it since, or it went
                        self._lowered.discard(key)
                        return self._started(key)
                if not block:
                    return None
                wait = self._timers[0][0] - self.clock() if self._timers else None
                self._cond.wait(wait)
            return None

    def _started(self, key: Key) -> Key:
        """`key` runs now (lock held): how long it waited is observed."""
        self._running.add(key)
        since = self._since.pop(key, None)
        if since is not None:
            self._wait.observe(max(0.0, self.clock() - since))
        return key

    def loop_stats(self) -> LoopStats:
        with self._cond:
            waiting = {"trigger": len(self._ready), "low": len(self._lowered)}
            return LoopStats(
                waiting,
                len(self._running),
                self._wait.copy(),
                dict(self._results),
                self._durations.copy(),
                dict(self._errors),
            )

    def _start_due(self) -> None:
        """Queue the retries whose time has come."""
        now = self.clock()
        while self._timers and self._timers[0][0] <= now:
            when, key = heapq.heappop(self._timers)
            if self._due.get(key) == when:  # else cancelled, or moved
                del self._due[key]
                self.stats["retries" if key in self._failures else "requeues"] += 1
                self._add(key)

    def done(self, key: Key, err: Exception | None, result: Result | None = None) -> None:
        """The run of `key` ended: failed with `err`, or with `result` (None: done)."""
        again = None if result is None else result.requeue_after
        with self._cond:
            failures, said = self._failures.get(key, (0, None))
        if err is not None:  # said while the key still counts as running: no run races it
            failures += 1
            delay = retry_delay(RETRY_SECONDS, failures, MAX_RETRY_SECONDS)
            said = self.complain(key, err, delay, said)
        elif failures:
            log.info("%s/%s: recovered after %d failed attempts", key[1], key[2], failures)
        with self._cond:
            self._running.discard(key)
            self._results["error" if err else "success" if again is None else "requeue"] += 1
            if err is None:
                if self._failures.pop(key, None) is not None:
                    self._due.pop(key, None)  # reconciled: the retry is moot
                # A run asked for (a compile's progress, a retention) stays: a run that
                # asks for none may have started before what made the other ask.
                if again is not None:
                    self._run_at(key, self.clock() + again)
            else:
                self._failures[key] = (failures, said)
                self._run_at(key, self.clock() + delay)
            rerun = key in self._rerun or (result is not None and result.later)
            self._rerun.discard(key)
            if key in self._dirty:  # runs again anyway (and sooner)
                self._dirty.discard(key)
                self._since.setdefault(key, self.clock())
                self._queued.add(key)
                self._ready.append(key)  # behind the keys that waited meanwhile
                self._cond.notify()
            elif rerun:
                self._lane_low(key)

    def _run_at(self, key: Key, when: float) -> None:
        """Queue `key` again at `when` (clock), unless it is due sooner (lock held)."""
        if when < self._due.get(key, float("inf")):
            self._due[key] = when
            heapq.heappush(self._timers, (when, key))
        self._cond.notify_all()  # a waiting worker's timeout may now be too long

    def retry_in(self, key: Key) -> float | None:
        """Seconds until `key`'s pending retry (None: none)."""
        with self._cond:
            when = self._due.get(key)
        return None if when is None else when - self.clock()

    def failures(self, key: Key) -> int:
        with self._cond:
            return self._failures.get(key, (0, ""))[0]

    # ----- threads -----------------------------------------------------------------
    def start(self, workers: int) -> None:
        for n in range(workers):
            thread = threading.Thread(target=self._work, name=f"reconcile-{n}", daemon=True)
            thread.start()
            self._workers.append(thread)

    def _work(self) -> None:
        while self.process():
            pass

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop taking keys; wait for the runs in progress, `timeout` seconds at most in
        all (what is queued is dropped: the next operator lists everything again)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._workers:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
