"""The operator/image contract, tested once: the env and args the operator renders for each
example are read back by the runtime's own contract reader (docs/contract.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from apilib import EXAMPLES, load_example, pinned

from spyre_operator.api.validation import parse
from spyre_operator.render.cachekey import cache_key, compile_config
from spyre_operator.render.children import build_compile_job, build_deployment
from spyre_runtime.config import from_env

pytestmark = pytest.mark.unit


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
        assert "command" not in c, "the image's ENTRYPOINT must stay in the start path"
        assert c["args"][0] == subcommand
        env = plain_env(c)
        config = from_env(env, c["args"][1:])

        assert config.flavour.name == spec.runtime.flavour
        assert config.cache_key == key
        assert config.compile_config == compile_config(spec)
        assert config.model == spec.model.load_path
        assert config.cache_dir is not None
        # the runtime agrees with the operator on where torch_sendnn's cache lives
        assert config.cache_env(env) == {
            "TORCH_SENDNN_CACHE_ENABLE": "1",
            "TORCH_SENDNN_CACHE_DIR": str(config.cache_dir),
        }
        # inductor's cache (backend inductor) is inside the key's directory
        inductor = env.get("TORCHINDUCTOR_CACHE_DIR")
        assert inductor is None or Path(inductor).parent == config.cache_dir
        assert (inductor is not None) == (spec.backend == "inductor")
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert str(config.cache_root) in mounts
        # serving pods of decoders never compile; the compile Job must be allowed to
        expected = subcommand == "serve" and decoder and spec.require_precompiled
        assert config.require_precompiled is expected
