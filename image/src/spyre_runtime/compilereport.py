"""What a process compiled, in its own output; and, in a serving pod that requires
precompiled graphs, a start-up that would compile stopped before it does.

This module is a vLLM general plugin (entry point `spyre_runtime` of the group
`vllm.general_plugins`; `serve` and `precompile` add the name to VLLM_PLUGINS). vLLM loads
general plugins in every process it starts, so the line comes from the process that
compiles wherever it runs: the engine core is a child process of `vllm serve`. Each time
Dynamo finishes compiling a frame, and once when the plugin's warmup has finished, it
prints that process's totals so far:

    spyre-runtime compile-cache: pid=812 compiles=3 fxgraph_hit=3 fxgraph_miss=0 \
fxgraph_bypass=0 aotautograd_hit=3 aotautograd_miss=0 aotautograd_bypass=0 compile_ms=2140 \
warmed=1

(one line; vLLM may prefix it with the process's name). `compiles` counts Dynamo's
compiles, which trace the model even when the graphs then come from the cache;
`fxgraph_*` are inductor's FX graph cache lookups (a hit skips code generation and the C++
compile; a hit through the AOTAutograd cache counts too), `aotautograd_*` the AOTAutograd
cache's; `compile_ms` the milliseconds spent in torch.compile (tracing and cache loads
included); `warmed=1` marks the line printed when the warmup finished: that process's
start-up report. A process compiled nothing when its last line has `fxgraph_miss=0
fxgraph_bypass=0`; it loaded from the cache when `fxgraph_hit` is above 0. The line's
format is part of the contract (contract.py: `parse`, each pid's last line; `startup`,
each pid's `warmed=1` line; `CompileCounts`), which the operator reads back.

With REQUIRE_CACHED_ENV set (`serve` sets it when the spec requires precompiled graphs),
inductor generating code before the warmup has finished (a graph the key's cache does not
hold, on any backend: the model's with inductor, vLLM's sampler helpers with all of them)
writes a CacheNotReady summary to the termination log and raises, so the engine, and the
pod, fail at once with the reason. After the warmup a compile is reported, not fatal: a
request must not bring the server down.

Only the stdlib at import time: `register` imports torch, which vLLM has loaded by then.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .contract import (
    CACHE_NOT_READY,
    FLAVOURS,
    MARKER,
    SPYRE_SERVING_CACHE_KEY,
    SPYRE_SERVING_FLAVOUR,
    TORCHINDUCTOR_CACHE_DIR,
    CompileCounts,
)
from .enginefork import prepare_forks
from .report import failure, termination_log, write_summary

PLUGIN_NAME = "spyre_runtime"
# Set by `serve` (the spec requires precompiled graphs): compiling at start-up is an error.
REQUIRE_CACHED_ENV = "SPYRE_RUNTIME_REQUIRE_CACHED"
# (field, torch counter group, counter) in line order; the rest are counted here
_COUNTERS = (
    ("fxgraph_hit", "inductor", "fxgraph_cache_hit"),
    ("fxgraph_miss", "inductor", "fxgraph_cache_miss"),
    ("fxgraph_bypass", "inductor", "fxgraph_cache_bypass"),
    ("aotautograd_hit", "aot_autograd", "autograd_cache_hit"),
    ("aotautograd_miss", "aot_autograd", "autograd_cache_miss"),
    ("aotautograd_bypass", "aot_autograd", "autograd_cache_bypass"),
)
# The plugins' last warmup line: continuous batching, then static shapes and pooling.
WARMUP_DONE = r"\[WARMUP\] (?:Finished in|All .* finished in)"
_WARMUP_DONE = re.compile("^" + WARMUP_DONE)


@dataclass
class _State:
    compiles: int = 0
    compile_seconds: float = 0.0
    compile_started: float | None = None
    warmed: bool = False


_state = _State()


def _print(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _report(warmed: bool = False) -> None:
    try:
        from torch._dynamo.utils import counters

        values = {name: counters[group][key] for name, group, key in _COUNTERS}
        counts = CompileCounts(
            pid=os.getpid(),
            compiles=_state.compiles,
            **values,
            compile_ms=round(_state.compile_seconds * 1000),
            warmed=int(warmed),
        )
        _print(counts.line())
    except Exception as e:  # a report must never fail a compile
        _print(f"{MARKER} unavailable: {type(e).__name__}: {e}")


def _compile_started(*_args: object) -> None:
    """Dynamo's start-of-compile callback (its CallbackArgs are not needed)."""
    _state.compile_started = time.monotonic()


