"""spec -> env and args per flavour and role (the examples' full env is in the goldens)."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import BASE, EXAMPLES, example, load_example, merge, with_spec

from spyre_operator.api import runtimes
from spyre_operator.api.arg_rules import RENDERED_FLAGS
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.api.validation import parse, validate
from spyre_operator.render.args import container_args
from spyre_operator.render.env import Role, container_env

pytestmark = pytest.mark.unit

VLLM_SPYRE = {"runtime": {"flavour": "vllm-spyre"}}


def _spec(obj: dict[str, Any]) -> SpyreModelSpec:
    return parse(obj).spec


def _env(obj: dict[str, Any], role: Role = "serve") -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container_env(_spec(obj), role)}


def test_sendnn_inference_continuous_batching() -> None:
    env = _env(example("granite-3.3-8b-instruct"))
    assert env["VLLM_PLUGINS"] == "sendnn_inference"
    assert env["SENDNN_INFERENCE_DYNAMO_BACKEND"] == "sendnn"
    assert env["SENDNN_INFERENCE_REQUIRE_PRECOMPILED_DECODERS"] == "1"
    assert env["SENDNN_INFERENCE_NUM_CPUS"] == "16"
    assert env["FLEX_DEVICE"] == "PF"
    assert "HF_TOKEN" not in env and env["HF_HUB_OFFLINE"] == "1"
    # 2.x has neither the CB switch nor the chunked-prefill flag, and no VLLM_SPYRE_ names.
    assert not [name for name in env if name.startswith("VLLM_SPYRE_") or "USE_C" in name]


def test_vllm_spyre_static_decoder() -> None:
    env = _env(example("granite-8b-static-vllm-spyre"))
    assert env["VLLM_PLUGINS"] == "spyre"
    assert env["VLLM_SPYRE_USE_CB"] == "0"
    assert "VLLM_SPYRE_USE_CHUNKED_PREFILL" not in env
    assert (env["VLLM_SPYRE_WARMUP_PROMPT_LENS"], env["VLLM_SPYRE_WARMUP_NEW_TOKENS"]) == (
        "2048",
        "1024",
    )
    assert env["VLLM_SPYRE_WARMUP_BATCH_SIZES"] == "16"


def test_vllm_spyre_continuous_batching_switches() -> None:
    env = _env(with_spec(VLLM_SPYRE))
    assert (env["VLLM_SPYRE_USE_CB"], env["VLLM_SPYRE_USE_CHUNKED_PREFILL"]) == ("1", "1")
    spec = merge(
        VLLM_SPYRE,
        {"batching": {"continuous": {"chunkedPrefill": False, "maxNumBatchedTokens": 8192}}},
    )
    assert _env(with_spec(spec))["VLLM_SPYRE_USE_CHUNKED_PREFILL"] == "0"


def test_pooling_gets_warmup_shapes_and_no_precompiled_switch() -> None:
    env = _env(example("granite-embedding-125m-english"))
    assert env["SENDNN_INFERENCE_WARMUP_PROMPT_LENS"] == "512"
    assert env["SENDNN_INFERENCE_WARMUP_BATCH_SIZES"] == "64"
    assert "SENDNN_INFERENCE_WARMUP_NEW_TOKENS" not in env
    assert "SENDNN_INFERENCE_REQUIRE_PRECOMPILED_DECODERS" not in env


def test_the_compile_job_compiles() -> None:
    obj = example("granite-3.3-8b-instruct")
    env = _env(obj, "precompile")
    assert env["SENDNN_INFERENCE_REQUIRE_PRECOMPILED_DECODERS"] == "0"
    assert env["SENDNN_INFERENCE_DYNAMO_BACKEND"] == "sendnn_compile_only"
    assert env["FLEX_DEVICE"] == "COMPILE"
    assert env["SENDNN_INFERENCE_NUM_CPUS"] == "32"  # the compile resources
    serve = _env(obj)
    same = ("SPYRE_SERVING_CACHE_KEY", "SPYRE_SERVING_COMPILE_CONFIG", "TORCH_SENDNN_CACHE_DIR")
    assert [env[n] for n in same] == [serve[n] for n in same]


def test_cache_env_points_at_the_key_directory() -> None:
    env = _env(with_spec({}))
    key = env["SPYRE_SERVING_CACHE_KEY"]
    assert len(key) == 64
    assert env["TORCH_SENDNN_CACHE_ENABLE"] == "1"
    assert env["TORCH_SENDNN_CACHE_DIR"] == f"/var/cache/spyre/{key}"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("localhost", "12355")


def test_requiring_precompiled_graphs_can_be_turned_off() -> None:
    env = _env(with_spec({"cache": {"requirePrecompiled": False}}))
    assert env["SENDNN_INFERENCE_REQUIRE_PRECOMPILED_DECODERS"] == "0"


@pytest.mark.parametrize(
    ("cpu", "cores"), [("7500m", "7"), ("500m", "1"), (12, "12"), ("2.5", "2")]
)
def test_num_cpus_follows_the_cpu_limit(cpu: Any, cores: str) -> None:
    env = _env(with_spec({"resources": {"limits": {"cpu": cpu}}}))
    assert env["SENDNN_INFERENCE_NUM_CPUS"] == cores


def test_no_cpu_limit_leaves_detection_to_the_plugin() -> None:
    assert "SENDNN_INFERENCE_NUM_CPUS" not in _env(with_spec({}))


def test_stack_env_follows_the_device() -> None:
    assert (
        _env(with_spec({"accelerator": {"resourceName": "ibm.com/spyre_vf"}}))["FLEX_DEVICE"]
        == "VF"
    )
    eager = _env(with_spec({"backend": "eager"}))
    assert "FLEX_DEVICE" not in eager and "FLEX_COMPUTE" not in eager


def test_inductor_keeps_its_cache_in_the_key_directory() -> None:
    """The compile Job fills TORCHINDUCTOR_CACHE_DIR, serving pods of the key read it."""
    obj = with_spec({"backend": "inductor"})
    serve, job = _env(obj), _env(obj, "precompile")
    key = serve["SPYRE_SERVING_CACHE_KEY"]
    for env in (serve, job):
        assert env["TORCHINDUCTOR_CACHE_DIR"] == f"/var/cache/spyre/{key}/inductor"
        assert env["SENDNN_INFERENCE_DYNAMO_BACKEND"] == "inductor"
        assert not [name for name in env if name.startswith(("FLEX_", "DT", "TORCH_SENDNN_L"))]
    assert job["SENDNN_INFERENCE_REQUIRE_PRECOMPILED_DECODERS"] == "0"
    assert serve["SENDNN_INFERENCE_REQUIRE_PRECOMPILED_DECODERS"] == "1"
    spec = _spec(obj)
    assert spec.accelerator_count == 0


@pytest.mark.parametrize("backend", ["eager", "sendnn"])
def test_every_backend_keeps_inductors_cache_in_the_key_directory(backend: str) -> None:
    """vLLM's sampler helpers compile with inductor whatever the model's backend: the
    compile Job fills their cache too (the pods copy it, spyre_runtime.serve)."""
    obj = with_spec({"backend": backend})
    for env in (_env(obj), _env(obj, "precompile")):
        key = env["SPYRE_SERVING_CACHE_KEY"]
        assert env["TORCHINDUCTOR_CACHE_DIR"] == f"/var/cache/spyre/{key}/inductor"


def test_tkv_override_and_user_env_come_last() -> None:
    spec = {
        "batching": {"continuous": {"maxBatchTkvLimit": 131072}},
        "env": [{"name": "X", "value": "y"}],
    }
    env = container_env(_spec(with_spec(spec)), "serve")
    assert {"name": "VLLM_DT_MAX_BATCH_TKV_LIMIT", "value": "131072"} in env
    assert env[-1] == {"name": "X", "value": "y"}


# Stack defaults users may override in spec.env (a later entry of the same name wins).
OVERRIDABLE = {
    runtimes.FLEX_COMPUTE,
    runtimes.DTLOG_LEVEL,
    runtimes.DT_DEEPRT_VERBOSE,
    runtimes.TORCH_SENDNN_LOG,
    runtimes.DISTRIBUTED_STRATEGY_IGNORE_MODULES,
    runtimes.TOKENIZERS_PARALLELISM,
    runtimes.HF_HUB_OFFLINE,  # e.g. a pvc model whose tokenizer is fetched on purpose
}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize("role", ["serve", "precompile"])
def test_users_cannot_override_what_the_operator_decides(path: Any, role: Role) -> None:
    doc = merge(load_example(path), {"spec": {"env": None}})
    names = {entry["name"] for entry in container_env(_spec(doc), role)}

    def refused(name: str) -> bool:
        env = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        problems = validate(merge(doc, {"spec": {"env": env}}))
        return any(p.path == "spec.env[0].name" for p in problems)

    assert {n for n in names - OVERRIDABLE if not refused(n)} == set()


def test_continuous_batching_args() -> None:
    args = container_args(_spec(example("granite-3.3-8b-instruct")), "serve")
    assert args == [
        "serve", "/models/ibm-granite/granite-3.3-8b-instruct",
        "--tensor-parallel-size", "4",
        "--max-model-len", "32768", "--max-num-seqs", "32", "--max-num-batched-tokens", "1024",
        "--enable-prefix-caching",
        "--served-model-name", "granite-3.3-8b-instruct", "--port", "8000",
    ]  # fmt: skip


def test_compile_args_drop_only_the_serving_flags() -> None:
    spec = _spec(example("granite-3.3-8b-instruct"))
    serve, compile_ = container_args(spec, "serve"), container_args(spec, "precompile")
    assert compile_[0] == "precompile"
    assert compile_[1:] == serve[1 : serve.index("--served-model-name")]


def test_local_model_args() -> None:
    args = container_args(_spec(example("granite-8b-static-vllm-spyre")), "serve")
    assert args[:4] == ["serve", "/models/granite-3.3-8b-instruct", "--tensor-parallel-size", "1"]
    assert "--max-model-len" not in args  # static shapes decide it
    assert args[args.index("--served-model-name") + 1] == "ibm-granite/granite-3.3-8b-instruct"


def test_pooling_revision_quantization_and_extra_args() -> None:
    spec = {
        "model": {"revision": "abc", "quantization": "compressed-tensors"},
        "extraArgs": ["--seed", "1"],
    }
    args = container_args(_spec(with_spec(spec)), "serve")
    # A hub model is loaded from its download: the revision is the weights Job's.
    assert args[1:4] == [
        "/models/" + BASE["spec"]["model"]["id"],
        "--quantization",
        "compressed-tensors",
    ]
    assert "--revision" not in args
    assert args[-2:] == ["--seed", "1"]
    pooling = container_args(_spec(example("granite-embedding-125m-english")), "precompile")
    assert pooling[2:4] == ["--runner", "pooling"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_rendered_flag_is_protected_from_extra_args(path: Any) -> None:
    # quantized models compile on cards: the compile backend follows spec.backend
    patch = {"model": {"quantization": "gptq"}, "cache": {"compile": {"backend": None}}}
    spec = _spec(merge(load_example(path), {"spec": patch}))
    flags = [a for a in container_args(spec, "serve") if a.startswith("-")]
    assert set(flags) <= RENDERED_FLAGS.keys()
