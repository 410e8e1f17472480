"""The SpyreModel spec: fields, defaults and per-field bounds (the one source of truth).

Bounds that a CRD schema can express live here (they become minimum/maximum/multipleOf/
enum in the CRD, so the API server enforces them too); rules across fields live in
api/rules.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from spyre_operator.api import profiles, runtimes
from spyre_operator.api.autoscaling import Autoscaling
from spyre_operator.api.base import (
    ApiModel,
    IntOrPercent,
    LabelMap,
    Name,
    ObjectName,
    Quantity,
)
from spyre_operator.api.k8s_types import (
    Affinity,
    EnvVar,
    LocalObjectReference,
    NetworkPeer,
    Resources,
    SecretKey,
    Text,
    Tolerations,
    TopologySpreadConstraint,
)
from spyre_operator.api.labels import ANNOTATIONS_MAX_BYTES
from spyre_operator.api.model import ModelSpec
from spyre_operator.api.routing import Routing
from spyre_runtime.contract import FLAVOURS, SENDNN_INFERENCE, Flavour, FlavourName
from spyre_runtime.ociregistry import REPOSITORY_PATTERN

# Spyre's KV-cache block size: chunk sizes and static prompt lengths are multiples of it.
SPYRE_BLOCK = 64
# Continuous batching on Spyre supports at most a 32K context (prompt + output tokens).
MAX_CONTEXT = 32768
TP_SIZES = (1, 2, 4)
# Names of quantized checkpoints: FP8 (compressed-tensors), GPTQ, wNaM (e.g. w4a16).

Task = Literal["generate", "embed", "score", "rerank"]
POOLING_TASKS = ("embed", "score", "rerank")
Backend = Literal["sendnn", "eager", "inductor"]
# Backends that run on CPU: eager compiles nothing, inductor compiles with torch.compile.
CPU_BACKENDS = ("eager", "inductor")
CompileBackend = Literal["sendnn", "sendnn_compile_only"]

BlockMultiple = Annotated[int, Field(ge=SPYRE_BLOCK, le=MAX_CONTEXT, multiple_of=SPYRE_BLOCK)]
NewTokens = Annotated[int, Field(ge=2, le=MAX_CONTEXT)]
BatchSize = Annotated[int, Field(ge=1, le=256)]


class RuntimeSpec(ApiModel):
    """The vLLM-Spyre plugin the serving image carries (part of the cache key)."""

    flavour: FlavourName = SENDNN_INFERENCE
    """vllm-spyre (vLLM-Spyre 1.x) or sendnn-inference (2.x, the renamed successor)."""
    version: (
        Annotated[
            str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+([.-]?[0-9A-Za-z.]+)?$", max_length=64)
        ]
        | None
    ) = None
    """Plugin version; defaults to 1.10.0 (vllm-spyre) or 2.6.3 (sendnn-inference)."""
    image_profile: profiles.ProfileName = profiles.SPYRE_SERVING
    """The serving image's family: spyre-serving (the operator's own image, spyre-runtime
    inside), sendnn-inference (IBM's sendnn-inference 2.x images) or openshift-ai (Red Hat
    AI Inference Server and OpenShift AI vLLM-Spyre images, flavour vllm-spyre). IBM's and
    Red Hat's images run unmodified: an init container from the operator's image brings
    spyre-runtime, which runs on the image's own Python."""
    architecture: profiles.Architecture | None = None
    """CPU architecture of the image and its nodes: amd64, ppc64le (IBM Power) or s390x
    (IBM Z, LinuxONE). Set: every pod gets the kubernetes.io/arch node selector, and on
    s390x the cards default to ibm.com/spyre_vf. Unset: any node, amd64's defaults."""


class ContinuousBatching(ApiModel):
    """Continuous batching (decoders): sequences join and leave the batch at every step."""

    max_model_len: Annotated[int, Field(ge=SPYRE_BLOCK, le=MAX_CONTEXT)]
    """Longest prompt + output in tokens (--max-model-len)."""
    max_num_seqs: BatchSize
    """Most sequences decoded together (--max-num-seqs)."""
    max_num_batched_tokens: BlockMultiple = 1024
    """Prefill chunk size (--max-num-batched-tokens)."""
    chunked_prefill: bool = True
    """Prefill long prompts in chunks; always on in sendnn-inference."""
    prefix_caching: bool = False
    """Reuse KV blocks of shared prompt prefixes (--enable-prefix-caching)."""
    max_batch_tkv_limit: Annotated[int, Field(ge=SPYRE_BLOCK, le=MAX_CONTEXT * 256)] | None = None
    """Override of VLLM_DT_MAX_BATCH_TKV_LIMIT; unset uses the registry or
    maxModelLen * maxNumSeqs."""
    num_gpu_blocks_override: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    """Override of the Spyre KV-cache block count (--num-gpu-blocks-override)."""


