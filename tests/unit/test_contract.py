"""The operator/image contract (spyre_runtime/contract.py, docs/contract.md): one table,
importable from the operator without the runtime's stack, and what the operator renders for
each example is what the runtime's own contract reader understands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from apilib import EXAMPLES, load_example, pinned

from spyre_operator.api.validation import parse
from spyre_operator.render.cachekey import cache_key, compile_config
from spyre_operator.render.children import build_compile_job, build_deployment, build_weights_job
from spyre_runtime import contract, weights
from spyre_runtime.config import from_env

pytestmark = pytest.mark.unit


def test_the_contract_imports_only_the_standard_library() -> None:
    """The operator imports it: it must never pull in torch, vLLM or the runtime's modules."""
    code = (
        "import json, sys; before = set(sys.modules); import spyre_runtime.contract; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert "spyre_runtime.contract" in loaded
    foreign = [
        name
        for name in loaded
        if name not in ("spyre_runtime", "spyre_runtime.contract")
        and name.split(".")[0] not in sys.stdlib_module_names
    ]
    assert foreign == []


def test_one_flavour_table() -> None:
    assert set(get_args(contract.FlavourName)) == set(contract.FLAVOURS)
    for name, flavour in contract.FLAVOURS.items():
        assert flavour.name == name
        assert flavour.require_precompiled_var.startswith(flavour.env_prefix)
    prefixes = [f.env_prefix for f in contract.FLAVOURS.values()]
    assert len(set(prefixes)) == len(prefixes)


def test_the_reasons_the_operator_names_are_the_runtimes() -> None:
    assert contract.CACHE_NOT_READY in contract.REASONS
    assert contract.PERMANENT < contract.REASONS


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def plain_env(c: dict[str, Any]) -> dict[str, str]:
    """The literal env values (valueFrom entries, e.g. a hub token, are the kubelet's)."""
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_runtime_reads_what_the_operator_renders(path: Path) -> None:
    model = parse(pinned(load_example(path)))
    spec = model.spec
    key = cache_key(spec)
    decoder = spec.task == "generate"
    for subcommand, workload in (
        ("precompile", build_compile_job(spec, model.namespace)),
        ("serve", build_deployment(model)),
    ):
        c = container(workload)
        if spec.image_profile.injected:  # the injected runtime, on the image's Python
            assert c["command"] == [spec.image_profile.python, "-m", "spyre_runtime"]
        else:
            assert "command" not in c, "the image's ENTRYPOINT must stay in the start path"
        assert c["args"][0] == subcommand
        env = plain_env(c)
        config = from_env(env, c["args"][1:])

        assert config.flavour.name == spec.runtime.flavour
        assert config.cache_key == key
        assert config.compile_config == compile_config(spec)
        assert config.model == spec.model.load_path
        assert config.cache_dir is not None
        # the runtime agrees with the operator on where torch_sendnn's and inductor's caches
        # live: inside the key's directory, inductor's on every backend (vLLM's sampler
        # helpers compile with it)
        assert config.cache_env(env) == {
            contract.TORCH_SENDNN_CACHE_ENABLE: "1",
            contract.TORCH_SENDNN_CACHE_DIR: str(config.cache_dir),
            contract.TORCHINDUCTOR_CACHE_DIR: str(config.cache_dir / "inductor"),
        }
        assert env[contract.TORCHINDUCTOR_CACHE_DIR] == str(config.inductor_cache_dir)
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert str(config.cache_root) in mounts
        # serving pods of decoders never compile; the compile Job must be allowed to
        expected = subcommand == "serve" and decoder and spec.require_precompiled
        assert config.require_precompiled is expected


HUB_EXAMPLES = [p for p in EXAMPLES if parse(load_example(p)).spec.model.from_hub]


@pytest.mark.parametrize("path", HUB_EXAMPLES, ids=lambda p: p.stem)
def test_the_weights_command_reads_what_the_operator_renders(path: Path, tmp_path: Path) -> None:
    model = parse(load_example(path))
    (c,) = build_weights_job(model.spec, model.namespace)["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["weights"]
    env = plain_env(c) | {contract.SPYRE_SERVING_CACHE_ROOT: str(tmp_path)}  # the volume, here
    cfg = weights.parse_env(env)
    assert (cfg.model_id, cfg.revision) == (model.spec.model.id, model.spec.model.hub_revision)
    # where the runtime publishes the download is what the pods mount (subPath)
    commit = "0123456789abcdef0123456789abcdef01234567"
    mount = next(
        m
        for m in container(build_deployment(model, commit=commit))["volumeMounts"]
        if m.get("subPath")
    )
    assert cfg.layout.final(commit) == tmp_path / mount["subPath"]
