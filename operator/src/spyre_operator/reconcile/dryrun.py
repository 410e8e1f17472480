"""Before a spec's children are written: would the API server take every one of them?

`validate` checks what Kubernetes checks offline; the cluster adds its own rules (resource
quotas, limit ranges, policy webhooks, fields the operator passes through). Before a
reconcile starts a Job (a download or a compile), each child the spec leads to that this
reconcile does not write itself, the serving Deployment included, is sent with dryRun=All
(validated and admitted, never stored), so a spec the cluster refuses is Invalid at once
instead of after hours of download and compile. What the reconcile writes is checked by
the write itself (a refusal: Degraded ApplyFailed, before the Job); a child that exists
(the cache volume another SpyreModel made, a shared Job) is not sent: it was admitted,
and a create's dry run of it would only answer 409.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spyre_operator.api.validation import SpyreModel
from spyre_operator.kube.client import ApiError, Kube, one_line
from spyre_operator.render.children import desired, manifest_hash
from spyre_operator.settings import Settings

# A hub model's commit is known once its weights are downloaded; the manifests have the
# same shape with any commit and key, so one of each stands in, before and after the
# download (the compile config the key hashes is in the manifests as it is).
STAND_IN_COMMIT = "0" * 40
STAND_IN_KEY = "0" * 64
MESSAGE_LIMIT = 1000
PARALLEL = 4  # dry runs of one reconcile at once (3 for a new SpyreModel, 4 at most)


class DryRuns:
    """Dry-runs a SpyreModel's children once per spec (a spec change makes a new set of
    manifests; a hub model's resolved commit does not: a stand-in renders the same shape);
    what was admitted is remembered, a refusal is not, so a raised quota is seen at the
    next reconcile. Thread-safe."""

    def __init__(self, kube: Kube, settings: Settings) -> None:
        self.kube, self.settings = kube, settings
        self._admitted: dict[tuple[str, str], str] = {}
        self._guard = threading.Lock()

    def refusal(
        self, model: SpyreModel, uid: str, key: str | None, written: Collection[tuple[str, str]]
    ) -> str | None:
        """Why the API server would refuse one of the children, in its words; None when it
        takes them all. `key`: the spec's cache key, as the reconcile computed it (a hub
        model's stands in); `written`: (kind, name) of what this reconcile writes itself,
        which that write checks, and of what exists. The rest go at once, in parallel (one
        round trip of latency).
        A timeout or a 5xx raises (the reconcile is tried again)."""
        commit = None
        if model.spec.model.from_hub:
            commit, key = STAND_IN_COMMIT, STAND_IN_KEY
        objects = desired(
            model, uid, self.settings.platform, commit, self.settings.runtime_images, key=key
        ).objects()
        digest = manifest_hash({"objects": objects})
        ref = (model.namespace, model.name)
        with self._guard:
            if self._admitted.get(ref) == digest:
                return None
        later = [o for o in objects if (o["kind"], o["metadata"]["name"]) not in written]
        with ThreadPoolExecutor(max_workers=max(min(len(later), PARALLEL), 1)) as pool:
            answers = list(pool.map(self._try, later))
        for obj, err in zip(later, answers, strict=True):
            if err is None or err.conflict:  # taken, or exists already (a shared Job)
                continue
            if not err.refused:
                raise err
            return refusal_message(obj, err)
        with self._guard:
            self._admitted[ref] = digest
        return None

    def _try(self, obj: dict[str, Any]) -> ApiError | None:
        """A create (POST): what the later write would create, as a server-side apply does
        for an object that does not exist yet; an object that exists answers 409 (it was
        admitted). A POST costs the API server less than an apply (no field ownership)."""
        try:
            self.kube.dry_run(obj)
        except ApiError as err:
            return err
        return None

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._admitted.pop((namespace, name), None)


def refusal_message(obj: dict[str, Any], err: ApiError) -> str:
    meta = obj["metadata"]
    said = one_line(err.body.get("message") or f"{err.status} {err.reason}")
    if len(said) > MESSAGE_LIMIT:
        said = said[:MESSAGE_LIMIT] + "..."
    return (
        f"the API server refuses {obj['kind']} {meta['name']} (a dry run; nothing was "
        f"created): {said}. Change the spec or the cluster's policy; the operator tries "
        "again at the next change and at each resync"
    )
