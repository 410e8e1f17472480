"""The kopf indexes of SpyreModels and SpyreCaches (handlers.py): each body, packed, for
its reconciles to read, with the compile Job it wants; and the compile queue read from
them and from the compile Jobs' store."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from spyre_operator.api.runtimes import DEFAULT_IMAGES, RuntimeImages
from spyre_operator.kube.entries import Preset, pack, plain
from spyre_operator.kube.watches import Store
from spyre_operator.reconcile import compile_queue
from spyre_operator.reconcile.views import job_view
from spyre_operator.render import meta

MODELS = "spyremodels"  # the index of SpyreModels -> Entry (handlers.py)
CACHES = "spyrecaches"  # the same of SpyreCaches


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


def model_entry(
    body: Mapping[str, Any], images: RuntimeImages = DEFAULT_IMAGES
) -> dict[tuple[str, str], Entry]:
    """A SpyreModel as the index keeps it, for its reconciles to read (`stored`) and the
    compile queue (the resync counts the keys); `images`: the operator's serving images
    (which judge a spec without spec.image)."""
    metadata = body["metadata"]
    kept = plain({k: v for k, v in body.items() if k != "metadata"})
    kept["metadata"] = plain({k: v for k, v in metadata.items() if k != "managedFields"})
    text = json.dumps(kept, separators=(",", ":")).encode()
    written = bool((kept.get("status") or {}).get("conditions"))  # a status the operator wrote
    packed, preset, with_preset = pack(str(body.get("kind")), text, written)
    key = (metadata["namespace"], metadata["name"])
    return {key: Entry(packed, compile_queue.wanted(kept, images), preset, with_preset)}


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
