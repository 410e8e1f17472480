"""Compile once, pull elsewhere, for real: the real vLLM-Spyre precompile (CPU, eager)
publishes its key to the testbed's registry; `spyre-runtime pull` fetches it into another,
empty volume; `serve` starts from the pulled cache with the require switch on, compiles
nothing and answers. The times of the compile, the pull and the start are printed (run
with -s; docs/cache-sharing.md has the figures)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rtlib import Runtime, decoder, precompile

from cachelib import Bed, files_of, running_registry
from contractlib import cache_key
from spyre_runtime.contract import READY_NAME, parse, startup

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.parametrize("runtime", ["vllm-spyre"], indirect=True),
]


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    with running_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


def test_a_key_compiled_and_published_pulls_into_another_volume_and_serves_compiling_nothing(
    runtime: Runtime, bed: Bed, tmp_path: Path, server: Any
) -> None:
    repository = f"{bed.registry.address}/caches/t{uuid.uuid4().hex[:8]}"
    plain = decoder(runtime)
    workload = dataclasses.replace(plain, extra_env={**plain.extra_env, **bed.job_env(repository)})
    compiled = precompile(runtime, workload, tmp_path / "a")
    assert compiled.result.returncode == 0, compiled.result.tail()
    summary = compiled.result.summary or {}
    key = cache_key(workload.config)
    assert "published" in summary, summary
    published = summary["published"]
    assert published["reference"].startswith(f"{repository}:{key}-"), summary
    assert published["bytes"] > summary["bytes"] > 0  # the tar's headers besides the files

    other = tmp_path / "b"
    other.mkdir()
    began = time.monotonic()
    pulled = runtime.run("pull", ["pull"], workload.env(runtime, other), timeout=600)
    pull_seconds = time.monotonic() - began
    assert pulled.returncode == 0, pulled.tail()
    assert pulled.summary is not None and pulled.summary["pulled"]["digest"] == published["digest"]
    assert files_of(other / key) == files_of(compiled.cache_dir)
    assert (other / key / READY_NAME).exists()

    began = time.monotonic()
    port, log = server(workload, other, require_precompiled=True)
    start_seconds = time.monotonic() - began
    started = log.read_text(errors="replace")
    warmed = list(startup(started).values())
    assert warmed and not [r for r in warmed if r.compiled], started[-4000:]
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={"model": workload.args[0], "prompt": "Hello", "max_tokens": 4, "temperature": 0,
              "ignore_eos": True, "logprobs": 2},
        timeout=300,
    )  # fmt: skip
    assert response.status_code == 200, response.text
    served = log.read_text(errors="replace")
    assert not [r for r in parse(served).values() if r.compiled], served[-4000:]
    print(
        f"\n[cache-sharing] {runtime.flavour} eager: compile {compiled.seconds:.1f} s "
        f"(its summary: {summary['seconds']} s), published {published['bytes']} bytes in "
        f"{published['seconds']} s; pull {pull_seconds:.1f} s (its summary: "
        f"{pulled.summary['seconds']} s, {pulled.summary['pulled']['bytes']} bytes); "
        f"start from the pulled cache {start_seconds:.1f} s"
    )
