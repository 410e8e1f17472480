"""The work queue between the triggers and the reconciles.

The triggers (kopf's event handlers, the resync) only `add` a key, which never blocks; a
few worker threads take the keys in the order they came and reconcile them. A key queued
again before it runs is not queued twice (the triggers coalesce); a key added while it is
being reconciled runs once more after that run, never two runs of one key at once. A run
that fails is retried after a pause that doubles with each failure in a row (10 s to 5 min,
`retry_delay`), reset by a success; an event in between runs the key at once all the same
(its data changed, so the reconcile may well pass now), and a success cancels the retry.

The resync's keys, and the ones a run puts `later` (its key's inventory entry), wait in a
low lane: they run only when no key a trigger queued waits.

An event brings the object's latest copy: a run of a key that only events queued
reconciles from that copy (no GET, and the echo of the reconciler's own status write is
recognised); any other trigger (a child, a retry) makes the run read it afresh, and so
does a backlog (at most MAX_COPIES copies are kept at once). The
resync's keys come with the copy its LIST brought (`Listed`: never taken for an echo),
unless a trigger queued the key after that LIST was sent (the copy may be older than what
that trigger's run saw: the run reads afresh).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (kind, namespace, name)
Copy = dict[str, Any] | None  # the object as an event brought it; None: read it afresh
# Event copies kept at once: beyond, a queued key's run reads its object afresh, so a burst
# of thousands of creates waiting for the workers costs keys, not bodies.
MAX_COPIES = 500


class Listed(dict[str, Any]):
    """An object's copy from the resync's LIST, not from an event: never the echo of the
    reconciler's own status write (the resync reconciles it all the same)."""


RETRY_SECONDS = 10.0  # pause before a failed run is retried, doubled per failure in a row
MAX_RETRY_SECONDS = 300.0


def retry_delay(first: float, failures: int, longest: float = MAX_RETRY_SECONDS) -> float:
    """`first` after one failure, doubling with each one after it, at most `longest` (so
    a write, or a watch, that keeps failing does not load the API server)."""
    return min(first * 2 ** min(failures - 1, 30), max(first, longest))


class Complain(Protocol):
    def __call__(self, key: Key, err: Exception, delay: float, before: str | None) -> str:
        """Log a failed run, retried in `delay` seconds; `before`: what was said of the
        failure before it in a row (None: the first). Returns what it said."""


