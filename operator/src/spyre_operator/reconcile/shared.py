"""What the reconcilers of SpyreModels and of SpyreCaches share (`Shared`): between
passes, the compile Jobs just created that the watch has not brought yet and the kinds the
API server does not serve; the readers of the compile queue, of a compile's progress and of
the serving pods' start-ups; where the statuses written are told (the metrics), whether a
reconcile a trigger asked for waits (the work queue's backlog), and the clock.
Thread-safe."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from spyre_operator.kube.client import ApiError, one_line
from spyre_operator.reconcile.compile_queue import JobRef, Queue
from spyre_operator.reconcile.conditions import now_rfc3339
from spyre_operator.reconcile.observe import Cards
from spyre_operator.reconcile.progress import ProgressReader
from spyre_operator.reconcile.starts import StartReader

log = logging.getLogger(__name__)

# A compile Job this operator created counts as running until the watch brings it (the
# index has it then); this long at most, should its events be lost (created and deleted).
STARTED_SECONDS = 60.0
# A kind the API server does not serve (the SpyreCache CRD not installed) is tried again
# after this long: its CRD may be installed meanwhile.
UNSERVED_SECONDS = 300.0


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


class Unserved:
    """Kinds the API server answered a create of with 404 (their CRD is not installed),
    shared by the reconcilers: what needs them (the inventory entries) is skipped,
    said once, and tried again `UNSERVED_SECONDS` later. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._since: dict[str, float] = {}  # kind -> when found unserved
        self._guard = threading.Lock()

    def skipped(self) -> frozenset[str]:
        """The kinds found unserved lately (what needs them is skipped)."""
        since = self.clock() - UNSERVED_SECONDS
        with self._guard:
            return frozenset(kind for kind, found in self._since.items() if found > since)

    def found(self, kind: str, err: ApiError) -> None:
        with self._guard:
            first = kind not in self._since
            self._since[kind] = self.clock()
        if first:
            log.warning(
                "the API server does not serve %s (%s): no inventory of caches, no clean-up; "
                "install its CRD (tried again every %gs)",
                kind,
                one_line(err),
                UNSERVED_SECONDS,
            )

    def served(self, kind: str) -> None:
        with self._guard:
            was = self._since.pop(kind, None)
        if was is not None:
            log.info("the API server serves %s now: the inventory of caches resumes", kind)


class Statuses(Protocol):
    """Told each status a reconcile decided (written or not): the metrics' phases, cache
    keys and compile durations (controller/metrics.py)."""

    def status(
        self, kind: str, key: tuple[str, str], status: dict[str, Any], spec: dict[str, Any] | None
    ) -> None: ...


class Untold:
    """Statuses told nobody (a reconciler on its own: the tests, the dev tools)."""

    def status(
        self, kind: str, key: tuple[str, str], status: dict[str, Any], spec: dict[str, Any] | None
    ) -> None:
        pass


def never() -> bool:
    return False


@dataclass(frozen=True)
class Shared:
    """What both kinds' reconcilers share. `compile_queue` reads the compile queue from the
    cluster (None: no limits); `progress` reads a running compile's progress and
    `start_reports` the serving pods' start-ups (None: not read); `busy`: a reconcile a
    trigger asked for waits (what can wait, waits behind it); `cards` reads the nodes and
    the operator's pods (spec.autoscaling's capacity; None: not read); `clock`: the time,
    RFC 3339."""

    starts: Starts = field(default_factory=Starts)
    unserved: Unserved = field(default_factory=Unserved)
    compile_queue: Callable[[], Queue] | None = None
    progress: ProgressReader | None = None
    start_reports: StartReader | None = None
    statuses: Statuses = field(default_factory=Untold)
    busy: Callable[[], bool] = never
    cards: Callable[[], Cards | None] | None = None
    clock: Callable[[], str] = now_rfc3339
