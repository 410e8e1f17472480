"""spec -> container env, for the serving pod (`serve`) and the compile Job (`precompile`).

The flavour differences are data (spyre_runtime/contract.py: prefix, plugin, the knobs each
flavour reads); this module renders values only. See docs/contract.md for who reads what.
"""

from __future__ import annotations

from typing import Any, Literal

from spyre_operator.api import runtimes as rt
from spyre_operator.api.base import cpu_cores
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.render.cachekey import cache_key, canonical_json, compile_config
from spyre_runtime import contract

Role = Literal["serve", "precompile", "weights", "clean", "pull"]
CARD_FREE: tuple[Role, ...] = ("weights", "clean", "pull")  # pods that never use a card


def _flag(on: bool) -> str:
    return "1" if on else "0"


def _csv(values: list[int] | None) -> str | None:
    return None if values is None else ",".join(str(v) for v in values)


def backend_for(spec: SpyreModelSpec, role: Role) -> str:
    return spec.backend if role == "serve" else spec.compile_backend


def _backend_env(spec: SpyreModelSpec, backend: str) -> dict[str, str]:
    """What the backend's own stack reads: nothing more for the CPU backends; the Spyre
    stack's settings (torch_sendnn, deeptools) for the sendnn backends."""
    if backend in ("inductor", "eager"):
        return {}
    if backend == "sendnn_compile_only":
        device = "COMPILE"  # what the plugin sets itself for this backend
    else:
        device = "VF" if "_vf" in spec.accelerator.resource_name else "PF"
    return {
        rt.FLEX_COMPUTE: "SENTIENT",
        rt.FLEX_DEVICE: device,
        rt.DTLOG_LEVEL: "error",
        rt.DT_DEEPRT_VERBOSE: "-1",
        rt.TORCH_SENDNN_LOG: "WARNING",
    }


def _plugin_env(spec: SpyreModelSpec, role: Role, backend: str) -> dict[str, str]:
    cb, st = spec.batching.continuous, spec.batching.static
    resources = spec.resources if role == "serve" else spec.compile_resources
    cpu = resources.limits.get("cpu")
    knobs = {
        contract.DYNAMO_BACKEND: backend,
        contract.USE_CB: _flag(cb is not None),
        contract.USE_CHUNKED_PREFILL: _flag(cb.chunked_prefill) if cb else None,
        contract.WARMUP_PROMPT_LENS: _csv(st.prompt_lens) if st else None,
        contract.WARMUP_NEW_TOKENS: _csv(st.new_tokens) if st else None,
        contract.WARMUP_BATCH_SIZES: _csv(st.batch_sizes) if st else None,
        # Serving pods of decoders never compile; the compile Job must.
        contract.REQUIRE_PRECOMPILED_DECODERS: (
            None if spec.is_pooling else _flag(role == "serve" and spec.require_precompiled)
        ),
        # Thread pools sized to the CPU limit instead of the node's cores.
        contract.NUM_CPUS: None if cpu is None else str(cpu_cores(cpu)),
    }
    flavour = spec.flavour
    return {flavour.env(k): v for k, v in knobs.items() if v is not None and flavour.reads(k)}


def _token_env(spec: SpyreModelSpec) -> list[dict[str, Any]]:
    hub = spec.model.source.hub
    if hub is None or hub.token_secret is None:
        return []
    ref = {"name": hub.token_secret.name, "key": hub.token_secret.key}
    return [{"name": contract.HF_TOKEN, "valueFrom": {"secretKeyRef": ref}}]


def _api_key_env(spec: SpyreModelSpec) -> list[dict[str, Any]]:
    """vLLM reads VLLM_API_KEY as --api-key: from the Secret, never the value in the pod."""
    secret = spec.service.api_key_secret
    if secret is None:
        return []
    ref = {"name": secret.name, "key": secret.key}
    return [{"name": rt.VLLM_API_KEY, "valueFrom": {"secretKeyRef": ref}}]


