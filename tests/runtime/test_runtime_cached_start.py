"""Serving starts from the cache a compile made, on every backend the CPU runs (eager:
vLLM's sampler helpers still compile with inductor; inductor: the model too): it compiles
nothing, even for a first logprobs request, and writes nothing under the key's directory.
With the key's inductor cache emptied by hand and the require switch on, `serve` refuses
before vLLM starts (READY's manifest), and what the manifest cannot see stops the start-up
at the first graph it would compile; both with the reason in the termination summary.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from rtlib import (
    ENGINE_TIMEOUT,
    Precompiled,
    Runtime,
    Workload,
    assert_published,
    decoder,
    precompile,
)

from contractlib import cache_key
from spyre_runtime import modelinfo
from spyre_runtime.catalog import write_ready
from spyre_runtime.contract import (
    FLAVOURS,
    INDUCTOR_CACHE_SUBDIR,
    INDUCTOR_FILES,
    MARKER,
    READY_NAME,
    CompileCounts,
    parse,
    startup,
)

# Each flavour once, with the backend that compiles most: inductor where the flavour
# compiles continuous batching with it, else eager (vllm-spyre 1.10: tests/runtime/
# test_runtime_registry.py, docs/runtime.md). A case costs a compile and four starts
# (~5 min here); sendnn-inference with eager was run by hand (docs/runtime.md).
CASES = [
    pytest.param(name, backend, id=f"{name}-{backend}")
    for name, flavour in FLAVOURS.items()
    for backend in ["inductor" if flavour.inductor_continuous_batching else "eager"]
]
pytestmark = [
    pytest.mark.runtime,
    pytest.mark.parametrize(("runtime", "backend"), CASES, indirect=True),
]


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def compiled(
    runtime: Runtime, backend: str, tmp_path_factory: pytest.TempPathFactory
) -> Precompiled:
    root = tmp_path_factory.mktemp(f"cache-{backend}")
    return precompile(runtime, in_own_tmp(decoder(runtime, backend=backend), root), root)


def in_own_tmp(workload: Workload, folder: Path) -> Workload:
    """The pod's temporary directory and HOME (emptyDirs) under `folder`: where serve puts
    its copy of the inductor cache and vLLM's model infos, outside the key's directory."""
    tmp, home = folder / "pod-tmp", folder / "pod-home"
    tmp.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    extra = {**workload.extra_env, "TMPDIR": str(tmp), "HOME": str(home)}
    return dataclasses.replace(workload, extra_env=extra)


def files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder`: size and modification time."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def reports(text: str) -> list[CompileCounts]:
    found = list(parse(text).values())
    assert found, f"no {MARKER} line in the output:\n{text[-4000:]}"
    return found


def complete(port: int, model: str, **extra: Any) -> dict[str, Any]:
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={"model": model, "prompt": "Hello world", "max_tokens": 4, "temperature": 0,
              "ignore_eos": True, **extra},
        timeout=300,
    )  # fmt: skip
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_serving_start_from_the_cache_compiles_nothing_and_writes_nothing(
    runtime: Runtime, compiled: Precompiled, server: Any, tmp_path: Path
) -> None:
    ready = assert_published(compiled, runtime)
    # The compile Job's warmup compiled with inductor into the key's directory (the model
    # with inductor; vLLM's sampler helpers with every backend) and served the first
    # requests there.
    assert any(files(compiled.cache_dir / INDUCTOR_CACHE_SUBDIR))
    assert [r.compiled for r in reports(compiled.result.log)] == [True]
    assert ready["timings"]["requestsSeconds"] > 0
    # vLLM's inspection of the model class, kept for the pods (modelinfo.py)
    assert any((compiled.cache_dir / modelinfo.SUBDIR).glob("*.json"))
    before = files(compiled.cache_dir)

    pod = in_own_tmp(compiled.workload, tmp_path)  # another pod's HOME than the Job's
    port, log = server(pod, compiled.root, require_precompiled=True)
    started = log.read_text(errors="replace")
    assert "[PRECOMPILED_WARN] Setting DISABLE_COMPILATION" in started
    assert "vLLM model infos: 1 files from the key" in started
    # a CPU backend's engine core is forked (enginefork.py): it imports and lists the
    # platform plugins no second time, as a spawned one does
    assert started.count("Available plugins for group vllm.platform_plugins") == 1, started
    # the engine core's report at the end of its warmup: none compiled
    warmed = list(startup(started).values())
    assert warmed and not [r for r in warmed if r.compiled], reports(started)

    model = compiled.workload.args[0]
    with_logprobs = complete(port, model, logprobs=2)["choices"][0]
    assert len(with_logprobs["logprobs"]["tokens"]) == 4
    assert complete(port, model)["usage"]["completion_tokens"] == 4
    served = log.read_text(errors="replace")
    # graphs loaded from the cache (at start-up, or for the first logprobs request, as
    # the runtime goes), none compiled
    assert not [r for r in reports(served) if r.compiled], reports(served)
    assert [r for r in reports(served) if r.from_cache], reports(served)
    assert "refused" not in served
    assert files(compiled.cache_dir) == before


def emptied_copy(compiled: Precompiled, root: Path, keep_manifest: bool) -> Path:
    """A copy of the compiled key's directory under `root`, its `inductor/` emptied by hand
    (READY and the catalog kept; READY's manifest of `inductor/` kept or dropped)."""
    cache_dir = root / compiled.cache_dir.name
    shutil.copytree(compiled.cache_dir, cache_dir, symlinks=True)
    inductor = cache_dir / INDUCTOR_CACHE_SUBDIR
    shutil.rmtree(inductor)
    inductor.mkdir()
    if not keep_manifest:
        ready = json.loads((cache_dir / READY_NAME).read_text())
        del ready[INDUCTOR_FILES]
        write_ready(cache_dir, ready)
    return cache_dir


def test_an_emptied_cache_with_the_require_switch_is_refused_before_vllm_starts(
    runtime: Runtime, compiled: Precompiled, tmp_path: Path
) -> None:
    """READY's manifest of `inductor/` says what the compile wrote: `serve` refuses at once."""
    assert compiled.result.returncode == 0, compiled.result.tail()
    cache_dir = emptied_copy(compiled, tmp_path / "cache", keep_manifest=True)
    before = files(cache_dir)
    workload = in_own_tmp(compiled.workload, tmp_path)
    env = workload.env(runtime, cache_dir.parent, require_precompiled=True)

    done = runtime.run("emptied", ["serve", *workload.args], env, timeout=120)
    assert done.returncode == 3, done.tail()
    assert done.summary is not None and done.summary["reason"] == "CacheNotReady", done.tail()
    assert "inductor files its compile wrote" in done.summary["message"], done.summary
    assert "INFO exec " not in done.log
    assert files(cache_dir) == before


def test_a_start_that_would_compile_with_the_require_switch_stops_at_that_graph(
    runtime: Runtime, compiled: Precompiled, tmp_path: Path, server: Any
) -> None:
    """What the manifest cannot see (here: a READY without one, as older images wrote, over
    an emptied `inductor/`): the first graph the start-up would compile stops it, with the
    reason. Where this runtime's start-up compiles nothing (its Job's start-up report says
    so), the start succeeds and the first logprobs request compiles: reported, not fatal."""
    assert compiled.result.returncode == 0, compiled.result.tail()
    cache_dir = emptied_copy(compiled, tmp_path / "cache", keep_manifest=False)
    before = files(cache_dir)
    workload = in_own_tmp(compiled.workload, tmp_path)
    (job_startup,) = startup(compiled.result.log).values()

    if job_startup.compiled:
        env = workload.env(runtime, cache_dir.parent, require_precompiled=True)
        done = runtime.run("refused", ["serve", *workload.args], env, timeout=ENGINE_TIMEOUT)
        assert done.returncode != 0, done.tail()
        assert done.summary is not None, done.tail()
        assert done.summary["reason"] == "CacheNotReady", done.summary
        assert done.summary["cacheKey"] == cache_dir.name
        assert done.summary["message"].startswith(
            f"{runtime.prefix}REQUIRE_PRECOMPILED_DECODERS=1 but this serving pod would compile"
        ), done.summary
        assert f"{MARKER} refused: " in done.log
        assert "[WARMUP] Finished" not in done.log
    else:
        port, log = server(workload, cache_dir.parent, require_precompiled=True)
        assert not [r for r in startup(log.read_text()).values() if r.compiled]
        complete(port, workload.args[0], logprobs=2)
        assert [r for r in reports(log.read_text()) if r.compiled]
    assert files(cache_dir) == before


def test_without_the_switch_a_start_with_no_cache_compiles_and_says_so(
    runtime: Runtime, backend: str, tmp_path: Path, server: Any
) -> None:
    """The control: the same report says so when a serving process compiles, at start-up
    or at its first logprobs request (into its own copy: the key's directory is not even
    made)."""
    workload = in_own_tmp(decoder(runtime, backend=backend), tmp_path)
    port, log = server(workload, tmp_path, require_precompiled=False)
    assert "never precompiled; vLLM will compile" in log.read_text(errors="replace")
    complete(port, workload.args[0], logprobs=2)
    text = log.read_text(errors="replace")
    assert [r for r in parse(text).values() if r.compiled], reports(text)
    assert not (tmp_path / cache_key(workload.config)).exists()
