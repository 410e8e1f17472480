"""The known-config registry check: per flavour, matched as the plugins match (a warning
off the registry, None on it). tests/runtime/test_runtime_registry.py compares the tables
with the wheels."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import example, merge, with_spec

from spyre_operator.api.known_configs import REGISTRIES, known_config_warning, match_architecture
from spyre_operator.api.validation import parse

pytestmark = pytest.mark.unit

VLLM_SPYRE = {"runtime": {"flavour": "vllm-spyre"}}
EMBED = {
    "model": {"id": "ibm-granite/granite-embedding-125m-english"},
    "task": "embed",
    "batching": {"continuous": None, "static": {"promptLens": [512], "batchSizes": [64]}},
}
STATIC_8B = {
    **VLLM_SPYRE,
    "tensorParallelSize": 4,
    "batching": {
        "continuous": None,
        "static": {"promptLens": [], "newTokens": [], "batchSizes": []},
    },
}
ON_PVC = {"id": None, "path": "/models/m", "source": {"hub": None, "pvc": {"claimName": "m"}}}
GRANITE_33_CONFIG = {
    "model_type": "granite",
    "num_hidden_layers": 40,
    "max_position_embeddings": 131072,
    "hidden_size": 4096,
    "vocab_size": 49159,
    "num_key_value_heads": 8,
    "num_attention_heads": 32,
    "torch_dtype": "bfloat16",
}


def _warning(obj: dict[str, Any], config: dict[str, Any] | None = None) -> str | None:
    return known_config_warning(parse(obj).spec, config)


def _static(*shapes: tuple[int, int, int]) -> dict[str, Any]:
    lens, new, batch = (list(column) for column in zip(*shapes, strict=True))
    patch = {"batching": {"static": {"promptLens": lens, "newTokens": new, "batchSizes": batch}}}
    return with_spec(merge(STATIC_8B, patch))


@pytest.mark.parametrize(
    "stem",
    [
        "granite-3.3-8b-instruct",
        "granite-3.3-8b-ibm-image",
        "granite-embedding-125m-english",
        "granite-8b-static-vllm-spyre",  # by path on a pvc: no id, no config
        "micro-granite-cpu",  # eager: the registry does not apply
        "micro-granite-inductor",  # inductor (CPU) neither
    ],
)
def test_examples_are_on_the_registry(stem: str) -> None:
    assert _warning(example(stem)) is None


def test_registry_names_are_case_insensitive() -> None:
    spec = {
        "model": {"id": "IBM-Granite/Granite-3.3-8b-Instruct"},
        "batching": {"continuous": {"maxNumSeqs": 4}},
    }
    assert _warning(with_spec(spec)) is None


def test_a_decoder_config_off_the_registry_lists_the_known_ones() -> None:
    warning = _warning(with_spec({"batching": {"continuous": {"maxNumSeqs": 8}}}))
    assert warning is not None
    assert warning.startswith(
        "ibm-granite/granite-3.3-8b-instruct: (tensorParallelSize, maxModelLen, maxNumSeqs) "
        "(1, 8192, 8) is not in sendnn-inference 2.6.3's known-config registry"
    )
    assert "(4, 32768, 32)" in warning
    # what sendnn-inference does then (platform.py, off the registry)
    assert "caps maxModelLen at 32768 and maxNumSeqs at 32 and the TKV limit at 131072" in warning


@pytest.mark.parametrize(
    ("model_id", "vllm_spyre", "sendnn_inference"),
    [
        ("ibm-granite/granite-4-8b-dense-hybrid", False, True),
        ("ibm-granite/granite-4.2-8b-fp8", False, True),
        ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", False, True),
        ("ibm-granite/granite-4-8b-dense", True, True),
        ("ibm-granite/granite-4-8b-dense-FP8", False, False),  # in neither wheel
    ],
)
def test_each_flavour_knows_what_its_wheel_ships(
    model_id: str, vllm_spyre: bool, sendnn_inference: bool
) -> None:
    spec: dict[str, Any] = {
        "model": {"id": model_id},
        "tensorParallelSize": 4,
        "cache": {"compile": {"backend": None}},  # quantized ids compile on cards
        "batching": {"continuous": {"maxModelLen": 32768, "maxNumSeqs": 32}},
    }
    assert (_warning(with_spec(merge(spec, VLLM_SPYRE))) is None) is vllm_spyre
    assert (_warning(with_spec(spec)) is None) is sendnn_inference


def test_static_shapes_must_all_fit_one_entry() -> None:
    """1.10.0 has (6144, 2048, 1) and (7168, 1024, 4) for TP 4, but as two entries."""
    assert _warning(_static((6144, 2048, 1))) is None
    assert _warning(_static((7168, 1024, 4))) is None
    warning = _warning(_static((6144, 2048, 1), (7168, 1024, 4)))
    assert warning is not None
    assert "(6144, 2048, 1), (7168, 1024, 4) is not in vllm-spyre 1.10.0's" in warning
    assert "tensorParallelSize 4: (6144, 2048, 1); tensorParallelSize 4: (7168, 1024, 4)" in warning


def test_static_decoder_shapes_of_granite_4_in_vllm_spyre() -> None:
    spec = merge(STATIC_8B, {"model": {"id": "ibm-granite/granite-4-8b-dense"}})
    spec["batching"]["static"] = {"promptLens": [7168], "newTokens": [1024], "batchSizes": [4]}
    assert _warning(with_spec(spec)) is None


def test_a_pooling_shape_off_the_registry() -> None:
    warning = _warning(with_spec(merge(EMBED, {"batching": {"static": {"batchSizes": [8]}}})))
    assert warning is not None
    assert "(promptLen, batchSize) at tensorParallelSize 1 (512, 8) is not in" in warning
    assert "caps" not in warning  # the caps are for decoders
    assert _warning(with_spec(EMBED)) is None
    # vllm-spyre's pooling shapes carry newTokens 0
    assert _warning(with_spec(merge(EMBED, VLLM_SPYRE))) is None


def test_an_unknown_model() -> None:
    warning = _warning(with_spec({"model": {"id": "acme/llm-7b"}}))
    assert warning is not None
    assert warning.startswith(
        "acme/llm-7b is not in sendnn-inference 2.6.3's known-config registry"
    )


def test_a_model_known_only_for_another_batching_mode() -> None:
    spec = merge(EMBED, {"model": {"id": "ibm-granite/granite-3.3-8b-instruct"}})
    warning = _warning(with_spec(spec))
    assert warning is not None
    assert "has for ibm-granite/granite-3.3-8b-instruct: nothing for this batching mode" in warning


def test_models_given_only_by_path_are_not_checked_without_their_config() -> None:
    assert _warning(with_spec({"model": ON_PVC})) is None


def test_a_model_config_is_matched_by_architecture() -> None:
    """A fine-tune on a volume: no id, but its config.json is Granite 3.3 8B's."""
    on_pvc = with_spec({"model": ON_PVC, "batching": {"continuous": {"maxNumSeqs": 4}}})
    assert _warning(on_pvc, GRANITE_33_CONFIG) is None
    off = with_spec({"model": ON_PVC, "batching": {"continuous": {"maxNumSeqs": 8}}})
    warning = _warning(off, GRANITE_33_CONFIG)
    assert warning is not None
    assert warning.startswith("/models/m (matched by its model config): ")
    assert "has for ibm-granite/granite-3.3-8b-instruct:" in warning
    unknown = _warning(on_pvc, {"model_type": "gpt2"})
    assert unknown is not None and "is not in sendnn-inference 2.6.3's" in unknown


