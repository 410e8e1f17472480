"""The SpyreModel spec: fields, defaults and per-field bounds (the one source of truth).

Bounds that a CRD schema can express live here (they become minimum/maximum/multipleOf/
enum in the CRD, so the API server enforces them too); rules across fields live in
api/rules.py.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from spyre_operator.api import runtimes
from spyre_operator.api.base import (
    PRUNED,
    ApiModel,
    LabelMap,
    LabelValue,
    Name,
    ObjectName,
    Quantity,
)
from spyre_runtime.contract import FLAVOURS, SENDNN_INFERENCE, Flavour, FlavourName

# Spyre's KV-cache block size: chunk sizes and static prompt lengths are multiples of it.
SPYRE_BLOCK = 64
# Continuous batching on Spyre supports at most a 32K context (prompt + output tokens).
MAX_CONTEXT = 32768
TP_SIZES = (1, 2, 4)
# Names of quantized checkpoints: FP8 (compressed-tensors), GPTQ, wNaM (e.g. w4a16).
QUANTIZED_NAME = re.compile(r"fp8|gptq|w[0-9]+a[0-9]+", re.IGNORECASE)

Task = Literal["generate", "embed", "score", "rerank"]
POOLING_TASKS = ("embed", "score", "rerank")
Backend = Literal["sendnn", "eager", "inductor"]
# Backends that run on CPU: eager compiles nothing, inductor compiles with torch.compile.
CPU_BACKENDS = ("eager", "inductor")
CompileBackend = Literal["sendnn", "sendnn_compile_only"]

BlockMultiple = Annotated[int, Field(ge=SPYRE_BLOCK, le=MAX_CONTEXT, multiple_of=SPYRE_BLOCK)]
NewTokens = Annotated[int, Field(ge=2, le=MAX_CONTEXT)]
BatchSize = Annotated[int, Field(ge=1, le=256)]
# Label and annotation keys: a qualified name, at most a 253-character prefix, '/' and 63.
LabelKey = Annotated[str, Field(min_length=1, max_length=317)]
EnvName = Annotated[str, Field(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", max_length=256)]
AbsolutePath = Annotated[str, Field(pattern=r"^/", max_length=4096)]
# Kubernetes' limit on all annotations of an object together (keys and values).
ANNOTATIONS_MAX_BYTES = 256 * 1024
# Free text the operator passes on (env values, extra arguments): bounded, as a request is.
Text = Annotated[str, Field(max_length=32768)]
# A key of a Secret's data (Kubernetes' IsConfigMapKey).
SecretKey = Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]


class SecretKeyRef(ApiModel):
    name: ObjectName
    """Name of the Secret."""
    key: SecretKey = "token"
    """Key in the Secret."""


class PvcSource(ApiModel):
    claim_name: ObjectName
    """PersistentVolumeClaim holding the model files."""
    sub_path: Annotated[str, Field(max_length=4096)] | None = None
    """Directory inside the claim to mount instead of its root."""
    mount_path: AbsolutePath = "/models"
    """Where the claim is mounted (read-only) in the container."""


class HostPathSource(ApiModel):
    path: AbsolutePath
    """Directory on the node holding the model files."""
    mount_path: AbsolutePath = "/models"
    """Where the directory is mounted (read-only) in the container."""


class HubSource(ApiModel):
    """The weights Job downloads the model once into the cache volume; the compile and
    serving pods load it from there with the hub switched off."""

    token_secret: SecretKeyRef | None = None
    """Secret key with a Hugging Face token (gated or private models); only the weights Job
    gets it (as HF_TOKEN), never the compile or serving pods."""
    endpoint: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=2048)] | None = None
    """Hub endpoint (HF_ENDPOINT of the weights Job), e.g. a mirror; unset is
    https://huggingface.co."""


class ModelSource(ApiModel):
    """Where the weights come from: exactly one of pvc, hostPath, hub."""

    pvc: PvcSource | None = None
    """A PersistentVolumeClaim holding the model directory."""
    host_path: HostPathSource | None = None
    """A directory on the node (needs a hostPath-capable security policy)."""
    hub: HubSource | None = None

    @property
    def mount(self) -> PvcSource | HostPathSource | None:
        return self.pvc or self.host_path


