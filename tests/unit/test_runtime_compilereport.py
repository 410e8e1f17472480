"""The compile report line: its format, reading it back from a log, the plugin name."""

from __future__ import annotations

import dataclasses
import json
import logging
import tomllib
from pathlib import Path
from typing import Any

import pytest

from spyre_runtime import compilereport
from spyre_runtime.compilereport import PLUGIN_NAME, with_plugin
from spyre_runtime.contract import MARKER, CompileCounts, parse, startup

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def counts(pid: int, compiles: int, hit: int, miss: int) -> CompileCounts:
    return CompileCounts(pid, compiles, hit, miss, 0, hit, miss, 0)


def test_the_line_reads_back_per_process_last_one_wins() -> None:
    engine = [counts(812, 1, 0, 1), counts(812, 2, 0, 2)]
    log = "\n".join(
        [
            "INFO 11-23 13:00:00 [api_server.py:1] vLLM API server",
            # vLLM prefixes the engine core's output with its name
            *(f"(EngineCore pid=812) {c.line()}" for c in engine),
            counts(99, 1, 1, 0).line(),
            f"{MARKER} unavailable: ImportError: no torch",
        ]
    )
    assert parse(log) == {812: engine[-1], 99: counts(99, 1, 1, 0)}
    assert engine[-1].line() == (
        f"{MARKER} pid=812 compiles=2 fxgraph_hit=0 fxgraph_miss=2 fxgraph_bypass=0 "
        "aotautograd_hit=0 aotautograd_miss=2 aotautograd_bypass=0 compile_ms=0 warmed=0"
    )
    # a line without the later fields (an older image) still reads
    older = f"{MARKER} pid=7 compiles=1 fxgraph_hit=1 fxgraph_miss=0 fxgraph_bypass=0 "
    older += "aotautograd_hit=1 aotautograd_miss=0 aotautograd_bypass=0"
    assert parse(older) == {7: counts(7, 1, 1, 0)}
    assert engine[-1].compiled and not engine[-1].from_cache
    loaded = counts(5, 3, 3, 0)
    assert loaded.from_cache and not loaded.compiled
    assert CompileCounts(5, 3, 2, 0, 1, 0, 0, 3).compiled  # a graph inductor cannot cache
    assert parse("no report here") == {}


def test_the_start_up_report_is_each_processs_warmed_line() -> None:
    warmed = dataclasses.replace(counts(812, 1, 1, 0), compile_ms=1500, warmed=1)
    later = counts(812, 2, 1, 1)  # a request compiled after the warmup
    log = "\n".join([counts(812, 1, 1, 0).line(), warmed.line(), later.line()])
    assert startup(log) == {812: warmed}
    assert parse(log) == {812: later}
    assert not warmed.compiled and later.compiled


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, None),  # unset: vLLM loads every plugin, this one too
        ("sendnn_inference", f"sendnn_inference,{PLUGIN_NAME}"),
        (f"spyre,{PLUGIN_NAME}", f"spyre,{PLUGIN_NAME}"),
        ("", PLUGIN_NAME),
    ],
)
def test_the_plugin_joins_vllm_plugins(given: str | None, expected: str | None) -> None:
    assert with_plugin(given) == expected


def test_the_plugin_is_a_vllm_general_plugin_entry_point() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    plugins = project["project"]["entry-points"]["vllm.general_plugins"]
    assert plugins == {PLUGIN_NAME: "spyre_runtime.compilereport:register"}


@pytest.mark.parametrize(
    ("message", "last"),
    [
        ("[WARMUP] Finished in 12.345s (compilation cache enabled)", True),
        ("[WARMUP] All 2 prompt/decode/batchsize-shape combinations finished in 3.2s", True),
        ("[WARMUP] Prompt length 64 finished in 1.000s (compilation cache enabled)", False),
        ("[WARMUP] Deploying prefill to device...", False),
    ],
)
def test_the_end_of_the_plugins_warmup_is_seen(message: str, last: bool) -> None:
    """Both flavours' last warmup line (continuous batching; static shapes and pooling)."""
    assert bool(compilereport._WARMUP_DONE.match(message)) is last


@pytest.fixture
def fresh_state(monkeypatch: pytest.MonkeyPatch) -> compilereport._State:
    state = compilereport._State()
    monkeypatch.setattr(compilereport, "_state", state)
    return state


def test_a_compile_before_the_warmup_ends_is_refused_with_the_reason(
    fresh_state: compilereport._State,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    termination = tmp_path / "termination-log"
    for name, value in {
        "SPYRE_SERVING_FLAVOUR": "sendnn-inference",
        "SPYRE_SERVING_CACHE_KEY": "k" * 64,
        "SPYRE_SERVING_TERMINATION_LOG": str(termination),
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/spyre-inductor-x",
    }.items():
        monkeypatch.setenv(name, value)
    generated: list[Any] = []

    def generate(*a: Any, **k: Any) -> str:
        generated.append((a, k))
        return "code"

    guarded = compilereport._guard(generate)

    with pytest.raises(compilereport.CompileForbidden, match="would compile a graph"):
        guarded("graph", inputs=[])
    assert generated == []
    summary = json.loads(termination.read_text())
    assert summary["reason"] == "CacheNotReady" and summary["cacheKey"] == "k" * 64
    assert summary["message"].startswith(
        "SENDNN_INFERENCE_REQUIRE_PRECOMPILED_DECODERS=1 but this serving pod would compile"
    )
    assert "/tmp/spyre-inductor-x" in summary["message"]
    assert f"{MARKER} refused: " in capsys.readouterr().err

    # after the warmup (the plugin's last line), a request's compile is not fatal
    done = "[WARMUP] Finished in %.3fs (compilation cache %s)", (1.0, "enabled")
    compilereport._WarmupDone().emit(logging.LogRecord("p", logging.INFO, "", 1, *done, None))
    assert fresh_state.warmed
    assert guarded("graph", inputs=[]) == "code"
    assert generated == [(("graph",), {"inputs": []})]
