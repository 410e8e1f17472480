"""The operator <-> image contract (docs/contract.md), defined once.

Everything both sides name: the environment the operator renders and the entrypoint reads,
the runtime flavours, the cache directory's files and the termination summary. The image
owns this module and the operator imports it; it imports nothing but the standard library,
so the operator never pulls in torch or vLLM through it (tests/unit/test_contract.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Final, Literal, Required, TypedDict, get_args

# ----- environment ---------------------------------------------------------------------
SPYRE_SERVING_FLAVOUR: Final = "SPYRE_SERVING_FLAVOUR"
SPYRE_SERVING_CACHE_KEY: Final = "SPYRE_SERVING_CACHE_KEY"
SPYRE_SERVING_CACHE_ROOT: Final = "SPYRE_SERVING_CACHE_ROOT"
SPYRE_SERVING_COMPILE_CONFIG: Final = "SPYRE_SERVING_COMPILE_CONFIG"
SPYRE_SERVING_TERMINATION_LOG: Final = "SPYRE_SERVING_TERMINATION_LOG"
# The weights Job's (`spyre-runtime weights`): what to download into the cache volume.
SPYRE_SERVING_MODEL_ID: Final = "SPYRE_SERVING_MODEL_ID"
SPYRE_SERVING_MODEL_REVISION: Final = "SPYRE_SERVING_MODEL_REVISION"
HF_ENDPOINT: Final = "HF_ENDPOINT"
HF_TOKEN: Final = "HF_TOKEN"
# Compiled caches shared through an OCI registry (docs/cache-sharing.md): the repository
# (host[:port]/path), a Docker config file with its credentials (the mounted
# `.dockerconfigjson` of a Secret), a PEM CA for a registry with a private certificate. Set:
# the compile Job publishes the key after READY; `spyre-runtime pull` fetches it instead.
SPYRE_SERVING_CACHE_REGISTRY: Final = "SPYRE_SERVING_CACHE_REGISTRY"
SPYRE_SERVING_CACHE_REGISTRY_AUTH: Final = "SPYRE_SERVING_CACHE_REGISTRY_AUTH"
SPYRE_SERVING_CACHE_REGISTRY_CA: Final = "SPYRE_SERVING_CACHE_REGISTRY_CA"
# torch_sendnn's graph cache: <root>/<cacheKey>, set by the operator and checked by `serve`.
TORCH_SENDNN_CACHE_ENABLE: Final = "TORCH_SENDNN_CACHE_ENABLE"
TORCH_SENDNN_CACHE_DIR: Final = "TORCH_SENDNN_CACHE_DIR"
# torch's inductor keeps its FX-graph and AOTAutograd caches and the compiled C++ kernels
# here (backend inductor: <root>/<cacheKey>/<INDUCTOR_CACHE_SUBDIR>, filled by the Job).
TORCHINDUCTOR_CACHE_DIR: Final = "TORCHINDUCTOR_CACHE_DIR"
INDUCTOR_CACHE_SUBDIR: Final = "inductor"
# inductor's precompiled C++ header (config.cpp_cache_precompile_headers): off in the Job
# and the serving pods alike, as it is part of inductor's cache keys (config.vllm_env).
TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS: Final = "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"
# The READY record's copy of the settings above the compile ran with: a serving pod takes
# them from there, so a key compiled before a default changed keeps loading (no field:
# compiled with inductor's own defaults).
COMPILER_ENV_FIELD: Final = "compilerEnv"
COMPILER_ENV: Final = {TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS: "0"}  # -> the runtime's value
# The flavour's plugin; the runtime adds its own (compilereport.py), which vLLM finds
# through this entry point (pyproject.toml's, and the injected copy's: inject.py).
VLLM_PLUGINS: Final = "VLLM_PLUGINS"
PLUGIN_GROUP: Final = "vllm.general_plugins"
PLUGIN_ENTRY: Final = "spyre_runtime = spyre_runtime.compilereport:register"
# The image user's home, where the Spyre base images keep the senlib config: copied into
# the pod's HOME at start (the image's entrypoint, or imagesetup.py when injected).
SPYRE_SERVING_IMAGE_HOME: Final = "SPYRE_SERVING_IMAGE_HOME"
# The plugin's gloo init.
MASTER_ADDR: Final = "MASTER_ADDR"
MASTER_PORT: Final = "MASTER_PORT"

DEFAULT_TERMINATION_LOG: Final = "/dev/termination-log"

# Plugin settings ("knobs"): the flavour's prefix (VLLM_SPYRE_ / SENDNN_INFERENCE_) is
# prepended. Each flavour reads the ones in its `knobs`.
DYNAMO_BACKEND: Final = "DYNAMO_BACKEND"
USE_CB: Final = "USE_CB"
USE_CHUNKED_PREFILL: Final = "USE_CHUNKED_PREFILL"
WARMUP_PROMPT_LENS: Final = "WARMUP_PROMPT_LENS"
WARMUP_NEW_TOKENS: Final = "WARMUP_NEW_TOKENS"
WARMUP_BATCH_SIZES: Final = "WARMUP_BATCH_SIZES"
REQUIRE_PRECOMPILED_DECODERS: Final = "REQUIRE_PRECOMPILED_DECODERS"
NUM_CPUS: Final = "NUM_CPUS"

_COMMON_KNOBS = frozenset(
    {DYNAMO_BACKEND, WARMUP_PROMPT_LENS, WARMUP_BATCH_SIZES, REQUIRE_PRECOMPILED_DECODERS, NUM_CPUS}
)


# ----- runtime flavours ----------------------------------------------------------------
FlavourName = Literal["vllm-spyre", "sendnn-inference"]
VLLM_SPYRE: Final = "vllm-spyre"
SENDNN_INFERENCE: Final = "sendnn-inference"


@dataclass(frozen=True)
class Flavour:
    """One runtime flavour: the plugin's package and the names it reads. A flavour is data:
    the knobs it reads decide what gets rendered, so nothing branches on its name."""

    name: FlavourName
    default_version: str
    major_version: int
    module: str  # importable package, also its distribution name for importlib.metadata
    plugin: str  # the VLLM_PLUGINS value
    env_prefix: str  # of the plugin's settings
    knobs: frozenset[str]
    compile_only_backend: bool  # the sendnn_compile_only backend exists
    # 1.10 passes the Spyre-only torch.compile option `sendnn.dynamic` for continuous
    # batching whatever the backend, and inductor refuses unknown options.
    inductor_continuous_batching: bool

    def env(self, knob: str) -> str:
        return self.env_prefix + knob

    def reads(self, knob: str) -> bool:
        return knob in self.knobs

    @property
    def static_decoders(self) -> bool:
        """Static batching of decoders exists only where USE_CB switches it off (1.x)."""
        return self.reads(USE_CB)

    @property
    def catalog_version_field(self) -> str:
        """The catalog entry's version key, as the plugin's matcher reads it."""
        return f"{self.module}_version"

    @property
    def require_precompiled_var(self) -> str:
        return self.env(REQUIRE_PRECOMPILED_DECODERS)


FLAVOURS: dict[str, Flavour] = {
    VLLM_SPYRE: Flavour(
        name=VLLM_SPYRE,
        default_version="1.10.0",
        major_version=1,
        module="vllm_spyre",
        plugin="spyre",
        env_prefix="VLLM_SPYRE_",
        knobs=_COMMON_KNOBS | {USE_CB, USE_CHUNKED_PREFILL, WARMUP_NEW_TOKENS},
        compile_only_backend=False,
        inductor_continuous_batching=False,
    ),
    SENDNN_INFERENCE: Flavour(
        name=SENDNN_INFERENCE,
        default_version="2.6.3",
        major_version=2,
        module="sendnn_inference",
        plugin="sendnn_inference",
        env_prefix="SENDNN_INFERENCE_",
        knobs=_COMMON_KNOBS,
        compile_only_backend=True,
        inductor_continuous_batching=True,
    ),
}


# ----- the cache volume ----------------------------------------------------------------
# <root>/<cacheKey>/: the plugin's catalog (a JSON list), and READY, written last.
CATALOG_NAME: Final = "pre_compiled_cache_catalog.json"
READY_NAME: Final = "READY"
# READY's manifest of <root>/<cacheKey>/inductor/ (relative path -> size): `serve` finds a
# cache emptied or cut short since the compile before vLLM starts.
INDUCTOR_FILES: Final = "inductorFiles"
# Hub weights: <root>/<WEIGHTS_DIR>/<id>/<commit>/, which the pods mount read-only.
WEIGHTS_DIR: Final = "weights"


# ----- progress: the step lines of the log ---------------------------------------------
# `precompile` (and `weights`) log each step as `step=<name> elapsed=<s>s <detail>`, the
# seconds since the command started; the warmup heartbeat repeats the current step every
# HEARTBEAT_SECONDS. The operator reads the last one from the log's tail while a compile
# runs (status.cache.progress).
HEARTBEAT_SECONDS: Final = 60
# the step `precompile` logs while its cache volume does not answer (volumewatch.py)
VOLUME_STEP: Final = "volume-not-answering"
_STEP = re.compile(r"(?:^|\s)step=(\S+) elapsed=(\d+(?:\.\d+)?)s(?: (.*))?$")


@dataclass(frozen=True)
class Step:
    name: str
    elapsed: float  # seconds since the command started
    detail: str = ""


def step_line(step: Step) -> str:
    """The log message of a step (the logger adds the time and level before it)."""
    return f"step={step.name} elapsed={step.elapsed:.1f}s {step.detail}".rstrip()


def parse_step(line: str) -> Step | None:
    """The step a log line reports, None if it reports none."""
    found = _STEP.search(line.rstrip("\r\n"))
    if found is None:
        return None
    name, elapsed, detail = found.groups()
    return Step(name, float(elapsed), (detail or "").strip())


def last_step(log: str) -> Step | None:
    """The newest step in a log's tail."""
    for line in reversed(log.splitlines()):
        step = parse_step(line)
        if step is not None:
            return step
    return None


