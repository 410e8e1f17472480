"""The child objects of a SpyreModel as plain dicts (no API calls). `desired` is the one
desired state: `spyre-operator render` prints it and the operator writes it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from spyre_operator.api import runtimes
from spyre_operator.api.k8s_types import TopologySpreadConstraint
from spyre_operator.api.runtimes import CacheSharing, Platform
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.api.validation import SpyreModel
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key, short_key
from spyre_operator.render.pod import pod_spec, startup_seconds
from spyre_operator.render.serving import (
    build_network_policy,
    build_pod_disruption_budget,
    build_service,
)
from spyre_operator.render.sharing import (
    build_pull_job,
    sharing_for,
    with_sharing,
)
from spyre_operator.render.weights_job import is_commit, weights_job_name

# Time for a rollout beyond the startup budget (image pull, scheduling).
ROLLOUT_MARGIN_SECONDS = 600
# Retries of a download that failed (connection trouble); the partial download resumes.
WEIGHTS_BACKOFF_LIMIT = 3


def _pod_metadata(
    spec: SpyreModelSpec, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod template's metadata: spec.podLabels/podAnnotations, and the operator's own
    over them (validation refuses a clash; the selectors must hold regardless)."""
    out: dict[str, Any] = {"labels": spec.pod_labels | labels}
    merged = spec.pod_annotations | (annotations or {})
    if merged:
        out["annotations"] = merged
    return out


def _spread(constraint: TopologySpreadConstraint, name: str) -> dict[str, Any]:
    """A topology spread of the serving pods; without a labelSelector it counts this
    SpyreModel's serving pods (one without would count none)."""
    return {"labelSelector": {"matchLabels": meta.server_selector(name)}} | constraint.to_k8s()


def build_cache_pvc(spec: SpyreModelSpec, namespace: str) -> dict[str, Any]:
    """The shared graph cache claim. Not owned by any SpyreModel: it outlives them."""
    volume = spec.cache.volume
    pvc_spec: dict[str, Any] = {
        "accessModes": [volume.access_mode],
        "resources": {"requests": {"storage": volume.size}},
    }
    if volume.storage_class_name:
        pvc_spec["storageClassName"] = volume.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta.object_metadata(
            volume.claim_name, namespace, meta.labels(meta.GRAPH_CACHE, volume.claim_name)
        ),
        "spec": pvc_spec,
    }


def resolved_commit(spec: SpyreModelSpec, commit: str | None) -> str | None:
    """The commit a hub model's pods load: the weights Job's answer, or the revision when
    it already is a full commit; None for the other sources."""
    if not spec.model.from_hub:
        return None
    found = commit or (spec.model.revision if is_commit(spec.model.revision) else None)
    if found is None:
        raise ValueError(
            f"the hub revision {spec.model.hub_revision!r} of {spec.model.id} is not resolved "
            "to a commit yet (the weights Job does that)"
        )
    return found


def build_weights_job(
    spec: SpyreModelSpec,
    namespace: str,
    platform: Platform = "kubernetes",
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
) -> dict[str, Any]:
    """The Job that downloads a hub model into the cache volume, shared by every
    SpyreModel of that model id and revision."""
    name = weights_job_name(spec)
    labels = meta.labels(meta.WEIGHTS, name)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta.object_metadata(name, namespace, labels),
        "spec": {
            # Hub hiccups are retried; a refusal (not found, gated) fails at once, its
            # summary says why and the status shows it while the retries run.
            "backoffLimit": WEIGHTS_BACKOFF_LIMIT,
            "activeDeadlineSeconds": spec.cache.compile.active_deadline_seconds,
            "template": {
                "metadata": _pod_metadata(spec, labels),
                "spec": pod_spec(spec, "weights", platform, images=images),
            },
        },
    }


