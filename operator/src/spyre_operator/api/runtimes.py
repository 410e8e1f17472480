"""The operator's side of the runtime: env var names only the operator renders, and the
rules for users' env.

The names the image reads too, and the runtime flavours, are the contract's
(spyre_runtime.contract, defined once for both). render/env.py builds the values,
api/rules.py keeps users from overriding them. A flavour is data: the plugin knobs it
reads decide what gets rendered, so the builders never branch on the flavour's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator

from spyre_operator import __version__
from spyre_operator.api import imageref
from spyre_operator.api.base import DNS_SUBDOMAIN
from spyre_runtime.contract import (
    FLAVOURS,
    HF_ENDPOINT,
    HF_TOKEN,
    MASTER_ADDR,
    MASTER_PORT,
    SPYRE_SERVING_CACHE_KEY,
    SPYRE_SERVING_CACHE_ROOT,
    SPYRE_SERVING_COMPILE_CONFIG,
    SPYRE_SERVING_FLAVOUR,
    SPYRE_SERVING_IMAGE_HOME,
    SPYRE_SERVING_MODEL_ID,
    SPYRE_SERVING_MODEL_REVISION,
    TORCH_SENDNN_CACHE_DIR,
    TORCH_SENDNN_CACHE_ENABLE,
    TORCHINDUCTOR_CACHE_DIR,
    VLLM_PLUGINS,
    Flavour,
)

# Where the pods run (the operator's --platform). OpenShift's restricted-v2 SCC assigns the
# pod's fsGroup (and uid) from the namespace's range and rejects any other value, so the
# pods leave them to it there; elsewhere the fixed group makes the shared cache writable.
Platform = Literal["kubernetes", "openshift"]
PLATFORMS: tuple[Platform, ...] = ("kubernetes", "openshift")


@dataclass(frozen=True)
class CacheSharing:
    """The operator's --cache-registry and --cache-registry-secret."""

    repository: str  # host[:port]/path
    secret: str | None = None  # in the model's namespace: .dockerconfigjson, ca.crt


# A plugin setting (after the flavour's prefix) that replaces the known-config registry,
# whose device settings (TKV limit, KV blocks) shape the graphs; the file's content cannot
# enter the cache key, so users may not set it.
MODEL_CONFIG_FILE = "MODEL_CONFIG_FILE"

# Read by torch_sendnn, vLLM and the Spyre stack (never renamed between flavours).
TORCH_SENDNN_LOG = "TORCH_SENDNN_LOG"
VLLM_DT_MAX_BATCH_TKV_LIMIT = "VLLM_DT_MAX_BATCH_TKV_LIMIT"
FLEX_COMPUTE = "FLEX_COMPUTE"
FLEX_DEVICE = "FLEX_DEVICE"
DTLOG_LEVEL = "DTLOG_LEVEL"
DT_DEEPRT_VERBOSE = "DT_DEEPRT_VERBOSE"
DISTRIBUTED_STRATEGY_IGNORE_MODULES = "DISTRIBUTED_STRATEGY_IGNORE_MODULES"
TOKENIZERS_PARALLELISM = "TOKENIZERS_PARALLELISM"
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"
HF_HUB_DISABLE_TELEMETRY = "HF_HUB_DISABLE_TELEMETRY"
HOME = "HOME"
PYTHONPATH = "PYTHONPATH"  # the injected runtime's (render/inject.py)
VLLM_API_KEY = "VLLM_API_KEY"  # vLLM's --api-key (spec.service.apiKeySecret)

