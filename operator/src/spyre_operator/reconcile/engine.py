"""One level-based reconcile of a SpyreModel (or a SpyreCache): observe -> decide -> apply ->
status, a function of the object's key.

Everything is derived from the cluster on each pass (the object as the watch store holds
it, its children and its stored status). Between passes the reconciler keeps only the
specs whose dry runs passed, and what both kinds share (shared.Shared): the serving pods'
start-ups read, the next progress reading of a running compile (progress.py), the compile
Jobs created a moment ago that the watch has not brought yet, and a kind found not served
(the SpyreCache CRD missing: no inventory entries for a while); so a restarted operator
continues where the last one stopped. When a reconcile runs, what its end means, its
metrics and the echoes of its own status writes are the controller's business
(controller/workqueue.py, kinds.py, echoes.py): never two of one object at once, a failed
one again after a pause, a compiling one again after the progress interval.
"""

from __future__ import annotations

import logging
from collections import Counter
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
    status_patch,
    transition_events,
)
from spyre_operator.reconcile.decide import decide, decide_invalid
from spyre_operator.reconcile.dryrun import DryRuns
from spyre_operator.reconcile.model_status import with_apply_failure
from spyre_operator.reconcile.observe import Later, Observed, object_ref, observe
from spyre_operator.reconcile.plan import Plan, starts_job
from spyre_operator.reconcile.result import Result
from spyre_operator.reconcile.shared import Shared
from spyre_operator.render.sharing import sharing_for
from spyre_operator.settings import Settings

log = logging.getLogger(__name__)


class Store(Protocol):
    """The objects of the reconciler's kind as the operator's watch holds them
    (controller/echoes.py)."""

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the object to decide from; None: read it with a GET (not in the store,
        or the store may be behind)."""

    def wrote(self, namespace: str, name: str, version: str) -> None:
        """The reconcile's status write of the object returned `version`."""