def build_compile_job(
    spec: SpyreModelSpec,
    namespace: str,
    platform: Platform = "kubernetes",
    commit: str | None = None,
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
    key: str | None = None,
) -> dict[str, Any]:
    """The compile Job of the spec's cache key, shared by every SpyreModel with that key.
    `commit`: what a hub model's revision resolved to; `key`: their cache key, if known."""
    commit = resolved_commit(spec, commit)
    key = key or cache_key(spec, commit)
    name = meta.compile_job_name(key)
    labels = meta.labels(meta.COMPILE, name) | {meta.CACHE_KEY_LABEL: short_key(key)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta.object_metadata(name, namespace, labels, key),
        "spec": {
            "backoffLimit": spec.cache.compile.backoff_limit,
            "template": {
                "metadata": _pod_metadata(spec, labels, {meta.CACHE_KEY_ANNOTATION: key}),
                # The pod's deadline, not the Job's: it counts from the pod's start on a
                # node, so a compile that waits for cards is not failed by the wait.
                "spec": pod_spec(spec, "precompile", platform, commit, images, key)
                | {"activeDeadlineSeconds": spec.cache.compile.active_deadline_seconds},
            },
        },
    }


def build_cleanup_job(
    model: SpyreModel,
    uid: str,
    platform: Platform = "kubernetes",
    commit: str | None = None,
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
) -> dict[str, Any]:
    """The Job that removes the key's directory from the cache volume, owned by the key's
    inventory entry (a SpyreCache): `spyre-runtime clean`, one attempt."""
    spec = model.spec
    commit = resolved_commit(spec, commit)
    key = cache_key(spec, commit)
    name = meta.cleanup_job_name(key)
    labels = meta.labels(meta.CLEANUP, name) | {meta.CACHE_KEY_LABEL: short_key(key)}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta.object_metadata(name, model.namespace, labels, key),
        "spec": {
            "backoffLimit": 0,  # a refusal is final; a rerun finds the key gone or half gone
            "activeDeadlineSeconds": spec.cache.compile.active_deadline_seconds,
            "template": {
                "metadata": _pod_metadata(spec, labels, {meta.CACHE_KEY_ANNOTATION: key}),
                "spec": pod_spec(spec, "clean", platform, commit, images),
            },
        },
    }
    return _finish(job, model, uid, controller=True, hashed=False)


def build_deployment(
    model: SpyreModel,
    platform: Platform = "kubernetes",
    commit: str | None = None,
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
    key: str | None = None,
) -> dict[str, Any]:
    """`key`: the cache key of the spec and commit, if known."""
    spec = model.spec
    commit = resolved_commit(spec, commit)
    key = key or cache_key(spec, commit)
    labels = (
        meta.labels(meta.SERVER, model.name)
        | meta.server_selector(model.name)
        | {meta.CACHE_KEY_LABEL: short_key(key)}
    )
    pod = pod_spec(spec, "serve", platform, commit, images, key)
    if spec.topology_spread_constraints:
        spreads = spec.topology_spread_constraints
        pod["topologySpreadConstraints"] = [_spread(c, model.name) for c in spreads]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta.object_metadata(model.name, model.namespace, labels, key),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": meta.server_selector(model.name)},
            # card models: one replica at a time, no surge pod (api/spec.py CARD_ROLLOUT)
            "strategy": {"type": "RollingUpdate", "rollingUpdate": spec.rolling_update},
            "progressDeadlineSeconds": startup_seconds(spec) + ROLLOUT_MARGIN_SECONDS,
            "template": {
                "metadata": _pod_metadata(spec, labels, {meta.CACHE_KEY_ANNOTATION: key}),
                "spec": pod,
            },
        },
    }


def manifest_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _finish(
    obj: dict[str, Any], model: SpyreModel, uid: str | None, *, controller: bool, hashed: bool
) -> dict[str, Any]:
    """Owner reference (with a uid) and, on an applied object, the hash of the result: a
    changed hash means the manifest changed, removed fields included."""
    if uid is not None:
        ref = meta.owner_reference(model.name, uid, controller=controller, kind=model.kind)
        obj["metadata"]["ownerReferences"] = [ref]
    if hashed:
        digest = manifest_hash(obj)
        obj["metadata"].setdefault("annotations", {})[meta.APPLIED_ANNOTATION] = digest
    return obj


