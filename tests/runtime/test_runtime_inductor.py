"""The inductor backend on CPU: precompile fills a real compiled-graph cache in the key's
directory, and a serving start proves from its own output that it loaded every graph from
there and compiled nothing (spyre_runtime.compilereport); without the cache it compiles.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from rtlib import Precompiled, Runtime, assert_published, decoder, precompile

from spyre_runtime.compilereport import CompileCounts, parse
from spyre_runtime.contract import FLAVOURS

# Only the flavours that can compile continuous batching with inductor (vllm-spyre 1.10
# passes the Spyre-only torch.compile option sendnn.dynamic; the API refuses it there,
# tests/unit/test_api_validation.py; docs/runtime.md).
WITH_INDUCTOR = [name for name, f in FLAVOURS.items() if f.inductor_continuous_batching]
pytestmark = [
    pytest.mark.runtime,
    pytest.mark.parametrize("runtime", WITH_INDUCTOR, indirect=True),
]


@pytest.fixture(scope="module")
def inductor_cache(runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Precompiled:
    workload = decoder(runtime, backend="inductor")
    return precompile(runtime, workload, tmp_path_factory.mktemp("inductor-cache"))


def reports(text: str, tail: str) -> list[CompileCounts]:
    found = list(parse(text).values())
    assert found, f"no compile report in the output:\n{tail}"
    return found


def test_serving_loads_every_graph_from_the_precompiled_inductor_cache(
    runtime: Runtime, inductor_cache: Precompiled, server: Any
) -> None:
    assert_published(inductor_cache, runtime)
    inductor_dir = inductor_cache.cache_dir / "inductor"
    assert inductor_dir.is_dir() and any(inductor_dir.iterdir())
    # The compile Job's warmup process compiled (an empty cache: misses).
    job = reports(inductor_cache.result.log, inductor_cache.result.tail())
    assert [r.compiled for r in job] == [True], job

    port, log = server(inductor_cache.workload, inductor_cache.root, require_precompiled=True)
    text = log.read_text(errors="replace")
    served = reports(text, text[-4000:])
    # The engine core (a child of vllm serve) loaded its graphs and compiled none.
    assert not [r for r in served if r.compiled], served
    assert [r for r in served if r.from_cache], served
    assert "[PRECOMPILED_WARN] Setting DISABLE_COMPILATION" in text

    # logprobs need vLLM-Spyre's sampler helpers, which it compiles with inductor
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={
            "model": inductor_cache.workload.args[0],
            "prompt": "Hello world",
            "max_tokens": 4,
            "temperature": 0,
            "ignore_eos": True,
            "logprobs": 2,
        },
        timeout=300,
    )
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert len(choice["logprobs"]["tokens"]) == 4


def test_serving_with_an_empty_inductor_cache_compiles(
    runtime: Runtime, tmp_path: Path, server: Any
) -> None:
    """The control: the same report says so when a serving start compiles."""
    workload = decoder(runtime, backend="inductor")
    _, log = server(workload, tmp_path, require_precompiled=False)
    text = log.read_text(errors="replace")
    assert "never precompiled; vLLM will compile" in text
    assert [r for r in reports(text, text[-4000:]) if r.compiled]
