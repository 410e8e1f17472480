"""The operator's own watches of its children, filtered by the API server.

kopf has no label selector for a watch: it receives every object of a kind in the watched
namespaces and filters labels itself, so in cluster-wide mode every Pod and PVC of the
cluster reached the operator's memory and CPU. These watches ask the API server for the
objects labelled `app.kubernetes.io/managed-by=spyre-operator` only: Jobs, Deployments,
Services, NetworkPolicies, PVCs and Pods into stores the reconciler reads instead of GETs
and LISTs (indexed.IndexedKube). Per kind (and per namespace when
the operator is namespace-scoped): a paged LIST, then a WATCH from the list's
resourceVersion (with bookmarks); a watch the API server ends is resumed from the last
resourceVersion it brought, an expired one (410 Gone) is listed again and the differences
are delivered as events, and errors are retried with a growing pause. Each store is
updated before its event is delivered, and `Watches.wait_synced` returns once every store
holds its first listing: the reconciles never see an empty store at start-up.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spyre_operator.kube.backoff import retry_delay
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.kube.entries import index_entry, readable

log = logging.getLogger(__name__)

SELECTOR = "app.kubernetes.io/managed-by=spyre-operator"
PAGE = 500  # objects per LIST page
WATCH_SECONDS = 300  # the API server ends a watch after this; the next one resumes it
FIRST_PAUSE, LONGEST_PAUSE = 1.0, 30.0  # between failed attempts, doubling
Key = tuple[str, str]
Deliver = Callable[[str | None, dict[str, Any]], None]  # (event type, body)


class Store:
    """The objects of one kind, (namespace, name) -> what the reconciler reads of each
    (entries.index_entry). `complete`: every object the reconciler may ask for is
    labelled, so a missing key means a missing object; a user's existing cache claim
    (spec.cache.volume.claimName) is not labelled, so a PVC missing here is listed by
    name (indexed.IndexedKube). `by`: labels whose values are indexed, so a selection by
    one of them reads only the entries that carry it (of the pods: the model's, the
    Job's), not every entry. Safe from any thread; the entries are shared (a packed spec
    is unpacked afresh: entries.readable): read them, never change them."""

    def __init__(self, plural: str, complete: bool = True, by: tuple[str, ...] = ()) -> None:
        self.plural, self.complete, self.by = plural, complete, by
        self._items: dict[Key, dict[str, Any]] = {}
        self._index: dict[tuple[str, str, str], set[Key]] = {}  # (namespace, label, value)
        self._lock = threading.Lock()

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            found = self._items.get(key)
        return None if found is None else readable(found)

    def values(self) -> list[dict[str, Any]]:
        with self._lock:
            found = list(self._items.values())
        return [readable(e) for e in found]

    def select(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The entries of `namespace` that carry every label of `labels`."""
        wanted = labels.items()
        indexed = [(namespace, k, v) for k, v in wanted if k in self.by]
        with self._lock:
            keys = self._index.get(indexed[0], set()) if indexed else self._items.keys()
            found = [self._items[key] for key in keys if key[0] == namespace]
        return [readable(e) for e in found if wanted <= (e["metadata"].get("labels") or {}).items()]

    def _put(self, key: Key, entry: dict[str, Any]) -> None:
        """Keep `entry` under `key` and in the index (lock held)."""
        self._drop(key)
        self._items[key] = entry
        for label in self._indexed(key, entry):
            self._index.setdefault(label, set()).add(key)

    def _drop(self, key: Key) -> dict[str, Any] | None:
        """Forget `key`, and its place in the index; its entry (lock held)."""
        entry = self._items.pop(key, None)
        for label in self._indexed(key, entry) if entry is not None else ():
            keys = self._index[label]
            keys.discard(key)
            if not keys:
                del self._index[label]
        return entry

    def _indexed(self, key: Key, entry: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        labels = entry["metadata"].get("labels") or {}
        return [(key[0], k, labels[k]) for k in self.by if k in labels]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def event(self, event_type: str, body: Mapping[str, Any]) -> None:
        (key, entry), *_ = index_entry(self.plural, body).items()
        with self._lock:
            if event_type == "DELETED":
                self._drop(key)
            else:
                self._put(key, entry)

    def replace(
        self, bodies: Iterable[Mapping[str, Any]], namespace: str | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """Take a new listing (of `namespace`, or of all): the events that turn the old
        contents into the new one (ADDED, MODIFIED: another resourceVersion, DELETED: with
        the last entry known), to deliver after a re-list."""
        listed: dict[Key, dict[str, Any]] = {}
        for body in bodies:
            listed.update(index_entry(self.plural, body))
        events: list[tuple[str, dict[str, Any]]] = []
        with self._lock:
            for key, entry in listed.items():
                old = self._items.get(key)
                if old is None:
                    events.append(("ADDED", entry))
                elif _version(old) != _version(entry):
                    events.append(("MODIFIED", entry))
                self._put(key, entry)
            for key in [k for k in self._items if namespace in (None, k[0])]:
                if key not in listed:
                    events.append(("DELETED", self._items[key]))
                    self._drop(key)
        return [(event_type, readable(entry)) for event_type, entry in events]


def _version(entry: Mapping[str, Any]) -> str | None:
    version: str | None = entry["metadata"].get("resourceVersion")
    return version


@dataclass(frozen=True)
class Source:
    """One watched kind: its kind name (kube.KINDS), its store, and what its events
    trigger (None: nothing)."""

    kind: str
    store: Store
    deliver: Deliver | None
    selector: str | None = SELECTOR  # None: every object (the nodes)
    cluster: bool = False  # not in a namespace (the nodes): one watch, whatever the scope
    # The reconciles wait for its first listing (the nodes' do not: without them, or the
    # right to list them, only spec.autoscaling's capacity is unknown)
    awaited: bool = True


class Gone(Exception):
    """The resourceVersion a watch or a page asked for is no longer kept: list again."""


class Watch(threading.Thread):
    """LIST then WATCH one kind in one namespace (None: all), until `stop` is set."""

    def __init__(
        self,
        kube: Kube,
        source: Source,
        namespace: str | None,
        received: Counter[str],
        lock: threading.Lock,
        stop: threading.Event,
    ) -> None:
        where = namespace or "all namespaces"
        super().__init__(name=f"watch {source.kind} in {where}", daemon=True)
        self.kube, self.source, self.namespace = kube, source, namespace
        self.received, self._lock, self.stop = received, lock, stop
        self.synced = threading.Event()
        prefix, plural = kube.kinds[source.kind]
        self.url = kube.path(source.kind, namespace) if namespace else f"/{prefix}/{plural}"

    def run(self) -> None:
        version: str | None = None
        failures = 0
        while not self.stop.is_set():
            try:
                if version is None:
                    version = self.list()
                    self.synced.set()
                version = self.watch(version)
                failures = 0
            except Gone:
                log.info("%s: the watch expired (410 Gone): listing again", self.name)
                version = None
            except Exception as err:  # the API server away, a timeout, a refusal (RBAC)
                failures += 1
                pause = retry_delay(FIRST_PAUSE, failures, LONGEST_PAUSE)
                log.warning("%s: %s (again in %gs)", self.name, err, pause)
                self.stop.wait(pause)

    def _count(self, n: int) -> None:
        with self._lock:
            self.received[self.source.kind] += n

    def list(self) -> str:
        """The managed objects (the store) and the resourceVersion to watch from."""
        store, token = self.source.store, ""
        items: list[dict[str, Any]] = []
        while True:
            query = self.selecting({"limit": str(PAGE)})
            if token:
                query["continue"] = token
            try:
                page = self.kube.request("GET", self.url, query=query)
            except ApiError as err:
                if err.status == 410:  # the continue token expired
                    raise Gone() from err
                raise
            self._count(len(page.get("items") or []))
            items += page.get("items") or []
            token = page["metadata"].get("continue") or ""
            if not token:
                break
        first = not self.synced.is_set()  # the first listing is what kopf called resume:
        events = store.replace(items, self.namespace)  # no events, the models' is that
        for event_type, entry in [] if first else events:
            self._deliver(event_type, entry)
        version: str = page["metadata"]["resourceVersion"]
        return version

    def watch(self, version: str) -> str:
        """Events from `version` on, until the API server ends the watch: the last
        resourceVersion seen."""
        query = self.selecting(
            {
                "watch": "true",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(WATCH_SECONDS),
            }
        )
        try:
            for event in self.kube.watch(self.url, query, WATCH_SECONDS + 30):
                event_type, body = event["type"], event["object"]
                if event_type == "ERROR":
                    if body.get("code") == 410:
                        raise Gone()
                    raise ApiError(body.get("code", 500), body.get("reason", ""), body)
                version = body["metadata"]["resourceVersion"]
                if event_type == "BOOKMARK":
                    continue
                self._count(1)
                self.source.store.event(event_type, body)
                self._deliver(event_type, body)
                if self.stop.is_set():
                    break
        except ApiError as err:
            if err.status == 410:
                raise Gone() from err
            raise
        return version

    def selecting(self, query: dict[str, str]) -> dict[str, str]:
        selector = self.source.selector
        return query | ({"labelSelector": selector} if selector else {})

    def _deliver(self, event_type: str, body: dict[str, Any]) -> None:
        if self.source.deliver is None:
            return
        try:
            self.source.deliver(event_type, body)
        except Exception:  # a bug in a trigger must not end the watch
            log.exception("%s: handling a %s event", self.name, event_type)


class Watches:
    """Every watch of the operator; `counts` are the objects they brought, by kind
    (metrics: spyre_operator_watch_events_total)."""

    def __init__(self, kube: Kube, sources: list[Source], namespaces: list[str]) -> None:
        """`namespaces`: the watched ones; none: all."""
        scopes: list[str | None] = [*namespaces] or [None]
        self._received: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            Watch(kube, source, namespace, self._received, self._lock, self.stop)
            for source in sources
            for namespace in ([None] if source.cluster else scopes)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def wait_synced(self) -> bool:
        """Wait until every store holds its first listing (True) or `stop` is set."""
        for thread in (t for t in self.threads if t.source.awaited):
            while not thread.synced.wait(1.0):
                if self.stop.is_set():
                    return False
        return True

    def synced(self, kind: str) -> bool:
        """Every watch of `kind` has its first listing."""
        return all(t.synced.is_set() for t in self.threads if t.source.kind == kind)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._received)

    def close(self) -> None:
        self.stop.set()
