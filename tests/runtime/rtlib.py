"""Helpers shared by the runtime tests: the flavours' venvs, the workloads and how they are
precompiled (the contract env itself: tests/contractlib.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from contractlib import PREFIX, cache_key, contract_env
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.simulate import Timeout, poll_until
from spyre_runtime.contract import CATALOG_NAME, READY_NAME

ENGINE_TIMEOUT = 900  # one engine start-up on a loaded 2-core machine, generously
REPO = Path(__file__).resolve().parents[2]


def installed_venv(flavour: str) -> Path:
    """The flavour's CPU runtime venv (scripts/runtime-env); the test fails if it is missing."""
    done = subprocess.run(
        [str(REPO / "scripts" / "runtime-env"), "--installed", flavour],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(
            f"the {flavour} runtime env is missing; install it first with "
            f"`scripts/runtime-env {flavour}` (or `all`):\n{done.stderr}",
            pytrace=False,
        )
    return Path(done.stdout.strip().splitlines()[-1])


BATCHING_ENV = {
    # USE_CB=1: 1.x decoders use continuous batching, which is what 2.x always does, so
    # both flavours warm up the same kind of graphs.
    "vllm-spyre": {"VLLM_SPYRE_USE_CB": "1"},
    "sendnn-inference": {},
}
# Pooling models warm up static shapes in every version (1.x: static batching, USE_CB=0).
POOLING_ENV = {
    "vllm-spyre": {"VLLM_SPYRE_USE_CB": "0"},
    "sendnn-inference": {},
}


@dataclass
class Runtime:
    """One flavour's venv and tiny models, and how the tests launch spyre-runtime in it."""

    flavour: str
    venv: Path
    models: Path
    logs: Path

    @property
    def prefix(self) -> str:
        return PREFIX[self.flavour]

    def env(
        self,
        root: Path,
        config: dict[str, Any],
        require_precompiled: bool = False,
        key: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> dict[str, str]:
        """A pod's env: the contract, the CPU backend, a free gloo port, no hub access."""
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        return {
            **base,
            **contract_env(
                self.flavour,
                root,
                config,
                root / f"termination-{uuid.uuid4().hex[:8]}",
                require_precompiled,
                key,
            ),
            **BATCHING_ENV[self.flavour],
            **(extra or {}),
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": str(free_port()),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }

    def start(
        self, name: str, args: list[str], env: dict[str, str], program: str = "spyre-runtime"
    ) -> subprocess.Popen[str]:
        """Start `<venv>/bin/<program> <args>` in its own session, output to logs/<name>.log."""
        log = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 - the child owns it
        return subprocess.Popen(
            [str(self.venv / "bin" / program), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def run(self, name: str, args: list[str], env: dict[str, str], timeout: float) -> Result:
        proc = self.start(name, args, env)
        try:
            proc.wait(timeout=timeout)
        finally:
            stop(proc)
        return Result(proc.returncode, self.log(name), termination(env))

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def python(self, script: Path, *args: str, env: dict[str, str], timeout: float) -> str:
        done = subprocess.run(
            [str(self.venv / "bin" / "python"), str(script), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"{script.name} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout


@dataclass
class Result:
    returncode: int
    log: str
    summary: dict[str, Any] | None

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.splitlines()[-lines:])


def termination(env: dict[str, str]) -> dict[str, Any] | None:
    path = Path(env["SPYRE_SERVING_TERMINATION_LOG"])
    if not path.exists():
        return None
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


def stop(proc: subprocess.Popen[str]) -> None:
    """End a process group started by Runtime.start: TERM, then KILL."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    # the group may still hold children (vLLM's engine core) after its leader exited
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def wait_for_server(
    proc: subprocess.Popen[str], port: int, log: Path, timeout: float, interval: float = 1.0
) -> None:
    """Poll /v1/models until it answers; fail with the log's tail if the server dies."""

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{_tail(log)}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        poll_until(answers, "the server answers /v1/models", timeout, interval)
    except Timeout as err:
        raise AssertionError(f"{err}:\n{_tail(log)}") from None


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-60:])


@dataclass
class Workload:
    """A model plus the compile config the operator would derive for it."""

    name: str
    args: list[str]
    config: dict[str, Any]
    extra_env: dict[str, str]

    def env(self, rt: Runtime, root: Path, **kwargs: Any) -> dict[str, str]:
        return rt.env(root, self.config, extra=self.extra_env, **kwargs)


def decoder(rt: Runtime, max_model_len: int = 256, backend: str = "eager") -> Workload:
    model = str(rt.models / "granite")
    args = [model, "--max-model-len", str(max_model_len), "--max-num-seqs", "2",
            "--max-num-batched-tokens", "256"]  # fmt: skip
    config = {"flavour": rt.flavour, "model": model, "maxModelLen": max_model_len,
              "maxNumSeqs": 2, "maxNumBatchedTokens": 256, "backend": backend}  # fmt: skip
    name = "decoder" if backend == "eager" else f"decoder-{backend}"
    return Workload(name, args, config, {})


def embedding(rt: Runtime) -> Workload:
    model = str(rt.models / "roberta")
    shapes = {f"{rt.prefix}WARMUP_PROMPT_LENS": "64", f"{rt.prefix}WARMUP_BATCH_SIZES": "2"}
    config = {"flavour": rt.flavour, "model": model, "runner": "pooling", "warmup": shapes}
    return Workload("embedding", [model, "--runner", "pooling"], config,
                    {**POOLING_ENV[rt.flavour], **shapes})  # fmt: skip


@dataclass
class Precompiled:
    workload: Workload
    root: Path
    result: Result
    seconds: float

    @property
    def cache_dir(self) -> Path:
        return self.root / cache_key(self.workload.config)


def precompile(rt: Runtime, workload: Workload, root: Path) -> Precompiled:
    started = time.monotonic()
    result = rt.run(
        f"precompile-{workload.name}-{root.name}",
        ["precompile", *workload.args],
        workload.env(rt, root),
        timeout=ENGINE_TIMEOUT,
    )
    return Precompiled(workload, root, result, time.monotonic() - started)


def assert_published(done: Precompiled, rt: Runtime) -> dict[str, Any]:
    assert done.result.returncode == 0, done.result.tail()
    ready = json.loads((done.cache_dir / READY_NAME).read_text())
    assert ready["cacheKey"] == done.cache_dir.name
    assert ready["config"] == done.workload.config
    assert ready["versions"]["spyre_runtime"] and ready["versions"]["vllm"]
    catalog = json.loads((done.cache_dir / CATALOG_NAME).read_text())
    assert catalog == [ready["catalogEntry"]]
    assert done.result.summary == {
        "ok": True,
        "cacheKey": done.cache_dir.name,
        "seconds": ready["timings"]["totalSeconds"],
        "versions": ready["versions"],
        "bytes": ready["bytes"],
    }
    # what it says it wrote is there (READY, written after the count, aside; a shared
    # fixture's cache may have grown since, never shrunk)
    written = [p for p in done.cache_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    on_disk = sum(p.stat().st_size for p in written if p.name != READY_NAME)
    assert 0 < ready["bytes"] <= on_disk, (ready["bytes"], on_disk)
    assert not [p for p in done.cache_dir.iterdir() if p.name.endswith(".tmp")]
    return ready
