"""spyre-runtime brought to a serving image that lacks it (an upstream image profile).

As the OpenTelemetry Operator injects Python instrumentation: an init container from the
operator's own (multi-architecture) image copies the pure-Python package into an emptyDir
(`python3 -m spyre_runtime.inject DIR`), and the pod's container runs it with the image's
own interpreter (`python3 -m spyre_runtime <role> ...`, PYTHONPATH on the emptyDir). The
image, its entrypoint's work aside, runs unmodified; spyre_runtime/imagesetup.py does what
our image's entrypoint does (the senlib config, the Spyre device setup script).
"""

from __future__ import annotations

import copy
from typing import Any

from spyre_operator.api import runtimes as rt
from spyre_operator.api.profiles import ImageProfile
from spyre_runtime import contract

VOLUME = "spyre-runtime"
INIT_CONTAINER = "spyre-runtime"
# A copy of a few hundred kilobytes.
INIT_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
INIT_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}


def init_container(injector: str) -> dict[str, Any]:
    """Copies spyre-runtime out of the operator's image (its own Python runs the copy)."""
    return {
        "name": INIT_CONTAINER,
        "image": injector,
        "command": ["python3", "-m", "spyre_runtime.inject", rt.RUNTIME_DIR],
        "volumeMounts": [{"name": VOLUME, "mountPath": rt.RUNTIME_DIR}],
        "resources": copy.deepcopy(INIT_RESOURCES),
        "securityContext": copy.deepcopy(INIT_SECURITY),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def with_injected_runtime(
    pod: dict[str, Any], profile: ImageProfile, injector: str
) -> dict[str, Any]:
    """The pod with spyre-runtime injected into its one container (a copy)."""
    out = copy.deepcopy(pod)
    (container,) = out["containers"]
    # the image's ENTRYPOINT is replaced, its args (role, vLLM's) stay as rendered
    container["command"] = [profile.python, "-m", "spyre_runtime"]
    container["env"] = [
        {"name": rt.PYTHONPATH, "value": rt.RUNTIME_DIR},
        {"name": contract.SPYRE_SERVING_IMAGE_HOME, "value": profile.image_home},
        *container["env"],
    ]
    mount = {"name": VOLUME, "mountPath": rt.RUNTIME_DIR, "readOnly": True}
    container["volumeMounts"] = [*container["volumeMounts"], mount]
    out["volumes"] = [*out["volumes"], {"name": VOLUME, "emptyDir": {}}]
    init = init_container(injector)
    if "imagePullPolicy" in container:  # spec.imagePullPolicy: every container's
        init["imagePullPolicy"] = container["imagePullPolicy"]
    out["initContainers"] = [init, *out.get("initContainers", [])]
    return out
