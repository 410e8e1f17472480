"""The contract reader: env/args parsing and the mismatch messages serve prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contractlib import contract_env
from spyre_runtime.config import ContractError, config_differences, from_env, model_argument
from spyre_runtime.contract import FLAVOURS
from spyre_runtime.warmup import classify

pytestmark = pytest.mark.unit

CONFIG = {"model": "/models/granite", "maxModelLen": 256, "tp": 1}


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_the_operators_env_parses(flavour: str, tmp_path: Path) -> None:
    env = contract_env(flavour, tmp_path, CONFIG, tmp_path / "term", require_precompiled=True)
    cfg = from_env(env, ["/models/granite", "--max-model-len", "256"])
    assert cfg.flavour.name == flavour
    assert cfg.cache_dir == tmp_path / env["SPYRE_SERVING_CACHE_KEY"]
    assert cfg.compile_config == CONFIG
    assert cfg.require_precompiled
    assert cfg.model == "/models/granite"
    assert cfg.termination_log == tmp_path / "term"
    assert cfg.cache_env(env) == {
        "TORCH_SENDNN_CACHE_ENABLE": "1",
        "TORCH_SENDNN_CACHE_DIR": str(cfg.cache_dir),
        "TORCHINDUCTOR_CACHE_DIR": str(cfg.cache_dir / "inductor"),
    }


def test_defaults_outside_a_cache(tmp_path: Path) -> None:
    cfg = from_env({"SPYRE_SERVING_FLAVOUR": "vllm-spyre"}, ["m"])
    assert cfg.cache_dir is None
    assert cfg.cache_env({}) == {}
    assert not cfg.require_precompiled
    assert str(cfg.termination_log) == "/dev/termination-log"
    with pytest.raises(ContractError, match="SPYRE_SERVING_CACHE_KEY, SPYRE_SERVING_CACHE_ROOT"):
        cfg.require_cache()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SPYRE_SERVING_FLAVOUR": "vllm"}, "SPYRE_SERVING_FLAVOUR='vllm': expected one of"),
        ({"SPYRE_SERVING_CACHE_KEY": "../etc"}, "not 64 lowercase hex"),
        ({"SPYRE_SERVING_COMPILE_CONFIG": "{oops"}, "SPYRE_SERVING_COMPILE_CONFIG is not valid"),
        ({"SPYRE_SERVING_COMPILE_CONFIG": "[1]"}, "must be a JSON object"),
        ({"VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS": "maybe"}, "is not a boolean"),
    ],
)
def test_contract_errors_name_the_variable(
    tmp_path: Path, change: dict[str, str], message: str
) -> None:
    env = {**contract_env("vllm-spyre", tmp_path, CONFIG, tmp_path / "t"), **change}
    with pytest.raises(ContractError, match=message):
        from_env(env, ["m"])


def test_a_torch_sendnn_cache_dir_elsewhere_is_an_error(tmp_path: Path) -> None:
    env = {
        **contract_env("sendnn-inference", tmp_path, CONFIG, tmp_path / "t"),
        "TORCH_SENDNN_CACHE_DIR": "/somewhere/else",
    }
    cfg = from_env(env, ["m"])
    with pytest.raises(ContractError, match="TORCH_SENDNN_CACHE_DIR=/somewhere/else disagrees"):
        cfg.cache_env(env)
    # A trailing slash is the same directory.
    env["TORCH_SENDNN_CACHE_DIR"] = f"{cfg.cache_dir}/"
    assert cfg.cache_env(env)["TORCH_SENDNN_CACHE_DIR"] == str(cfg.cache_dir)


@pytest.mark.parametrize(
    ("args", "model"),
    [
        (["/m", "--port", "8000"], "/m"),
        (["--port", "1", "--model", "org/x"], "org/x"),
        (["--model=org/y"], "org/y"),
        (["--port", "1"], None),
        ([], None),
    ],
)
def test_model_argument(args: list[str], model: str | None) -> None:
    assert model_argument(args) == model


def test_differences_name_each_field() -> None:
    ready = {"model": "a", "limits": {"maxModelLen": 256, "maxNumSeqs": 2}, "tp": 1}
    pod = {"model": "a", "limits": {"maxModelLen": 512, "maxNumSeqs": 2}, "quant": "fp8"}
    assert config_differences(ready, pod) == [
        "limits.maxModelLen: READY has 256, this pod has 512",
        'quant: READY has none, this pod has "fp8"',
        "tp: READY has 1, this pod has none",
    ]
    assert config_differences(ready, ready) == []
    expected = f"config: READY has null, this pod has {json.dumps(pod)}"
    assert config_differences(None, pod) == [expected]


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (MemoryError(), "OutOfMemory"),
        (RuntimeError("CPU out of memory. Tried to allocate 2 GiB"), "OutOfMemory"),
        (OSError("x is not a local folder and is not a valid model identifier"), "ModelNotFound"),
        (ValueError("max_num_batched_tokens must be >= max_model_len"), "InvalidConfig"),
    ],
)
def test_failures_are_classified(exc: Exception, reason: str) -> None:
    assert classify(exc, "InvalidConfig") == reason


def test_a_cause_decides_the_reason() -> None:
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("Engine core initialization failed") from inner
    except RuntimeError as outer:
        assert classify(outer, "CompileFailed") == "OutOfMemory"
    assert classify(RuntimeError("warmup shape"), "CompileFailed") == "CompileFailed"
