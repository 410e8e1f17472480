"""The objects of spec.routing (pure): the InferencePool of the serving pods, its endpoint
picker (the Gateway API Inference Extension's EPP: a Deployment, its Service, a
ServiceAccount and a RoleBinding to the chart's picker ClusterRole), and an HTTPRoute from
the user's Gateway to the pool.

The pool and the route are owned by the SpyreModel; the picker's objects by the pool, so
that deleting the pool (spec.routing removed) takes them along without the operator
deleting Deployments or Services itself (its role has no such delete)."""

from __future__ import annotations

from typing import Any

import yaml

from spyre_operator.api import runtimes
from spyre_operator.api.spec import SPYRE_BLOCK
from spyre_operator.api.validation import SpyreModel
from spyre_operator.render import meta
from spyre_operator.render.children import manifest_hash

POOL_GROUP = "inference.networking.k8s.io"
POOL_API_VERSION = f"{POOL_GROUP}/v1"
POOL = "InferencePool"
GATEWAY_GROUP = "gateway.networking.k8s.io"
ROUTE = "HTTPRoute"
ROUTER = "router"  # the pool's and the route's component label
EXT_PROC_PORT = 9002  # the picker's ext_proc (gRPC) port the gateway calls
HEALTH_PORT = 9003
METRICS_PORT = 9090
# The picker's scorers and their weights (upstream's default profile). Its prefix scorer
# hashes prompts in blocks to guess which pod holds a prefix in its KV cache: Spyre's
# block, fixed by vLLM-Spyre at 64 tokens (SPYRE_BLOCK), not auto-tuned from vLLM's
# metrics.
PICKER_CONFIG: dict[str, Any] = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {
            "type": "prefix-cache-scorer",
            "parameters": {"autoTune": False, "blockSizeTokens": SPYRE_BLOCK},
        },
    ],
    "schedulingProfiles": [
        {
            "name": "default",
            "plugins": [
                {"pluginRef": "queue-scorer", "weight": 2},
                {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                {"pluginRef": "prefix-cache-scorer", "weight": 3},
            ],
        }
    ],
}


def inference_pool(model: SpyreModel, uid: str | None) -> dict[str, Any]:
    """The pool of the model's serving pods (their vLLM port), with its picker."""
    routing = model.spec.routing
    assert routing is not None
    obj: dict[str, Any] = {
        "apiVersion": POOL_API_VERSION,
        "kind": POOL,
        "metadata": _metadata(model, model.name, ROUTER),
        "spec": {
            "selector": {"matchLabels": meta.server_selector(model.name)},
            "targetPorts": [{"number": runtimes.SERVING_PORT}],
            "endpointPickerRef": {
                "name": meta.picker_name(model.name),
                "port": {"number": EXT_PROC_PORT},
                "failureMode": routing.failure_mode,
            },
        },
    }
    return _finish(obj, [meta.owner_reference(model.name, uid)] if uid else [])


def http_route(model: SpyreModel, uid: str | None) -> dict[str, Any] | None:
    """The route from spec.routing.gateway to the pool (None: no gateway named)."""
    routing = model.spec.routing
    gateway = routing.gateway if routing else None
    if gateway is None:
        return None
    parent: dict[str, Any] = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": gateway.name}
    if gateway.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.section_name:
        parent["sectionName"] = gateway.section_name
    spec: dict[str, Any] = {
        "parentRefs": [parent],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [{"group": POOL_GROUP, "kind": POOL, "name": model.name}],
            }
        ],
    }
    if gateway.hostnames:
        spec["hostnames"] = list(gateway.hostnames)
    obj: dict[str, Any] = {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": ROUTE,
        "metadata": _metadata(model, model.name, ROUTER),
        "spec": spec,
    }
    return _finish(obj, [meta.owner_reference(model.name, uid)] if uid else [])


def picker_objects(
    model: SpyreModel, pool_uid: str | None, image: str, cluster_role: str
) -> list[dict[str, Any]]:
    """The picker's ServiceAccount, RoleBinding, Service and Deployment, owned by the pool
    (given its uid). One hash of the four on each: the step applies them together when
    the Deployment's differs."""
    name, ns = meta.picker_name(model.name), model.namespace
    account: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(model, name),
    }
    binding: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(model, name),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }
    ports = [("grpc", EXT_PROC_PORT), ("grpc-health", HEALTH_PORT), ("metrics", METRICS_PORT)]
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(model, name),
        "spec": {
            "selector": meta.picker_selector(model.name),
            "ports": [
                {"name": n, "port": p, "targetPort": p, "protocol": "TCP"}
                | ({"appProtocol": "http2"} if p == EXT_PROC_PORT else {})
                for n, p in ports
            ],
        },
    }
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(model, name),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": meta.picker_selector(model.name)},
            "template": {
                "metadata": {"labels": meta.labels(meta.PICKER, model.name)},
                "spec": {
                    "serviceAccountName": name,
                    "containers": [_picker_container(model, image, ports)],
                },
            },
        },
    }
    objs = [account, binding, service, deployment]
    owners = [_pool_owner(model.name, pool_uid)] if pool_uid else []
    for obj in objs:
        if owners:
            obj["metadata"]["ownerReferences"] = owners
    applied = manifest_hash({"objects": objs})
    for obj in objs:
        obj["metadata"]["annotations"] = {meta.APPLIED_ANNOTATION: applied}
    return objs


def _picker_container(
    model: SpyreModel, image: str, ports: list[tuple[str, int]]
) -> dict[str, Any]:
    probe = {"grpc": {"port": HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": 10}
    field = {"fieldRef": {"fieldPath": "metadata.name"}}
    return {
        "name": "epp",
        "image": image,
        "args": [
            *("--pool-name", model.name, "--pool-namespace", model.namespace),
            *("--pool-group", POOL_GROUP),
            *("--config-text", yaml.safe_dump(PICKER_CONFIG, sort_keys=False)),
            # /metrics without a TokenReview (the operator grants no cluster-wide RBAC)
            "--metrics-endpoint-auth=false",
            "--tracing=false",
        ],
        "env": [
            {"name": "NAMESPACE", "value": model.namespace},
            {"name": "POD_NAME", "valueFrom": field},
        ],
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports],
        "readinessProbe": probe,
        "livenessProbe": probe | {"initialDelaySeconds": 5},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def _metadata(model: SpyreModel, name: str, component: str = meta.PICKER) -> dict[str, Any]:
    return meta.object_metadata(name, model.namespace, meta.labels(component, model.name))


def _pool_owner(name: str, uid: str) -> dict[str, Any]:
    """Not blocking the pool's deletion: no update of inferencepools/finalizers needed
    (OpenShift's OwnerReferencesPermissionEnforcement asks for it otherwise)."""
    return {
        "apiVersion": POOL_API_VERSION,
        "kind": POOL,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


def _finish(obj: dict[str, Any], owners: list[dict[str, Any]]) -> dict[str, Any]:
    if owners:
        obj["metadata"]["ownerReferences"] = owners
    obj["metadata"]["annotations"] = {meta.APPLIED_ANNOTATION: manifest_hash(obj)}
    return obj
