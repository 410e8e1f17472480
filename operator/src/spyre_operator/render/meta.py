"""Names, labels and owner references of the child objects."""

from __future__ import annotations

import hashlib
from typing import Any

from spyre_operator.api.names import API_VERSION, GROUP, KIND
from spyre_operator.render.cachekey import short_key

MODEL_LABEL = f"{GROUP}/model"
CACHE_KEY_LABEL = f"{GROUP}/cache-key"  # the short key (label values are at most 63 chars)
CACHE_KEY_ANNOTATION = f"{GROUP}/cache-key"  # the full key
APPLIED_ANNOTATION = f"{GROUP}/applied"  # hash of the applied manifest (children.py)
# A SpyreCache the operator made as the inventory entry of a key (not a user's request).
INVENTORY_LABEL = f"{GROUP}/inventory"
# On a compile Job: its key's clean-up started (when); no SpyreModel joins it from then on.
CLEANUP_ANNOTATION = f"{GROUP}/cleanup"

SERVER = "server"
COMPILE = "compile"
WEIGHTS = "weights"
CLEANUP = "cleanup"
PULL = "pull"
GRAPH_CACHE = "graph-cache"
COMPONENT_LABEL = "app.kubernetes.io/component"
JOB_NAME_LABEL = "job-name"  # what the Job controller labels its pods with


LABEL_VALUE_LIMIT = 63


def label_value(name: str) -> str:
    """A name as a label value: as it is up to 63 characters; a longer one (a claim name
    may have 253) cut, with a hash of the whole so that different names stay different."""
    if len(name) <= LABEL_VALUE_LIMIT:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: LABEL_VALUE_LIMIT - 9]}-{digest}"


def labels(component: str, instance: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "spyre-model",
        "app.kubernetes.io/instance": label_value(instance),
        COMPONENT_LABEL: component,
        "app.kubernetes.io/part-of": "spyre-serving",
        "app.kubernetes.io/managed-by": "spyre-operator",
    }


def server_selector(name: str) -> dict[str, str]:
    """Selects the serving pods of one SpyreModel (stable across cache keys)."""
    return {MODEL_LABEL: name, COMPONENT_LABEL: SERVER}


def server_labels(name: str) -> dict[str, str]:
    """The labels of one SpyreModel's serving objects (Service, NetworkPolicy)."""
    return labels(SERVER, name) | {MODEL_LABEL: name}


PICKER = "endpoint-picker"  # spec.routing's endpoint picker (render/router.py)


def picker_name(model: str) -> str:
    """The picker's Deployment, Service, ServiceAccount and RoleBinding (a DNS label)."""
    return label_value(f"{model}-epp")


def picker_selector(model: str) -> dict[str, str]:
    """Selects the endpoint picker's pods of one SpyreModel."""
    return {"app.kubernetes.io/instance": label_value(model), COMPONENT_LABEL: PICKER}


def component(obj: Any) -> str | None:
    """Which child an object is (SERVER, COMPILE, WEIGHTS, ...), from its labels."""
    found: str | None = (obj.get("metadata", {}).get("labels") or {}).get(COMPONENT_LABEL)
    return found


def selector_string(name: str) -> str:
    """status.selector for the scale subresource."""
    return ",".join(f"{k}={v}" for k, v in server_selector(name).items())


def compile_job_name(key: str) -> str:
    """Deterministic, so retries and a second operator never make two Jobs for one key."""
    return f"spyre-compile-{short_key(key)}"


def cleanup_job_name(key: str) -> str:
    return f"spyre-cleanup-{short_key(key)}"


def pull_job_name(key: str) -> str:
    return f"spyre-pull-{short_key(key)}"


def inventory_name(key: str) -> str:
    """The key's inventory entry (a SpyreCache)."""
    return f"spyre-cache-{short_key(key)}"


def is_inventory(obj: Any) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return bool(labels.get(INVENTORY_LABEL) == "true")


def owner_reference(
    name: str, uid: str, *, controller: bool = True, kind: str = KIND
) -> dict[str, Any]:
    """An ownerReference to a SpyreModel or a SpyreCache (the compile Job is shared:
    controller=False)."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def object_metadata(
    name: str, namespace: str, labels: dict[str, str], key: str | None = None
) -> dict[str, Any]:
    """A child's metadata; `key`: the cache key it is made for (an annotation)."""
    out: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if key is not None:
        out["annotations"] = {CACHE_KEY_ANNOTATION: key}
    return out
