"""`serve`: check the cache for this key, give inductor its own copy of the key's inductor
caches, then become `vllm serve` (exec, no child), its engine core forked on a CPU backend
(enginefork.py).

Nothing here imports torch or vLLM: the check costs milliseconds, and after exec signals
and the exit code belong to vLLM alone.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

from .catalog import CacheState, check_cache
from .compilereport import REQUIRE_CACHED_ENV
from .config import RuntimeConfig, as_compiled
from .contract import CACHE_NOT_READY, TORCHINDUCTOR_CACHE_DIR
from .enginefork import start_method_env
from .inductorcopy import private_copy
from .modelinfo import give
from .report import failure, log, write_summary

EXIT_CACHE_NOT_READY = 3


def vllm_command(cfg: RuntimeConfig) -> list[str]:
    # Prefer the vllm beside this interpreter: the same venv, even when it is not on PATH.
    here = os.path.dirname(sys.executable)
    exe = shutil.which("vllm", path=here) or shutil.which("vllm") or "vllm"
    return [exe, "serve", *cfg.vllm_args]


def refusal(cfg: RuntimeConfig, state: CacheState) -> str:
    return (
        f"{cfg.flavour.require_precompiled_var}=1 but {state.summary}. Serving pods never "
        "compile: run `spyre-runtime precompile` with this configuration first "
        "(the operator's compile Job does)."
    )


def serve(cfg: RuntimeConfig, environ: Mapping[str, str]) -> int:
    """Exec vLLM; returns an exit code only when refusing to start."""
    env = cfg.vllm_env(environ) | start_method_env(cfg.flavour, environ)
    state = check_cache(cfg)
    env = as_compiled(env, state.marker if state.ready else None, environ)
    if state.ready:
        log.info("%s", state.summary)
    elif cfg.require_precompiled:
        message = refusal(cfg, state)
        log.error("%s", message)
        summary = failure(CACHE_NOT_READY, message)
        summary["cacheKey"] = cfg.cache_key
        write_summary(cfg.termination_log, summary)
        return EXIT_CACHE_NOT_READY
    else:
        log.warning("%s; vLLM will compile the graphs it needs at start-up", state.summary)
    # inductor reads the key's caches through a copy of its own (inductorcopy.py); a cache
    # not ready may be half written, inductor then starts empty.
    if state.ready and cfg.cache_dir is not None:  # vLLM then inspects no model class
        log.info("vLLM model infos: %d files from the key", give(cfg.cache_dir, env))
    copied = private_copy(cfg.inductor_cache_dir if state.ready else None)
    env[TORCHINDUCTOR_CACHE_DIR] = str(copied.path)
    log.info(
        "inductor cache: %d files, %d bytes copied to %s", copied.files, copied.bytes, copied.path
    )
    if cfg.require_precompiled:
        env[REQUIRE_CACHED_ENV] = "1"  # compilereport.py stops a start-up that would compile
    command = vllm_command(cfg)
    log.info("exec %s", " ".join(command))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, env)
