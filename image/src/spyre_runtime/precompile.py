"""`precompile`: warm the graph cache for one cache key, then publish it.

The warmup runs in a child process (spyre_runtime.warmup) so that this process outlives
an out-of-memory kill and can still say why. Only after the child succeeds does it update
the catalog and then write READY, last: no READY means not ready, whatever else is there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, cast

from . import __version__
from .catalog import upsert_catalog_entry, write_ready
from .config import ContractError, RuntimeConfig
from .contract import (
    COMPILER_ENV,
    COMPILER_ENV_FIELD,
    HEARTBEAT_SECONDS,
    INDUCTOR_CACHE_SUBDIR,
    INDUCTOR_FILES,
    READY_NAME,
    VOLUME_STEP,
    Flavour,
    Summary,
)
from .inductorcopy import manifest
from .modelinfo import keep
from .registryjob import publish_ready
from .report import STARTED_ENV, Progress, failure, log, write_summary
from .space import shortfall, tree_bytes
from .volumewatch import VolumeWatch
from .warmup import current_step_path

VOLUME_CHECK_SECONDS = 5  # how often the cache volume is probed while the warmup runs


def versions(flavour: Flavour) -> dict[str, str]:
    """Installed versions, from package metadata (no imports)."""
    found = {"spyre_runtime": __version__}
    for dist in ("vllm", flavour.module, "torch"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found


def _local_model_problem(model: str | None) -> str | None:
    """Why a local model path cannot be read, if it cannot. Paths, unlike hub ids
    ("org/name"), can be checked before spending a minute on vLLM."""
    if not model or not model.startswith(("/", "./", "../", "~")):
        return None
    path = Path(model).expanduser()
    try:
        if not path.exists():
            return f"model path {model} does not exist"
        os.listdir(path)
    except PermissionError:
        return f"model path {model} is not readable by uid {os.getuid()} (check the volume's modes)"
    return None


def _watch(child: subprocess.Popen[bytes], progress: Progress, current: Path, cache: Path) -> int:
    """Wait for the warmup: its step every HEARTBEAT_SECONDS, and at once when the cache
    volume stops answering (VOLUME_STEP, repeated at the heartbeat) or answers again."""
    watch, beat, stalled = VolumeWatch(cache.parent), time.monotonic(), False
    while True:
        try:
            return child.wait(timeout=VOLUME_CHECK_SECONDS)
        except subprocess.TimeoutExpired:
            waited = watch.stalled()
            due = time.monotonic() - beat >= HEARTBEAT_SECONDS
            if waited is not None and (due or not stalled):
                progress.step(
                    VOLUME_STEP,
                    f"the cache volume at {cache.parent} has not answered a write for "
                    f"{waited:.0f}s: its filesystem's server is unreachable; the compile "
                    "waits for it (no signal frees I/O waiting there) and goes on once it is back",
                )
            elif due or (stalled and waited is None):
                progress.heartbeat(current, "warmup")
            else:
                continue
            beat, stalled = time.monotonic(), waited is not None


def _run_warmup(
    cfg: RuntimeConfig, env: Mapping[str, str], progress: Progress
) -> Mapping[str, Any]:
    with tempfile.TemporaryDirectory(prefix="spyre-warmup-") as tmp:
        result_path = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "spyre_runtime.warmup", str(result_path), *cfg.vllm_args]
        child = subprocess.Popen(command, env={**env, STARTED_ENV: repr(progress.started)})
        # Pod deletion sends SIGTERM to us (PID 1): pass it on, the child decides.
        previous = signal.signal(signal.SIGTERM, lambda signum, _: child.send_signal(signum))
        try:
            code = _watch(child, progress, current_step_path(result_path), cfg.require_cache())
        finally:
            signal.signal(signal.SIGTERM, previous)
        if result_path.exists():
            result: dict[str, Any] = json.loads(result_path.read_text())
            return result
    if code == -signal.SIGKILL:
        return failure(
            "OutOfMemory",
            "the warmup process was killed with SIGKILL, most likely by the out-of-memory "
            "killer: give the compile Job more memory (or lower max_num_seqs/max_model_len)",
        )
    return failure("CompileFailed", f"the warmup process exited with code {code}; see its log")


def precompile(cfg: RuntimeConfig, environ: Mapping[str, str]) -> int:
    progress = Progress()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    require_var = cfg.flavour.require_precompiled_var

    def fail(summary: Summary) -> int:
        log.error("precompile failed: %s: %s", summary["reason"], summary["message"])
        summary["cacheKey"] = cfg.cache_key
        write_summary(cfg.termination_log, summary)
        return 1

    try:
        cache_dir = cfg.require_cache()
        env = cfg.vllm_env(environ)
    except ContractError as e:
        return fail(failure("InvalidConfig", str(e)))
    if not cfg.vllm_args:
        return fail(failure("InvalidConfig", "no vllm serve arguments (the model comes first)"))
    problem = _local_model_problem(cfg.model)
    if problem:
        return fail(failure("ModelNotFound", problem))
    if cfg.require_precompiled:
        log.warning("%s=1 ignored: precompile is what compiles", require_var)
    # The compile must be allowed; the engine core runs in the warmup process (see warmup.py).
    env[require_var] = "0"
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    cache_dir.mkdir(parents=True, exist_ok=True)
    # The model as the compile config names it (a hub id, not the weights' local path).
    model = str((cfg.compile_config or {}).get("model") or cfg.model)
    short = shortfall(cache_dir.parent, cache_dir.name, model)
    if short:
        return fail(failure("OutOfSpace", short))
    progress.step("warmup", f"cache {cache_dir}; vllm serve {' '.join(cfg.vllm_args)}")
    result = _run_warmup(cfg, env, progress)
    if not result["ok"]:
        return fail(cast(Summary, dict(result)))  # the warmup's failure summary
    found = versions(cfg.flavour)
    entry = {
        cfg.flavour.catalog_version_field: found[cfg.flavour.module],
        "data": result["catalogData"],
    }
    log.info("vLLM model infos: %d files kept in the key", keep(env, cache_dir))
    upsert_catalog_entry(cache_dir, entry)
    progress.step("catalog", json.dumps(entry, sort_keys=True))
    seconds = progress.elapsed()
    written = tree_bytes(cache_dir)  # READY's own few bytes aside
    write_ready(
        cache_dir,
        {
            "cacheKey": cfg.cache_key,
            "bytes": written,
            "config": cfg.compile_config,
            "flavour": cfg.flavour.name,
            "catalogEntry": entry,
            COMPILER_ENV_FIELD: {name: env[name] for name in COMPILER_ENV if name in env},
            INDUCTOR_FILES: manifest(cache_dir / INDUCTOR_CACHE_SUBDIR),
            "versions": found,
            "timings": {
                **result["timings"],
                "totalSeconds": seconds,
                "startedAt": started_at,
                "finishedAt": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        },
    )
    progress.step("ready", f"{cache_dir / READY_NAME} written")
    shared = publish_ready(environ, cache_dir.parent, cache_dir.name)
    if len(shared) > 1:
        progress.step("publish", json.dumps(shared, sort_keys=True))
    write_summary(
        cfg.termination_log,
        {
            **shared,
            "ok": True,
            "cacheKey": cfg.cache_key,
            "seconds": seconds,
            "versions": found,
            "bytes": written,
        },
    )
    return 0
