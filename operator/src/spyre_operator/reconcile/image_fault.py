"""Which container states say that a pod's image cannot run here, and what to do (pure).

A pull the kubelet gave up on or a reference it cannot parse, an image of another CPU
(`exec format error`: no emulator runs it; or an index without the node's platform), an
image without the Python the pod runs, an image whose USER is root (or a name the kubelet
cannot check) while the pods run as non-root, or the injected runtime's own check of the image
(spyre_runtime/imagecheck.py: no vLLM, a Python too old, the other flavour's plugin,
another plugin version: summary reason ImageUnusable) all end in one reason,
ImageUnusable, whose message names the image and the setting to change: spec.image, or
for the injected runtime's init container the operator's injector image.
docs/operator.md ("An image that cannot run") lists them.
"""

from __future__ import annotations

import re

from spyre_operator.render.inject import INIT_CONTAINER
from spyre_runtime.contract import IMAGE_UNUSABLE

PULL = ("ErrImagePull", "ImagePullBackOff")
FOREIGN = "exec format error"
NO_PLATFORM = "no match for platform"  # containerd: an index without the node's
ROOT = "runAsNonRoot"  # the kubelet: the image's USER is root, or a name it cannot check
# runc's words for a command the image does not have
NO_PROGRAM = re.compile(r'exec: "[^"]*": (executable file not found|stat [^:]*: no such file)')
INJECTOR = (
    "the operator's runtimeImage.injector (chart value; --runtime-injector-image), the "
    "image that brings spyre-runtime to the pods"
)


def cannot_run(message: str) -> bool:
    """Did a container end because its image has no program this node can start?"""
    return FOREIGN in message or NO_PROGRAM.search(message) is not None


def _last_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def fault(container: str, image: str, reason: str, message: str) -> str | None:
    """What is wrong with the image of `container` and what to set; None: nothing the
    image is to blame for (`reason`/`message`: a waiting state's, a termination's or its
    summary's)."""
    field = INJECTOR if container == INIT_CONTAINER else "spec.image"
    named = f"image {image}" if image else "the image"
    said = f"{reason}: {message}" if message else reason
    if reason == IMAGE_UNUSABLE:  # the runtime's words: what the image lacks, what to set
        return f"{named}: {message}"
    if FOREIGN in message or NO_PLATFORM in message:
        return (
            f"{named} is not built for the node's CPU ({_last_line(message)}): name one "
            f"built for the node's architecture (or a multi-architecture index) in {field}, "
            "or set spec.runtime.architecture to the image's (the pods then run on nodes "
            "of that architecture)"
        )
    if reason in PULL:
        return (
            f"{named} cannot be pulled ({said}): check that {field} names an image its "
            "registry has (registry, path, tag) and that spec.imagePullSecrets lets the "
            "nodes pull it"
        )
    if reason == "InvalidImageName":
        return f"{named} is not a valid image reference ({said}): correct {field}"
    if reason == "CreateContainerConfigError" and ROOT in message:
        return (
            f"{named} does not run as a non-root uid ({message}), and the pods run as "
            f"non-root: name an image whose USER is a numeric uid other than 0 in {field}"
        )
    if NO_PROGRAM.search(message):
        return (
            f"{named} has no program to start ({_last_line(message)}): name a vLLM-Spyre "
            f"image (with python3 on its PATH) in {field}, with the image profile of its "
            "family in spec.runtime.imageProfile"
        )
    return None
