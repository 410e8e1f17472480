"""What the operator keeps of the watched objects: the children the reconciler reads
instead of GETs (the stores of watches.py), and each SpyreModel and SpyreCache with the
compile Job it wants (kopf indexes: the store its reconcile reads; the compile queue)."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterable, Mapping
from sys import intern
from typing import TYPE_CHECKING, Any, NamedTuple

from kubernetes import client

from spyre_operator.kube.client import KINDS, Kube
from spyre_operator.reconcile import compile_queue
from spyre_operator.reconcile.observe import job_view
from spyre_operator.render import meta

if TYPE_CHECKING:
    from spyre_operator.kube.watches import Store

MANAGED = {"app.kubernetes.io/managed-by": "spyre-operator"}
MODELS = "spyremodels"  # the index of SpyreModels -> Entry (handlers.py)
CACHES = "spyrecaches"  # the same of SpyreCaches

KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
)
SHORT = 64  # characters of the strings `plain` interns (names, labels, kinds, not messages)
POD_METADATA = ("name", "namespace", "resourceVersion", "labels", "creationTimestamp")
CONTAINER_STATUS = ("name", "ready", "state", "lastState")


def pod_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """A pod as observe and progress read it: its labels (selected by them), age, phase,
    when a node started it, its containers' states (waiting reasons, terminations with
    their messages) and, while the scheduler cannot place it, why (its PodScheduled
    condition)."""
    metadata, status = body["metadata"], body.get("status") or {}
    statuses = status.get("containerStatuses") or []
    unplaced = [
        plain(c)
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    return {
        "metadata": {k: plain(metadata[k]) for k in POD_METADATA if k in metadata},
        "status": {
            "phase": status.get("phase"),
            "containerStatuses": [
                {k: plain(c[k]) for k in CONTAINER_STATUS if k in c} for c in statuses
            ],
        }
        | ({"startTime": status["startTime"]} if status.get("startTime") else {})
        | ({"conditions": unplaced} if unplaced else {}),
    }


def index_entry(plural: str, body: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """A child as the reconciler reads it, keyed by (namespace, name): only what observe
    and decide look at (no managedFields; of a Job not the pod template; of a PVC that it
    exists; of a pod its labels and its containers' states), so the indexes stay small."""
    metadata = body["metadata"]
    key = (metadata["namespace"], metadata["name"])
    if plural == "pods":
        return {key: pod_entry(body)}
    entry: dict[str, Any] = {
        "metadata": {k: plain(metadata[k]) for k in KEPT_METADATA if k in metadata}
    }
    if plural == "jobs":
        deadline = body.get("spec", {}).get("activeDeadlineSeconds")
        entry["spec"] = {} if deadline is None else {"activeDeadlineSeconds": deadline}
        entry["status"] = plain(body.get("status") or {})
    elif plural != "persistentvolumeclaims":
        entry["spec"] = PackedSpec.of(plural, body.get("spec") or {})
        entry["status"] = plain(body.get("status") or {})
    return {key: entry}


def readable(entry: dict[str, Any]) -> dict[str, Any]:
    """A store's entry as the reconciler reads it: its spec unpacked (a fresh copy), the
    rest shared."""
    spec = entry.get("spec")
    return {**entry, "spec": spec.unpack()} if isinstance(spec, PackedSpec) else entry


class IndexedKube(Kube):
    """The operator's client, but GETs and LISTs of watched kinds are answered from the
    watches' stores (filled before any reconcile runs, updated before each event is
    handled), by plural. The answers are shared: read them, never change them."""

    def __init__(
        self, api: client.ApiClient, stores: Mapping[str, Store], policy: str = "policy/v1"
    ) -> None:
        super().__init__(api, policy)
        self.stores = stores

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        store = self.stores.get(KINDS[kind][1])
        if store is None:
            return super().get(kind, namespace, name)
        found = store.get((namespace, name))
        if found is None and not store.complete:
            # Not labelled (a user's claim): a LIST of that one name, which the role
            # allows (list and watch claims, no get).
            query = {"fieldSelector": f"metadata.name={name}"}
            items: list[dict[str, Any]] = (
                self.request("GET", self.path(kind, namespace), query=query).get("items") or []
            )
            return items[0] if items else None
        return found

    def list(
        self, kind: str, namespace: str, selector: str, consistent: bool = False
    ) -> list[dict[str, Any]]:
        """`selector`: k=v pairs, comma-separated (what the reconciler asks for). A store
        is filled by its own watch, so it may lag behind another kind's (a Job's end seen
        before its pod's): `consistent` asks the API server."""
        store = self.stores.get(KINDS[kind][1])
        if consistent or store is None or not store.complete:
            return super().list(kind, namespace, selector)
        return store.select(namespace, equalities(selector))


def equalities(selector: str) -> dict[str, str]:
    """A label selector of k=v pairs as a dict; ValueError for any other kind of selector
    (the reconciler asks for none)."""
    out = {}
    for term in selector.split(","):
        name, sep, value = term.partition("=")
        if not sep or not name or value.startswith("=") or name.endswith("!"):
            raise ValueError(f"only k=v label selectors are answered from a store: {selector!r}")
        out[name.strip()] = value.strip()
    return out


# ----- the compile queue, from the indexes ----------------------------------------------
class Preset:
    """zlib's preset dictionary: the first text offered as `usable` (of the bodies the
    index packs, the first one with a status the operator wrote; of a kind of children's
    specs, the first one). A fleet's SpyreModels and SpyreCaches share most of their keys
    and values (spec, conditions, their messages), so the others pack to a few hundred
    bytes instead of ~1 KB. Fixed once chosen: what was packed with it is unpacked with
    it."""

    def __init__(self) -> None:
        self.value: bytes | None = None
        self._guard = threading.Lock()

    def offer(self, text: bytes, usable: bool = True) -> None:
        if self.value is None and usable:
            with self._guard:
                if self.value is None:
                    self.value = text

    def pack(self, text: bytes) -> tuple[bytes, bool]:
        """The packed text, and whether the dictionary packed it."""
        if self.value is None:
            return zlib.compress(text, 1), False
        packer = zlib.compressobj(1, zdict=self.value)
        return packer.compress(text) + packer.flush(), True

    def unpack(self, packed: bytes, preset: bool) -> bytes:
        if not preset:
            return zlib.decompress(packed)
        assert self.value is not None
        unpacker = zlib.decompressobj(zdict=self.value)
        return unpacker.decompress(packed) + unpacker.flush()


# By the kind of the bodies the index packs (SpyreModel, SpyreCache: shaped apart), and
# by the plural of the children whose specs the stores pack.
PRESETS: dict[str, Preset] = {}


def pack(shape: str, text: bytes, usable: bool = True) -> tuple[bytes, Preset, bool]:
    """`text` packed with the preset of its `shape` (the first usable text of that shape
    becomes it): the packed bytes, the preset, whether its dictionary packed them."""
    preset = PRESETS.setdefault(shape, Preset())
    preset.offer(text, usable)
    packed, with_preset = preset.pack(text)
    return packed, preset, with_preset


class PackedSpec(NamedTuple):
    """A child's spec as its store keeps it (Deployments, Services, NetworkPolicies,
    PodDisruptionBudgets): compact JSON, zlib with the first one of its kind as the
    dictionary. drift compares all of it, but a reconcile reads a few children: a
    Deployment's is ~12 KB as dicts, ~200 bytes so (1,000 Deployments: 12 MB)."""

    packed: bytes
    preset: Preset
    with_preset: bool

    @classmethod
    def of(cls, plural: str, spec: Mapping[str, Any]) -> PackedSpec:
        return cls(*pack(plural, json.dumps(spec, separators=(",", ":")).encode()))

    def unpack(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.preset.unpack(self.packed, self.with_preset))
        return found


class Entry(NamedTuple):
    """A SpyreModel (or SpyreCache) as its index keeps it: every one of them is held, so
    its body is packed (compact JSON, zlib with its kind's preset: a few hundred bytes; as
    dicts ~5 KB, 100 MB at 20,000)."""

    packed: bytes  # the body without its managedFields (never read; the largest part)
    want: compile_queue.Want | None  # the compile Job it wants (the compile queue)
    preset: Preset
    with_preset: bool  # packed with the preset's dictionary

    @property
    def body(self) -> dict[str, Any]:
        """A fresh copy of the body: the caller's to change."""
        found: dict[str, Any] = json.loads(self.preset.unpack(self.packed, self.with_preset))
        return found


def model_entry(body: Mapping[str, Any]) -> dict[tuple[str, str], Entry]:
    """A SpyreModel as the index keeps it, for its reconciles to read (`stored`) and the
    compile queue (the resync counts the keys)."""
    metadata = body["metadata"]
    kept = plain({k: v for k, v in body.items() if k != "metadata"})
    kept["metadata"] = plain({k: v for k, v in metadata.items() if k != "managedFields"})
    text = json.dumps(kept, separators=(",", ":")).encode()
    written = bool((kept.get("status") or {}).get("conditions"))  # a status the operator wrote
    packed, preset, with_preset = pack(str(body.get("kind")), text, written)
    key = (metadata["namespace"], metadata["name"])
    return {key: Entry(packed, compile_queue.wanted(kept), preset, with_preset)}


def stored(index: Mapping[Any, Any], namespace: str, name: str) -> dict[str, Any] | None:
    """A copy of the object `index` (of model_entry) holds under (namespace, name)."""
    entries = list(index.get((namespace, name), ()))
    return entries[0].body if entries else None


def _values(index: Mapping[Any, Any]) -> list[Any]:
    """Every value of a kopf index, read from a worker thread while the event loop may
    change it (list() of the key iterator is atomic, a Python-level loop over it is not)."""
    return [value for key in list(index) for value in list(index.get(key, ()))]


def read_compile_queue(
    limits: compile_queue.Limits, jobs: Store, wants: Iterable[Mapping[Any, Any]]
) -> compile_queue.Queue:
    """The queue as the cluster shows it: the compile Jobs (their store), and the
    SpyreModels and SpyreCaches (their indexes: `wants`) whose wanted Job does not exist."""
    known, running = set(), set()
    for job in jobs.values():
        if meta.component(job) != meta.COMPILE:
            continue
        ref = (job["metadata"]["namespace"], job["metadata"]["name"])
        known.add(ref)
        view = job_view(job, [])
        if not (view.succeeded or view.failed):
            running.add(ref)
    wanting = tuple(
        w
        for index in wants
        for w in (e.want for e in _values(index))
        if w is not None and w.ref not in known
    )
    return compile_queue.Queue(limits, frozenset(running), wanting, frozenset(known))


def plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """A mutable deep copy of kopf's read-only body, its keys and short strings interned:
    each event is parsed on its own, so without that every stored entry holds its own
    copy of "ownerReferences", "app.kubernetes.io/managed-by", "spyre-operator"... (a
    compile Job's store entry: 4.3 -> 2.9 KB). Interned strings are freed with their
    last user."""

    def copy(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {intern(k): copy(v) for k, v in value.items()}
        if isinstance(value, list):
            return [copy(v) for v in value]
        if isinstance(value, str) and len(value) <= SHORT:
            return intern(value)
        return value

    out: dict[str, Any] = copy(body)
    return out