class ModelSpec(ApiModel):
    id: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """Hugging Face model id (e.g. ibm-granite/granite-3.3-8b-instruct); also names the
    model for the known-config registry."""
    path: AbsolutePath | None = None
    """Model directory in the container, under the pvc/hostPath mountPath."""
    revision: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """Model revision (branch, tag or commit) to download from the hub; default main. The
    weights Job resolves it to a commit once (status.weights.commit), and the cache key
    uses that commit."""
    served_name: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """Name clients use in requests (--served-model-name); defaults to the id."""
    quantization: Literal["gptq", "compressed-tensors"] | None = None
    """Quantization of the weights (--quantization): gptq or compressed-tensors (FP8
    checkpoints are compressed-tensors); unset lets vLLM read it from the model config."""
    source: ModelSource = Field(default_factory=lambda: ModelSource(hub=HubSource()))
    """Where the weights come from: exactly one of pvc, hostPath, hub; defaults to the
    Hugging Face hub."""

    @property
    def argument(self) -> str:
        """What names the model (cache key, known-config registry): the local path of a
        pvc/hostPath model, else the hub id."""
        return self.path or self.id or ""

    @property
    def from_hub(self) -> bool:
        return self.source.hub is not None

    @property
    def hub_revision(self) -> str:
        return self.revision or "main"

    @property
    def load_path(self) -> str:
        """The model argument of `vllm serve`: the path, or for a hub model its read-only
        copy from the cache volume."""
        if self.from_hub:
            return f"{runtimes.MODELS_ROOT}/{self.id}"
        return self.argument

    @property
    def is_quantized(self) -> bool:
        """Quantized as far as the spec tells: quantization is set, or the id/path names a
        quantized checkpoint. A checkpoint whose config alone says so is only known to vLLM
        (docs/api.md)."""
        name = (self.id or "") + " " + (self.path or "")
        return self.quantization is not None or QUANTIZED_NAME.search(name) is not None


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


class Toleration(ApiModel):
    """core/v1 Toleration."""

    key: Annotated[str, Field(max_length=317)] | None = None
    """Taint key to tolerate; empty with operator Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists (any value) or Equal (the value below); Kubernetes defaults to Equal."""
    value: LabelValue | None = None
    """Taint value to match with operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches every effect."""
    toleration_seconds: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    """With NoExecute: how long the pod stays bound after the taint appears."""


ResourceMap = Annotated[dict[str, Quantity], Field(max_length=16)]
Tolerations = Annotated[list[Toleration], Field(max_length=32)]


class Resources(ApiModel):
    limits: ResourceMap = Field(default_factory=dict)
    """Most a container may use, e.g. {cpu: 8, memory: 64Gi}."""
    requests: ResourceMap = Field(default_factory=dict)
    """What the scheduler reserves, e.g. {cpu: 4, memory: 48Gi}."""


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
    """How long a compile may run before it is failed."""
    backoff_limit: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of a failed compile."""


class CacheSpec(ApiModel):
    """The shared compiled-graph cache and the Job that fills it."""

    volume: CacheVolume = Field(default_factory=CacheVolume)
    require_precompiled: bool | None = None
    """Serving pods of decoders refuse to compile (REQUIRE_PRECOMPILED_DECODERS=1).
    Defaults to true for generate, must stay unset or false for pooling models."""
    compile: CompileSpec = Field(default_factory=CompileSpec)


class Accelerator(ApiModel):
    """The Spyre cards of a serving (and Spyre compile) pod."""

    resource_name: Annotated[
        str, Field(pattern=r"^ibm\.com/(spyre|aiu)_(pf|vf)(_tier[0-2])?$", max_length=64)
    ] = "ibm.com/spyre_pf"
    """Extended resource of the Spyre device plugin (ibm.com/aiu_pf on older clusters)."""
    count: Annotated[int, Field(ge=0, le=4)] | None = None
    """Cards per replica; must equal tensorParallelSize (default), 0 for the CPU backends
    (eager, inductor)."""


class EnvKeyRef(ApiModel):
    name: ObjectName
    """Name of the Secret or ConfigMap."""
    key: SecretKey
    """Key in it."""
    optional: bool | None = None
    """Start the pod even if the object or key is missing."""


class EnvFieldRef(ApiModel):
    """A field of the pod (core/v1 ObjectFieldSelector)."""

    field_path: Annotated[str, Field(min_length=1, max_length=256)]
    """Path of the field, e.g. metadata.name or status.podIP."""
    api_version: Annotated[str, Field(max_length=64)] | None = None
    """API version the path is written in; Kubernetes defaults to v1."""


class EnvVarSource(ApiModel):
    """Where the value comes from (instead of value): exactly one of secretKeyRef,
    configMapKeyRef, fieldRef."""

    secret_key_ref: EnvKeyRef | None = None
    """A key of a Secret in the SpyreModel's namespace."""
    config_map_key_ref: EnvKeyRef | None = None
    """A key of a ConfigMap in the SpyreModel's namespace."""
    field_ref: EnvFieldRef | None = None


