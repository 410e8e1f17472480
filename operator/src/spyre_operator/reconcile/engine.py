"""One level-based reconcile of a SpyreModel: observe -> decide -> apply -> status.

Everything is derived from the cluster on each pass (the SpyreModel, its children and its
stored status). Between passes the reconciler keeps only a lock per object, the
resourceVersion of its own last status write (to skip the watch echo of that write),
pending retries, and the compile Jobs it created a moment ago that the watch has not
brought yet, so a restarted operator continues where the last one stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from spyre_operator.api.names import KIND
from spyre_operator.api.problem import InvalidSpec, Problem
from spyre_operator.api.validation import parse
from spyre_operator.reconcile.apply import execute, write_status
from spyre_operator.reconcile.compiles import JobRef, Queue, is_compile_start
from spyre_operator.reconcile.conditions import (
    Event,
    announce,
    event_name,
    now_rfc3339,
    status_patch,
    transition_events,
)
from spyre_operator.reconcile.decide import Plan, decide, decide_invalid, with_apply_failure
from spyre_operator.reconcile.dryrun import DryRuns
from spyre_operator.reconcile.kube import ApiError, Kube, one_line
from spyre_operator.reconcile.metrics import Metrics
from spyre_operator.reconcile.observe import observe

log = logging.getLogger(__name__)


class EventSink(Protocol):
    def __call__(self, body: dict[str, Any], event: Event, name: str | None = None) -> None:
        """Post an Event about `body`: in the background, or, given a name, at once and
        idempotently (the same name again is no second Event)."""


Key = tuple[str, str]  # (namespace, name) of a SpyreModel
MAX_ATTEMPTS = 4  # re-reads after a stale status write (409) before giving up this pass
RETRY_SECONDS = 10.0  # pause before a failed reconcile runs again, doubled per failure
MAX_RETRY_SECONDS = 300.0
# A compile Job this operator created counts as running until the watch brings it (the
# index has it then); this long at most, should its events be lost (created and deleted).
STARTED_SECONDS = 60.0


class WriteFailed(ApiError):
    """A child write failed; the status already says so (Degraded, ApplyFailed)."""

    def __init__(self, message: str, err: ApiError) -> None:
        super().__init__(err.status, err.reason, err.body)
        self.args = (message,)


def retry_delay(first: float, failures: int) -> float:
    """`first` after one failure, doubling with each one after it, at most
    MAX_RETRY_SECONDS (so a write that keeps failing does not load the API server)."""
    return min(first * 2 ** min(failures - 1, 30), max(first, MAX_RETRY_SECONDS))


class Starts:
    """Compile starts, shared by the reconcilers of SpyreModels and of SpyreCaches: one at a
    time (`lock`), and the Jobs created a moment ago that the watch has not brought yet."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._started: dict[JobRef, float] = {}  # compile Jobs created -> time.monotonic()
        self._guard = threading.Lock()

    def add(self, ref: JobRef) -> None:
        with self._guard:
            self._started[ref] = time.monotonic()

    def unseen(self, known: frozenset[JobRef]) -> frozenset[JobRef]:
        """The Jobs started that `known` (what the watch brought) lacks, forgetting those it
        has and those too old."""
        with self._guard:
            expired = time.monotonic() - STARTED_SECONDS
            for ref, when in list(self._started.items()):
                if ref in known or when < expired:
                    del self._started[ref]
            return frozenset(self._started)


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        emit: EventSink,
        clock: Callable[[], str] = now_rfc3339,
        retry_seconds: float = RETRY_SECONDS,
        compile_queue: Callable[[], Queue] | None = None,
        kind: str = KIND,
        starts: Starts | None = None,
    ):
        """`compile_queue` reads the compile queue from the cluster (None: no limits);
        `kind`: SpyreModel, or SpyreCache (compile only); `starts` is shared by both."""
        self.kube, self.emit, self.clock = kube, emit, clock
        self.kind = kind
        self.retry_seconds = retry_seconds
        self._compile_queue = compile_queue
        self.starts = starts or Starts()
        self.stats: Counter[str] = Counter()
        self.metrics = Metrics()
        self._locks: dict[Key, threading.Lock] = {}
        self._written: dict[Key, str] = {}  # resourceVersion of our last status write
        self._retries: dict[Key, threading.Timer] = {}
        self._later: dict[Key, threading.Timer] = {}  # a plan's requeue_after
        self._failures: dict[Key, int] = {}  # failed reconciles in a row
        self._complaints: dict[Key, str] = {}  # what the log said of the current failure
        self.dry_runs = DryRuns(kube)
        self._guard = threading.Lock()

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def forget(self, namespace: str, name: str) -> None:
        """The SpyreModel is gone: drop what is kept about it."""
        with self._guard:
            self._locks.pop((namespace, name), None)
            self._written.pop((namespace, name), None)
            self._failures.pop((namespace, name), None)
            self._complaints.pop((namespace, name), None)
            retry = self._retries.pop((namespace, name), None)
            later = self._later.pop((namespace, name), None)
        for timer in (retry, later):
            if timer is not None:
                timer.cancel()
        self.dry_runs.forget(namespace, name)
        self.metrics.forget((namespace, name))

    def run(self, namespace: str, name: str, body: dict[str, Any] | None = None) -> None:
        """Reconcile; on failure run again (from a fresh read) after a pause that doubles
        with each failure in a row (`retry_delay`). A failing SpyreModel never raises into
        the caller, which goes on with the others."""
        key = (namespace, name)
        try:
            self.reconcile(namespace, name, body)
        except Exception as err:
            with self._guard:
                failures = self._failures[key] = self._failures.get(key, 0) + 1
            delay = retry_delay(self.retry_seconds, failures)
            self._complain(key, err, delay)
            self._retry_later(namespace, name, delay)
        else:
            with self._guard:
                failures = self._failures.pop(key, 0)
                complained = self._complaints.pop(key, None)
            if complained is not None:
                log.info("%s/%s: recovered after %d failed attempts", namespace, name, failures)

    def _complain(self, key: Key, err: Exception, delay: float) -> None:
        """One line per failed attempt, except a refusal, which the status explains: said
        once, and again only when it changes. A traceback only for the first failure of an
        unexpected kind (a bug)."""
        said = (
            one_line(err) if isinstance(err, ApiError) else f"{type(err).__name__}: {one_line(err)}"
        )
        with self._guard:
            before = self._complaints.get(key)
            self._complaints[key] = said
        where = f"{key[0]}/{key[1]}"
        if isinstance(err, ApiError) and err.refused:
            if said != before:
                log.warning("%s: %s (tried again after a growing pause)", where, said)
        elif isinstance(err, ApiError) or said == before:
            log.warning("%s: %s (again in %gs)", where, said, delay)
        else:
            log.exception("reconciling %s (again in %gs)", where, delay)

    def _retry_later(self, namespace: str, name: str, delay: float) -> None:
        key = (namespace, name)
        with self._guard:
            if key in self._retries:
                return
            timer = threading.Timer(delay, self._retry, key)
            timer.daemon = True
            self._retries[key] = timer
        timer.start()

    def _requeue(self, namespace: str, name: str, delay: float) -> None:
        """Reconcile again in `delay` seconds (a retention that expires then), replacing
        an earlier such timer: the newest plan knows best."""
        key = (namespace, name)
        timer = threading.Timer(delay, self._requeued, key)
        timer.daemon = True
        with self._guard:
            before = self._later.pop(key, None)
            self._later[key] = timer
        if before is not None:
            before.cancel()
        timer.start()

    def _requeued(self, namespace: str, name: str) -> None:
        with self._guard:
            self._later.pop((namespace, name), None)
        self.run(namespace, name)

    def _retry(self, namespace: str, name: str) -> None:
        with self._guard:
            self._retries.pop((namespace, name), None)
        self.stats["retries"] += 1
        self.run(namespace, name)

    def reconcile(self, namespace: str, name: str, body: dict[str, Any] | None = None) -> None:
        """Reconcile one SpyreModel; `body` is a recent copy if the caller has one."""
        started = time.perf_counter()
        with self._lock(namespace, name):
            if body is not None and self._is_echo(namespace, name, body):
                self.stats["echoes"] += 1
                return
            try:
                self._reconcile(namespace, name, body)
            except Exception as err:
                self.stats["errors"] += 1
                reason = f"http_{err.status}" if isinstance(err, ApiError) else type(err).__name__
                self.metrics.failed(reason)
                raise
            finally:
                self.stats["reconciles"] += 1
                self.metrics.reconciled(time.perf_counter() - started)

    def _is_echo(self, namespace: str, name: str, body: dict[str, Any]) -> bool:
        """The watch event of our own status write: the object is exactly what the last
        pass left (any child that changed since sends its own event)."""
        with self._guard:
            written = self._written.get((namespace, name))
        return written is not None and written == body["metadata"].get("resourceVersion")

    def _reconcile(self, namespace: str, name: str, body: dict[str, Any] | None) -> None:
        for _ in range(MAX_ATTEMPTS):
            if body is None:
                body = self.kube.get(self.kind, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                self.forget(namespace, name)  # children go with it (ownerReferences)
                return
            try:
                self._once(body)
                return
            except ApiError as err:
                if not err.conflict:
                    raise
                self.stats["conflicts"] += 1
                body = None  # decided from a stale copy: read it again
        raise RuntimeError(f"{namespace}/{name} kept changing during {MAX_ATTEMPTS} passes")

    def compile_queue(self) -> Queue | None:
        """The compile queue as the cluster shows it, with the Jobs just created."""
        if self._compile_queue is None:
            return None
        queue = self._compile_queue()
        return queue.with_started(self.starts.unseen(queue.known))

    def plan(self, body: dict[str, Any], now: str) -> Plan:
        try:
            model = parse(body, kind=self.kind)
        except InvalidSpec as invalid:
            return decide_invalid(body, invalid.problems, now)
        observed = observe(self.kube, body, model, self.compile_queue)
        plan = decide(observed, model, now)
        starts = [a for a in plan.actions if a.verb == "create" and a.obj["kind"] == "Job"]
        if starts:  # a download or a compile: first, would the rest of the spec be taken?
            written = {(a.obj["kind"], a.obj["metadata"]["name"]) for a in plan.actions}
            refusal = self.dry_runs.refusal(model, observed.uid, written)
            if refusal is not None:
                return decide_invalid(body, [Problem("", refusal)], now, reason="Refused")
        return plan

    def _once(self, body: dict[str, Any]) -> None:
        now = self.clock()
        plan = self.plan(body, now)
        if self._compile_queue is None or not any(
            is_compile_start(a.verb, a.obj) for a in plan.actions
        ):
            self._carry_out(body, plan, now)
            return
        # Starting a compile: decide again under the lock, counting the Jobs the ones
        # before just started, so concurrent reconciles never exceed the limits.
        with self.starts.lock:
            self._carry_out(body, self.plan(body, now), now)

    def _say(self, body: dict[str, Any], event: Event, name: str | None = None) -> None:
        meta = body["metadata"]
        log.info("%s/%s: %s: %s", meta["namespace"], meta["name"], event.reason, event.message)
        self.emit(body, event, name)

    def _carry_out(self, body: dict[str, Any], plan: Plan, now: str) -> None:
        old = body.get("status") or {}
        status, events = plan.status, plan.events
        done: list[Event] = []
        failed: WriteFailed | None = None
        for action in plan.actions:
            try:
                execute(self.kube, action)
            except ApiError as err:
                if err.conflict:
                    raise  # decided from a stale view: read again
                if err.namespace_terminating:  # the SpyreModel goes with its namespace
                    log.info("%s: namespace is being deleted", body["metadata"]["namespace"])
                    return
                child = action.obj["metadata"]
                message = f"writing {action.obj['kind']} {child['name']} failed: {one_line(err)}"
                status = with_apply_failure(status, old, message, now)
                events = transition_events(old, status)
                failed = WriteFailed(message, err)
                break
            if is_compile_start(action.verb, action.obj):
                job = action.obj["metadata"]
                self.starts.add((job["namespace"], job["name"]))
            done.append(Event("Normal", action.reason, action.message))
            if action.verb == "delete":  # an inventory entry went: no status to write
                for event in done:
                    self._say(body, event)
                return
        if plan.requeue_after is not None and failed is None:
            meta = body["metadata"]
            self._requeue(meta["namespace"], meta["name"], plan.requeue_after)
        written_status = status.to_k8s()  # the JSON, compared with the stored one
        patch = status_patch(old, written_status)
        meta = body["metadata"]
        said = announce(done, events)
        for event in said if events else []:  # a transition: said before the status moves
            self._say(body, event, event_name(body, old, event))
        if patch is not None:
            written = write_status(self.kube, self.kind, body, patch)
            self.stats["status_writes"] += 1
            with self._guard:
                self._written[(meta["namespace"], meta["name"])] = written["metadata"][
                    "resourceVersion"
                ]
        self.metrics.status((meta["namespace"], meta["name"]), written_status)
        for event in [] if events else said:
            self._say(body, event)
        if failed is not None:
            raise failed  # run() tries again after a pause (a refusal: one that grows long)