# Names users may not set in spec.env: the operator renders them, and several of them
# change the compiled graphs without changing the cache key.
RESERVED_ENV = frozenset(
    {
        SPYRE_SERVING_FLAVOUR,
        SPYRE_SERVING_CACHE_KEY,
        SPYRE_SERVING_CACHE_ROOT,
        SPYRE_SERVING_COMPILE_CONFIG,
        SPYRE_SERVING_IMAGE_HOME,
        PYTHONPATH,
        TORCH_SENDNN_CACHE_ENABLE,
        TORCH_SENDNN_CACHE_DIR,
        TORCHINDUCTOR_CACHE_DIR,
        VLLM_PLUGINS,
        MASTER_ADDR,
        MASTER_PORT,
        FLEX_DEVICE,
        SPYRE_SERVING_MODEL_ID,
        SPYRE_SERVING_MODEL_REVISION,
        HF_TOKEN,
        HF_ENDPOINT,
        HOME,
    }
)
# Graph-shaping settings of torch_sendnn that have spec fields or are set by the plugin.
RESERVED_ENV_PREFIXES = ("VLLM_DT_",)

# spec.env names that never change the compiled graphs (logging, hub access, proxies,
# load pacing, timeouts); every other spec.env entry is part of the cache key.
GRAPH_NEUTRAL_ENV = frozenset(
    {
        "VLLM_LOGGING_LEVEL",
        "VLLM_CONFIGURE_LOGGING",
        "VLLM_LOGGING_PREFIX",
        "VLLM_LOG_STATS_INTERVAL",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
        "DO_NOT_TRACK",
        VLLM_API_KEY,
        DTLOG_LEVEL,
        DT_DEEPRT_VERBOSE,
        TORCH_SENDNN_LOG,
        TOKENIZERS_PARALLELISM,
        "TRANSFORMERS_VERBOSITY",
        "PYTHONUNBUFFERED",
        "TZ",
        HF_HUB_OFFLINE,
        "HF_HUB_ENABLE_HF_TRANSFER",
        "HF_HUB_DOWNLOAD_TIMEOUT",
        "HF_HUB_ETAG_TIMEOUT",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    }
)
# The same for plugin settings (after the flavour's prefix).
GRAPH_NEUTRAL_KNOBS = frozenset(
    {
        "MAX_LOAD_PROCESSES",
        "GLOO_TIMEOUT_MINUTES",
        "PERF_METRIC_LOGGING_ENABLED",
        "PERF_METRIC_LOGGING_DIR",
        "BENCH_METRICS_ENABLED",
        "WORKER_LOG_REDIRECT_DIR",
        "OVERRIDE_SIGNALS_HANDLER",
        "REQUIRE_KNOWN_CONFIG",
    }
)

CACHE_ROOT = "/var/cache/spyre"
HOME_DIR = "/home/spyre"
# Hub weights: downloaded once into <CACHE_ROOT>/<contract.WEIGHTS_DIR>/<id>/<commit>/ by
# the weights Job; the compile and serving pods mount that directory read-only at
# <MODELS_ROOT>/<id> and load it from there, with the hub switched off.
MODELS_ROOT = "/models"
MASTER_PORT_VALUE = "12355"
SERVING_PORT = 8000

# Images without spyre-runtime (an upstream runtime.imageProfile) get it from the
# operator's image: an init container copies the package into this emptyDir, and the
# image's own Python runs it from there (render/inject.py).
RUNTIME_DIR = "/opt/spyre-serving/runtime"
OPERATOR_IMAGE_NAME = "operator"  # beside the serving images (a release, a mirror, the node)

IMAGE_REPOSITORY = "quay.io/spyre-serving/runtime"
# The default repository's path: its images keep it in a mirror (the registry changes).
_IMAGE_PATH = imageref.parse(IMAGE_REPOSITORY).path