class WorkQueue:
    """Keys in, one run per key at a time, fair (first come, first run), retries with back-off.

    `handle(key, copy)` reconciles; raising means "try again later" (`complain` logs it);
    returning a number of seconds means "run again then" (a running compile's progress).
    Thread-safe; `clock` (seconds, monotonic) is injectable for tests, which may also drive
    the queue without worker threads (`process(block=False)`)."""

    def __init__(
        self,
        handle: Callable[[Key, Copy], float | None],
        complain: Complain,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.handle, self.complain, self.clock = handle, complain, clock
        # "retries": retries whose time came; "requeues": runs asked for by a run
        self.stats: Counter[str] = Counter()
        self._cond = threading.Condition()
        self._ready: deque[Key] = deque()  # waiting to run, first come first
        # the low lane (the resync's keys -> their listed copy, and the keys put `later`):
        # run when none of _ready waits
        self._resyncs: dict[Key, Copy] = {}
        self._since_listing: set[Key] | None = None  # keys triggers queued since the LIST
        self._later: deque[Key] = deque()  # their order (keys no longer in _resyncs skipped)
        self._rerun: set[Key] = set()  # put `later` while running: the low lane after the run
        self._owed: set[Key] = set()  # put `later`, in the low lane: never run from a copy
        self._copies: dict[Key, Copy] = {}  # of the keys in _ready, or dirty ones
        self._held = 0  # how many of them are not None (at most MAX_COPIES)
        self._running: set[Key] = set()
        self._dirty: set[Key] = set()  # added while running: runs again after
        # failed runs in a row, and what the log said of the last one
        self._failures: dict[Key, tuple[int, str | None]] = {}
        self._due: dict[Key, float] = {}  # pending retries and requeues: key -> when
        self._timers: list[tuple[float, Key]] = []  # heap of (when, key); stale ones skipped
        self._closed = False
        self._workers: list[threading.Thread] = []

    # ----- adding ------------------------------------------------------------------
    def add(self, key: Key, copy: Copy = None) -> None:
        """Queue `key` (never blocks). `copy`: the object as its event brought it."""
        with self._cond:
            self._add(key, copy)

    def listing(self, sent: bool = True) -> None:
        """The resync is about to send a LIST: the copies it brings are older than what
        triggers queue from now on (`sent` False: its pass is over, nothing to track)."""
        with self._cond:
            self._since_listing = set() if sent else None

    def resync(self, key: Key, copy: Listed | None = None) -> None:
        """Queue `key` for the resync (never blocks), behind every key a trigger queued: a
        worker takes it only when none of those waits, so the resync never slows what
        events ask for. A key already queued or running is left as it is (that run
        reconciles it as well). `copy`: the object as the LIST since `listing` brought it;
        dropped if a trigger queued the key since (read afresh)."""
        with self._cond:
            if key in self._copies or key in self._running or key in self._resyncs:
                return
            stale = self._since_listing is None or key in self._since_listing
            self._lane_low(key, None if stale else copy)

    def later(self, key: Key) -> None:
        """Queue `key` in the resync's lane (never blocks), for work that can wait until
        every key a trigger queued ran (a compile Job's inventory entry, so a burst's Jobs
        go first). Unlike the resync, a key being reconciled runs once more after that run
        (which may have decided before what asks for this), in that lane. A run already
        queued is as good, but reads afresh: its copy may be the echo of a status write,
        which skips the run (and would lose what asked for this one)."""
        with self._cond:
            if key in self._running:
                self._rerun.add(key)
            elif key in self._copies:
                self._set_copy(key, None)
            else:  # in the low lane, or put there; owed either way (a resync key too)
                if key not in self._resyncs:
                    self._lane_low(key)
                self._owed.add(key)

    def idle(self) -> bool:
        """Fewer keys a trigger queued wait than there are workers (none, without worker
        threads): no backlog a run could delay. Not "none waits": a steady trickle of
        triggered keys would put off what waits for idleness for ever."""
        with self._cond:
            return len(self._ready) < max(1, len(self._workers))

    def _lane_low(self, key: Key, copy: Copy = None) -> None:
        self._resyncs[key] = copy
        self._later.append(key)
        self._cond.notify()

    def resyncs_waiting(self) -> int:
        """The resync's keys not taken yet (each may hold its copy)."""
        with self._cond:
            return len(self._resyncs)

    def _add(self, key: Key, copy: Copy) -> None:
        # A trigger's add takes the place of a key in the low lane among the others; if it
        # was put `later`, that run reads afresh: it owes a run, which the echo of its own
        # status write (skipped) would not give (10,000 models: 774 entries never made).
        self._resyncs.pop(key, None)
        owed = key in self._owed
        self._owed.discard(key)
        if self._since_listing is not None:
            self._since_listing.add(key)
        queued = key in self._copies
        # A later copy replaces an earlier one; once a trigger wants a fresh read, the run
        # reads afresh (a copy could be the echo of a status write and skip the run).
        keep = copy if not owed and (not queued or self._copies[key] is not None) else None
        self._set_copy(key, keep)
        if key in self._running:
            self._dirty.add(key)
        elif not queued:
            self._ready.append(key)
            self._cond.notify()

    def forget(self, key: Key) -> None:
        """The object is gone: no retry; a run still queued reads it afresh (and finds it
        gone)."""
        with self._cond:
            self._failures.pop(key, None)
            self._due.pop(key, None)
            self._resyncs.pop(key, None)
            self._rerun.discard(key)
            self._owed.discard(key)
            if key in self._copies:
                self._set_copy(key, None)

    def _set_copy(self, key: Key, copy: Copy) -> None:
        """Keep `copy` for the key's run, unless MAX_COPIES are kept already (a backlog:
        the run reads afresh, one GET, instead of the queue holding every body)."""
        held = self._copies.get(key) is not None
        if copy is not None and not held and self._held >= MAX_COPIES:
            copy = None
        self._held += (copy is not None) - held
        self._copies[key] = copy

    # ----- running -----------------------------------------------------------------
    def process(self, block: bool = True) -> bool:
        """Run one key (waiting for one if `block`); False when there was none to run
        without waiting, or the queue is shut down."""
        taken = self._take(block)
        if taken is None:
            return False
        key, copy = taken
        try:
            again = self.handle(key, copy)
        except Exception as err:
            self._done(key, err)
        else:
            self._done(key, None, again)
        return True

    def _take(self, block: bool) -> tuple[Key, Copy] | None:
        with self._cond:
            while not self._closed:
                self._start_due()
                if self._ready:
                    key = self._ready.popleft()
                    self._running.add(key)
                    copy = self._copies.pop(key)
                    self._held -= copy is not None
                    return key, copy
                while self._later:
                    key = self._later.popleft()
                    if key in self._resyncs:  # else: a trigger queued it since
                        self._running.add(key)
                        self._owed.discard(key)
                        return key, self._resyncs.pop(key)
                if not block:
                    return None
                wait = self._timers[0][0] - self.clock() if self._timers else None
                self._cond.wait(wait)
            return None

    def _start_due(self) -> None:
        """Queue the retries whose time has come."""
        now = self.clock()
        while self._timers and self._timers[0][0] <= now:
            when, key = heapq.heappop(self._timers)
            if self._due.get(key) == when:  # else cancelled, or moved
                del self._due[key]
                self.stats["retries" if key in self._failures else "requeues"] += 1
                self._add(key, None)

    def _done(self, key: Key, err: Exception | None, again: float | None = None) -> None:
        with self._cond:
            failures, said = self._failures.get(key, (0, None))
        if err is not None:  # said while the key still counts as running: no run races it
            failures += 1
            delay = retry_delay(RETRY_SECONDS, failures)
            said = self.complain(key, err, delay, said)
        elif failures:
            log.info("%s/%s: recovered after %d failed attempts", key[1], key[2], failures)
        with self._cond:
            self._running.discard(key)
            if err is None:
                if self._failures.pop(key, None) is not None:
                    self._due.pop(key, None)  # reconciled: the retry is moot
                # A run asked for (a compile's progress, a retention) stays: a run that
                # asks for none may be the echo of the one that asked (it decided nothing).
                if again is not None:
                    self._run_at(key, self.clock() + again)
            else:
                self._failures[key] = (failures, said)
                self._run_at(key, self.clock() + delay)
            rerun = key in self._rerun
            self._rerun.discard(key)
            if key in self._dirty:  # runs again anyway (and sooner)
                self._dirty.discard(key)
                if rerun:  # afresh (see `later`)
                    self._set_copy(key, None)
                self._ready.append(key)  # behind the keys that waited meanwhile
                self._cond.notify()
            elif rerun and key not in self._resyncs:
                self._lane_low(key)
                self._owed.add(key)

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
