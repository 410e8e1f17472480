"""The known-config registry check: a warning off the registry, None on it."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import example, merge, with_spec

from spyre_operator.api.known_configs import known_config_warning
from spyre_operator.api.validation import parse

pytestmark = pytest.mark.unit

EMBED = {
    "model": {"id": "ibm-granite/granite-embedding-125m-english"},
    "task": "embed",
    "batching": {"continuous": None, "static": {"promptLens": [512], "batchSizes": [64]}},
}


def _warning(obj: dict[str, Any]) -> str | None:
    return known_config_warning(parse(obj).spec)


@pytest.mark.parametrize(
    "stem",
    [
        "granite-3.3-8b-instruct",
        "granite-embedding-125m-english",
        "granite-8b-static-vllm-spyre",
        "micro-granite-cpu",  # eager: the registry does not apply
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
    assert "(tensorParallelSize, maxModelLen, maxNumSeqs) (1, 8192, 8) is not in" in warning
    assert "(4, 32768, 32)" in warning


def test_a_pooling_shape_off_the_registry() -> None:
    warning = _warning(with_spec(merge(EMBED, {"batching": {"static": {"batchSizes": [8]}}})))
    assert warning is not None
    assert "(tensorParallelSize, promptLen, batchSize) (1, 512, 8)" in warning
    assert _warning(with_spec(EMBED)) is None


def test_an_unknown_model() -> None:
    warning = _warning(with_spec({"model": {"id": "acme/llm-7b"}}))
    assert warning is not None
    assert warning.startswith("acme/llm-7b is not in vLLM-Spyre's known-config registry")


def test_a_model_known_only_for_another_batching_mode() -> None:
    spec = merge(EMBED, {"model": {"id": "ibm-granite/granite-3.3-8b-instruct"}})
    warning = _warning(with_spec(spec))
    assert warning is not None
    assert "not in vLLM-Spyre's known-config registry for this batching mode" in warning


def test_models_given_only_by_path_are_not_checked() -> None:
    spec = {"model": {"id": None, "path": "/models/x", "source": {"pvc": {"claimName": "m"}}}}
    assert _warning(with_spec(spec)) is None