class StaticBatching(ApiModel):
    """Warmup shapes: shape i is (promptLens[i], newTokens[i], batchSizes[i])."""

    prompt_lens: Annotated[list[BlockMultiple], Field(min_length=1, max_length=16)]
    """Padded prompt length of each shape."""
    batch_sizes: Annotated[list[BatchSize], Field(min_length=1, max_length=16)]
    """Batch size of each shape."""
    new_tokens: Annotated[list[NewTokens], Field(min_length=1, max_length=16)] | None = None
    """Most output tokens of each shape (vllm-spyre decoders only)."""


class Batching(ApiModel):
    """Batching of the serving engine, fixed when compiling (part of the cache key): exactly
    one of continuous or static."""

    continuous: ContinuousBatching | None = None
    static: StaticBatching | None = None


class CacheVolume(ApiModel):
    """The PersistentVolumeClaim holding compiled graphs and hub downloads."""

    claim_name: ObjectName = "spyre-graph-cache"
    """PersistentVolumeClaim shared by all SpyreModels of the namespace."""
    create: bool = True
    """Create the claim if it does not exist (false: use an existing claim)."""
    size: Quantity = "100Gi"
    """Requested size when the operator creates the claim."""
    storage_class_name: ObjectName | None = None
    """StorageClass when the operator creates the claim; unset uses the default class."""
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce"] = "ReadWriteMany"
    """ReadWriteOnce only works when the compile Job and all replicas share one node."""


class CompileSpec(ApiModel):
    """The compile Job; unset scheduling fields are taken from the serving pod."""

    backend: CompileBackend | None = None
    """Backend of the compile step; sendnn_compile_only compiles on CPU nodes
    (sendnn-inference only, not for quantized models). Defaults to spec.backend, the only
    choice with the CPU backends (eager, inductor)."""
    resources: Resources | None = None
    """CPU/memory of the compile pod; unset takes spec.resources."""
    node_selector: LabelMap | None = None
    """Node labels the compile and weights pods need; unset takes spec.nodeSelector."""
    tolerations: Tolerations | None = None
    """Tolerations of the compile and weights pods; unset takes spec.tolerations."""
    active_deadline_seconds: Annotated[int, Field(ge=60, le=7 * 24 * 3600)] = 3 * 3600
    """How long a compile pod may run, counted from its start on a node (the wait for a
    node, e.g. for cards, is not counted: status.cache.pendingSeconds), before the kubelet
    stops it; each attempt (backoffLimit) has its own."""
    backoff_limit: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of a failed compile."""
    min_serving_replicas: Annotated[int, Field(ge=0, le=1000)] = 1
    """When a new cache key must compile on cards and no node has them free, the
    operator frees them: it scales the Deployment still serving the old key down by the
    replicas whose cards the compile needs, never below this many, until the new key is
    compiled (then it rolls to the new key at spec.replicas). 0 lets the compile take
    every serving replica's cards (an outage while it compiles); at or above
    spec.replicas the compile waits for cards to free up (Unschedulable)."""


class CacheRegistry(ApiModel):
    """Where this model's compiled caches are shared (docs/cache-sharing.md): a key is
    pulled from there before it would compile, and a compile publishes its key there.
    Unset fields take the operator's --cache-registry and --cache-registry-secret."""

    enabled: bool = True
    """false: no pull Job and no publish for this model, whatever the operator's setting."""
    repository: Annotated[str, Field(max_length=255, pattern=REPOSITORY_PATTERN)] | None = None
    """An OCI repository, host[:port]/path (lowercase, no scheme or tag)."""
    secret_name: ObjectName | None = None
    """A Secret of this namespace the Jobs mount: .dockerconfigjson (the credentials) and,
    for a private certificate, ca.crt."""


class CacheSpec(ApiModel):
    """The shared compiled-graph cache and the Job that fills it."""

    volume: CacheVolume = Field(default_factory=CacheVolume)
    registry: CacheRegistry | None = None
    """Share compiled caches through an OCI registry (overrides the operator's)."""
    require_precompiled: bool | None = None
    """Serving pods of decoders refuse to compile (REQUIRE_PRECOMPILED_DECODERS=1).
    Defaults to true for generate, must stay unset or false for pooling models."""
    compile: CompileSpec = Field(default_factory=CompileSpec)


