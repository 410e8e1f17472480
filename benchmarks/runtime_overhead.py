"""What the spyre-runtime entrypoint costs on top of plain vLLM (a script, not a test).

    .venv/bin/python benchmarks/runtime_overhead.py [--flavour vllm-spyre] [--runs 3]

Needs the flavour's env from scripts/runtime-env. With the tiny test decoder on CPU:
- serve: `spyre-runtime serve <args>` versus `vllm serve <args>`, start to the first
  answer from /v1/models, same env (the precompiled cache, require-precompiled on);
- precompile: `spyre-runtime precompile <args>` on an empty cache versus a bare warmup, a
  process that only constructs `vllm.LLM(...)` with the same limits;
- and, alone, the time serve's own checks take before the exec (`describe`, same checks).
Runs alternate between the two sides; prints each run, the medians and their ratios.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime"))
from rtlib import REPO, Runtime, stop, wait_for_server

from spyre_devcluster.controlplane import free_port

LIMITS = {"max_model_len": 256, "max_num_seqs": 2, "max_num_batched_tokens": 256}
BARE_WARMUP = "import sys; from vllm import LLM; LLM(model=sys.argv[1], **{})"


def installed_venv(flavour: str) -> Path:
    done = subprocess.run(
        [str(REPO / "scripts" / "runtime-env"), "--installed", flavour],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.split()[-1])


def serve_seconds(rt: Runtime, program: str, args: list[str], env: dict[str, str]) -> float:
    port = free_port()
    name = f"bench-{program}-{port}"
    started = time.monotonic()
    proc = rt.start(name, [*args, "--port", str(port)], env, program=program)
    try:
        wait_for_server(proc, port, rt.logs / f"{name}.log", timeout=900, interval=0.05)
        return time.monotonic() - started
    finally:
        stop(proc)


def process_seconds(rt: Runtime, program: str, args: list[str], env: dict[str, str]) -> float:
    name = f"bench-{program}-{time.monotonic_ns()}"
    started = time.monotonic()
    proc = rt.start(name, args, env, program=program)
    try:
        code = proc.wait(timeout=900)
    finally:
        stop(proc)
    if code != 0:
        raise SystemExit(f"{program} {' '.join(args)} failed:\n{rt.log(name)[-3000:]}")
    return time.monotonic() - started


def compare(label: str, runs: int, ours: Callable[[], float], base: Callable[[], float]) -> None:
    samples: dict[str, list[float]] = {"spyre-runtime": [], "baseline": []}
    for i in range(runs):
        samples["spyre-runtime"].append(ours())
        samples["baseline"].append(base())
        print(
            f"{label} run {i + 1}: spyre-runtime {samples['spyre-runtime'][-1]:.2f}s, "
            f"baseline {samples['baseline'][-1]:.2f}s",
            flush=True,
        )
    ours_median = statistics.median(samples["spyre-runtime"])
    base_median = statistics.median(samples["baseline"])
    print(
        f"{label}: median spyre-runtime {ours_median:.2f}s, baseline {base_median:.2f}s, "
        f"ratio {ours_median / base_median:.3f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flavour", default="vllm-spyre")
    parser.add_argument("--runs", type=int, default=3)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spyre-bench-"))
    rt = Runtime(opts.flavour, installed_venv(opts.flavour), work / "models", work / "logs")
    rt.models.mkdir()
    rt.logs.mkdir()
    rt.python(
        rt.venv / "bin" / "spyre-runtime",
        "tiny-models",
        str(rt.models),
        env=rt.env(work, {}),
        timeout=600,
    )
    model = str(rt.models / "granite")
    args = [model, *(f"--{k.replace('_', '-')}={v}" for k, v in LIMITS.items())]
    config = {"model": model, **LIMITS}
    cache = work / "cache"

    # One precompile makes the cache both serve variants start from.
    process_seconds(rt, "spyre-runtime", ["precompile", *args], rt.env(cache, config))
    serving = rt.env(cache, config, require_precompiled=True)
    # What serve adds before exec, measured alone: describe runs the same checks.
    checks = [process_seconds(rt, "spyre-runtime", ["describe", *args], serving) for _ in range(10)]
    median = statistics.median(checks)
    print(f"serve's checks before exec (describe, 10 runs): median {median:.3f}s", flush=True)
    compare(
        "serve start-to-ready",
        opts.runs,
        lambda: serve_seconds(rt, "spyre-runtime", ["serve", *args], serving),
        lambda: serve_seconds(rt, "vllm", ["serve", *args], serving),
    )

    fresh = iter(range(10**6))
    compare(
        "precompile vs bare warmup",
        opts.runs,
        lambda: process_seconds(
            rt, "spyre-runtime", ["precompile", *args], rt.env(work / f"c{next(fresh)}", config)
        ),
        lambda: process_seconds(
            rt,
            "python",
            ["-c", BARE_WARMUP.format(LIMITS), model],
            rt.env(work / f"c{next(fresh)}", config),
        ),
    )
    print(f"logs: {rt.logs}")


if __name__ == "__main__":
    main()
