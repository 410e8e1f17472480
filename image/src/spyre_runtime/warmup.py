"""The warmup child of `precompile`: vLLM's own engine start-up, a decoder's first
requests (what they compile beyond the plugin's warmup), then a clean shutdown.

Run as `python -m spyre_runtime.warmup <result.json> <vllm serve args...>`. The arguments go
through `vllm serve`'s own parser and engine-config path (same usage context as the API
server), so the plugin warms up exactly the graphs a serving pod will ask for. The engine
core runs in this process, so a failure arrives here as the real exception and can be
classified; the parent survives an OOM kill of this process and reports it.

vLLM, the plugin and torch are imported inside functions only.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .catalog import atomic_write_json
from .config import from_env
from .contract import (
    USE_CB,
    WARMUP_BATCH_SIZES,
    WARMUP_NEW_TOKENS,
    WARMUP_PROMPT_LENS,
    Flavour,
    Reason,
)
from .report import Progress, failure, log, setup_logging

_OOM_MARKERS = ("out of memory", "outofmemory", "bad_alloc", "cannot allocate memory")
_MODEL_MARKERS = (
    "not a valid model identifier",
    "does not appear to have a file named",
    "invalid repository id or local directory",
    "repository not found",
    "repo id must",
    "we couldn't connect to",
    "no such file or directory",
)
_MODEL_ERRORS = ("RepositoryNotFoundError", "LocalEntryNotFoundError", "HFValidationError")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def classify(exc: BaseException, default: Reason) -> Reason:
    """Map an exception (and its causes) to a summary reason; `default` by phase."""
    chain = _chain(exc)
    texts = [f"{type(e).__name__}: {e}".lower() for e in chain]
    if any(isinstance(e, MemoryError) for e in chain) or any(
        m in t for t in texts for m in _OOM_MARKERS
    ):
        return "OutOfMemory"
    if any(type(e).__name__ in _MODEL_ERRORS for e in chain) or any(
        m in t for t in texts for m in _MODEL_MARKERS
    ):
        return "ModelNotFound"
    return default


class ArgumentsRejected(Exception):
    """`vllm serve`'s parser refused the arguments (instead of printing and exiting)."""


def _reject(message: str) -> None:
    raise ArgumentsRejected(message)


def _parse_serve_args(vllm_args: Sequence[str]) -> Any:
    """`vllm serve`'s own parser and validation, as its CLI main does them."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    command = ServeSubcommand()
    serve_parser = command.subparser_init(subparsers)
    parser.error = serve_parser.error = _reject
    args = parser.parse_args(["serve", *vllm_args])
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    command.validate(args)
    return args


def build_vllm_config(vllm_args: Sequence[str]) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    args = _parse_serve_args(vllm_args)
    engine_args = AsyncEngineArgs.from_cli_args(args)
    return engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


def catalog_data(flavour: Flavour, vllm_config: Any) -> dict[str, Any]:
    """The catalog `data` the plugin's matcher compares with this vllm_config.

    Static shapes (1.x static batching, and pooling models) are keyed by the plugin's own
    parsed warmup lists (its defaults included), continuous batching by the limits.
    """
    envs = importlib.import_module(f"{flavour.module}.envs")
    prefix = flavour.env_prefix
    data: dict[str, Any] = {
        "MODEL_NAME": vllm_config.model_config.model,
        "NUM_AIUS": vllm_config.parallel_config.tensor_parallel_size,
    }
    pooling = vllm_config.model_config.runner_type == "pooling"
    cb = bool(getattr(envs, flavour.env(USE_CB), True))
    if pooling or (flavour.static_decoders and not cb):
        shapes = [WARMUP_PROMPT_LENS, WARMUP_BATCH_SIZES]
        if flavour.static_decoders:
            shapes.insert(1, WARMUP_NEW_TOKENS)
        for name in shapes:
            data[prefix + name] = ",".join(str(v) for v in getattr(envs, prefix + name))
    else:
        data["VLLM_DT_MAX_CONTEXT_LEN"] = vllm_config.model_config.max_model_len
        data["VLLM_DT_MAX_BATCH_SIZE"] = vllm_config.scheduler_config.max_num_seqs
    return data


def start_engine(vllm_config: Any) -> Any:
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.llm_engine import LLMEngine

    return LLMEngine.from_vllm_config(
        vllm_config, usage_context=UsageContext.OPENAI_API_SERVER, disable_log_stats=True
    )


# What a user's first requests compile beyond the plugin's warmup: vLLM's sampler helpers
# for logprobs (torch.compile with inductor on every backend), greedy and sampled. Short,
# so they fit static warmup shapes too (new tokens >= 2).
FIRST_REQUESTS = (
    {"max_tokens": 2, "temperature": 0.0, "logprobs": 2},
    {"max_tokens": 2, "temperature": 1.0, "top_p": 0.9, "logprobs": 1},
)
FIRST_PROMPT = "Hello world"


def serve_first_requests(engine: Any) -> None:
    """Run FIRST_REQUESTS through the engine, so the graphs they compile land in the key's
    caches: each alone, then together (vLLM 0.17 compiles its logprobs helper for a batch
    of one and for larger batches apart)."""
    from vllm import SamplingParams

    rounds = [[params] for params in FIRST_REQUESTS] + [list(FIRST_REQUESTS)]
    for n, batch in enumerate(rounds):
        for i, params in enumerate(batch):
            request_id = f"spyre-runtime-first-{n}-{i}"
            engine.add_request(request_id, FIRST_PROMPT, SamplingParams(**params))
        while engine.has_unfinished_requests():
            engine.step()


def current_step_path(result: Path) -> Path:
    """Where the warmup keeps its step in progress, for the parent's heartbeat."""
    return result.with_name(result.name + ".step")


