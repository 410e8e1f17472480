"""One level-based reconcile of a SpyreModel: observe -> decide -> apply -> status.

Everything is derived from the cluster on each pass (the SpyreModel, its children and its
stored status); nothing is remembered between passes except a lock per object, so a
restarted operator continues where the last one stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from spyre_operator.api.problem import InvalidSpec
from spyre_operator.api.validation import parse
from spyre_operator.reconcile.apply import execute, write_status
from spyre_operator.reconcile.conditions import (
    Event,
    now_rfc3339,
    status_patch,
    transition_events,
)
from spyre_operator.reconcile.decide import Plan, decide, decide_invalid, with_apply_failure
from spyre_operator.reconcile.kube import ApiError, Kube
from spyre_operator.reconcile.observe import observe

log = logging.getLogger(__name__)

EventSink = Callable[[dict[str, Any], Event], None]
MAX_ATTEMPTS = 4  # re-reads after a stale status write (409) before giving up this pass
# The API server refused the object itself: retrying the same manifest cannot help.
REFUSED = (400, 403, 422)


class Reconciler:
    def __init__(self, kube: Kube, emit: EventSink, clock: Callable[[], str] = now_rfc3339):
        self.kube, self.emit, self.clock = kube, emit, clock
        self.stats: Counter[str] = Counter()
        self.seconds = 0.0
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def _forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._locks.pop((namespace, name), None)

    def reconcile(self, namespace: str, name: str, body: dict[str, Any] | None = None) -> None:
        """Reconcile one SpyreModel; `body` is a recent copy if the caller has one."""
        started = time.perf_counter()
        with self._lock(namespace, name):
            try:
                self._reconcile(namespace, name, body)
            except Exception:
                self.stats["errors"] += 1
                raise
            finally:
                self.stats["reconciles"] += 1
                self.seconds += time.perf_counter() - started

    def _reconcile(self, namespace: str, name: str, body: dict[str, Any] | None) -> None:
        for _ in range(MAX_ATTEMPTS):
            if body is None:
                body = self.kube.get("SpyreModel", namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                self._forget(namespace, name)  # children go with it (ownerReferences)
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

    def plan(self, body: dict[str, Any], now: str) -> Plan:
        try:
            model = parse(body)
        except InvalidSpec as invalid:
            return decide_invalid(body, invalid.problems, now)
        return decide(observe(self.kube, body, model), model, now)

    def _once(self, body: dict[str, Any]) -> None:
        now = self.clock()
        plan = self.plan(body, now)
        old = body.get("status") or {}
        status, events = plan.status, plan.events
        done: list[Event] = []
        for action in plan.actions:
            try:
                execute(self.kube, action)
            except ApiError as err:
                if err.status not in REFUSED:
                    raise
                meta = action.obj["metadata"]
                message = f"the API server refused {action.obj['kind']} {meta['name']}: {err}"
                log.warning("%s/%s: %s", body["metadata"]["namespace"], meta["name"], message)
                status = with_apply_failure(status, old, message, now)
                events = transition_events(old, status)
                break
            done.append(Event("Normal", action.reason, action.message))
        patch = status_patch(old, status)
        if patch is not None:
            write_status(self.kube, body, patch)
            self.stats["status_writes"] += 1
        for event in done + events:
            self.emit(body, event)
