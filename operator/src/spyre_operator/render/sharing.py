"""Compiled caches shared through an OCI registry (docs/cache-sharing.md), in the Jobs:
the registry's env and Secret in the compile Job (it publishes the key after READY) and
the pull Job (`spyre-runtime pull`: the key fetched from the registry instead of compiled,
no card, one attempt: a miss is final and the compile follows)."""

from __future__ import annotations

import copy
from typing import Any

from spyre_operator.api import runtimes
from spyre_operator.api.runtimes import CacheSharing, Platform
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key, short_key
from spyre_operator.render.pod import pod_spec
from spyre_runtime import contract

MOUNT = "/etc/spyre-registry"
VOLUME = "cache-registry"
AUTH_FILE = ".dockerconfigjson"  # the key of a kubernetes.io/dockerconfigjson Secret
CA_FILE = "ca.crt"
PULL_DEADLINE_SECONDS = 3600  # a few GB over a slow link; a stuck pull then compiles


def sharing_for(spec: SpyreModelSpec, default: CacheSharing | None) -> CacheSharing | None:
    """The model's registry: spec.cache.registry over the operator's (`default`)."""
    chosen = spec.cache.registry
    if chosen is None:
        return default
    repository = chosen.repository or (default.repository if default else None)
    if not chosen.enabled or repository is None:
        return None
    return CacheSharing(repository, chosen.secret_name or (default.secret if default else None))


def with_sharing(pod: dict[str, Any], sharing: CacheSharing) -> dict[str, Any]:
    """The pod with the registry's env and, with a Secret, the Secret mounted (optional
    keys: a registry without auth, or with a public certificate, needs neither file)."""
    out = copy.deepcopy(pod)
    (container,) = out["containers"]
    env = [{"name": contract.SPYRE_SERVING_CACHE_REGISTRY, "value": sharing.repository}]
    if sharing.secret is not None:
        files = {
            contract.SPYRE_SERVING_CACHE_REGISTRY_AUTH: AUTH_FILE,
            contract.SPYRE_SERVING_CACHE_REGISTRY_CA: CA_FILE,
        }
        env += [{"name": name, "value": f"{MOUNT}/{file}"} for name, file in files.items()]
        # optional: a namespace without the Secret must not hold its pods in
        # ContainerCreating (the pull until its deadline, the compile for ever); the pull is
        # then refused (401) at once and says so, and the key compiles.
        secret = {"secretName": sharing.secret, "optional": True, "defaultMode": 0o444}
        out["volumes"].append({"name": VOLUME, "secret": secret})
        container["volumeMounts"].append({"name": VOLUME, "mountPath": MOUNT, "readOnly": True})
    container["env"] = container["env"] + env
    return out


def build_pull_job(
    spec: SpyreModelSpec,
    namespace: str,
    sharing: CacheSharing,
    platform: Platform = "kubernetes",
    commit: str | None = None,
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
    key: str | None = None,
) -> dict[str, Any]:
    """The pull Job of the spec's cache key (`key`, if known), shared like the compile
    Job."""
    key = key or cache_key(spec, commit)
    name = meta.pull_job_name(key)
    labels = meta.labels(meta.PULL, name) | {meta.CACHE_KEY_LABEL: short_key(key)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {meta.CACHE_KEY_ANNOTATION: key},
        },
        "spec": {
            "backoffLimit": 0,  # a miss or a refusal is final: the key compiles
            "activeDeadlineSeconds": PULL_DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": labels, "annotations": {meta.CACHE_KEY_ANNOTATION: key}},
                "spec": with_sharing(
                    pod_spec(spec, "pull", platform, commit, images, key), sharing
                ),
            },
        },
    }
