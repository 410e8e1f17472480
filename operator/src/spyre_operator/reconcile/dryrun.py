"""Before a spec's children are written: would the API server take every one of them?

`validate` checks what Kubernetes checks offline; the cluster adds its own rules (resource
quotas, limit ranges, policy webhooks, fields the operator passes through). Each child the
spec leads to, the serving Deployment included, is sent with dryRun=All (validated and
admitted, never stored) before the first write, so a spec the cluster refuses is Invalid at
once instead of after hours of download and compile.
"""

from __future__ import annotations

import threading

from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile import options
from spyre_operator.reconcile.kube import ApiError, Kube, one_line
from spyre_operator.render.children import desired, manifest_hash

# A hub model's commit is known once its weights are downloaded; the pods' manifests have
# the same shape with any commit, so one stands in for the dry run of what comes after.
STAND_IN_COMMIT = "0" * 40
MESSAGE_LIMIT = 1000


class DryRuns:
    """Dry-runs a SpyreModel's children once per distinct set of manifests (a spec change
    or a resolved commit makes a new set); what was admitted is remembered, a refusal is
    not, so a raised quota is seen at the next reconcile. Thread-safe."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._admitted: dict[tuple[str, str], str] = {}
        self._guard = threading.Lock()

    def refusal(self, model: SpyreModel, uid: str, commit: str | None) -> str | None:
        """Why the API server would refuse one of the children, in its words; None when it
        takes them all. A timeout or a 5xx raises (the reconcile is tried again)."""
        if model.spec.model.from_hub and commit is None:
            commit = STAND_IN_COMMIT
        objects = desired(model, uid, options.platform(), commit).objects()
        digest = manifest_hash({"objects": objects})
        key = (model.namespace, model.name)
        with self._guard:
            if self._admitted.get(key) == digest:
                return None
        for obj in objects:
            verb = "create" if obj["kind"] in ("PersistentVolumeClaim", "Job") else "apply"
            try:
                self.kube.dry_run(verb, obj)
            except ApiError as err:
                if err.conflict:
                    continue  # exists already (a shared Job, the volume): nothing to create
                if not err.refused:
                    raise
                return refusal_message(obj, err)
        with self._guard:
            self._admitted[key] = digest
        return None

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._admitted.pop((namespace, name), None)


def refusal_message(obj: dict[str, object], err: ApiError) -> str:
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    said = one_line(err.body.get("message") or f"{err.status} {err.reason}")
    if len(said) > MESSAGE_LIMIT:
        said = said[:MESSAGE_LIMIT] + "..."
    return (
        f"the API server refuses {obj['kind']} {meta['name']} (a dry run; nothing was "
        f"created): {said}. Change the spec or the cluster's policy; the operator tries "
        "again at the next change and at each resync"
    )
