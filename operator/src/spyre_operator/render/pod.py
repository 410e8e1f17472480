"""The pod shared by the compile Job (`precompile`) and the serving Deployment (`serve`)."""

from __future__ import annotations

import copy
from typing import Any

from spyre_operator.api import runtimes as rt
from spyre_operator.api.profiles import ARCH_LABEL
from spyre_operator.api.runtimes import Platform
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.render.args import container_args
from spyre_operator.render.env import CARD_FREE, Role, backend_for, container_env
from spyre_operator.render.inject import with_injected_runtime
from spyre_operator.render.weights_job import weights_subpath

# Budgets of the serving startupProbe. Even with precompiled graphs a start loads the
# weights (about 16 GB for an 8B model, from the volume) and the graphs and runs two warmup
# passes: upstream's deployment guide allows 20 minutes. A cold compile of an 8B TP4 32K
# model takes 20-60 minutes.
STARTUP_MINUTES_PRECOMPILED = 20
STARTUP_MINUTES_COMPILING = 90
# /dev/shm per tensor-parallel rank: the ranks exchange tensors through shared memory.
SHM_GI_PER_RANK = 2
# The image's user (uid 2000 in the Spyre base images) reads the cache through this group.
FS_GROUP = 2000


# The weights Job streams files to the volume: little CPU, memory for the hub client only.
WEIGHTS_RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "4Gi"}}
# The clean-up Job walks and removes one directory; the pull Job streams one into place.
CLEAN_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
CONTAINER_NAMES: dict[Role, str] = {
    "serve": "vllm",
    "precompile": "precompile",
    "weights": "weights",
    "clean": "clean",
    "pull": "pull",
}

CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}


def startup_seconds(spec: SpyreModelSpec) -> int:
    minutes = STARTUP_MINUTES_PRECOMPILED if spec.require_precompiled else STARTUP_MINUTES_COMPILING
    return minutes * 60


def cards(spec: SpyreModelSpec, role: Role) -> int:
    """Spyre cards of a pod: spec.accelerator's count (one per rank with sendnn, 0 unless
    set with a CPU backend), whatever the backend runs on, so a CPU stand-in that holds
    cards counts as a card model does; none for the weights and clean-up Jobs and for a
    compile with sendnn_compile_only, which needs no card by design."""
    if role in CARD_FREE or backend_for(spec, role) == "sendnn_compile_only":
        return 0
    return spec.accelerator_count


def _resources(spec: SpyreModelSpec, role: Role) -> dict[str, Any]:
    if role in CARD_FREE:
        return copy.deepcopy(WEIGHTS_RESOURCES if role == "weights" else CLEAN_RESOURCES)
    base = spec.resources if role == "serve" else spec.compile_resources
    out = {kind: dict(amounts) for kind, amounts in base.to_k8s().items() if amounts}
    count = cards(spec, role)
    if count:
        for kind in ("limits", "requests"):
            out.setdefault(kind, {})[spec.accelerator.resource_name] = str(count)
    return out