def test_the_most_specific_pattern_wins_and_the_first_on_a_tie() -> None:
    registry = REGISTRIES["sendnn-inference"]
    fp8 = GRANITE_33_CONFIG | {"quantization_config": {"format": "float-quantized"}}
    assert match_architecture(registry, fp8) == "ibm-granite/granite-3.3-8b-instruct-FP8"
    assert match_architecture(registry, GRANITE_33_CONFIG) == "ibm-granite/granite-3.3-8b-instruct"
    # granite-4-8b-dense and granite-4.2-8b share one pattern: the first entry wins
    granite_4 = GRANITE_33_CONFIG | {"vocab_size": 100352}
    assert match_architecture(registry, granite_4) == "ibm-granite/granite-4-8b-dense"


def test_e5_large_instruct_is_matched_as_e5_large_by_the_plugin() -> None:
    """Both entries have one pattern; the plugin picks the first, whose shape is 512 x 64,
    so e5-large-instruct's own (512, 4) never applies. The operator warns as the plugin."""
    config = {"model_type": "xlm-roberta", "num_hidden_layers": 24, "vocab_size": 250002}
    spec = merge(EMBED, {"model": {"id": None, **ON_PVC}})
    spec["batching"]["static"]["batchSizes"] = [4]
    warning = _warning(with_spec(spec), config)
    assert warning is not None and "has for intfloat/multilingual-e5-large: " in warning
    by_id = merge(spec, {"model": {"id": "intfloat/multilingual-e5-large-instruct"}})
    assert _warning(with_spec(by_id)) is None  # by name it looks known