class EnvVar(ApiModel):
    """core/v1 EnvVar: a value or a reference."""

    name: EnvName
    """Variable name; the names the operator renders are refused (docs/api.md)."""
    value: Text | None = None
    """Literal value."""
    value_from: EnvVarSource | None = None


class LocalObjectReference(ApiModel):
    name: ObjectName
    """Name of a docker-registry Secret (kubernetes.io/dockerconfigjson) in the SpyreModel's
    namespace."""


class _Pruned(ApiModel):
    """A copy of a Kubernetes type: the API server prunes unknown fields in it, as it does in
    a Deployment (a bounded schema: nothing unknown nests below it)."""

    model_config = ConfigDict(json_schema_extra=PRUNED)


class LabelSelectorRequirement(ApiModel):
    key: LabelKey
    """Label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the key's value is matched; In and NotIn need values, the others take none."""
    values: Annotated[list[LabelValue], Field(max_length=64)] | None = None
    """Label values for In and NotIn."""


class LabelSelector(ApiModel):
    """A label query (metav1.LabelSelector): every requirement must hold; {} matches all.
    Unknown fields are kept for a refusal by name: pruned, a typo (matchLabel) would leave
    {}, which matches every pod (a NetworkPolicy would admit them all)."""

    match_labels: LabelMap | None = None
    """Labels a match must carry (all of them)."""
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=16)] | None = None
    """Requirements a match must meet (all of them)."""


class _PrunedRequirement(LabelSelectorRequirement):
    model_config = ConfigDict(json_schema_extra=PRUNED)


class PodSelector(_Pruned):
    """A label query inside affinity, pruned as the rest of it: every requirement must hold;
    {} matches all."""

    match_labels: LabelMap | None = None
    """Labels a match must carry (all of them)."""
    match_expressions: Annotated[list[_PrunedRequirement], Field(max_length=16)] | None = None
    """Requirements a match must meet (all of them)."""


class IpBlock(ApiModel):
    """A range of IP addresses (networking/v1 IPBlock), e.g. clients outside the cluster."""

    cidr: Annotated[str, Field(min_length=1, max_length=43)]
    """Addresses admitted, e.g. 10.0.0.0/8, 0.0.0.0/0 or ::/0."""
    except_: Annotated[list[Annotated[str, Field(max_length=43)]], Field(max_length=16)] | None = (
        Field(default=None, alias="except")
    )
    """Ranges inside cidr that are not admitted."""


class NetworkPeer(ApiModel):
    """Who may connect (networking/v1 NetworkPolicyPeer): namespaceSelector and/or
    podSelector, or an ipBlock alone."""

    namespace_selector: LabelSelector | None = None
    """Namespaces whose pods are admitted; {} is every namespace. With podSelector: only
    those pods of those namespaces."""
    pod_selector: LabelSelector | None = None
    """Pods admitted; alone, pods of the SpyreModel's namespace only."""
    ip_block: IpBlock | None = None
    """Addresses admitted (clients that are not pods: a LoadBalancer's or NodePort's)."""


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
    allow_from: Annotated[list[NetworkPeer], Field(min_length=1, max_length=16)] | None = None
    """Who may connect to the serving port: the operator's NetworkPolicy of the serving pods
    admits these peers only. Unset: pods of the SpyreModel's namespace only (every source
    for a NodePort or LoadBalancer Service); [{namespaceSelector: {}}] admits the pods of
    every namespace, an ipBlock clients outside the cluster."""
    api_key_secret: ApiKeySecret | None = None
    """Require an API key on /v1 (vLLM's --api-key, given to the serving container as
    VLLM_API_KEY from this Secret); /health and /metrics stay open."""


# core/v1 Affinity (the fields of Kubernetes 1.20), with bounds on every list.
TERMS = 16