@dataclass(frozen=True)
class Desired:
    """Every object the operator writes for one SpyreModel, exactly as it writes it (for a
    SpyreCache: the volume and the Jobs, no serving objects). The compile Job and the
    Deployment of a hub model depend on the commit its revision resolves to: None until
    the weights Job has said it."""

    pvc: dict[str, Any] | None  # created when missing (cache.volume.create); never owned
    weights: dict[str, Any] | None  # hub models; created when missing, shared like the Job
    job: dict[str, Any] | None  # created when missing; shared by every SpyreModel of its key
    network_policy: dict[str, Any] | None  # server-side applied, before the Deployment
    deployment: dict[str, Any] | None  # server-side applied
    service: dict[str, Any] | None  # server-side applied
    disruption_budget: dict[str, Any] | None = None  # server-side applied; 2+ replicas
    # With a cache registry: created before the compile Job, shared like it
    pull: dict[str, Any] | None = None

    def objects(self) -> list[dict[str, Any]]:
        """In creation order."""
        found = (
            self.pvc,
            self.weights,
            self.pull,
            self.job,
            self.network_policy,
            self.deployment,
            self.service,
            self.disruption_budget,
        )
        return [obj for obj in found if obj is not None]


def desired(
    model: SpyreModel,
    uid: str | None = None,
    platform: Platform = "kubernetes",
    commit: str | None = None,
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
    sharing: CacheSharing | None = None,
    key: str | None = None,
) -> Desired:
    """With the SpyreModel's uid, the owned objects get their ownerReferences (the shared
    Jobs as non-controllers), as the operator writes them. `commit`: the commit a hub
    model's revision resolved to (a revision that is a full commit needs none); `images`:
    the operator's runtime image settings (--runtime-image-repository, -pull-secret);
    `sharing`: its cache registry (--cache-registry, -secret): the compile Job publishes
    there, and a pull Job fetches the key from there first; `key`: the cache key of the
    spec and commit, when the caller has it (the reconcile's, computed once)."""
    spec = model.spec
    sharing = sharing_for(spec, sharing)
    weights = job = deployment = pull = None
    if spec.model.from_hub:
        weights = _finish(
            build_weights_job(spec, model.namespace, platform, images),
            model,
            uid,
            controller=False,
            hashed=False,
        )
        commit = commit or (spec.model.revision if is_commit(spec.model.revision) else None)
    if commit is not None or not spec.model.from_hub:
        key = key or cache_key(spec, resolved_commit(spec, commit))
        job = _finish(
            build_compile_job(spec, model.namespace, platform, commit, images, key),
            model,
            uid,
            controller=False,
            hashed=False,
        )
        if sharing is not None:
            template = job["spec"]["template"]
            template["spec"] = with_sharing(template["spec"], sharing)
            pull_job = build_pull_job(spec, model.namespace, sharing, platform, commit, images, key)
            pull = _finish(pull_job, model, uid, controller=False, hashed=False)
        if model.serves:
            deployment = _finish(
                build_deployment(model, platform, commit, images, key),
                model,
                uid,
                controller=True,
                hashed=True,
            )
    network_policy = service = budget = None
    if model.serves:
        network_policy = _finish(
            build_network_policy(model), model, uid, controller=True, hashed=True
        )
        service = _finish(build_service(model), model, uid, controller=True, hashed=True)
        built = build_pod_disruption_budget(model)
        if built is not None:
            budget = _finish(built, model, uid, controller=True, hashed=True)
    return Desired(
        pvc=build_cache_pvc(spec, model.namespace) if spec.cache.volume.create else None,
        weights=weights,
        job=job,
        network_policy=network_policy,
        deployment=deployment,
        service=service,
        disruption_budget=budget,
        pull=pull,
    )