def _compile_ended(*_args: object) -> None:
    _state.compiles += 1
    if _state.compile_started is not None:
        _state.compile_seconds += time.monotonic() - _state.compile_started
        _state.compile_started = None
    _report()


class _WarmupDone(logging.Handler):
    """The plugin's last warmup line: start-up's compiles are over."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record of the plugin: not ours to report
            return
        if not _state.warmed and _WARMUP_DONE.match(message):
            _state.warmed = True
            _report(warmed=True)


def refusal(environ: Mapping[str, str]) -> str:
    """Why a serving process must not compile (the termination summary's message)."""
    flavour = FLAVOURS.get(environ.get(SPYRE_SERVING_FLAVOUR, ""))
    switch = f"{flavour.require_precompiled_var}=1" if flavour else "requirePrecompiled"
    key = environ.get(SPYRE_SERVING_CACHE_KEY, "?")
    return (
        f"{switch} but this serving pod would compile a graph with inductor that the cache "
        f"of key {key} does not hold (its inductor cache, loaded from "
        f"{environ.get(TORCHINDUCTOR_CACHE_DIR, '?')}, misses it). Serving pods never compile: "
        "the key's cache is incomplete (changed after its compile Job, or compiled by another "
        "image); compile the key again, or turn requirePrecompiled off."
    )


class CompileForbidden(RuntimeError):
    """A serving process that requires precompiled graphs was about to compile one."""


def _guard(codegen: Callable[..., Any]) -> Callable[..., Any]:
    """inductor's code generation (its cache missed, or cannot cache the graph), refused
    until the warmup has finished."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _state.warmed:
            return codegen(*args, **kwargs)
        message = refusal(os.environ)
        _print(f"{MARKER} refused: {message}")
        summary = failure(CACHE_NOT_READY, message)
        summary["cacheKey"] = os.environ.get(SPYRE_SERVING_CACHE_KEY)
        write_summary(termination_log(os.environ), summary)
        raise CompileForbidden(message)

    guarded.__wrapped__ = codegen  # type: ignore[attr-defined]
    return guarded


def _forbid_compiling() -> None:
    import torch._inductor.compile_fx as compile_fx

    codegen = getattr(compile_fx, "fx_codegen_and_compile", None)
    if codegen is None:
        raise CompileForbidden(
            f"{REQUIRE_CACHED_ENV}: this torch ({compile_fx.__file__}) has no "
            "fx_codegen_and_compile to guard; the require switch cannot be enforced"
        )
    if not hasattr(codegen, "__wrapped__"):
        compile_fx.fx_codegen_and_compile = _guard(codegen)


def register() -> None:
    """vLLM's general-plugin hook: may run more than once per process (and is inherited
    across fork); everything is installed once."""
    from torch._dynamo.callback import callback_handler

    if _compile_ended not in callback_handler.end_callbacks:
        callback_handler.register_start_callback(_compile_started)
        callback_handler.register_end_callback(_compile_ended)
    flavour = FLAVOURS.get(os.environ.get(SPYRE_SERVING_FLAVOUR, ""))
    if flavour is not None:
        plugin_log = logging.getLogger(flavour.module)
        if not any(isinstance(h, _WarmupDone) for h in plugin_log.handlers):
            plugin_log.addHandler(_WarmupDone())
    if os.environ.get(REQUIRE_CACHED_ENV) == "1":
        _forbid_compiling()
    prepare_forks()  # enginefork.py


def with_plugin(plugins: str | None) -> str | None:
    """VLLM_PLUGINS with this plugin added (unset loads every plugin, this one included)."""
    if plugins is None:
        return None
    names = [p for p in plugins.split(",") if p]
    return ",".join(names if PLUGIN_NAME in names else [*names, PLUGIN_NAME])