class NodeSelectorRequirement(_Pruned):
    key: LabelKey
    """Node label key (matchExpressions), or metadata.name (matchFields)."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    """In and NotIn need values, Exists and DoesNotExist take none, Gt and Lt one integer."""
    values: Annotated[list[Annotated[str, Field(max_length=253)]], Field(max_length=64)] | None = (
        None
    )
    """Values to compare with: label values, or node names for metadata.name."""


class NodeSelectorTerm(_Pruned):
    """Requirements a node must meet (all of them)."""

    match_expressions: Annotated[list[NodeSelectorRequirement], Field(max_length=TERMS)] | None = (
        None
    )
    """Requirements on the node's labels."""
    match_fields: Annotated[list[NodeSelectorRequirement], Field(max_length=TERMS)] | None = None
    """Requirements on the node's fields (metadata.name, operator In or NotIn, one value)."""


class NodeSelector(_Pruned):
    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1, max_length=TERMS)]
    """A node must meet one of the terms."""


class PreferredSchedulingTerm(_Pruned):
    weight: Annotated[int, Field(ge=1, le=100)]
    """Weight of the preference, 1-100."""
    preference: NodeSelectorTerm
    """The node preferred."""


class NodeAffinity(_Pruned):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    """Nodes the pods must run on."""
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[PreferredSchedulingTerm], Field(max_length=TERMS)] | None
    ) = None
    """Nodes the pods prefer."""


Namespaces = Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=TERMS)]


class PodAffinityTerm(_Pruned):
    label_selector: PodSelector | None = None
    """Pods this term is about."""
    namespaces: Namespaces | None = None
    """Namespaces of those pods; unset: the SpyreModel's namespace."""
    topology_key: LabelKey
    """Node label whose value is the domain, e.g. kubernetes.io/hostname."""


class WeightedPodAffinityTerm(_Pruned):
    weight: Annotated[int, Field(ge=1, le=100)]
    """Weight of the preference, 1-100."""
    pod_affinity_term: PodAffinityTerm
    """The term preferred."""


class PodAffinity(_Pruned):
    """Pods to run near (podAffinity) or away from (podAntiAffinity)."""

    required_during_scheduling_ignored_during_execution: (
        Annotated[list[PodAffinityTerm], Field(max_length=TERMS)] | None
    ) = None
    """Terms the pods must meet."""
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[WeightedPodAffinityTerm], Field(max_length=TERMS)] | None
    ) = None
    """Terms the pods prefer to meet."""


class Affinity(_Pruned):
    """core/v1 Affinity."""

    node_affinity: NodeAffinity | None = None
    """Nodes the pods run on, by node labels."""
    pod_affinity: PodAffinity | None = None
    """Pods to run near (in the same topology domain)."""
    pod_anti_affinity: PodAffinity | None = None
    """Pods to run away from (not in the same topology domain)."""


class TopologySpreadConstraint(ApiModel):
    """core/v1 TopologySpreadConstraint (the fields of Kubernetes 1.20)."""

    max_skew: Annotated[int, Field(ge=1, le=1000)]
    """Most the number of matching pods may differ between two topology domains."""
    topology_key: LabelKey
    """Node label whose values are the domains, e.g. topology.kubernetes.io/zone."""
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    """DoNotSchedule keeps a pod pending; ScheduleAnyway only prefers the spread."""
    label_selector: LabelSelector | None = None
    """Pods counted for the spread; unset: this SpyreModel's serving pods."""


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
    """Serving replicas; `kubectl scale`, HPA and KEDA set it through the scale subresource."""
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
    """Pod scheduler, e.g. spyre-scheduler."""
    env: Annotated[list[EnvVar], Field(max_length=128)] = Field(default_factory=list)
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
        dict[str, Annotated[str, Field(max_length=ANNOTATIONS_MAX_BYTES)]], Field(max_length=64)
    ] = Field(default_factory=dict)
    """Annotations of every pod (service mesh, secret injectors, autoscaler hints)."""
    pod_labels: LabelMap = Field(default_factory=dict)
    """Labels of every pod (cost tags, policies); the operator's own labels cannot be set."""
    priority_class_name: ObjectName | None = None
    """PriorityClass of every pod."""
    topology_spread_constraints: Annotated[list[TopologySpreadConstraint], Field(max_length=8)] = (
        Field(default_factory=list)
    )
    """How the serving replicas spread across zones or nodes."""

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
