"""One level-based reconcile of a SpyreModel: observe -> decide -> apply -> status.

Everything is derived from the cluster on each pass (the SpyreModel as the watch store
holds it, its children and its stored status). Between passes the reconciler keeps only the
resourceVersion of its own last status write (its watch echo needs no run, and a store
that has not shown it yet is read around), the specs whose dry runs passed, the next
progress reading of a running compile (progress.py), the compile Jobs it
created a moment ago that the watch has not brought yet, and a kind found not served (the
SpyreCache CRD missing: no inventory entries for a while), so a restarted operator continues
where the last one stopped. When a reconcile runs is the work queue's business
(workqueue.py): never two of one object at once, a failed one again after a pause, a
compiling one again after the progress interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from spyre_operator.api.names import KIND
from spyre_operator.api.problem import InvalidSpec
from spyre_operator.api.validation import SpyreModel, parse
from spyre_operator.kube.client import ApiError, Kube, one_line
from spyre_operator.reconcile.apply import execute, write_status
from spyre_operator.reconcile.compile_queue import Queue, is_compile_start
from spyre_operator.reconcile.conditions import (
    Event,
    announce,
    event_name,
    now_rfc3339,
    status_patch,
    transition_events,
)
from spyre_operator.reconcile.decide import decide, decide_invalid
from spyre_operator.reconcile.dryrun import DryRuns
from spyre_operator.reconcile.model_status import with_apply_failure
from spyre_operator.reconcile.observe import Later, Observed, object_ref, observe
from spyre_operator.reconcile.plan import Plan, starts_job
from spyre_operator.reconcile.progress import ProgressReader
from spyre_operator.reconcile.shared import Starts, Unserved
from spyre_operator.reconcile.starts import StartReader
from spyre_operator.render.sharing import sharing_for
from spyre_operator.settings import Settings

log = logging.getLogger(__name__)


Key = tuple[str, str, str]  # (kind, namespace, name): a key of the work queue


class KeyQueue(Protocol):
    """What the reconciler asks of the controller's work queue (controller/workqueue.py)."""

    def add(self, key: Key) -> None: ...
    def later(self, key: Key) -> None: ...
    def forget(self, key: Key) -> None: ...
    def idle(self) -> bool: ...


class Measure(Protocol):
    """What the reconciler tells the controller's metrics (controller/metrics.py)."""

    def reconciled(self, seconds: float) -> None: ...
    def failed(self, reason: str) -> None: ...
    def status(
        self, kind: str, key: tuple[str, str], status: dict[str, Any], spec: dict[str, Any] | None
    ) -> None: ...
    def forget(self, kind: str, key: tuple[str, str]) -> None: ...


class Unmeasured:
    """No metrics (a reconciler on its own: the tests, the dev tools)."""

    def reconciled(self, seconds: float) -> None:
        pass

    def failed(self, reason: str) -> None:
        pass

    def status(
        self, kind: str, key: tuple[str, str], status: dict[str, Any], spec: dict[str, Any] | None
    ) -> None:
        pass

    def forget(self, kind: str, key: tuple[str, str]) -> None:
        pass


class EventSink(Protocol):
    def __call__(self, body: dict[str, Any], event: Event, name: str | None = None) -> None:
        """Post an Event about `body`: in the background, or, given a name, at once and
        idempotently (the same name again is no second Event)."""


MAX_ATTEMPTS = 4  # re-reads after a stale status write (409) before giving up this pass


class WriteFailed(ApiError):
    """A child write failed; the status already says so (Degraded, ApplyFailed)."""

    def __init__(self, message: str, err: ApiError) -> None:
        super().__init__(err.status, err.reason, err.body)
        self.args = (message,)


def complain(key: Key, err: Exception, delay: float, before: str | None) -> str:
    """What the log says of a failed reconcile (retried in `delay` seconds): one line per
    attempt, except a refusal, which the status explains: said once, and again only when
    it changes. A traceback only for the first failure of an unexpected kind (a bug)."""
    said = one_line(err) if isinstance(err, ApiError) else f"{type(err).__name__}: {one_line(err)}"
    where = f"{key[1]}/{key[2]}"
    if isinstance(err, ApiError) and err.refused:
        if said != before:
            log.warning("%s: %s (tried again after a growing pause)", where, said)
    elif isinstance(err, ApiError) or said == before:
        log.warning("%s: %s (again in %gs)", where, said, delay)
    else:
        log.exception("reconciling %s (again in %gs)", where, delay, exc_info=err)
    return said


