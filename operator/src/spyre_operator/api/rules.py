"""Rules across fields of a parsed spec (what a CRD schema cannot express).

Each rule yields Problems whose message says the rule and the fix. The facts behind them
are in docs/api.md ("Rules").
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Callable, Iterator

from spyre_operator.api import runtimes
from spyre_operator.api.base import DNS_LABEL, DNS_SUBDOMAIN, cpu_cores, quantity_value
from spyre_operator.api.imageref import IMAGE_NAME_MAX, IMAGE_REF
from spyre_operator.api.names import GROUP
from spyre_operator.api.problem import Problem, clip, join_path, shown
from spyre_operator.api.spec import (
    ANNOTATIONS_MAX_BYTES,
    CPU_BACKENDS,
    SPYRE_BLOCK,
    Affinity,
    EnvFieldRef,
    IpBlock,
    LabelSelector,
    ModelSpec,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinity,
    PodAffinityTerm,
    PodSelector,
    Resources,
    SpyreModelSpec,
    Toleration,
)
from spyre_runtime import contract

Rule = Callable[[SpyreModelSpec], Iterator[Problem]]

CB = "spec.batching.continuous"
STATIC = "spec.batching.static"
ACCELERATOR_RESOURCE = re.compile(r"^ibm\.com/(spyre|aiu)_")
# Mount points the operator uses itself.
RESERVED_MOUNTS = (runtimes.CACHE_ROOT, "/dev/shm", "/tmp", runtimes.HOME_DIR)
# A hub repository id (org/name or name) and a revision, as the weights Job gets them.
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
HUB_REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*$")

# vLLM flags the operator renders, and the field to set instead (extraArgs may not repeat
# them: two values would be ambiguous and several change the graphs but not the cache key).
RENDERED_FLAGS = {
    "--model": "spec.model.id or spec.model.path",
    "--revision": "spec.model.revision",
    "--quantization": "spec.model.quantization",
    "-q": "spec.model.quantization",
    "--served-model-name": "spec.model.servedName",
    "--tensor-parallel-size": "spec.tensorParallelSize",
    "-tp": "spec.tensorParallelSize",
    "--max-model-len": f"{CB}.maxModelLen",
    "--max-num-seqs": f"{CB}.maxNumSeqs",
    "--max-num-batched-tokens": f"{CB}.maxNumBatchedTokens",
    "--enable-chunked-prefill": f"{CB}.chunkedPrefill",
    "--no-enable-chunked-prefill": f"{CB}.chunkedPrefill",
    "--enable-prefix-caching": f"{CB}.prefixCaching",
    "--no-enable-prefix-caching": f"{CB}.prefixCaching",
    "--num-gpu-blocks-override": f"{CB}.numGpuBlocksOverride",
    "--runner": "spec.task",
    "--port": "spec.service.port (the container always listens on 8000)",
    "--dtype": "nothing: vLLM-Spyre picks the dtype (fp16 on Spyre, fp32 on CPU)",
    "--api-key": "spec.service.apiKeySecret (a Secret: an argument is plain text in the pod)",
    # vLLM reads more arguments from this file: it could set any of the above
    "--config": "the spec fields (a config file could set the flags the operator renders)",
}


# Labels the operator (selectors, identity) and the Deployment and Job controllers set on
# the pods: podLabels may not replace them. Annotations under the operator's prefix are its.
RESERVED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "pod-template-hash",
    "controller-uid",
    "job-name",
)
RESERVED_PREFIXES = (f"{GROUP}/", "batch.kubernetes.io/")
# Kubernetes' limits: label/annotation key names and label values, all annotations together.
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
SUBDOMAIN = re.compile(DNS_SUBDOMAIN)
# Container resources without a domain (IsStandardContainerResourceName); others are
# extended resources, a qualified name with a domain (example.com/device).
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
RESOURCE_RULE = (
    "use cpu, memory, ephemeral-storage or hugepages-<size>, or an extended resource with "
    "a domain (example.com/device)"
)
# Kubernetes counts a quantity as an int64 of its smallest unit (milli).
QUANTITY_MAX = (2**63 - 1) // 1000
INTEGER = re.compile(r"[-+]?[0-9]{1,19}")  # an int64, as Gt and Lt compare
NAMESPACE = re.compile(DNS_LABEL)
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
KEY_RULE = (
    "an optional DNS subdomain prefix and '/' (e.g. example.com/), then a name of at most "
    "63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit"
)
VALUE_RULE = (
    "empty, or at most 63 letters, digits, '-', '_' or '.' that start and end with a "
    "letter or digit"
)


def _ceil_block(n: int) -> int:
    return -(-n // SPYRE_BLOCK) * SPYRE_BLOCK


def _quantized_because(s: SpyreModelSpec) -> str:
    q = s.model.quantization
    return f"quantization {q}" if q else f"{s.model.argument} names a quantized checkpoint"


def model_identity(s: SpyreModelSpec) -> Iterator[Problem]:
    if not s.model.id and not s.model.path:
        yield Problem(
            "spec.model",
            "set id (a Hugging Face model id) or path (a model directory on a pvc or "
            "hostPath source)",
        )


def _hub_model(m: ModelSpec) -> Iterator[Problem]:
    if m.path:
        yield Problem(
            "spec.model.path",
            "a hub model is downloaded by id: remove path, or read the model from a "
            "pvc or hostPath source",
        )
    if m.id and (not HUB_ID.fullmatch(m.id) or ".." in m.id):
        yield Problem(
            "spec.model.id",
            f"{shown(m.id)} is not a Hugging Face model id: use org/name (letters, digits, "
            "'-', '_', '.'; each part starts with a letter or digit)",
        )
    if m.revision and (not HUB_REVISION.fullmatch(m.revision) or ".." in m.revision):
        yield Problem(
            "spec.model.revision",
            f"{shown(m.revision)} is not a branch, tag or commit name: letters, digits and "
            "'._/+-', starting with a letter, digit or '_'",
        )


def model_source(s: SpyreModelSpec) -> Iterator[Problem]:
    m, src = s.model, s.model.source
    chosen = [n for n, v in (("pvc", src.pvc), ("hostPath", src.host_path), ("hub", src.hub)) if v]
    if len(chosen) != 1:
        got = ", ".join(chosen) or "none"
        yield Problem("spec.model.source", f"set exactly one of pvc, hostPath, hub (got {got})")
        return
    mount = src.mount
    if mount is None:
        yield from _hub_model(m)
        return
    where = mount.mount_path.rstrip("/") or "/"
    if not m.path:
        yield Problem(
            "spec.model.path",
            f"required with a {chosen[0]} source: the model directory, e.g. {where}/<model>",
        )
    elif not posixpath.normpath(m.path).startswith(where + "/"):
        yield Problem(
            "spec.model.path",
            f"must be inside the source's mountPath {clip(where)}, got {clip(m.path)}",
        )
    if m.revision:
        yield Problem(
            "spec.model.revision",
            f"only applies to hub downloads; the files on the {chosen[0]} are used as they "
            "are: remove revision",
        )
    for reserved in RESERVED_MOUNTS:
        if where == "/" or where == reserved or where.startswith(reserved + "/"):
            yield Problem(
                f"spec.model.source.{chosen[0]}.mountPath",
                f"{clip(where)} is used by the operator ({', '.join(RESERVED_MOUNTS)} and /): "
                "choose another directory such as /models",
            )
            break


def batching_mode(s: SpyreModelSpec) -> Iterator[Problem]:
    b = s.batching
    if (b.continuous is None) == (b.static is None):
        yield Problem("spec.batching", "set exactly one of continuous or static")
    elif s.is_pooling and b.continuous:
        yield Problem(
            CB,
            f"pooling models (task {s.task}) run on static warmup shapes, where maxModelLen, "
            "maxNumSeqs and prefix caching do not apply: replace continuous with static "
            "(promptLens, batchSizes)",
        )
    elif not s.is_pooling and b.static and not s.flavour.static_decoders:
        yield Problem(
            STATIC,
            f"{s.flavour.name} has no static batching for decoders (task generate): use "
            "batching.continuous, or runtime.flavour vllm-spyre",
        )


def static_shapes(s: SpyreModelSpec) -> Iterator[Problem]:
    st = s.batching.static
    if st is None:
        return
    lengths = {"promptLens": len(st.prompt_lens), "batchSizes": len(st.batch_sizes)}
    if st.new_tokens is None:
        if not s.is_pooling:
            yield Problem(
                f"{STATIC}.newTokens",
                "required for static decoder batching: the most output tokens of each shape "
                "(at least 2)",
            )
    elif s.is_pooling:
        yield Problem(f"{STATIC}.newTokens", "pooling models generate no tokens: remove newTokens")
    else:
        lengths["newTokens"] = len(st.new_tokens)
    if len(set(lengths.values())) > 1:
        got = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        yield Problem(
            STATIC,
            f"the warmup lists must have the same length (one entry per shape): {got}",
        )


def continuous_batching(s: SpyreModelSpec) -> Iterator[Problem]:
    cb, f = s.batching.continuous, s.flavour
    if cb is None:
        return
    if not cb.chunked_prefill:
        if not f.reads(contract.USE_CHUNKED_PREFILL):
            yield Problem(
                f"{CB}.chunkedPrefill",
                f"{f.name} always prefills in chunks: remove chunkedPrefill or set it to true",
            )
        else:
            if cb.max_num_batched_tokens < cb.max_model_len:
                yield Problem(
                    f"{CB}.maxNumBatchedTokens",
                    "without chunked prefill a prompt is prefilled in one step, so "
                    f"maxNumBatchedTokens ({cb.max_num_batched_tokens}) must be at least "
                    f"maxModelLen ({cb.max_model_len}): set it to "
                    f"{_ceil_block(cb.max_model_len)}, or set chunkedPrefill: true",
                )
            if cb.prefix_caching:
                yield Problem(
                    f"{CB}.prefixCaching",
                    f"prefix caching needs chunked prefill in {f.name}: set chunkedPrefill: "
                    "true or prefixCaching: false",
                )
    if s.model.is_quantized and cb.max_num_seqs == 1:
        yield Problem(
            f"{CB}.maxNumSeqs",
            f"quantized models ({_quantized_because(s)}) do not support batch size 1 with "
            "continuous batching (vLLM-Spyre refuses it for any quantization): use 2 or more",
        )


def accelerators(s: SpyreModelSpec) -> Iterator[Problem]:
    count, tp = s.accelerator_count, s.tensor_parallel_size
    if s.backend == "sendnn" and count != tp:
        yield Problem(
            "spec.accelerator.count",
            f"must equal tensorParallelSize ({tp}), one Spyre card per tensor-parallel rank: "
            f"set {tp} or leave it unset",
        )
    elif s.backend in CPU_BACKENDS and count not in (0, tp):
        yield Problem(
            "spec.accelerator.count",
            f"the {s.backend} backend runs on CPU: set 0 (the default) or {tp}",
        )


def inductor_batching(s: SpyreModelSpec) -> Iterator[Problem]:
    f = s.flavour
    if s.backend == "inductor" and s.batching.continuous and not f.inductor_continuous_batching:
        yield Problem(
            "spec.backend",
            f"{f.name} cannot compile continuous batching with inductor (it passes the "
            "Spyre-only torch.compile option sendnn.dynamic, which inductor refuses): use "
            "runtime.flavour sendnn-inference, or backend eager",
        )


def compile_step(s: SpyreModelSpec) -> Iterator[Problem]:
    backend, f = s.cache.compile.backend, s.flavour
    path = "spec.cache.compile.backend"
    if backend is None:
        return
    if s.backend == "eager":
        yield Problem(path, "the eager backend compiles nothing: remove cache.compile.backend")
    elif s.backend == "inductor":
        yield Problem(
            path,
            "the inductor backend compiles on CPU and its compile Job warms up with inductor "
            "too (the serving pods load exactly those graphs): remove cache.compile.backend",
        )
    elif backend == "sendnn_compile_only" and not f.compile_only_backend:
        yield Problem(
            path,
            f"{f.name} has no sendnn_compile_only backend (sendnn-inference has): use sendnn "
            "to compile on Spyre cards, or runtime.flavour sendnn-inference",
        )
    elif backend == "sendnn_compile_only" and s.model.is_quantized:
        yield Problem(
            path,
            f"sendnn_compile_only cannot compile quantized models ({_quantized_because(s)}): "
            "use sendnn to compile on Spyre cards",
        )


def precompiled_pooling(s: SpyreModelSpec) -> Iterator[Problem]:
    if s.is_pooling and s.cache.require_precompiled:
        yield Problem(
            "spec.cache.requirePrecompiled",
            "only decoders can require precompiled graphs (vLLM-Spyre does not apply it to "
            "pooling models): remove it or set false",
        )


def runtime_version(s: SpyreModelSpec) -> Iterator[Problem]:
    version, f = s.runtime.version, s.flavour
    # compared as text: int() of a 5,000-digit major part raises
    if version and (version.split(".")[0].lstrip("0") or "0") != str(f.major_version):
        yield Problem(
            "spec.runtime.version",
            f"{f.name} versions are {f.major_version}.x, got {clip(version)}: use e.g. "
            f"{f.default_version}, or pick the flavour that matches the version",
        )


def extra_env(s: SpyreModelSpec) -> Iterator[Problem]:
    seen: set[str] = set()
    for i, e in enumerate(s.env):
        path = f"spec.env[{i}]"
        if e.name in seen:
            yield Problem(f"{path}.name", f"{e.name} is set twice: keep one")
        seen.add(e.name)
        if e.name.endswith(runtimes.MODEL_CONFIG_FILE) and runtimes.is_reserved_env(e.name):
            yield Problem(
                f"{path}.name",
                f"{e.name} replaces vLLM-Spyre's known-config registry, whose device "
                "settings shape the compiled graphs, and the file's content cannot be part "
                "of the cache key: set batching.continuous.maxBatchTkvLimit or "
                "numGpuBlocksOverride instead",
            )
        elif e.name == contract.TORCHINDUCTOR_CACHE_DIR:
            yield Problem(
                f"{path}.name",
                f"{e.name} is set by the operator: with backend inductor it is inductor's "
                "cache in the cache key's directory, which the compile Job fills for the "
                "serving pods: remove it",
            )
        elif runtimes.is_reserved_env(e.name):
            yield Problem(
                f"{path}.name",
                f"{e.name} is set by the operator or by vLLM-Spyre from spec fields and may "
                "change the compiled graphs (docs/api.md lists them): set the field instead",
            )
        if e.value is not None and e.value_from is not None:
            yield Problem(path, "set value or valueFrom, not both")
        if e.value_from and len(e.value_from.to_k8s()) != 1:
            yield Problem(
                f"{path}.valueFrom", "set exactly one of secretKeyRef, configMapKeyRef, fieldRef"
            )
        if e.value_from and e.value_from.field_ref:
            yield from _field_ref_problems(f"{path}.valueFrom.fieldRef", e.value_from.field_ref)


# The pod fields Kubernetes passes to an env var (validEnvDownwardAPIFieldPathExpressions),
# besides one label or annotation: metadata.labels['KEY'], metadata.annotations['KEY'].
DOWNWARD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.podIP",
    "status.podIPs",
)
_SUBSCRIPT = re.compile(r"metadata\.(labels|annotations)\['(.*)'\]", re.DOTALL)


def _field_ref_problems(where: str, ref: EnvFieldRef) -> Iterator[Problem]:
    if ref.api_version not in (None, "v1"):
        yield Problem(
            f"{where}.apiVersion",
            f"{shown(ref.api_version)}: a pod's fields are v1: use v1, or leave it out",
        )
    subscript = _SUBSCRIPT.fullmatch(ref.field_path)
    if subscript:
        what = "a label" if subscript[1] == "labels" else "an annotation"
        yield from _key_problems(f"{where}.fieldPath", subscript[2], what)
    elif ref.field_path not in DOWNWARD_FIELDS:
        yield Problem(
            f"{where}.fieldPath",
            f"{shown(ref.field_path)} is not a field Kubernetes passes to env: use one of "
            f"{', '.join(DOWNWARD_FIELDS)}, metadata.labels['KEY'] or "
            "metadata.annotations['KEY']",
        )


def rendered_flags_set_by(arg: str) -> list[str]:
    """The rendered flags an argument sets under any spelling vLLM's argument parser
    (argparse) accepts: `--flag=value`, underscores for dashes (vLLM rewrites them),
    an abbreviation (`--max-model`), a short option with its value attached (`-qgptq`)."""
    key = arg.split("=", 1)[0]
    if key.startswith("--") and len(key) > 2:
        key = "--" + key[2:].replace("_", "-")
        return [f for f in RENDERED_FLAGS if f.startswith("--") and f.startswith(key)]
    if key.startswith("-") and len(key) > 1 and not key[1].isdigit():  # -5 is a value
        short = [f for f in RENDERED_FLAGS if not f.startswith("--")]
        # an abbreviation (-t for -tp), or a one-letter option with its value attached
        return [f for f in short if f.startswith(key) or (len(f) == 2 and key.startswith(f))]
    return []


def extra_args(s: SpyreModelSpec) -> Iterator[Problem]:
    for i, arg in enumerate(s.extra_args):
        flags = rendered_flags_set_by(arg)
        if flags:
            fields = " or ".join(dict.fromkeys(RENDERED_FLAGS[f] for f in flags))
            option, is_set, _ = arg.partition("=")  # the value is not repeated: maybe a key
            written = shown(option + ("=..." if is_set else ""))
            yield Problem(
                f"spec.extraArgs[{i}]",
                f"{written} sets {' or '.join(flags)}, which the operator renders: set "
                f"{fields} instead",
            )


def argument_values(s: SpyreModelSpec) -> Iterator[Problem]:
    """Values the operator passes as vLLM arguments: one that starts with '-' would be read
    as an option. (A hub id and revision follow the hub's grammar: _hub_model.)"""
    m = s.model
    values = {"spec.model.servedName": m.served_name}
    if not m.from_hub:
        values["spec.model.id"] = m.id
    for path, value in values.items():
        if value is not None and value.startswith("-"):
            yield Problem(
                path,
                f"{shown(value)} starts with '-', so vLLM would read it as an option: use a "
                "name that starts with a letter or digit",
            )


def _resource_name_problem(name: str) -> str | None:
    """What Kubernetes says against a container resource name (validateContainerResourceName),
    or None."""
    if "/" not in name:
        if name in STANDARD_RESOURCES or name.startswith("hugepages-"):
            return None
        return f"{shown(name)} is not a container resource: {RESOURCE_RULE}"
    if not _qualified_name(name) or name.startswith("requests."):
        return f"{shown(name)} is not a resource name: {RESOURCE_RULE}"
    return None


def _extended(name: str) -> bool:
    """An extended resource (a device plugin's): whole units, requests equal to limits."""
    return "/" in name and "kubernetes.io/" not in name


def _overcommitable(name: str) -> bool:
    """Kubernetes' IsOvercommitAllowed: a request below its limit (not hugepages, not
    extended resources)."""
    return not (_extended(name) or name.startswith("hugepages-"))


def _resource_problems(path: str, res: Resources | None) -> Iterator[Problem]:
    if res is None:
        return
    for kind, amounts in (("limits", res.limits), ("requests", res.requests)):
        for name, amount in amounts.items():
            where = join_path(path, kind, name)
            bad_name = _resource_name_problem(name)
            value = quantity_value(amount)
            if ACCELERATOR_RESOURCE.match(name):
                yield Problem(where, "Spyre cards are requested with spec.accelerator: remove it")
            elif bad_name:
                yield Problem(where, bad_name)
            elif value > QUANTITY_MAX:
                yield Problem(where, f"{amount} is more than Kubernetes counts: use e.g. 8 or 64Gi")
            elif name == "cpu":
                try:
                    cpu_cores(amount)
                except ValueError:
                    yield Problem(where, f"use cores (8) or millicores (7500m), got {amount}")
            elif _extended(name) and value.denominator != 1:
                yield Problem(where, f"{name} is counted in whole units, got {amount}")
    for name, amount in res.requests.items():
        limit = res.limits.get(name)
        where = join_path(path, "requests", name)
        if _resource_name_problem(name) or ACCELERATOR_RESOURCE.match(name):
            continue
        if limit is not None and quantity_value(amount) > quantity_value(limit):
            yield Problem(
                where,
                f"{amount} is more than the limit {limit}: a container may not request more "
                "than it may use; raise limits or lower requests",
            )
        elif not _overcommitable(name) and (
            limit is None or quantity_value(amount) != quantity_value(limit)
        ):
            yield Problem(
                where,
                f"{name} cannot be overcommitted: set limits.{name} to the same amount ({amount})",
            )

    named = set(res.limits) | set(res.requests)
    if any(n.startswith("hugepages-") for n in named) and not named & {"cpu", "memory"}:
        yield Problem(
            join_path(path, "limits"),
            "hugepages need cpu or memory set too (Kubernetes refuses hugepages alone): add "
            "e.g. limits.memory",
        )


def resources(s: SpyreModelSpec) -> Iterator[Problem]:
    yield from _resource_problems("spec.resources", s.resources)
    yield from _resource_problems("spec.cache.compile.resources", s.cache.compile.resources)


def _qualified_name(key: str) -> bool:
    """Kubernetes' IsQualifiedName (label and annotation keys). fullmatch: `$` would let a
    trailing newline through."""
    *prefix, name = key.split("/", 1)
    if prefix and not (len(prefix[0]) <= 253 and SUBDOMAIN.fullmatch(prefix[0])):
        return False
    return len(name) <= 63 and LABEL_NAME.fullmatch(name) is not None


def _key_problems(where: str, key: str, what: str = "label") -> Iterator[Problem]:
    if not _qualified_name(key):
        yield Problem(where, f"{shown(key)} is not {what} key: {KEY_RULE}")


def _value_problems(where: str, value: str) -> Iterator[Problem]:
    if value and not (len(value) <= 63 and LABEL_NAME.fullmatch(value)):
        yield Problem(where, f"{shown(value)} is not a label value: {VALUE_RULE}")


def _label_problems(path: str, labels: dict[str, str]) -> Iterator[Problem]:
    for key, value in labels.items():
        yield from _key_problems(join_path(path, key), key, "a label")
        yield from _value_problems(join_path(path, key), value)


def pod_metadata(s: SpyreModelSpec) -> Iterator[Problem]:
    yield from _label_problems("spec.podLabels", s.pod_labels)
    for key in s.pod_labels:
        if key in RESERVED_LABELS or key.startswith(RESERVED_PREFIXES):
            yield Problem(
                join_path("spec.podLabels", key),
                f"{key} is set by the operator or by Kubernetes (it selects or identifies the "
                "pods): use a key of your own",
            )
    for key in s.pod_annotations:
        where = join_path("spec.podAnnotations", key)
        yield from _key_problems(where, key, "an annotation")
        if key.startswith(f"{GROUP}/"):
            yield Problem(where, f"keys under {GROUP}/ are the operator's: use a key of your own")
    size = sum(len(k.encode()) + len(v.encode()) for k, v in s.pod_annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        yield Problem(
            "spec.podAnnotations",
            f"keys and values come to {size} bytes; Kubernetes allows {ANNOTATIONS_MAX_BYTES}",
        )


def _toleration_problems(path: str, tolerations: list[Toleration] | None) -> Iterator[Problem]:
    """Kubernetes' ValidateTolerations."""
    for i, t in enumerate(tolerations or []):
        where = f"{path}[{i}]"
        if t.key:
            yield from _key_problems(f"{where}.key", t.key, "a taint")
        elif t.operator != "Exists":
            yield Problem(
                f"{where}.operator",
                "must be Exists when key is empty (a toleration of every taint): set a key, "
                "or operator: Exists",
            )
        if t.toleration_seconds is not None and t.effect != "NoExecute":
            yield Problem(
                f"{where}.effect",
                "must be NoExecute when tolerationSeconds is set (only NoExecute taints evict): "
                "set effect: NoExecute, or remove tolerationSeconds",
            )
        if t.operator == "Exists" and t.value:
            yield Problem(
                f"{where}.value",
                "must be empty with operator Exists (every value matches): remove value, or "
                "use operator: Equal",
            )
        elif t.value:
            yield from _value_problems(f"{where}.value", t.value)


def placement(s: SpyreModelSpec) -> Iterator[Problem]:
    """nodeSelector and tolerations of the pods (and of the compile and weights pods)."""
    compile_spec = s.cache.compile
    yield from _label_problems("spec.nodeSelector", s.node_selector)
    yield from _label_problems("spec.cache.compile.nodeSelector", compile_spec.node_selector or {})
    yield from _toleration_problems("spec.tolerations", s.tolerations)
    yield from _toleration_problems("spec.cache.compile.tolerations", compile_spec.tolerations)
    name = s.scheduler_name
    if name is not None and (not name.isprintable() or any(c.isspace() for c in name)):
        yield Problem(
            "spec.schedulerName",
            f"{shown(name)} cannot name a scheduler: no spaces or control characters (e.g. "
            "spyre-scheduler)",
        )


def _int64(text: str) -> bool:
    return INTEGER.fullmatch(text) is not None and -(2**63) <= int(text) < 2**63


def _requirement_problems(where: str, req: NodeSelectorRequirement) -> Iterator[Problem]:
    values, op = req.values or [], req.operator
    if op in ("In", "NotIn") and not values:
        yield Problem(f"{where}.values", f"required with operator {op}: the values to match")
    elif op in ("Exists", "DoesNotExist") and values:
        yield Problem(f"{where}.values", f"operator {op} takes none: remove them")
    elif op in ("Gt", "Lt") and (len(values) != 1 or not _int64(values[0])):
        yield Problem(
            f"{where}.values",
            f"operator {op} takes exactly one integer, e.g. ['4'], got {shown(values)}",
        )


def _node_term_problems(path: str, term: NodeSelectorTerm) -> Iterator[Problem]:
    for i, req in enumerate(term.match_expressions or []):
        where = f"{path}.matchExpressions[{i}]"
        yield from _key_problems(f"{where}.key", req.key, "a node label")
        yield from _requirement_problems(where, req)
    for i, req in enumerate(term.match_fields or []):
        where = f"{path}.matchFields[{i}]"
        if req.key != "metadata.name":
            yield Problem(
                f"{where}.key",
                f"{shown(req.key)} is no node field Kubernetes selects on: use metadata.name",
            )
        if req.operator not in ("In", "NotIn") or len(req.values or []) != 1:
            yield Problem(where, "takes operator In or NotIn and exactly one value (a node name)")


def _pod_term_problems(path: str, term: PodAffinityTerm) -> Iterator[Problem]:
    yield from _key_problems(f"{path}.topologyKey", term.topology_key, "a node label")
    if term.label_selector is not None:
        yield from _selector_problems(f"{path}.labelSelector", term.label_selector)
    for i, namespace in enumerate(term.namespaces or []):
        if not NAMESPACE.fullmatch(namespace):
            yield Problem(
                f"{path}.namespaces[{i}]",
                f"{shown(namespace)} is not a namespace name: lowercase letters, digits and "
                "'-', starting and ending with a letter or digit",
            )


def _pod_affinity_problems(path: str, pa: PodAffinity | None) -> Iterator[Problem]:
    if pa is None:
        return
    for i, term in enumerate(pa.required_during_scheduling_ignored_during_execution or []):
        yield from _pod_term_problems(f"{path}.{REQUIRED}[{i}]", term)
    for i, weighted in enumerate(pa.preferred_during_scheduling_ignored_during_execution or []):
        yield from _pod_term_problems(
            f"{path}.{PREFERRED}[{i}].podAffinityTerm", weighted.pod_affinity_term
        )


def affinity(s: SpyreModelSpec) -> Iterator[Problem]:
    """Kubernetes' ValidateAffinity, past the schema (types, required fields, weights)."""
    a: Affinity | None = s.affinity
    if a is None:
        return
    node = a.node_affinity
    if node is not None:
        path = "spec.affinity.nodeAffinity"
        required = node.required_during_scheduling_ignored_during_execution
        for i, term in enumerate(required.node_selector_terms if required else []):
            yield from _node_term_problems(f"{path}.{REQUIRED}.nodeSelectorTerms[{i}]", term)
        for i, pref in enumerate(node.preferred_during_scheduling_ignored_during_execution or []):
            yield from _node_term_problems(f"{path}.{PREFERRED}[{i}].preference", pref.preference)
    yield from _pod_affinity_problems("spec.affinity.podAffinity", a.pod_affinity)
    yield from _pod_affinity_problems("spec.affinity.podAntiAffinity", a.pod_anti_affinity)


def image(s: SpyreModelSpec) -> Iterator[Problem]:
    ref = s.image
    if ref is None:
        return
    if ref != ref.strip():
        yield Problem(
            "spec.image",
            f"{shown(ref)} has leading or trailing whitespace, which Kubernetes refuses in a "
            "pod: remove it",
        )
    elif not (match := IMAGE_REF.fullmatch(ref)) or len(match["name"]) > IMAGE_NAME_MAX:
        yield Problem(
            "spec.image",
            f"{shown(ref)} is not an image reference: [registry[:port]/]name[:tag][@digest], the "
            "name in lowercase (e.g. quay.io/org/image:1.0)",
        )


def cache_volume(s: SpyreModelSpec) -> Iterator[Problem]:
    size = s.cache.volume.size
    if quantity_value(size) <= 0:
        yield Problem(
            "spec.cache.volume.size",
            f"must be more than 0, got {shown(size)}: the claim's size, e.g. 100Gi",
        )


def image_pull_secrets(s: SpyreModelSpec) -> Iterator[Problem]:
    names = [ref.name for ref in s.image_pull_secrets]
    for i, name in enumerate(names):
        if name in names[:i]:
            yield Problem(f"spec.imagePullSecrets[{i}].name", f"{name} is listed twice: keep one")


def _selector_problems(path: str, selector: LabelSelector | PodSelector) -> Iterator[Problem]:
    yield from _label_problems(f"{path}.matchLabels", selector.match_labels or {})
    for i, req in enumerate(selector.match_expressions or []):
        where = f"{path}.matchExpressions[{i}]"
        yield from _key_problems(f"{where}.key", req.key, "a label")
        listed = req.operator in ("In", "NotIn")
        if listed and not req.values:
            yield Problem(
                f"{where}.values", f"required with operator {req.operator}: the values to match"
            )
        elif not listed and req.values:
            yield Problem(f"{where}.values", f"operator {req.operator} takes none: remove them")
        for j, value in enumerate(req.values or []):
            yield from _value_problems(f"{where}.values[{j}]", value)


def topology_spread(s: SpyreModelSpec) -> Iterator[Problem]:
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(s.topology_spread_constraints):
        path = f"spec.topologySpreadConstraints[{i}]"
        yield from _key_problems(f"{path}.topologyKey", c.topology_key, "a node label")
        pair = (c.topology_key, c.when_unsatisfiable)
        if pair in seen:
            yield Problem(
                path,
                f"a second constraint on {pair[0]} with {pair[1]}: Kubernetes allows one per "
                "topologyKey and whenUnsatisfiable, keep one",
            )
        seen.add(pair)
        if c.label_selector is not None:
            yield from _selector_problems(f"{path}.labelSelector", c.label_selector)


def _cidr_problems(path: str, block: IpBlock) -> Iterator[Problem]:
    try:
        network = ipaddress.ip_network(block.cidr, strict=False)
    except ValueError:
        yield Problem(f"{path}.cidr", f"{block.cidr!r} is not a CIDR: write e.g. 10.0.0.0/8")
        return
    for i, text in enumerate(block.except_ or []):
        where = f"{path}.except[{i}]"
        try:
            inner = ipaddress.ip_network(text, strict=False)
        except ValueError:
            yield Problem(where, f"{text!r} is not a CIDR: write e.g. 10.1.0.0/16")
            continue
        inside = inner.network_address in network and inner.broadcast_address in network
        if not inside or inner.prefixlen <= network.prefixlen:
            yield Problem(where, f"{text} must be a range inside cidr {block.cidr}")


def network_policy(s: SpyreModelSpec) -> Iterator[Problem]:
    for i, peer in enumerate(s.service.allow_from or []):
        path = f"spec.service.allowFrom[{i}]"
        selectors = {
            "namespaceSelector": peer.namespace_selector,
            "podSelector": peer.pod_selector,
        }
        if peer.ip_block is not None:
            if any(v is not None for v in selectors.values()):
                yield Problem(
                    path, "ipBlock stands alone: put the selectors in a peer of their own"
                )
            yield from _cidr_problems(f"{path}.ipBlock", peer.ip_block)
        elif all(v is None for v in selectors.values()):
            yield Problem(
                path,
                "set namespaceSelector and/or podSelector, or ipBlock ({namespaceSelector: {}} "
                "admits every namespace)",
            )
        for name, selector in selectors.items():
            if selector is not None:
                yield from _selector_problems(f"{path}.{name}", selector)


def api_key(s: SpyreModelSpec) -> Iterator[Problem]:
    for i, e in enumerate(s.env):
        if e.name != runtimes.VLLM_API_KEY:
            continue
        if s.service.api_key_secret is not None:
            yield Problem(
                f"spec.env[{i}].name",
                f"{e.name} comes from spec.service.apiKeySecret: remove it from env",
            )
        elif e.value is not None:
            yield Problem(
                f"spec.env[{i}].value",
                "an API key as a value is plain text in the pod spec: put it in a Secret and "
                "set spec.service.apiKeySecret",
            )


RULES: tuple[Rule, ...] = (
    model_identity,
    model_source,
    runtime_version,
    batching_mode,
    static_shapes,
    continuous_batching,
    accelerators,
    inductor_batching,
    compile_step,
    precompiled_pooling,
    extra_env,
    extra_args,
    argument_values,
    resources,
    placement,
    affinity,
    image,
    cache_volume,
    pod_metadata,
    image_pull_secrets,
    topology_spread,
    network_policy,
    api_key,
)


def check(spec: SpyreModelSpec) -> list[Problem]:
    problems: list[Problem] = []
    for rule in RULES:
        try:
            problems += rule(spec)
        except (ArithmeticError, ValueError, RecursionError) as err:
            # a value no rule foresaw (size, nesting): a problem that names the rule, never
            # a traceback in validate, the webhook or the operator
            problems.append(
                Problem(
                    "spec",
                    f"the {rule.__name__.replace('_', ' ')} rule cannot check this spec "
                    f"({type(err).__name__}: {clip(str(err))}): simplify the values it reads, "
                    "and report it as a bug",
                )
            )
    return problems