class Accelerator(ApiModel):
    """The Spyre cards of a serving pod (and of a compile pod that compiles on cards)."""

    resource_name: Annotated[
        str, Field(pattern=r"^ibm\.com/(spyre|aiu)_(pf|vf)(_tier[0-2])?$", max_length=64)
    ] = "ibm.com/spyre_pf"
    """Extended resource of the Spyre device plugin (ibm.com/aiu_pf on older clusters);
    ibm.com/spyre_vf when runtime.architecture is s390x."""
    count: Annotated[int, Field(ge=0, le=4)] | None = None
    """Cards per replica; with sendnn it must equal tensorParallelSize (the default). The
    CPU backends (eager, inductor) default to 0; a count makes their pods hold that many
    cards as a sendnn model's would while the model runs on CPU (a stand-in for a card
    model, e.g. on a test node with fake cards)."""


class ApiKeySecret(ApiModel):
    """A Secret key holding the API key clients must send (Authorization: Bearer)."""

    name: ObjectName
    """Name of the Secret, in the SpyreModel's namespace."""
    key: SecretKey = "api-key"
    """Key in the Secret."""


class ServiceSpec(ApiModel):
    """The Service in front of the serving pods (OpenAI-compatible HTTP API), and who may
    reach it."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    """Service type."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    """Service port; the container always listens on 8000."""
    allow_from: Annotated[list[NetworkPeer], Field(min_length=1, max_length=8)] | None = None
    """Who may connect to the serving port: the operator's NetworkPolicy of the serving pods
    admits these peers only. Unset: pods of the SpyreModel's namespace only (every source
    for a NodePort or LoadBalancer Service); [{namespaceSelector: {}}] admits the pods of
    every namespace, an ipBlock clients outside the cluster."""
    api_key_secret: ApiKeySecret | None = None
    """Require an API key on /v1 (vLLM's --api-key, given to the serving container as
    VLLM_API_KEY from this Secret); /health and /metrics stay open."""


# The rolling update of a model whose serving pods hold cards: a node is usually full of
# them (8 cards: two TP4 replicas), so a surge pod would stay Pending and the rollout
# would never end; one replica at a time goes instead (its cards are freed before its
# successor asks for them). Other models keep Kubernetes' default.
CARD_ROLLOUT: tuple[int | str, int | str] = (0, 1)
KUBERNETES_ROLLOUT: tuple[int | str, int | str] = ("25%", "25%")


class Rollout(ApiModel):
    """How a change replaces the serving pods (the Deployment's RollingUpdate). Each field
    is a number of pods or a percent of the replicas; an unset one takes the default:
    maxSurge 0 and maxUnavailable 1 for models whose pods hold cards, else Kubernetes'
    25% and 25%."""

    max_surge: IntOrPercent | None = None
    """Pods above the replicas while a change rolls out; more than 0 needs free cards
    for the extra pods of a card model (else they stay Pending)."""
    max_unavailable: IntOrPercent | None = None
    """Replicas that may be down while a change rolls out; not 0 when maxSurge is 0."""


class SpyreModelSpec(ApiModel):
    """What to serve and how: the model, its batching, the compiled-graph cache and the
    serving pods."""

    model: ModelSpec
    """The model to serve."""
    task: Task = "generate"
    """generate (decoders) or a pooling task: embed, score, rerank."""
    backend: Backend = "sendnn"
    """sendnn (Spyre cards), or a CPU backend for tests: eager (compiles nothing) or
    inductor (torch.compile on CPU: the compile Job fills a real compiled-graph cache,
    TORCHINDUCTOR_CACHE_DIR in the cache key's directory, and serving pods load from it)."""
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    tensor_parallel_size: Literal[1, 2, 4] = 1
    """Cards one replica spans (--tensor-parallel-size)."""
    batching: Batching
    cache: CacheSpec = Field(default_factory=CacheSpec)
    replicas: Annotated[int, Field(ge=0, le=1000)] = 1
    """Serving replicas; `kubectl scale`, HPA and KEDA set it through the scale subresource
    (with spec.autoscaling the operator's ScaledObject does: leave it out of manifests)."""
    autoscaling: Autoscaling | None = None
    """Replicas by vLLM's load, through a KEDA ScaledObject the operator makes."""
    routing: Routing | None = None
    """An InferencePool of the serving pods with its endpoint picker, and a Gateway's route."""
    rollout: Rollout = Field(default_factory=Rollout)
    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    """Serving image; defaults to <repository>:<operator>-<flavour>-<version>, the repository
    being the operator's --runtime-image-repository [quay.io/spyre-serving/runtime]."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    """Pull policy of every container; unset leaves it to Kubernetes."""
    accelerator: Accelerator = Field(default_factory=Accelerator)
    resources: Resources = Field(default_factory=Resources)
    """CPU/memory of a serving pod; Spyre cards come from spec.accelerator."""
    node_selector: LabelMap = Field(default_factory=dict)
    """Node labels of the serving pods (and of the compile and weights pods unless
    cache.compile sets its own)."""
    tolerations: Tolerations = Field(default_factory=list)
    """Tolerations of the pods (as nodeSelector); pods with cards also tolerate the card
    resource's NoSchedule taint unless a toleration names it."""
    affinity: Affinity | None = None
    """core/v1 Affinity of the serving pods (and of compile pods that use cards)."""
    scheduler_name: Name | None = None
    """Scheduler of the serving pods and of pods with cards; unset: the cluster's default,
    or for pods with cards of an upstream runtime.imageProfile the Spyre Operator's
    (spyre-scheduler; aiu-scheduler for aiu_* resources)."""
    env: Annotated[list[EnvVar], Field(max_length=64)] = Field(default_factory=list)
    """Extra environment of the serving and compile containers."""
    extra_args: Annotated[list[Text], Field(max_length=128)] = Field(default_factory=list)
    """Extra `vllm serve` arguments, appended last."""
    service: ServiceSpec = Field(default_factory=ServiceSpec)
    # The platform's part of the pods; none changes the graphs (not in the cache key).
    image_pull_secrets: Annotated[list[LocalObjectReference], Field(max_length=16)] = Field(
        default_factory=list
    )
    """Secrets to pull the image with (a private registry), in every pod of the SpyreModel."""
    service_account_name: ObjectName | None = None
    """ServiceAccount of every pod (its identity, e.g. for an SCC or workload identity);
    unset is the namespace's default. Its token is not mounted."""
    # (keys are checked in api/rules.py: a CRD schema cannot constrain map keys)
    pod_annotations: Annotated[
        dict[str, Annotated[str, Field(max_length=ANNOTATIONS_MAX_BYTES)]], Field(max_length=32)
    ] = Field(default_factory=dict)
    """Annotations of every pod (service mesh, secret injectors, autoscaler hints)."""
    pod_labels: LabelMap = Field(default_factory=dict)
    """Labels of every pod (cost tags, policies); the operator's own labels cannot be set."""
    priority_class_name: ObjectName | None = None
    """PriorityClass of every pod."""
    topology_spread_constraints: Annotated[list[TopologySpreadConstraint], Field(max_length=4)] = (
        Field(default_factory=list)
    )
    """How the serving replicas spread across zones or nodes."""

    @model_validator(mode="before")
    @classmethod
    def _architecture_resource(cls, data: object) -> object:
        """The device resource's default depends on the architecture (VFs on Z)."""
        if not isinstance(data, dict):
            return data
        runtime, accelerator = data.get("runtime"), data.get("accelerator", {})
        arch = runtime.get("architecture") if isinstance(runtime, dict) else None
        if arch not in profiles.ARCHITECTURES or not isinstance(accelerator, dict):
            return data  # a wrong value: the field's own check says it
        if {"resourceName", "resource_name"} & accelerator.keys():
            return data
        resource = profiles.default_resource(arch)
        return {**data, "accelerator": {**accelerator, "resourceName": resource}}

    @property
    def image_profile(self) -> profiles.ImageProfile:
        return profiles.PROFILES[self.runtime.image_profile]

    @property
    def pod_scheduler(self) -> str | None:
        """The scheduler of pods with cards: spec.schedulerName, else the profile's."""
        if self.scheduler_name or not self.image_profile.spyre_scheduler:
            return self.scheduler_name
        return profiles.default_scheduler(self.accelerator.resource_name)

    @property
    def flavour(self) -> Flavour:
        return FLAVOURS[self.runtime.flavour]

    @property
    def runtime_version(self) -> str:
        return self.runtime.version or self.flavour.default_version

    def image_ref(self, images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES) -> str:
        """spec.image, else the operator's image of the flavour/version in `images`."""
        return self.image or images.image(self.runtime.flavour, self.runtime_version)

    @property
    def is_pooling(self) -> bool:
        return self.task in POOLING_TASKS

    @property
    def accelerator_count(self) -> int:
        if self.accelerator.count is not None:
            return self.accelerator.count
        return 0 if self.backend in CPU_BACKENDS else self.tensor_parallel_size

    @property
    def rolling_update(self) -> dict[str, int | str]:
        """maxSurge and maxUnavailable of the serving Deployment: spec.rollout's, the
        unset ones from the default of a card model (accelerator count above 0) or not."""
        surge, unavailable = CARD_ROLLOUT if self.accelerator_count else KUBERNETES_ROLLOUT
        chosen = self.rollout
        return {
            "maxSurge": surge if chosen.max_surge is None else chosen.max_surge,
            "maxUnavailable": (
                unavailable if chosen.max_unavailable is None else chosen.max_unavailable
            ),
        }

    @property
    def require_precompiled(self) -> bool:
        if self.cache.require_precompiled is None:
            return not self.is_pooling
        return self.cache.require_precompiled

    @property
    def compile_resources(self) -> Resources:
        return self.cache.compile.resources or self.resources

    @property
    def compile_backend(self) -> str:
        return self.cache.compile.backend or self.backend
