"""A watched object as the operator keeps it: only what observe and decide read, its short
strings interned and a child's spec packed (zlib, with a preset dictionary per shape), so
the stores (watches.py) and the kopf indexes (controller/indexes.py) stay small."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Mapping
from sys import intern
from typing import Any, NamedTuple

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
CONTAINER_STATUS = ("name", "image", "ready", "state", "lastState")
CARD_PREFIX = "ibm.com/"  # the Spyre device plugin's resources (spec.accelerator)


def pod_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """A pod as observe and progress read it: its labels (selected by them), age, phase,
    when a node started it, its containers' (and init containers') images and states
    (waiting reasons, terminations with their messages), while the scheduler cannot place
    it, why (its PodScheduled condition), and once placed, its node and the cards it holds
    there."""
    metadata, status = body["metadata"], body.get("status") or {}
    unplaced = [
        plain(c)
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    placed = placed_cards(body.get("spec") or {})
    return {
        "metadata": {k: plain(metadata[k]) for k in POD_METADATA if k in metadata},
        **({"spec": placed} if placed else {}),
        "status": {
            "phase": status.get("phase"),
            **{
                kind: [{k: plain(c[k]) for k in CONTAINER_STATUS if k in c} for c in found]
                for kind in ("initContainerStatuses", "containerStatuses")
                if (found := status.get(kind))
            },
        }
        | ({"startTime": status["startTime"]} if status.get("startTime") else {})
        | ({"conditions": unplaced} if unplaced else {}),
    }


def placed_cards(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A pod's node and the Spyre cards its containers hold there (capacity.py counts the
    free cards of a node from them)."""
    cards: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for resource, count in ((container.get("resources") or {}).get("limits") or {}).items():
            if resource.startswith(CARD_PREFIX):
                cards[intern(resource)] = cards.get(resource, 0) + int(count)
    node = spec.get("nodeName")
    return ({"nodeName": intern(node)} if node else {}) | ({"cards": cards} if cards else {})


def node_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """A node as capacity.py reads it: its labels and taints, cordoned or not, Ready or
    not, and the Spyre cards it has for pods (allocatable)."""
    metadata, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    allocatable = status.get("allocatable") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return {
        "metadata": plain(
            {k: metadata[k] for k in ("name", "labels", "resourceVersion") if k in metadata}
        ),
        "spec": plain({k: spec[k] for k in ("unschedulable", "taints") if k in spec}),
        "status": {
            "ready": ready,
            "cards": {
                intern(k): str(v) for k, v in allocatable.items() if k.startswith(CARD_PREFIX)
            },
        },
    }


def index_entry(plural: str, body: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """A child as the reconciler reads it, keyed by (namespace, name): only what observe
    and decide look at (no managedFields; of a Job not the pod template; of a PVC that it
    exists; of a pod its labels and its containers' states), so the indexes stay small."""
    metadata = body["metadata"]
    key = (metadata.get("namespace", ""), metadata["name"])  # nodes: no namespace
    if plural == "pods":
        return {key: pod_entry(body)}
    if plural == "nodes":
        return {key: node_entry(body)}
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
