"""The SpyreModel status (Kubernetes API conventions: conditions + observedGeneration)."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field, WithJsonSchema

from spyre_operator.api.base import ApiModel

ConditionType = Literal[
    "Ready",
    "CacheReady",
    "Available",
    "Progressing",
    "Degraded",
    "Autoscaling",
    "Routing",
    "Reconciling",
    "Stalled",
]
ConditionStatus = Literal["True", "False", "Unknown"]
READY: Final = "Ready"
CACHE_READY: Final = "CacheReady"
AVAILABLE: Final = "Available"
PROGRESSING: Final = "Progressing"
DEGRADED: Final = "Degraded"
AUTOSCALING: Final = "Autoscaling"  # with spec.autoscaling: its ScaledObject and capacity
ROUTING: Final = "Routing"  # with spec.routing: its InferencePool, picker and HTTPRoute
# kstatus' (kubernetes-sigs/cli-utils): what Flux, kpt and `kubectl wait` tools built on it
# read. Derived from Ready and Degraded (reconcile/conditions.py: kstatus).
RECONCILING: Final = "Reconciling"
STALLED: Final = "Stalled"
CONDITION_TYPES: tuple[ConditionType, ...] = (
    READY,
    CACHE_READY,
    AVAILABLE,
    PROGRESSING,
    DEGRADED,
    AUTOSCALING,
    ROUTING,
    RECONCILING,
    STALLED,
)

Phase = Literal[
    "Downloading",
    "Compiling",
    "Starting",
    "Ready",
    "ScaledToZero",
    "Degraded",
    "Failed",
    "Invalid",
    "CleaningUp",
]
WeightsState = Literal["Downloading", "Ready", "Failed"]
# A duration as the pod's summary gives it (61 stays 61, 61.2 stays 61.2).
Seconds = Annotated[int | float, WithJsonSchema({"type": "number"})]
Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]  # RFC 3339


class StatusModel(ApiModel):
    """Built by the reconciler (reconcile/decide.py), so a misspelled field is an error, as
    in the spec; the stored status is read back with `model_validate(..., extra="ignore")`
    (never fail on fields a newer operator added). The API server prunes fields the schema
    does not name, as everywhere in the CRD."""


class Condition(StatusModel):
    """metav1.Condition."""

    type: ConditionType
    """Ready: the current spec is served (what `kubectl wait --for=condition=Ready` waits
    for); the others say which part is not there yet."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: Annotated[
        str,
        Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", min_length=1, max_length=1024),
    ]
    """One CamelCase word, e.g. Compiling, CompileFailed, InvalidSpec."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """What happened and, for a problem, what to do."""
    last_transition_time: Timestamp
    """When status last changed (RFC 3339)."""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """metadata.generation the condition was set for."""


class CompileProgress(StatusModel):
    """How far a running compile is: the newest step its pod logged (docs/runtime.md)."""

    step: str
    """The step, e.g. warmup, engine (vLLM's engine start, which compiles), catalog."""
    elapsed_seconds: Seconds
    """Seconds since the compile command started, as the pod logged them."""
    detail: str | None = None
    """What the step does, e.g. "still running: [WARMUP] (2/3) for prompt length 64"."""
    pod: str
    """The compile pod (kubectl logs POD)."""


class CompileSummary(StatusModel):
    """The compile Job's outcome (its termination message, see docs/contract.md), and its
    progress while it runs."""

    job_name: str | None = None
    """The compile Job."""
    cache_key: str | None = None
    """The cache key it compiled."""
    ok: bool | None = None
    """Whether the compile succeeded."""
    reason: str | None = None
    """Why it failed, e.g. OutOfMemory, InvalidConfig, CompileFailed."""
    message: str | None = None
    """What failed and what to do."""
    seconds: Seconds | None = None
    """Duration of the compile."""
    versions: dict[str, str] | None = None
    """Versions of the software that compiled (vllm, the plugin, ...)."""
    bytes: Annotated[int, Field(ge=0)] | None = None
    """What the compile wrote to the cache volume under its key."""
    progress: CompileProgress | None = None
    """While the compile runs: its newest step, read from the compile pod's log every
    --progress-seconds (absent when the log cannot be read)."""
    pulled_from: str | None = None
    """With a cache registry: the artifact (repository:tag) a pull Job fetched the key
    from instead of compiling it (jobName is then the pull Job)."""
    published_to: str | None = None
    """With a cache registry: the artifact the compile published the key as."""
    bytes_moved: Annotated[int, Field(ge=0)] | None = None
    """The bytes that pull fetched or that publish sent (0: the registry had them)."""
    not_pulled: str | None = None
    """With a cache registry: why this key compiled rather than being pulled (the pull
    Job's reason and message, e.g. NotInRegistry)."""
    pending_seconds: Seconds | None = None
    """How long the compile's pods waited for a node to start them (cards, CPU, memory,
    their scheduler): so far while one waits, then how long they waited. Not counted by
    spec.cache.compile.activeDeadlineSeconds, which runs from a pod's start on a node."""


class WeightsSummary(StatusModel):
    """A hub model's download into the cache volume (the weights Job's termination
    message, see docs/contract.md)."""

    job_name: str | None = None
    """The weights Job."""
    model_id: str | None = None
    """The hub model id."""
    revision: str | None = None
    """The revision as the spec names it (default main)."""
    state: WeightsState | None = None
    """Downloading, Ready or Failed."""
    commit: str | None = None
    """The commit the revision resolved to (the last one while it is resolved again);
    the cache key uses it."""
    size_bytes: Annotated[int, Field(ge=0)] | None = None
    """Size of the downloaded files."""
    files: Annotated[int, Field(ge=0)] | None = None
    """Number of downloaded files."""
    downloaded: bool | None = None
    """False when the files were already on the volume (another revision of the commit,
    or a pre-loaded volume)."""
    seconds: Seconds | None = None
    """Duration of the download."""
    reason: str | None = None
    """Why it failed, e.g. GatedModel, RevisionNotFound, HubUnreachable."""
    message: str | None = None
    """What failed and what to do."""


class CompileStatus(StatusModel):
    """What the operator observed of a configuration's compile (written by the operator
    only): the whole status of a SpyreCache, the first part of a SpyreModel's."""

    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """metadata.generation the status was written for."""
    phase: Phase | None = None
    """Summary for printer columns; conditions are the API."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """The status as metav1.Conditions, one per type (docs/api.md); phase summarizes them."""
    target_cache_key: str | None = None
    """Cache key of the current spec."""
    cache: CompileSummary | None = None
    weights: WeightsSummary | None = None
    """Hub models: the download of the weights (before the compile)."""

    def condition(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


class SpyreCacheStatus(CompileStatus):
    """A SpyreCache's status: its configuration's compile, and the key's use (the
    inventory of the cache volume, docs/api.md)."""

    runtime: str | None = None
    """The runtime flavour and the plugin version that compiled (or will compile) the key,
    e.g. vllm-spyre 1.10.0."""
    used_by: list[str] | None = None
    """The SpyreModels using the key: those sharing its compile Job (empty: none)."""
    compiled_at: Timestamp | None = None
    """When the compile Job finished."""
    last_used_at: Timestamp | None = None
    """When the SpyreModels using the key last changed: while usedBy is empty, when the
    last one went (the retention counts from here, or from compiledAt)."""


class AutoscalingStatus(StatusModel):
    """With spec.autoscaling: the autoscaler the operator made and the replicas the cards
    allow (the Autoscaling condition says why no more)."""

    scaled_object: str | None = None
    """The KEDA ScaledObject (same name as the SpyreModel), once made."""
    min_replicas: Annotated[int, Field(ge=0)] | None = None
    """The ScaledObject's minimum."""
    max_replicas: Annotated[int, Field(ge=0)] | None = None
    """The ScaledObject's maximum: spec.autoscaling.maxReplicas, or fewer when the nodes'
    cards hold fewer replicas."""
    cards_per_replica: Annotated[int, Field(ge=0)] | None = None
    """Spyre cards one replica holds (spec.accelerator)."""
    replicas_on_nodes: Annotated[int, Field(ge=0)] | None = None
    """Replicas the nodes' cards hold in all (unset: a replica holds no cards)."""
    replicas_now: Annotated[int, Field(ge=0)] | None = None
    """Replicas that can run now: those placed on a node and those the free cards hold
    (pods waiting for cards do not count)."""


