"""Reads the operator<->image contract (contract.py, docs/contract.md) from env and args.

Pure standard library: `serve` must decide in well under a second, before exec'ing vLLM.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compilereport import with_plugin
from .contract import (
    COMPILER_ENV,
    COMPILER_ENV_FIELD,
    FLAVOURS,
    INDUCTOR_CACHE_SUBDIR,
    SPYRE_SERVING_CACHE_KEY,
    SPYRE_SERVING_CACHE_ROOT,
    SPYRE_SERVING_COMPILE_CONFIG,
    SPYRE_SERVING_FLAVOUR,
    TORCH_SENDNN_CACHE_DIR,
    TORCH_SENDNN_CACHE_ENABLE,
    TORCHINDUCTOR_CACHE_DIR,
    VLLM_PLUGINS,
    Flavour,
)
from .report import termination_log

_CACHE_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


class ContractError(ValueError):
    """The env/args do not follow the contract; the message says which variable and why."""


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything the entrypoint reads, parsed once."""

    flavour: Flavour
    cache_key: str | None
    cache_root: Path | None
    compile_config: dict[str, Any] | None
    termination_log: Path
    require_precompiled: bool
    vllm_args: tuple[str, ...]

    @property
    def cache_dir(self) -> Path | None:
        if self.cache_key is None or self.cache_root is None:
            return None
        return self.cache_root / self.cache_key

    @property
    def model(self) -> str | None:
        """The model argument as `vllm serve` sees it: the positional, else `--model`."""
        return model_argument(self.vllm_args)

    def require_cache(self) -> Path:
        """The cache dir, or a ContractError naming what is missing (precompile needs it)."""
        missing = [
            name
            for name, value in (
                (SPYRE_SERVING_CACHE_KEY, self.cache_key),
                (SPYRE_SERVING_CACHE_ROOT, self.cache_root),
                (SPYRE_SERVING_COMPILE_CONFIG, self.compile_config),
            )
            if value is None
        ]
        if missing:
            raise ContractError(f"{', '.join(missing)} must be set")
        cache_dir = self.cache_dir
        assert cache_dir is not None
        return cache_dir

    @property
    def inductor_cache_dir(self) -> Path | None:
        """inductor's caches for this key, which the compile Job fills (every backend)."""
        cache_dir = self.cache_dir
        return None if cache_dir is None else cache_dir / INDUCTOR_CACHE_SUBDIR

    def cache_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The torch_sendnn and inductor cache variables for this key (empty without a key).

        The operator sets them too; one pointing elsewhere would make the plugin or inductor
        read another cache than the one checked here, so it is an error.
        """
        cache_dir, inductor_dir = self.cache_dir, self.inductor_cache_dir
        if cache_dir is None or inductor_dir is None:
            return {}
        expected = {
            TORCH_SENDNN_CACHE_DIR: cache_dir,
            TORCHINDUCTOR_CACHE_DIR: inductor_dir,
        }
        for name, path in expected.items():
            given = environ.get(name)
            if given and os.path.normpath(given) != os.path.normpath(path):
                raise ContractError(
                    f"{name}={given} disagrees with {SPYRE_SERVING_CACHE_ROOT}/"
                    f"{SPYRE_SERVING_CACHE_KEY} ({path})"
                )
        return {TORCH_SENDNN_CACHE_ENABLE: "1", **{k: str(v) for k, v in expected.items()}}

    def vllm_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The environment vLLM runs with: the pod's, the cache variables for this key,
        inductor's precompiled header off unless the pod's env says, and VLLM_PLUGINS with
        the runtime's compile report (compilereport.py) added.

        inductor builds its precompiled header (150 MB, seconds of g++) in the temporary
        directory, an emptyDir in a pod, before it looks for a kernel in its cache: every
        serving pod built it again on a cache hit and never used it. Off, a hit runs no
        compiler at all. The setting is part of inductor's cache keys, so the compile Job
        (which then compiles each kernel without it) and the serving pods must agree: a
        serving pod takes it from the key's READY record (`as_compiled`).
        """
        env = {**COMPILER_ENV, **environ, **self.cache_env(environ)}
        plugins = with_plugin(environ.get(VLLM_PLUGINS))
        if plugins is not None:
            env[VLLM_PLUGINS] = plugins
        return env


def as_compiled(
    env: Mapping[str, str], record: Mapping[str, Any] | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """`env` with the compiler settings (COMPILER_ENV) the key's compile ran with, from its
    READY record, so that a serving pod's cache lookups match what the compile stored; the
    pod's own env wins. A record without them is a compile from before they were set: it
    ran with inductor's defaults, and so does the pod (no recompile of existing keys)."""
    out = dict(env)
    if record is None:
        return out
    said = record.get(COMPILER_ENV_FIELD) or {}
    for name in COMPILER_ENV:
        if name in environ:
            continue
        if name in said:
            out[name] = str(said[name])
        else:
            out.pop(name, None)
    return out


def model_argument(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--model" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    return args[0] if args and not args[0].startswith("-") else None


def _flag(environ: Mapping[str, str], name: str) -> bool:
    value = environ.get(name, "0").strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("", "0", "false", "no"):
        return False
    raise ContractError(f"{name}={value!r} is not a boolean (use 1 or 0)")


def parse_compile_config(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ContractError(f"{SPYRE_SERVING_COMPILE_CONFIG} is not valid JSON: {e}") from e
    if not isinstance(parsed, dict):
        raise ContractError(f"{SPYRE_SERVING_COMPILE_CONFIG} must be a JSON object")
    return parsed


def from_env(environ: Mapping[str, str], args: Sequence[str]) -> RuntimeConfig:
    """Parse the contract; raises ContractError with a precise message."""
    flavour_name = environ.get(SPYRE_SERVING_FLAVOUR, "")
    flavour = FLAVOURS.get(flavour_name)
    if flavour is None:
        raise ContractError(
            f"{SPYRE_SERVING_FLAVOUR}={flavour_name!r}: expected one of {', '.join(FLAVOURS)}"
        )
    cache_key = environ.get(SPYRE_SERVING_CACHE_KEY) or None
    if cache_key is not None and not _CACHE_KEY_RE.match(cache_key):
        raise ContractError(
            f"{SPYRE_SERVING_CACHE_KEY}={cache_key!r} is not 64 lowercase hex characters"
        )
    root = environ.get(SPYRE_SERVING_CACHE_ROOT) or None
    raw_config = environ.get(SPYRE_SERVING_COMPILE_CONFIG) or None
    return RuntimeConfig(
        flavour=flavour,
        cache_key=cache_key,
        cache_root=Path(root) if root else None,
        compile_config=parse_compile_config(raw_config) if raw_config else None,
        termination_log=termination_log(environ),
        require_precompiled=_flag(environ, flavour.require_precompiled_var),
        vllm_args=tuple(args),
    )


def config_differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Human-readable differences between two parsed configs, one line per field."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        lines: list[str] = []
        for key in sorted(expected.keys() | actual.keys(), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in actual:
                lines.append(f"{where}: READY has {json.dumps(expected[key])}, this pod has none")
            elif key not in expected:
                lines.append(f"{where}: READY has none, this pod has {json.dumps(actual[key])}")
            else:
                lines.extend(config_differences(expected[key], actual[key], where))
        return lines
    if expected == actual:
        return []
    where = path or "config"
    return [f"{where}: READY has {json.dumps(expected)}, this pod has {json.dumps(actual)}"]
