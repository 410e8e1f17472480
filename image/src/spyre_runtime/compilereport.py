"""What a process compiled, in its own output: one line after every finished torch.compile.

This module is a vLLM general plugin (entry point `spyre_runtime` of the group
`vllm.general_plugins`; `serve` and `precompile` add the name to VLLM_PLUGINS). vLLM loads
general plugins in every process it starts, so the line comes from the process that
compiles wherever it runs: the engine core is a child process of `vllm serve`. Each time
Dynamo finishes compiling a frame it prints that process's totals so far:

    spyre-runtime compile-cache: pid=812 compiles=3 fxgraph_hit=3 fxgraph_miss=0 \
fxgraph_bypass=0 aotautograd_hit=3 aotautograd_miss=0 aotautograd_bypass=0

(one line; vLLM may prefix it with the process's name). `compiles` counts Dynamo's
compiles, which trace the model even when the graphs then come from the cache;
`fxgraph_*` are inductor's FX graph cache lookups (a hit skips code generation and the C++
compile; a hit through the AOTAutograd cache counts too), `aotautograd_*` the AOTAutograd
cache's. The last line of a pid is its total so far. A process compiled nothing when its
last line has `fxgraph_miss=0 fxgraph_bypass=0`; it loaded from the cache when
`fxgraph_hit` is above 0. `parse` and `CompileCounts` read it back (tests, node stories).

Only the stdlib at import time: `register` imports torch, which vLLM has loaded by then.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, fields

PLUGIN_NAME = "spyre_runtime"
MARKER = "spyre-runtime compile-cache:"
# (field, torch counter group, counter) in line order; `compiles` is counted here
_COUNTERS = (
    ("fxgraph_hit", "inductor", "fxgraph_cache_hit"),
    ("fxgraph_miss", "inductor", "fxgraph_cache_miss"),
    ("fxgraph_bypass", "inductor", "fxgraph_cache_bypass"),
    ("aotautograd_hit", "aot_autograd", "autograd_cache_hit"),
    ("aotautograd_miss", "aot_autograd", "autograd_cache_miss"),
    ("aotautograd_bypass", "aot_autograd", "autograd_cache_bypass"),
)
_LINE = re.compile(re.escape(MARKER) + r" pid=(\d+)((?: [a-z_]+=\d+)+)")


@dataclass(frozen=True)
class CompileCounts:
    pid: int
    compiles: int
    fxgraph_hit: int
    fxgraph_miss: int
    fxgraph_bypass: int
    aotautograd_hit: int
    aotautograd_miss: int
    aotautograd_bypass: int

    @property
    def compiled(self) -> bool:
        """Inductor generated and compiled code (a cache miss, or a graph it cannot cache)."""
        return self.fxgraph_miss + self.fxgraph_bypass > 0

    @property
    def from_cache(self) -> bool:
        return self.fxgraph_hit > 0

    def line(self) -> str:
        counts = " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)[1:])
        return f"{MARKER} pid={self.pid} {counts}"


def parse(text: str) -> dict[int, CompileCounts]:
    """The last report of each pid in a log."""
    found: dict[int, CompileCounts] = {}
    for match in _LINE.finditer(text):
        values = dict(pair.split("=") for pair in match.group(2).split())
        found[int(match.group(1))] = CompileCounts(
            pid=int(match.group(1)), **{k: int(v) for k, v in values.items()}
        )
    return found


_compiles = 0


def _report(*_args: object) -> None:
    """Dynamo's end-of-compile callback (its CallbackArgs are not needed)."""
    global _compiles
    _compiles += 1
    try:
        from torch._dynamo.utils import counters

        values = {name: counters[group][key] for name, group, key in _COUNTERS}
        line = CompileCounts(pid=os.getpid(), compiles=_compiles, **values).line()
        print(line, file=sys.stderr, flush=True)
    except Exception as e:  # a report must never fail a compile
        print(f"{MARKER} unavailable: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


def register() -> None:
    """vLLM's general-plugin hook: may run more than once per process (and is inherited
    across fork), the callback is installed once."""
    from torch._dynamo.callback import callback_handler

    if _report not in callback_handler.end_callbacks:
        callback_handler.register_end_callback(_report)


def with_plugin(plugins: str | None) -> str | None:
    """VLLM_PLUGINS with this plugin added (unset loads every plugin, this one included)."""
    if plugins is None:
        return None
    names = [p for p in plugins.split(",") if p]
    return ",".join(names if PLUGIN_NAME in names else [*names, PLUGIN_NAME])