class WarmupTap(logging.Handler):
    """The plugin's own `[WARMUP] ...` lines (which shape it compiles, deploying to the
    device, ...) become the detail of the engine step for the heartbeat, no line of their
    own."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record of the plugin: not ours to report
            return
        if message.startswith("[WARMUP]"):
            self.progress.note("engine", message)


def run(vllm_args: Sequence[str], progress: Progress | None = None) -> Mapping[str, Any]:
    """Warm up and describe the result (a failure is the summary precompile writes);
    never raises for vLLM's failures."""
    progress = progress or Progress()
    flavour = from_env(os.environ, vllm_args).flavour
    default: Reason = "InvalidConfig"
    phase = "checking the vllm serve arguments and the model"
    timings: dict[str, float] = {}
    # The plugin logs through its package's logger, which does not propagate to the root.
    tap, plugin_log = WarmupTap(progress), logging.getLogger(flavour.module)
    try:
        progress.step("config", phase)
        started = time.monotonic()
        try:
            vllm_config = build_vllm_config(vllm_args)
        except ArgumentsRejected as e:
            return failure("InvalidConfig", f"vllm serve rejected the arguments: {e}")
        timings["configSeconds"] = round(time.monotonic() - started, 3)
        log.disabled = False  # vLLM's logging dictConfig disables loggers made before it
        phase, default = "loading the model and warming up", "CompileFailed"
        progress.step("engine", phase)
        plugin_log.addHandler(tap)
        started = time.monotonic()
        engine = start_engine(vllm_config)
        timings["engineSeconds"] = round(time.monotonic() - started, 3)
        if vllm_config.model_config.runner_type != "pooling":
            phase = "serving the first requests (logprobs)"
            progress.step("requests", phase)
            started = time.monotonic()
            serve_first_requests(engine)
            timings["requestsSeconds"] = round(time.monotonic() - started, 3)
        data = catalog_data(flavour, vllm_config)
        phase = "shutting the engine down"
        progress.step("shutdown", phase)
        started = time.monotonic()
        engine.engine_core.shutdown()
        timings["shutdownSeconds"] = round(time.monotonic() - started, 3)
    except Exception as e:
        traceback.print_exc()
        return failure(classify(e, default), f"{phase} failed: {type(e).__name__}: {e}")
    finally:
        plugin_log.removeHandler(tap)
    return {"ok": True, "catalogData": data, "timings": timings}


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    argv = list(sys.argv[1:] if argv is None else argv)
    result_path = Path(argv[0])
    result = run(argv[1:], Progress.of_parent(current_step_path(result_path)))
    atomic_write_json(result_path, result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
