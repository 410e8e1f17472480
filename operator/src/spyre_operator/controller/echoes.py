"""One kind's watch store as its reconciler reads it, and the echoes of its own status
writes.

A reconcile's status write comes back as a watch event of the object (its echo), which
needs no run: any child that changed since sends its own event. The resourceVersion the
write returned tells the echo (`echo`); and until the store has shown that version, a run
reads the object with a GET instead (`read`: the store's copy would decide from the status
before the write). The resync's LIST tells each object's version (`listed`): a store that
holds another one may have missed an event, so the next run reads afresh. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

Where = tuple[str, str]  # (namespace, name)


def unstored(namespace: str, name: str) -> dict[str, Any] | None:
    return None


class Echoes:
    """`stored` reads the object from the watch store, a copy (None: not there)."""

    def __init__(self, stored: Callable[[str, str], dict[str, Any] | None] = unstored) -> None:
        self.stored = stored
        self.stats: Counter[str] = Counter()  # echoes
        self._written: dict[Where, str] = {}  # resourceVersion of our last status write
        # written, but the store has not shown that version yet (nor a GET one as new)
        self._ahead: set[Where] = set()
        self._afresh: set[Where] = set()  # the store may have missed an event
        self._guard = threading.Lock()

    def echo(self, namespace: str, name: str, version: str) -> bool:
        """Is the event that brought `version` the echo of our last status write?"""
        with self._guard:
            echo = self._written.get((namespace, name)) == version
            if echo:
                self._ahead.discard((namespace, name))
        if echo:
            self.stats["echoes"] += 1
        return echo

    def wrote(self, namespace: str, name: str, version: str) -> None:
        """Our status write of the object returned `version`: its watch event is an echo,
        and a store that has not shown it yet is read around."""
        with self._guard:
            self._written[(namespace, name)] = version
            self._ahead.add((namespace, name))

    def listed(self, namespace: str, name: str, version: str) -> None:
        """The resync listed the object at `version`: a store that holds another one may
        have missed an event (or a newer one came since), so its next run reads afresh."""
        held = self.stored(namespace, name)
        if held is not None and held["metadata"].get("resourceVersion") != version:
            with self._guard:
                self._afresh.add((namespace, name))

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object from the watch store to decide from; None (read it with a GET) if
        the store lacks it, has not shown our last status write yet (it would decide from
        the status before it), or the resync found it behind."""
        where = (namespace, name)
        body = self.stored(namespace, name)
        version = None if body is None else body["metadata"].get("resourceVersion")
        with self._guard:
            ahead = where in self._ahead and version != self._written[where]
            behind = ahead or where in self._afresh
            self._afresh.discard(where)
            self._ahead.discard(where)  # this run reads our write, or newer
        return None if behind else body

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._written.pop((namespace, name), None)
            self._ahead.discard((namespace, name))
            self._afresh.discard((namespace, name))