class Unstored:
    """No store (a reconciler on its own: the tests, the dev tools): every pass GETs."""

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def wrote(self, namespace: str, name: str, version: str) -> None:
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


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        emit: EventSink,
        kind: str = KIND,
        store: Store | None = None,
        settings: Settings | None = None,
        shared: Shared | None = None,
    ):
        """`kind`: SpyreModel, or SpyreCache (compile only); `store` has the objects
        (None: every pass GETs); `settings`: the operator's (None: the defaults); `shared`:
        what both kinds' reconcilers share (None: nothing, no compile limits)."""
        self.kube, self.emit, self.kind = kube, emit, kind
        self.store = store or Unstored()
        self.settings = settings or Settings()
        self.shared = shared or Shared()
        self.stats: Counter[str] = Counter()  # conflicts, status_writes
        self.dry_runs = DryRuns(kube, self.settings)

    def forget(self, namespace: str, name: str) -> None:
        """The object is gone: drop what is kept about it."""
        self.dry_runs.forget(namespace, name)
        if self.shared.start_reports is not None:
            self.shared.start_reports.forget((namespace, name))

    def reconcile(self, namespace: str, name: str) -> Result:
        """Reconcile one object, read from the store (or with a GET). Never twice at once
        for one object (the work queue runs each key once at a time)."""
        body = self.store.read(namespace, name)
        for _ in range(MAX_ATTEMPTS):
            if body is None:
                body = self.kube.get(self.kind, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                self.forget(namespace, name)  # children go with it (ownerReferences)
                return Result(gone=True)
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
        if self.shared.compile_queue is None:
            return None
        queue = self.shared.compile_queue()
        return queue.with_started(self.shared.starts.unseen(queue.known))

    def plan(self, body: dict[str, Any], now: str) -> Plan:
        """observe -> decide (`decided`)."""
        return self.decided(body, now)[0]

    def decided(
        self, body: dict[str, Any], now: str, key: str | None = None
    ) -> tuple[Plan, str | None]:
        """observe -> decide; when the decision asks for more (it starts a Job, it has
        deferred actions), what it asks is read and the same decide runs again with it.
        The plan and the spec's cache key (None: not known yet, or an invalid spec);
        `key`: the one a plan before it in this reconcile computed."""
        try:
            model = parse(body, kind=self.kind, images=self.settings.runtime_images)
        except InvalidSpec as invalid:
            return decide_invalid(body, invalid.problems, now), None
        observed = observe(
            self.kube,
            body,
            model,
            self.compile_queue,
            self.shared.progress,
            self.shared.start_reports,
            pulls=sharing_for(model.spec, self.settings.cache_sharing) is not None,
            key=key,
            cards=self.shared.cards,
        )
        plan = decide(observed, model, now, self.settings)
        asked = self._asked(observed, model, plan)
        if asked is not observed:
            plan = decide(asked, model, now, self.settings)
        return plan, observed.key

    def _asked(self, observed: Observed, model: SpyreModel, plan: Plan) -> Observed:
        """The facts `plan` depends on that observe does not read: starting a Job, would
        the API server take the rest of the spec (a dry run)? With deferred actions: does
        a reconcile a trigger asked for wait, which kinds are unserved, which of them exist
        already (one made that has not joined the Job yet: a GET, not a POST answered 409
        at every pass until its own reconcile joins it)?"""
        if starts_job(plan):
            written = {(a.obj["kind"], a.obj["metadata"]["name"]) for a in plan.actions}
            claim = model.spec.cache.volume.claim_name
            present = written | observed.children(claim)
            refusal = self.dry_runs.refusal(model, observed.uid, observed.key, present)
            if refusal is not None:
                return replace(observed, refusal=refusal)
        if not plan.deferred:
            return observed
        unserved = self.shared.unserved.skipped()
        wanted = [a.obj for a in plan.deferred if a.obj["kind"] not in unserved]
        busy = bool(wanted) and self.shared.busy()
        made = [] if busy else [object_ref(o) for o in wanted]
        exist = frozenset(ref for ref in made if self.kube.get(*ref) is not None)
        return replace(observed, later=Later(busy, unserved, exist))

    def _once(self, body: dict[str, Any]) -> Result:
        now = self.shared.clock()
        plan, key = self.decided(body, now)
        if self.shared.compile_queue is not None and any(
            is_compile_start(a.verb, a.obj) for a in plan.actions
        ):
            # Starting a compile: decide again under the lock, counting the Jobs the ones
            # before just started, so concurrent reconciles never exceed the limits.
            with self.shared.starts.lock:
                plan, _ = self.decided(body, now, key)
                self._carry_out(body, plan, now)
        else:
            self._carry_out(body, plan, now)
        # `later`: what it defers waits behind the reconciles a trigger asked for
        return Result(plan.requeue_after, plan.later)

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
        for action in plan.actions + deferred:
            try:
                execute(self.kube, action)
            except ApiError as err:
                if err.conflict:
                    raise  # decided from a stale view: read again
                if action in deferred and err.kind_unserved:  # no inventory, all else works
                    self.shared.unserved.found(action.obj["kind"], err)
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
                self.shared.starts.add((job["namespace"], job["name"]))
            if action in deferred:
                self.shared.unserved.served(action.obj["kind"])
            done.append(Event("Normal", action.reason, action.message))
            if action.verb == "delete" and action.obj["kind"] == self.kind:
                # an inventory entry went: no status to write
                for event in done:
                    self._say(body, event)
                return
        written_status = status.to_k8s()  # the JSON, compared with the stored one
        patch = status_patch(old, written_status)
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        said = announce(done, events)
        for event in said if events else []:  # a transition: said before the status moves
            self._say(body, event, event_name(body, old, event))
        if patch is not None:
            written = write_status(self.kube, self.kind, body, patch)
            self.stats["status_writes"] += 1
            self.store.wrote(namespace, name, written["metadata"]["resourceVersion"])
        self.shared.statuses.status(self.kind, (namespace, name), written_status, body.get("spec"))
        for event in [] if events else said:
            self._say(body, event)
        if failed is not None:
            raise failed  # the queue tries again after a pause (a refusal: one that grows long)