# ----- the termination summary ---------------------------------------------------------
class Transfer(TypedDict):
    """A cache key moved to or from a registry."""

    reference: str  # repository:tag
    digest: str  # the manifest's
    bytes: int  # sent or received; 0 when nothing had to move
    seconds: float


class Summary(TypedDict, total=False):
    """The one line of JSON each command writes to its termination log, which the operator
    copies into status.cache (precompile) and status.weights (weights)."""

    ok: Required[bool]
    reason: Reason  # when not ok
    message: str  # when not ok: what failed and what to do
    cacheKey: str | None  # precompile, and serve's refusal (null when unset)
    seconds: float
    # precompile: what it wrote under the key; pull: that, as the record it verified says;
    # weights: the model's size
    bytes: int
    versions: dict[str, str]  # precompile: vllm, the plugin, torch, spyre_runtime
    # precompile with a registry: what it published, or why it could not (the compile
    # succeeded all the same)
    published: Transfer
    publishProblem: str
    pulled: Transfer  # pull: the artifact it fetched instead of a compile
    # weights
    id: str
    revision: str
    commit: str
    files: int
    downloaded: bool


# Why a command failed: precompile's, serve's refusal, the pull Job's (the key compiles as
# without a registry), then the weights Job's own.
Reason = Literal[
    "OutOfMemory", "ModelNotFound", "InvalidConfig", "CompileFailed", "OutOfSpace",
    "CacheNotReady", "ImageUnusable",
    "NotInRegistry", "ArtifactRefused", "RegistryUnavailable",
    "GatedModel", "RevisionNotFound", "Unauthorized", "HubUnreachable", "ChecksumMismatch",
    "DownloadFailed",
]  # fmt: skip
REASONS: frozenset[str] = frozenset(get_args(Reason))
CACHE_NOT_READY: Final[Reason] = "CacheNotReady"  # serve refused the cache (exit 3)
# The injected runtime's image cannot run the command (imagecheck.py, __main__.py; exit 2).
IMAGE_UNUSABLE: Final[Reason] = "ImageUnusable"
# The weights Job's reasons no rerun can fix (exit 2): the operator shows them at once,
# while the Job may still be retrying.
PERMANENT: frozenset[Reason] = frozenset(
    {
        "ModelNotFound",
        "GatedModel",
        "RevisionNotFound",
        "Unauthorized",
        "InvalidConfig",
        "ImageUnusable",
    }
)