def _where(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        emit: EventSink,
        clock: Callable[[], str] = now_rfc3339,
        compile_queue: Callable[[], Queue] | None = None,
        kind: str = KIND,
        starts: Starts | None = None,
        queue: KeyQueue | None = None,
        metrics: Measure | None = None,
        progress: ProgressReader | None = None,
        start_reports: StartReader | None = None,
        unserved: Unserved | None = None,
        settings: Settings | None = None,
        stored: Callable[[str, str], dict[str, Any] | None] | None = None,
    ):
        """`compile_queue` reads the compile queue from the cluster (None: no limits);
        `kind`: SpyreModel, or SpyreCache (compile only); `starts` is shared by both, and
        so is `unserved`; `queue` runs the reconciles the triggers ask for (`enqueue`);
        `metrics` may be shared too, and so may `progress`, which reads a running
        compile's progress (None: not read). `stored` reads the object from the watch
        store, a copy (None: not there; without it every pass GETs it); `settings`: the
        operator's (None: the defaults)."""
        self.kube, self.emit, self.clock = kube, emit, clock
        self.kind = kind
        self._compile_queue = compile_queue
        self.starts = starts or Starts()
        self.unserved = unserved or Unserved()
        self.queue = queue
        self.progress = progress
        self.start_reports = start_reports
        self.stats: Counter[str] = Counter()
        self.metrics = metrics or Unmeasured()
        self.stored = stored or (lambda namespace, name: None)
        self._written: dict[tuple[str, str], str] = {}  # resourceVersion of our last status write
        # written, but the store has not shown that version yet (nor a GET one as new)
        self._ahead: set[tuple[str, str]] = set()
        self._afresh: set[tuple[str, str]] = set()  # the store may have missed an event
        self.settings = settings or Settings()
        self.dry_runs = DryRuns(kube, self.settings)
        self._guard = threading.Lock()

    def enqueue(self, namespace: str, name: str, version: str | None = None) -> None:
        """Have the object reconciled by the queue's workers (never blocks), unless
        `version` (the resourceVersion its own event brought) is the one our last status
        write returned: the echo of that write needs no run (any child that changed since
        sends its own event)."""
        assert self.queue is not None, "a Reconciler without a queue only reconciles"
        if version is not None:
            with self._guard:
                echo = self._written.get((namespace, name)) == version
                if echo:
                    self._ahead.discard((namespace, name))
            if echo:
                self.stats["echoes"] += 1
                return
        self.queue.add((self.kind, namespace, name))

    def wrote(self, namespace: str, name: str, version: str) -> None:
        """Our status write of the object returned `version`: its watch event is an echo
        (`enqueue` runs nothing for it), and a store that has not shown it yet is read
        around (`read`)."""
        with self._guard:
            self._written[(namespace, name)] = version
            self._ahead.add((namespace, name))

    def listed(self, namespace: str, name: str, version: str) -> None:
        """The resync listed the object at `version`: a store that holds another one may
        have missed an event (or a newer one came since), so its next pass reads afresh."""
        held = self.stored(namespace, name)
        if held is not None and held["metadata"].get("resourceVersion") != version:
            with self._guard:
                self._afresh.add((namespace, name))

    def enqueue_later(self, namespace: str, name: str) -> None:
        """Have the object reconciled once no reconcile a trigger asked for waits (its
        inventory entry: workqueue.later)."""
        assert self.queue is not None, "a Reconciler without a queue only reconciles"
        self.queue.later((self.kind, namespace, name))

    def forget(self, namespace: str, name: str) -> None:
        """The object is gone: drop what is kept about it."""
        with self._guard:
            self._written.pop((namespace, name), None)
            self._ahead.discard((namespace, name))
            self._afresh.discard((namespace, name))
        if self.queue is not None:
            self.queue.forget((self.kind, namespace, name))
        self.dry_runs.forget(namespace, name)
        if self.start_reports is not None:
            self.start_reports.forget((namespace, name))
        self.metrics.forget(self.kind, (namespace, name))

    def reconcile(self, namespace: str, name: str) -> float | None:
        """Reconcile one SpyreModel, read from the watch store (`read`). Not twice at once
        for one object (the queue runs each key once at a time). Returns when to reconcile
        again without an event (seconds), if at all."""
        started = time.perf_counter()
        try:
            return self._reconcile(namespace, name, self.read(namespace, name))
        except Exception as err:
            self.stats["errors"] += 1
            reason = f"http_{err.status}" if isinstance(err, ApiError) else type(err).__name__
            self.metrics.failed(reason)
            raise
        finally:
            self.stats["reconciles"] += 1
            self.metrics.reconciled(time.perf_counter() - started)

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object from the watch store to decide from; None (read it with a GET) if
        the store lacks it, has not shown our last status write yet (it would
        decide from the status before it), or the resync found it behind."""
        where = (namespace, name)
        body = self.stored(namespace, name)
        version = None if body is None else body["metadata"].get("resourceVersion")
        with self._guard:
            ahead = where in self._ahead and version != self._written[where]
            behind = ahead or where in self._afresh
            self._afresh.discard(where)
            self._ahead.discard(where)  # this pass reads our write, or newer
        return None if behind else body

    def _reconcile(self, namespace: str, name: str, body: dict[str, Any] | None) -> float | None:
        for _ in range(MAX_ATTEMPTS):
            if body is None:
                body = self.kube.get(self.kind, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                self.forget(namespace, name)  # children go with it (ownerReferences)
                return None
            try:
                return self._once(body)
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
        """observe -> decide; when the decision asks for more (it starts a Job, it has
        deferred actions), what it asks is read and the same decide runs again with it."""
        try:
            model = parse(body, kind=self.kind)
        except InvalidSpec as invalid:
            return decide_invalid(body, invalid.problems, now)
        observed = observe(
            self.kube,
            body,
            model,
            self.compile_queue,
            self.progress,
            self.start_reports,
            pulls=sharing_for(model.spec, self.settings.cache_sharing) is not None,
        )
        plan = decide(observed, model, now, self.settings)
        asked = self._asked(observed, model, plan)
        return plan if asked is observed else decide(asked, model, now, self.settings)

    def _asked(self, observed: Observed, model: SpyreModel, plan: Plan) -> Observed:
        """The facts `plan` depends on that observe does not read: starting a Job, would
        the API server take the rest of the spec (a dry run)? With deferred actions: does
        a reconcile a trigger asked for wait, which kinds are unserved, which of them exist
        already (one made that has not joined the Job yet: a GET, not a POST answered 409
        at every pass until its own reconcile joins it)?"""
        if starts_job(plan):
            written = {(a.obj["kind"], a.obj["metadata"]["name"]) for a in plan.actions}
            claim = model.spec.cache.volume.claim_name
            refusal = self.dry_runs.refusal(model, observed.uid, written | observed.children(claim))
            if refusal is not None:
                return replace(observed, refusal=refusal)
        if not plan.deferred:
            return observed
        unserved = self.unserved.skipped()
        wanted = [a.obj for a in plan.deferred if a.obj["kind"] not in unserved]
        busy = bool(wanted) and self.queue is not None and not self.queue.idle()
        made = [] if busy else [object_ref(o) for o in wanted]
        exist = frozenset(ref for ref in made if self.kube.get(*ref) is not None)
        return replace(observed, later=Later(busy, unserved, exist))

    def _once(self, body: dict[str, Any]) -> float | None:
        now = self.clock()
        plan = self.plan(body, now)
        if self._compile_queue is not None and any(
            is_compile_start(a.verb, a.obj) for a in plan.actions
        ):
            # Starting a compile: decide again under the lock, counting the Jobs the ones
            # before just started, so concurrent reconciles never exceed the limits.
            with self.starts.lock:
                plan = self.plan(body, now)
                self._carry_out(body, plan, now)
        else:
            self._carry_out(body, plan, now)
        return plan.requeue_after

    def _say(self, body: dict[str, Any], event: Event, name: str | None = None) -> None:
        meta = body["metadata"]
        log.info("%s/%s: %s: %s", meta["namespace"], meta["name"], event.reason, event.message)
        self.emit(body, event, name)

    def _carry_out(self, body: dict[str, Any], plan: Plan, now: str) -> None:
        old = body.get("status") or {}
        status, events = plan.status, plan.events
        done: list[Event] = []
        failed: WriteFailed | None = None
        deferred = plan.deferred
        if plan.later:  # it waits behind the reconciles a trigger asked for: run it again
            self.enqueue_later(*_where(body))
        for action in plan.actions + deferred:
            try:
                execute(self.kube, action)
            except ApiError as err:
                if err.conflict:
                    raise  # decided from a stale view: read again
                if action in deferred and err.kind_unserved:  # no inventory, all else works
                    self.unserved.found(action.obj["kind"], err)
                    continue
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
            if action in deferred:
                self.unserved.served(action.obj["kind"])
            done.append(Event("Normal", action.reason, action.message))
            if action.verb == "delete" and action.obj["kind"] == self.kind:
                # an inventory entry went: no status to write
                for event in done:
                    self._say(body, event)
                return
        written_status = status.to_k8s()  # the JSON, compared with the stored one
        patch = status_patch(old, written_status)
        meta = body["metadata"]
        said = announce(done, events)
        for event in said if events else []:  # a transition: said before the status moves
            self._say(body, event, event_name(body, old, event))
        if patch is not None:
            written = write_status(self.kube, self.kind, body, patch)
            self.stats["status_writes"] += 1
            self.wrote(meta["namespace"], meta["name"], written["metadata"]["resourceVersion"])
        self.metrics.status(
            self.kind, (meta["namespace"], meta["name"]), written_status, body.get("spec")
        )
        for event in [] if events else said:
            self._say(body, event)
        if failed is not None:
            raise failed  # the queue tries again after a pause (a refusal: one that grows long)
