"""Rules of the vLLM arguments a spec passes on (spec.extraArgs) or the operator renders
from its values: extraArgs may not set a flag the operator renders, and no rendered value
may read as an option."""

from __future__ import annotations

from collections.abc import Iterator

from spyre_operator.api.problem import Problem, shown
from spyre_operator.api.spec import SpyreModelSpec

CB = "spec.batching.continuous"

# vLLM flags the operator renders, and the field to set instead (extraArgs may not repeat
# them: two values would be ambiguous and several change the graphs but not the cache key).
RENDERED_FLAGS = {
    "--model": "spec.model.id or spec.model.path",
    "--revision": "spec.model.revision",
    "--quantization": "spec.model.quantization",
    "-q": "spec.model.quantization",
    "--served-model-name": "spec.model.servedName",
    "--tensor-parallel-size": "spec.tensorParallelSize",
    "-tp": "spec.tensorParallelSize",
    "--max-model-len": f"{CB}.maxModelLen",
    "--max-num-seqs": f"{CB}.maxNumSeqs",
    "--max-num-batched-tokens": f"{CB}.maxNumBatchedTokens",
    "--enable-chunked-prefill": f"{CB}.chunkedPrefill",
    "--no-enable-chunked-prefill": f"{CB}.chunkedPrefill",
    "--enable-prefix-caching": f"{CB}.prefixCaching",
    "--no-enable-prefix-caching": f"{CB}.prefixCaching",
    "--num-gpu-blocks-override": f"{CB}.numGpuBlocksOverride",
    "--runner": "spec.task",
    "--port": "spec.service.port (the container always listens on 8000)",
    "--dtype": "nothing: vLLM-Spyre picks the dtype (fp16 on Spyre, fp32 on CPU)",
    "--api-key": "spec.service.apiKeySecret (a Secret: an argument is plain text in the pod)",
    # vLLM reads more arguments from this file: it could set any of the above
    "--config": "the spec fields (a config file could set the flags the operator renders)",
}


def rendered_flags_set_by(arg: str) -> list[str]:
    """The rendered flags an argument sets under any spelling vLLM's argument parser
    (argparse) accepts: `--flag=value`, underscores for dashes (vLLM rewrites them),
    an abbreviation (`--max-model`), a short option with its value attached (`-qgptq`)."""
    key = arg.split("=", 1)[0]
    if key.startswith("--") and len(key) > 2:
        key = "--" + key[2:].replace("_", "-")
        return [f for f in RENDERED_FLAGS if f.startswith("--") and f.startswith(key)]
    if key.startswith("-") and len(key) > 1 and not key[1].isdigit():  # -5 is a value
        short = [f for f in RENDERED_FLAGS if not f.startswith("--")]
        # an abbreviation (-t for -tp), or a one-letter option with its value attached
        return [f for f in short if f.startswith(key) or (len(f) == 2 and key.startswith(f))]
    return []


def extra_args(s: SpyreModelSpec) -> Iterator[Problem]:
    for i, arg in enumerate(s.extra_args):
        flags = rendered_flags_set_by(arg)
        if flags:
            fields = " or ".join(dict.fromkeys(RENDERED_FLAGS[f] for f in flags))
            option, is_set, _ = arg.partition("=")  # the value is not repeated: maybe a key
            written = shown(option + ("=..." if is_set else ""))
            yield Problem(
                f"spec.extraArgs[{i}]",
                f"{written} sets {' or '.join(flags)}, which the operator renders: set "
                f"{fields} instead",
            )


def argument_values(s: SpyreModelSpec) -> Iterator[Problem]:
    """Values the operator passes as vLLM arguments: one that starts with '-' would be read
    as an option. (A hub id and revision follow the hub's grammar: _hub_model.)"""
    m = s.model
    values = {"spec.model.servedName": m.served_name}
    if not m.from_hub:
        values["spec.model.id"] = m.id
    for path, value in values.items():
        if value is not None and value.startswith("-"):
            yield Problem(
                path,
                f"{shown(value)} starts with '-', so vLLM would read it as an option: use a "
                "name that starts with a letter or digit",
            )
