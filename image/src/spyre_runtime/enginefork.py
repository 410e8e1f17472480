"""The engine core of a serving pod on a CPU backend is forked, not spawned.

`vllm serve` sets VLLM_WORKER_MULTIPROC_METHOD=spawn when it is unset (for CUDA's sake), so
its engine core is a new interpreter that imports torch, vLLM and the plugin again: 20-40 s
of a cached start on two cores, about as much as the API server's own imports
(benchmarks/cache_effect.py, docs/node.md). Forked, it starts with the API server's
imports. On the CPU backends (eager, inductor) the API server process holds no device,
and fork is vLLM's own default as a library (the runtime tier serves through it). With
sendnn the worker opens the cards and the card runtime reads the environment the plugin's
platform writes after the API server's imports: unmeasured here, so it keeps vLLM's spawn.
A value in the pod's env (spec.env) is kept as given.

A spawned engine core reads the thread settings the platform writes (OMP_NUM_THREADS and
the like, from the pod's CPUs, when vLLM builds its config in the API server) as it
imports torch; a forked one has torch already and vLLM loads no plugin again in it, so the
plugin's hook registers `_follow_thread_settings` to run in every child forked after it.

The API server also freezes its garbage collector's heap right before the fork, as Python's
`gc.freeze` documentation advises for a fork without exec. vLLM freezes the heap itself
once start-up is over, in both processes (`freeze_gc_heap`: a full collection, then
`gc.freeze`), and each of those collections walked the ~750,000 objects of the imports the
engine core inherited: 0.5-0.6 s each on two quiet cores, both on the way to Ready. Frozen
before the fork, they are skipped there and by every later full collection (whose walk
also wrote to the pages the child shares with its parent). Garbage at that moment stays:
a collection there found 201 objects and took 0.9 s, so none is made. Measured on the
host: the engine core's freeze 0.50 -> 0.06 s, the API server's 0.59 -> 0.01 s.

Only the standard library at import time: `serve` runs this before exec'ing vLLM.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Mapping

from .contract import DYNAMO_BACKEND, Flavour

START_METHOD = "VLLM_WORKER_MULTIPROC_METHOD"
CPU_BACKENDS = ("eager", "inductor")


def start_method_env(flavour: Flavour, environ: Mapping[str, str]) -> dict[str, str]:
    """What `serve` adds to vLLM's environment: fork on a CPU backend, unless set."""
    if START_METHOD in environ or environ.get(flavour.env(DYNAMO_BACKEND)) not in CPU_BACKENDS:
        return {}
    return {START_METHOD: "fork"}


def prepare_forks() -> None:
    """From the plugin's hook (once per process: vLLM loads plugins once), in the API
    server before it forks the engine core."""
    if os.environ.get(START_METHOD) == "fork":
        os.register_at_fork(before=_freezer(os.getpid()), after_in_child=_follow_thread_settings)


def _freezer(pid: int) -> Callable[[], None]:
    """gc.freeze before a fork in process `pid` only (forked children inherit the hook)."""

    def freeze() -> None:
        if os.getpid() == pid:
            gc.freeze()

    return freeze


def _follow_thread_settings() -> None:
    """torch's intra-op threads as OMP_NUM_THREADS says now (torch is imported by then)."""
    wanted = os.environ.get("OMP_NUM_THREADS", "")
    torch = sys.modules.get("torch")
    if torch is not None and wanted.isdigit() and int(wanted) != torch.get_num_threads():
        torch.set_num_threads(max(1, int(wanted)))
