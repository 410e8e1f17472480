"""Image profiles: what the operator must know of a serving image's family to run it.

A family is data (docs/api.md, "Image profiles"): the plugin it ships (the flavour, which
names the env and VLLM_PLUGINS), whether spyre-runtime is in the image or the operator
brings it (render/inject.py), the interpreter and home of the image, and whether card pods
default to the Spyre scheduler. The device resource and scheduler defaults follow the
architecture and the resource; nothing here branches on a profile's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from spyre_runtime.contract import SENDNN_INFERENCE, VLLM_SPYRE, FlavourName

ProfileName = Literal["spyre-serving", "sendnn-inference", "openshift-ai"]
PROFILE_NAMES: tuple[ProfileName, ...] = get_args(ProfileName)
SPYRE_SERVING: Final = "spyre-serving"

# The CPU architectures Spyre cards ship in: x86 servers, IBM Power, IBM Z / LinuxONE.
Architecture = Literal["amd64", "ppc64le", "s390x"]
ARCHITECTURES: tuple[Architecture, ...] = get_args(Architecture)
DEFAULT_ARCHITECTURE: Final[Architecture] = "amd64"
ARCH_LABEL: Final = "kubernetes.io/arch"

# The IBM Spyre Operator's device resources: physical functions on x86 and Power, virtual
# functions on Z (its LPARs see VFs); aiu_* are the names of older clusters.
PF_RESOURCE: Final = "ibm.com/spyre_pf"
VF_RESOURCE: Final = "ibm.com/spyre_vf"
SPYRE_SCHEDULER: Final = "spyre-scheduler"
AIU_SCHEDULER: Final = "aiu-scheduler"  # the scheduler of clusters with aiu_* resources


@dataclass(frozen=True)
class ImageProfile:
    name: ProfileName
    flavour: FlavourName | None  # the plugin the family ships; None: built per flavour
    example: str  # an image of the family, for docs and messages
    injected: bool = True  # no spyre-runtime inside: an init container brings it
    spyre_scheduler: bool = True  # pods with cards default to the Spyre scheduler
    python: str = "python3"  # the interpreter on the image's PATH that has vLLM
    # the image user's home (the Spyre base images' senuser), with the senlib config
    image_home: str = "/home/senuser"


PROFILES: dict[str, ImageProfile] = {
    SPYRE_SERVING: ImageProfile(
        name=SPYRE_SERVING,
        flavour=None,
        example="quay.io/spyre-serving/runtime:0.1.0-sendnn-inference-2.6.3",
        injected=False,
        spyre_scheduler=False,
    ),
    SENDNN_INFERENCE: ImageProfile(
        name=SENDNN_INFERENCE,
        flavour=SENDNN_INFERENCE,
        example="quay.io/ibm-aiu/sendnn-inference:2.6.3.amd64",
    ),
    "openshift-ai": ImageProfile(
        name="openshift-ai",
        flavour=VLLM_SPYRE,
        example="registry.redhat.io/rhaiis/vllm-spyre-rhel9:<version>",
        # Red Hat's vLLM-Spyre images (UBI 9) run as `vllm` (uid 2000, group 0), the
        # senlib config in its home; their Python is a venv (/opt/vllm) on PATH.
        image_home="/home/vllm",
    ),
}

# Repository paths of the families' published images (a suffix of the image's path): an
# image named here but run with the spyre-serving profile would get arguments its own
# entrypoint does not know.
UPSTREAM_PATHS: dict[str, str] = {
    "ibm-aiu/sendnn-inference": SENDNN_INFERENCE,
    "ibm-aiu/vllm-spyre": "openshift-ai",
    "rhaiis/vllm-spyre": "openshift-ai",
}


def upstream_profile(path: str) -> str | None:
    """The profile of an image path (registry left out) that names an upstream family."""
    for suffix, profile in UPSTREAM_PATHS.items():
        if path == suffix or path.endswith("/" + suffix) or path.startswith(suffix + "-"):
            return profile
    return None


def tagged_architecture(image: str) -> str | None:
    """The architecture an image's tag ends in (`.amd64`, `-s390x`: how IBM tags its
    per-architecture images), else None."""
    tag = image.partition("@")[0].rpartition("/")[2].partition(":")[2]
    for arch in ARCHITECTURES:
        if tag.endswith((f".{arch}", f"-{arch}")):
            return arch
    return None


def default_resource(architecture: Architecture | None) -> str:
    return VF_RESOURCE if architecture == "s390x" else PF_RESOURCE


def default_scheduler(resource: str) -> str:
    return AIU_SCHEDULER if resource.startswith("ibm.com/aiu_") else SPYRE_SCHEDULER