# ----- the compile report (compilereport.py prints it, the operator and tests read it) ---
MARKER = "spyre-runtime compile-cache:"
_LINE = re.compile(re.escape(MARKER) + r" pid=(\d+)((?: [a-z_]+=\d+)+)")


@dataclass(frozen=True)
class CompileCounts:
    pid: int
    compiles: int
    fxgraph_hit: int
    fxgraph_miss: int
    fxgraph_bypass: int
    aotautograd_hit: int
    aotautograd_miss: int
    aotautograd_bypass: int
    compile_ms: int = 0
    warmed: int = 0

    @property
    def compiled(self) -> bool:
        """Inductor generated and compiled code (a cache miss, or a graph it cannot cache)."""
        return self.fxgraph_miss + self.fxgraph_bypass > 0

    @property
    def from_cache(self) -> bool:
        return self.fxgraph_hit > 0

    def line(self) -> str:
        counts = " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)[1:])
        return f"{MARKER} pid={self.pid} {counts}"


def _lines(text: str) -> list[CompileCounts]:
    found = []
    for match in _LINE.finditer(text):
        values = dict(pair.split("=") for pair in match.group(2).split())
        found.append(
            CompileCounts(pid=int(match.group(1)), **{k: int(v) for k, v in values.items()})
        )
    return found


def parse(text: str) -> dict[int, CompileCounts]:
    """The last report of each pid in a log."""
    return {counts.pid: counts for counts in _lines(text)}


def startup(text: str) -> dict[int, CompileCounts]:
    """Each pid's start-up report in a log: its `warmed=1` line (later lines of the pid
    count compiles after the warmup, a request's)."""
    return {counts.pid: counts for counts in _lines(text) if counts.warmed}
