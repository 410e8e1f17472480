"""Rules across fields of a parsed spec (what a CRD schema cannot express).

Each rule yields Problems whose message says the rule and the fix. The facts behind them
are in docs/api.md ("Rules").
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator

from spyre_operator.api import runtimes
from spyre_operator.api.arg_rules import CB, argument_values, extra_args
from spyre_operator.api.autoscaling_rules import autoscaling_rules
from spyre_operator.api.base import is_zero
from spyre_operator.api.image_rules import architecture, image_profile
from spyre_operator.api.model import ModelSpec
from spyre_operator.api.placement_rules import affinity, placement, topology_spread
from spyre_operator.api.pod_rules import (
    api_key,
    cache_volume,
    extra_env,
    image,
    image_pull_secrets,
    network_policy,
    pod_metadata,
    resources,
)
from spyre_operator.api.problem import Problem, clip, shown
from spyre_operator.api.spec import SPYRE_BLOCK, SpyreModelSpec
from spyre_runtime import contract

Rule = Callable[[SpyreModelSpec], Iterator[Problem]]

STATIC = "spec.batching.static"
# Mount points the operator uses itself.
RESERVED_MOUNTS = (runtimes.CACHE_ROOT, "/dev/shm", "/tmp", runtimes.HOME_DIR, runtimes.RUNTIME_DIR)
# A hub repository id (org/name or name) and a revision, as the weights Job gets them.
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
HUB_REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*$")


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
    """sendnn needs one card per rank; a CPU backend may hold any count (a stand-in)."""
    count, tp = s.accelerator_count, s.tensor_parallel_size
    if s.backend == "sendnn" and count != tp:
        yield Problem(
            "spec.accelerator.count",
            f"must equal tensorParallelSize ({tp}), one Spyre card per tensor-parallel rank: "
            f"set {tp} or leave it unset",
        )


def rollout(s: SpyreModelSpec) -> Iterator[Problem]:
    """A rolling update must be able to replace a pod (Kubernetes refuses 0 and 0)."""
    chosen, effective = s.rollout, s.rolling_update
    unavailable = effective["maxUnavailable"]
    if isinstance(unavailable, str) and int(unavailable[:-1]) > 100:
        yield Problem(
            "spec.rollout.maxUnavailable",
            f"{unavailable} is more than all the replicas: use at most 100%",
        )
    if not (is_zero(effective["maxSurge"]) and is_zero(unavailable)):
        return
    if chosen.max_surge is not None and chosen.max_unavailable is not None:
        yield Problem(
            "spec.rollout",
            "maxSurge and maxUnavailable cannot both be 0: no pod could ever be replaced; "
            "set maxUnavailable: 1 (a replica goes first, freeing its cards) or maxSurge: 1 "
            "(an extra pod first, which needs free cards in a card model)",
        )
    else:
        yield Problem(
            "spec.rollout.maxUnavailable",
            "0 with maxSurge 0 (the default when the pods hold cards: a surge pod would wait "
            "for free cards) can never replace a pod: set maxSurge (e.g. 1, if the nodes "
            "have spare cards) or leave maxUnavailable unset (1)",
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


RULES: tuple[Rule, ...] = (
    model_identity,
    model_source,
    runtime_version,
    image_profile,
    architecture,
    batching_mode,
    static_shapes,
    continuous_batching,
    accelerators,
    rollout,
    autoscaling_rules,
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