class RoutingStatus(StatusModel):
    """With spec.routing: the objects the operator made (the Routing condition says whether
    requests reach the pool)."""

    inference_pool: str | None = None
    """The InferencePool (same name as the SpyreModel)."""
    endpoint_picker: str | None = None
    """The picker's Deployment and Service (<name>-epp)."""
    http_route: str | None = None
    """The HTTPRoute from spec.routing.gateway (same name as the SpyreModel)."""


class SpyreModelStatus(CompileStatus):
    """What the operator observed (written by the operator only)."""

    active_cache_key: str | None = None
    """Cache key of the running Deployment (targetCacheKey while a new key compiles is
    the next one)."""
    replicas: Annotated[int, Field(ge=0)] | None = None
    """Serving pods of the Deployment (scale subresource)."""
    ready_replicas: Annotated[int, Field(ge=0)] | None = None
    """Serving pods that are ready."""
    replicas_from_cache: Annotated[int, Field(ge=0)] | None = None
    """Ready serving pods whose start-up compiled nothing (their compile report): every
    graph came from the cache."""
    unschedulable_replicas: Annotated[int, Field(ge=0)] | None = None
    """Serving pods no node takes (the scheduler's reason Unschedulable): replicas asked
    for, e.g. by an autoscaler, that wait for cards (or CPU, memory) no node has free."""
    selector: str | None = None
    """Label selector of the serving pods (scale subresource)."""
    endpoint: str | None = None
    """OpenAI-compatible base URL inside the cluster."""
    autoscaling: AutoscalingStatus | None = None
    """With spec.autoscaling (and until its ScaledObject is deleted once it is removed)."""
    routing: RoutingStatus | None = None
    """With spec.routing (and until its objects are deleted once it is removed)."""