@dataclass(frozen=True)
class RuntimeImages:
    """Where the operator's serving images come from (`run --runtime-image-repository`,
    e.g. a mirror or an air-gapped copy) and the Secrets every workload pod pulls with
    (`--runtime-image-pull-secret`, before the SpyreModel's own imagePullSecrets)."""

    repository: str = IMAGE_REPOSITORY
    pull_secrets: tuple[str, ...] = ()
    # the operator's own image, which carries spyre-runtime for images without it; None:
    # the one beside the serving images' repository (injector_image)
    injector: str | None = None
    # the repository holds images for Spyre cards (image/Containerfile on IBM's Spyre base);
    # False (a release's chart: it publishes CPU images only): a model on cards must name
    # its image (api/image_rules.card_image)
    cards: bool = True

    def __post_init__(self) -> None:
        problem = imageref.repository_problem(self.repository)
        if problem:
            raise ValueError(problem)
        if self.injector is not None and not imageref.IMAGE_REF.fullmatch(self.injector):
            raise ValueError(
                f"{self.injector!r} is not an image reference: [registry[:port]/]name[:tag]"
                "[@digest] (the operator's image, e.g. quay.io/spyre-serving/operator:0.1.0)"
            )
        for name in self.pull_secrets:
            if len(name) > 253 or not re.match(DNS_SUBDOMAIN, name):
                raise ValueError(
                    f"pull secret {name!r} is not a Secret name (lowercase letters, digits, "
                    "'-' and '.', at most 253)"
                )

    def image(self, flavour: str, version: str) -> str:
        return default_image(flavour, version, repository=self.repository)

    @property
    def injector_image(self) -> str:
        """`injector`, else `<the repository's parent>/operator:<operator version>`: a
        release (scripts/release), its mirror and the node's registry keep the operator's
        image beside the serving images, under the same pull secrets."""
        if self.injector is not None:
            return self.injector
        parent, slash, _ = self.repository.rpartition("/")
        return f"{parent}{slash}{OPERATOR_IMAGE_NAME}:{__version__}"


DEFAULT_IMAGES = RuntimeImages()


def default_image(
    flavour: str,
    version: str,
    operator_version: str = __version__,
    repository: str = IMAGE_REPOSITORY,
) -> str:
    """The serving image for a flavour and plugin version; the image build tags it so. The
    operator version in the tag keeps the entrypoint in step with the operator's contract."""
    return f"{repository}:{operator_version}-{flavour}-{version}"


def is_default_image(image: str, flavour: str, version: str) -> bool:
    """A tag of the operator's image for this flavour and version, of any operator version
    and under any registry or mirror prefix (the path ends in spyre-serving/runtime): the
    base image (the plugin, torch_sendnn) is the same, only the entrypoint differs."""
    ref = imageref.parse(image)
    own_path = ref.path == _IMAGE_PATH or ref.path.endswith(f"/{_IMAGE_PATH}")
    tagged = ref.tag is not None and ref.tag.endswith(f"-{flavour}-{version}")
    return own_path and tagged and ref.digest is None


def _knob(name: str) -> tuple[Flavour, str] | None:
    """(flavour, plugin setting) a flavour-prefixed name stands for, else None."""
    for f in FLAVOURS.values():
        if name.startswith(f.env_prefix):
            return f, name[len(f.env_prefix) :]
    return None


def is_reserved_env(name: str) -> bool:
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
        return True
    knob = _knob(name)
    return knob is not None and (knob[1] == MODEL_CONFIG_FILE or knob[0].reads(knob[1]))


def is_graph_neutral_env(name: str) -> bool:
    knob = _knob(name)
    return name in GRAPH_NEUTRAL_ENV or (knob is not None and knob[1] in GRAPH_NEUTRAL_KNOBS)


# Values of the operator's settings (settings.py) that need a check of their own.
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"^(\d+)([smhd]?)$")
PROMETHEUS_URL = re.compile(r"^(https?://[A-Za-z0-9.\-\[\]:]+(/[^\s]*)?)?$")


def duration_seconds(text: str) -> int:
    """A duration such as 7d, 12h, 30m, 45s (a bare number is seconds); 0 is 0."""
    found = DURATION.match(text.strip())
    if found is None:
        raise ValueError(f"{text!r}: use a whole number with a unit, e.g. 7d, 12h, 30m, 45s or 0")
    return int(found.group(1)) * _UNITS[found.group(2) or "s"]


def prometheus_address(value: str) -> str:
    if not PROMETHEUS_URL.match(value):
        raise ValueError(f"{value!r}: use http(s)://HOST[:PORT][/PATH], or empty")
    return value


PrometheusAddress = Annotated[str, AfterValidator(prometheus_address)]
