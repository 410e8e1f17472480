"""The operator's known-config registries equal the ones the installed plugin wheels ship
(config/model_configs.yaml of vllm-spyre 1.10.0 and sendnn-inference 2.6.3), and the
operator's architecture matcher picks what the plugin's own registry picks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from rtlib import installed_venv

from spyre_operator.api.known_configs import REGISTRIES, Registry, match_architecture

pytestmark = pytest.mark.runtime

MODULE = {"vllm-spyre": "vllm_spyre", "sendnn-inference": "sendnn_inference"}


def site_packages(venv: Path) -> Path:
    (site,) = venv.glob("lib/python3*/site-packages")
    return site


def wheel_registry(flavour: str) -> tuple[str, dict[str, Any]]:
    """(installed plugin version, its registry in the operator's terms)."""
    site, module = site_packages(installed_venv(flavour)), MODULE[flavour]
    (dist,) = site.glob(f"{module}-*.dist-info")
    version = dist.name[len(module) + 1 : -len(".dist-info")]
    data = yaml.safe_load((site / module / "config" / "model_configs.yaml").read_text())
    models = {}
    for name, model in data["models"].items():
        static = []
        for cfg in model.get("static_batching_configs", []):
            shapes = [
                (s["prompt_len"], s["batch_size"])
                if flavour == "sendnn-inference"  # 2.x WarmupShape.to_tuple
                else (s["prompt_len"], s["new_tokens"], s["batch_size"])
                for s in cfg["warmup_shapes"]
            ]
            static.append((cfg["tp_size"], shapes))
        models[name] = {
            "architecture": model["architecture"],
            "continuous": [
                (c["tp_size"], c["max_model_len"], c["max_num_seqs"])
                for c in model.get("continuous_batching_configs", [])
            ],
            "static": static,
        }
    return version, models


def ours(registry: Registry) -> dict[str, Any]:
    return {
        name: {
            "architecture": json.loads(json.dumps(known.architecture)),
            "continuous": list(known.continuous),
            "static": [(tp, list(shapes)) for tp, shapes in known.static],
        }
        for name, known in registry.models.items()
    }


@pytest.mark.parametrize("flavour", list(MODULE))
def test_the_registry_is_the_wheels(flavour: str) -> None:
    registry = REGISTRIES[flavour]
    version, theirs = wheel_registry(flavour)
    assert version == registry.version
    mine = ours(registry)
    assert list(mine) == list(theirs)  # the order breaks ties between equal patterns
    for name in theirs:
        assert mine[name] == theirs[name], name


PLUGIN_MATCH = """
import json, sys
from types import SimpleNamespace
from {module}.config.model_registry import get_model_registry

def obj(d):
    return SimpleNamespace(**{{k: obj(v) if k.endswith("_config") and k != "quantization_config"
                               else v for k, v in d.items()}})

registry = get_model_registry()
out = {{}}
for name, config in json.load(sys.stdin).items():
    found = registry.find_matching_model(SimpleNamespace(hf_config=obj(config), model=name))
    out[name] = found.name if found else None
print(json.dumps(out))
"""


@pytest.mark.parametrize("flavour", list(MODULE))
def test_architecture_matching_picks_what_the_plugin_picks(flavour: str) -> None:
    """Each entry's own pattern, a fine-tune with extra config keys, a quantized variant and
    an unknown model, through the plugin's real registry in its venv."""
    registry = REGISTRIES[flavour]
    configs: dict[str, dict[str, Any]] = {}
    for name, known in registry.models.items():
        arch = json.loads(json.dumps(known.architecture))
        configs[name] = arch
        configs[f"{name} fine-tune"] = {**arch, "torch_dtype": "bfloat16", "rope_theta": 1e7}
        configs[f"{name} fp8"] = {**arch, "quantization_config": {"format": "float-quantized"}}
    configs["unknown"] = {"model_type": "gpt2", "n_layer": 12}
    python = installed_venv(flavour) / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", PLUGIN_MATCH.format(module=MODULE[flavour])],
        input=json.dumps(configs), capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    plugin = json.loads(done.stdout.strip().splitlines()[-1])
    mine = {name: match_architecture(registry, config) for name, config in configs.items()}
    assert mine == plugin
    assert plugin["unknown"] is None
