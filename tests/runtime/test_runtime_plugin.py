"""The real entrypoint with the real plugin on CPU (eager backend), for both flavours.

Each engine start costs 15-60 s here, so caches are shared through module fixtures and
the refusal tests start no engine at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from rtlib import (
    ENGINE_TIMEOUT,
    REPO,
    Precompiled,
    Runtime,
    assert_published,
    decoder,
    embedding,
    precompile,
    stop,
    termination,
)

from contractlib import cache_key
from spyre_devcluster.simulate import poll_until
from spyre_runtime.contract import CATALOG_NAME, READY_NAME

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def decoder_cache(runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Precompiled:
    return precompile(runtime, decoder(runtime), tmp_path_factory.mktemp("decoder-cache"))


def plugin_match(rt: Runtime, done: Precompiled) -> int:
    module = rt.flavour.replace("-", "_")
    out = rt.python(
        REPO / "tests" / "runtime" / "match_catalog.py",
        module,
        str(done.cache_dir),
        *done.workload.args,
        env=done.workload.env(rt, done.root),
        timeout=ENGINE_TIMEOUT,
    )
    return int([line for line in out.splitlines() if line.startswith("MATCH=")][-1][6:])


def test_precompile_fills_an_empty_cache(runtime: Runtime, decoder_cache: Precompiled) -> None:
    ready = assert_published(decoder_cache, runtime)
    entry = ready["catalogEntry"]
    assert (
        entry[f"{runtime.flavour.replace('-', '_')}_version"]
        == (ready["versions"][runtime.flavour.replace("-", "_")])
    )
    assert entry["data"] == {
        "MODEL_NAME": decoder_cache.workload.args[0],
        "NUM_AIUS": 1,
        "VLLM_DT_MAX_CONTEXT_LEN": 256,
        "VLLM_DT_MAX_BATCH_SIZE": 2,
    }
    assert plugin_match(runtime, decoder_cache) == 0
    for step in ("step=warmup", "step=catalog", "step=ready"):
        assert step in decoder_cache.result.log


def test_serve_answers_from_the_precompiled_cache(
    runtime: Runtime, decoder_cache: Precompiled, server: Any
) -> None:
    assert decoder_cache.result.returncode == 0, decoder_cache.result.tail()
    port, log = server(decoder_cache.workload, decoder_cache.root, require_precompiled=True)
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={
            "model": decoder_cache.workload.args[0],
            "prompt": "Hello world",
            "max_tokens": 8,
            "temperature": 0,
            "ignore_eos": True,
        },
        timeout=300,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["usage"]["completion_tokens"] == 8
    assert body["choices"][0]["text"]
    text = log.read_text(errors="replace")
    assert "is READY for this configuration" in text
    # The plugin's require-precompiled path ran and its own matcher found the entry.
    assert "[PRECOMPILED_WARN] Setting DISABLE_COMPILATION" in text
    assert "doesn't match any of the pre-compiled" not in text


def test_serve_refuses_a_cache_compiled_for_another_config(
    runtime: Runtime, decoder_cache: Precompiled
) -> None:
    assert decoder_cache.result.returncode == 0, decoder_cache.result.tail()
    other = decoder(runtime, max_model_len=512)
    # The same key directory with another config, as with a stale key; then a key never built.
    for key, expected in (
        (decoder_cache.cache_dir.name, "maxModelLen: READY has 256, this pod has 512"),
        (cache_key(other.config), "it was never precompiled"),
    ):
        env = other.env(runtime, decoder_cache.root, require_precompiled=True, key=key)
        done = runtime.run(f"refuse-{key[:8]}", ["serve", *other.args], env, timeout=120)
        assert done.returncode == 3, done.tail()
        assert expected in done.log
        assert done.summary is not None and done.summary["reason"] == "CacheNotReady"
        assert "INFO exec " not in done.log


def test_concurrent_precompiles_of_one_key(runtime: Runtime, tmp_path: Path) -> None:
    workload = decoder(runtime)
    # each with its own gloo port, as two pods would have
    runs = [(f"concurrent-{i}", workload.env(runtime, tmp_path)) for i in range(2)]
    procs = [runtime.start(name, ["precompile", *workload.args], env) for name, env in runs]
    try:
        for proc in procs:
            proc.wait(timeout=2 * ENGINE_TIMEOUT)
    finally:
        for proc in procs:
            stop(proc)
    for (name, env), proc in zip(runs, procs, strict=True):
        assert proc.returncode == 0, runtime.log(name)[-4000:]
        assert (termination(env) or {}).get("ok"), runtime.log(name)[-4000:]
    cache_dir = tmp_path / cache_key(workload.config)
    ready = json.loads((cache_dir / READY_NAME).read_text())
    assert json.loads((cache_dir / CATALOG_NAME).read_text()) == [ready["catalogEntry"]]
    assert ready["cacheKey"] == cache_dir.name and ready["config"] == workload.config


def test_a_killed_precompile_leaves_no_ready(runtime: Runtime, tmp_path: Path) -> None:
    workload = decoder(runtime)
    name = "killed"
    proc = runtime.start(name, ["precompile", *workload.args], workload.env(runtime, tmp_path))
    try:

        def warming_up() -> bool:
            assert proc.poll() is None, runtime.log(name)[-4000:]
            return "[WARMUP]" in runtime.log(name)

        poll_until(warming_up, "the warmup started", ENGINE_TIMEOUT, interval=0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # the whole pod, mid-warmup
        proc.wait(timeout=60)
    finally:
        stop(proc)
    cache_dir = tmp_path / cache_key(workload.config)
    assert not (cache_dir / READY_NAME).exists(), runtime.log(name)[-4000:]
    env = workload.env(runtime, tmp_path, require_precompiled=True)
    refused = runtime.run("after-kill", ["serve", *workload.args], env, timeout=120)
    assert refused.returncode == 3 and "has no READY marker" in refused.log


def test_an_embedding_model_precompiles_and_serves(
    runtime: Runtime, tmp_path: Path, server: Any
) -> None:
    workload = embedding(runtime)
    done = precompile(runtime, workload, tmp_path)
    ready = assert_published(done, runtime)
    data = ready["catalogEntry"]["data"]
    assert data[f"{runtime.prefix}WARMUP_PROMPT_LENS"] == "64"
    assert data[f"{runtime.prefix}WARMUP_BATCH_SIZES"] == "2"
    port, _ = server(workload, tmp_path, require_precompiled=False)
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/embeddings",
        json={"model": workload.args[0], "input": ["hello world", "a tiny model"]},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    vectors = [item["embedding"] for item in response.json()["data"]]
    assert [len(v) for v in vectors] == [64, 64]


def test_the_serve_checks_import_neither_vllm_nor_torch(
    runtime: Runtime, decoder_cache: Precompiled
) -> None:
    # describe runs serve's checks (contract, READY, env, command) without the exec.
    env = decoder_cache.workload.env(runtime, decoder_cache.root, require_precompiled=True)
    done = subprocess.run(
        [str(runtime.venv / "bin" / "python"), "-X", "importtime", "-m", "spyre_runtime.cli",
         "describe", *decoder_cache.workload.args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cache: READY" in done.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines()}
    assert not imported & {"vllm", "torch", runtime.flavour.replace("-", "_")}


@pytest.mark.parametrize(
    ("model_dir", "extra", "expected"),
    [
        ("granite", ["--max-num-seqs", "two"], "InvalidConfig: vllm serve rejected"),
        ("empty", [], "ModelNotFound: checking"),  # a mounted volume without the model
    ],
    ids=["invalid-args", "empty-model-dir"],
)
def test_precompile_failures_are_explained(
    runtime: Runtime, tmp_path: Path, model_dir: str, extra: list[str], expected: str
) -> None:
    reason, message = expected.split(": ")
    (runtime.models / "empty").mkdir(exist_ok=True)
    workload = decoder(runtime)
    args = [str(runtime.models / model_dir), *workload.args[1:], *extra]
    done = runtime.run(f"fail-{reason}", ["precompile", *args], workload.env(runtime, tmp_path),
                       timeout=ENGINE_TIMEOUT)  # fmt: skip
    assert done.returncode == 1, done.tail()
    assert done.summary is not None and done.summary["reason"] == reason, done.tail()
    assert done.summary["ok"] is False and done.summary["message"].startswith(message)
    assert not (tmp_path / cache_key(workload.config) / READY_NAME).exists()
