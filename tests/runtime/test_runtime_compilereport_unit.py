"""The compile report line: its format, reading it back from a log, the plugin name."""

from __future__ import annotations

import tomllib

import pytest
from rtlib import REPO

from spyre_runtime.compilereport import MARKER, PLUGIN_NAME, CompileCounts, parse, with_plugin

pytestmark = pytest.mark.unit


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
        "aotautograd_hit=0 aotautograd_miss=2 aotautograd_bypass=0"
    )
    assert engine[-1].compiled and not engine[-1].from_cache
    loaded = counts(5, 3, 3, 0)
    assert loaded.from_cache and not loaded.compiled
    assert CompileCounts(5, 3, 2, 0, 1, 0, 0, 3).compiled  # a graph inductor cannot cache
    assert parse("no report here") == {}


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