def weights_env(spec: SpyreModelSpec) -> list[dict[str, Any]]:
    """The weights Job's: what to download, where to, from which hub, with which token
    (the only pod that gets it). spec.env comes along for proxies and hub settings."""
    hub = spec.model.source.hub
    values = {
        contract.SPYRE_SERVING_MODEL_ID: spec.model.id or "",
        contract.SPYRE_SERVING_MODEL_REVISION: spec.model.hub_revision,
        contract.SPYRE_SERVING_CACHE_ROOT: rt.CACHE_ROOT,
        rt.HF_HUB_DISABLE_TELEMETRY: "1",
        # the one pod that reaches the hub: Red Hat's images switch it off in their ENV
        rt.HF_HUB_OFFLINE: "0",
        rt.HOME: rt.HOME_DIR,
    }
    if hub is not None and hub.endpoint:
        values[contract.HF_ENDPOINT] = hub.endpoint
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    return env + _token_env(spec) + [e.to_k8s() for e in spec.env]


def container_env(
    spec: SpyreModelSpec, role: Role, commit: str | None = None, key: str | None = None
) -> list[dict[str, Any]]:
    """The compile and serving pods' (`commit`: a hub model's resolved commit; `key`: the
    cache key of the spec and commit, when known); the clean-up and pull pods' name only
    the key to remove or fetch."""
    if role == "weights":
        return weights_env(spec)
    key = key or cache_key(spec, commit)
    if role in ("clean", "pull"):
        values = {
            contract.SPYRE_SERVING_CACHE_KEY: key,
            contract.SPYRE_SERVING_CACHE_ROOT: rt.CACHE_ROOT,
            rt.HOME: rt.HOME_DIR,
        }
        return [{"name": k, "value": v} for k, v in values.items()]
    config = compile_config(spec, commit)
    backend = backend_for(spec, role)
    cache_dir = f"{rt.CACHE_ROOT}/{key}"
    cb = spec.batching.continuous
    values = {
        contract.SPYRE_SERVING_FLAVOUR: spec.flavour.name,
        contract.SPYRE_SERVING_CACHE_KEY: key,
        contract.SPYRE_SERVING_CACHE_ROOT: rt.CACHE_ROOT,
        contract.SPYRE_SERVING_COMPILE_CONFIG: canonical_json(config),
        contract.TORCH_SENDNN_CACHE_ENABLE: "1",
        contract.TORCH_SENDNN_CACHE_DIR: cache_dir,
        contract.VLLM_PLUGINS: spec.flavour.plugin,
        contract.MASTER_ADDR: "localhost",
        contract.MASTER_PORT: rt.MASTER_PORT_VALUE,
        rt.DISTRIBUTED_STRATEGY_IGNORE_MODULES: "WordEmbedding,Embedding",
        rt.TOKENIZERS_PARALLELISM: "false",
        rt.HOME: rt.HOME_DIR,
        # Never the hub: a hub model was downloaded by the weights Job, the others are
        # read from their volume (a model that still needs a download fails at once).
        rt.HF_HUB_OFFLINE: "1",
        # inductor's caches, in the key's directory on every backend: inductor compiles the
        # model (backend inductor) and vLLM's sampler helpers (every backend). The compile
        # Job fills them; `serve` copies them to the pod and points this variable there.
        contract.TORCHINDUCTOR_CACHE_DIR: f"{cache_dir}/{contract.INDUCTOR_CACHE_SUBDIR}",
        **_backend_env(spec, backend),
        **_plugin_env(spec, role, backend),
    }
    if cb is not None and cb.max_batch_tkv_limit is not None:
        values[rt.VLLM_DT_MAX_BATCH_TKV_LIMIT] = str(cb.max_batch_tkv_limit)
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    if role == "serve":
        env += _api_key_env(spec)
    return env + [e.to_k8s() for e in spec.env]