def _volumes(
    spec: SpyreModelSpec, role: Role, commit: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts): cache, model, shared memory and the writable /tmp and HOME
    (the root filesystem is read-only). The weights and clean-up Jobs need only the cache
    and HOME."""
    volumes: list[dict[str, Any]] = [
        {
            "name": "graph-cache",
            "persistentVolumeClaim": {"claimName": spec.cache.volume.claim_name},
        },
        {"name": "tmp", "emptyDir": {}},
        {"name": "home", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "graph-cache", "mountPath": rt.CACHE_ROOT},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "home", "mountPath": rt.HOME_DIR},
    ]
    if role in CARD_FREE:
        return volumes, mounts
    shm = f"{SHM_GI_PER_RANK * spec.tensor_parallel_size}Gi"
    volumes.insert(1, {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}})
    mounts.insert(1, {"name": "shm", "mountPath": "/dev/shm"})
    src, model = spec.model.source, spec.model
    if src.hub is not None and model.id and commit:
        # The weights Job's download, read-only, at the path vLLM loads.
        subpath = weights_subpath(model.id, commit)
        mount = {"mountPath": model.load_path, "subPath": subpath, "readOnly": True}
        mounts.append({"name": "graph-cache", **mount})
    elif src.pvc is not None:
        claim = {"claimName": src.pvc.claim_name, "readOnly": True}
        volumes.append({"name": "model", "persistentVolumeClaim": claim})
        mount = {"name": "model", "mountPath": src.pvc.mount_path, "readOnly": True}
        mounts.append(mount | ({"subPath": src.pvc.sub_path} if src.pvc.sub_path else {}))
    elif src.host_path is not None:
        host = {"path": src.host_path.path, "type": "Directory"}
        volumes.append({"name": "model", "hostPath": host})
        mounts.append({"name": "model", "mountPath": src.host_path.mount_path, "readOnly": True})
    return volumes, mounts


def _probes(spec: SpyreModelSpec) -> dict[str, Any]:
    """A replica is Ready within about a second of its server's start: the startupProbe
    asks every second while it starts (a refused connection costs nothing), and the
    kubelets before 1.22 probe readiness only at its next period after the start-up one
    succeeded (later ones at once), hence every second too (a /health GET); 16 s of
    failures take it out of the Service, as 3 x 5 s did."""
    health = {"httpGet": {"path": "/health", "port": "http"}, "timeoutSeconds": 5}
    return {
        "startupProbe": {**health, "periodSeconds": 1, "failureThreshold": startup_seconds(spec)},
        "readinessProbe": {**health, "periodSeconds": 1, "failureThreshold": 16},
        "livenessProbe": {**health, "periodSeconds": 10, "failureThreshold": 6},
    }


DRAIN_SECONDS = "10"


def _container(
    spec: SpyreModelSpec,
    role: Role,
    mounts: list[dict[str, Any]],
    commit: str | None,
    images: rt.RuntimeImages,
    key: str | None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAMES[role],
        "image": spec.image_ref(images),
        "args": container_args(spec, role),
        "env": container_env(spec, role, commit, key),
        "resources": _resources(spec, role),
        "volumeMounts": mounts,
        # The image's WORKDIR is on the read-only root filesystem: start in the writable HOME.
        "workingDir": rt.HOME_DIR,
        "securityContext": CONTAINER_SECURITY,
        # An OOM-killed compile or download writes no summary: fall back to the log tail.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    if role == "serve":
        container["ports"] = [{"name": "http", "containerPort": rt.SERVING_PORT, "protocol": "TCP"}]
        container |= _probes(spec)
        # Leave the Service before vLLM stops: the endpoint goes at once, but kube-proxy
        # (on every node) follows within seconds; without the pause a rollout or a
        # scale-down refuses and breaks requests (seen on the real node: a 500 and a
        # connection refused in one rollout). The grace period (30 s) covers it.
        container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", DRAIN_SECONDS]}}}
    return container


def _scheduling(spec: SpyreModelSpec, role: Role) -> dict[str, Any]:
    """Node placement. The compile and weights Jobs take cache.compile's fields when set;
    card-free pods skip the serving pod's scheduler and affinity (they target Spyre
    nodes)."""
    compile_spec = spec.cache.compile
    node_selector, tolerations = spec.node_selector, spec.tolerations
    if role != "serve":
        if compile_spec.node_selector is not None:
            node_selector = compile_spec.node_selector
        if compile_spec.tolerations is not None:
            tolerations = compile_spec.tolerations
    if spec.runtime.architecture:
        # the image is built for one architecture: every pod runs on a node of it
        node_selector = {ARCH_LABEL: spec.runtime.architecture, **node_selector}
    count = cards(spec, role)
    out: dict[str, Any] = {}
    if node_selector:
        out["nodeSelector"] = dict(node_selector)
    tolerating = [t.to_k8s() for t in tolerations]
    resource = spec.accelerator.resource_name
    if count and not any(t.get("key") == resource for t in tolerating):
        # Spyre nodes are usually tainted with the device resource name.
        tolerating.append({"key": resource, "operator": "Exists", "effect": "NoSchedule"})
    if tolerating:
        out["tolerations"] = tolerating
    if count or role == "serve":
        if spec.affinity:
            out["affinity"] = spec.affinity.to_k8s()
        scheduler = spec.pod_scheduler if count else spec.scheduler_name
        if scheduler:
            out["schedulerName"] = scheduler
    return out


def _platform(spec: SpyreModelSpec, images: rt.RuntimeImages) -> dict[str, Any]:
    """The platform's pod fields, the same in every pod (the token stays unmounted)."""
    # The account is always written: the API server copies it into the deprecated
    # serviceAccount field, which would bring a name removed from the spec back.
    out: dict[str, Any] = {"serviceAccountName": spec.service_account_name or "default"}
    # the operator's runtime pull secrets first, then the model's (each name once)
    secrets = dict.fromkeys([*images.pull_secrets, *(r.name for r in spec.image_pull_secrets)])
    if secrets:
        out["imagePullSecrets"] = [{"name": name} for name in secrets]
    if spec.priority_class_name:
        out["priorityClassName"] = spec.priority_class_name
    return out


def pod_security(platform: Platform) -> dict[str, Any]:
    fs_group = {} if platform == "openshift" else {"fsGroup": FS_GROUP}
    return {
        "runAsNonRoot": True,
        **fs_group,
        # The cache volume is large and shared: do not chown it on every mount.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_spec(
    spec: SpyreModelSpec,
    role: Role,
    platform: Platform = "kubernetes",
    commit: str | None = None,
    images: rt.RuntimeImages = rt.DEFAULT_IMAGES,
    key: str | None = None,
) -> dict[str, Any]:
    """`commit`: the commit a hub model resolved to (compile and serving pods mount its
    download); `images`: the operator's runtime image settings; `key`: the cache key of
    the spec and commit, when known (computed once per reconcile)."""
    volumes, mounts = _volumes(spec, role, commit)
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        # Service links would inject e.g. VLLM_PORT for a Service named "vllm", which vLLM
        # reads as its own setting.
        "enableServiceLinks": False,
        "securityContext": pod_security(platform),
        "containers": [_container(spec, role, mounts, commit, images, key)],
        "volumes": volumes,
        **_scheduling(spec, role),
        **_platform(spec, images),
    }
    if role != "serve":
        pod["restartPolicy"] = "Never"
    if spec.image_profile.injected:
        pod = with_injected_runtime(pod, spec.image_profile, images.injector_image)
    return copy.deepcopy(pod)  # callers may edit it; never share the module's dicts
