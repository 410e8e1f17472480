"""The contract's env as the operator renders it (docs/contract.md), for the runtime's
tests: the unit tests (tests/unit/test_runtime_*.py) and the runtime tier (tests/runtime)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

PREFIX = {"vllm-spyre": "VLLM_SPYRE_", "sendnn-inference": "SENDNN_INFERENCE_"}
PLUGIN = {"vllm-spyre": "spyre", "sendnn-inference": "sendnn_inference"}


def canonical(config: dict[str, Any]) -> str:
    """The operator's canonical JSON of a compile config (render/cachekey.py)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def cache_key(config: dict[str, Any]) -> str:
    """Its sha256, as the operator's: a pulled artifact's READY record must hash to it."""
    return hashlib.sha256(canonical(config).encode()).hexdigest()


def contract_env(
    flavour: str,
    root: Path,
    config: dict[str, Any],
    termination_log: Path,
    require_precompiled: bool = False,
    key: str | None = None,
) -> dict[str, str]:
    """The env docs/contract.md says the operator sets, for one compile config: its
    `backend` (a CPU one: eager unless given) as the operator renders it."""
    key = key or cache_key(config)
    prefix = PREFIX[flavour]
    return {
        f"{prefix}DYNAMO_BACKEND": config.get("backend", "eager"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / key / "inductor"),
        "SPYRE_SERVING_FLAVOUR": flavour,
        "SPYRE_SERVING_CACHE_KEY": key,
        "SPYRE_SERVING_CACHE_ROOT": str(root),
        "SPYRE_SERVING_COMPILE_CONFIG": canonical(config),
        "SPYRE_SERVING_TERMINATION_LOG": str(termination_log),
        "TORCH_SENDNN_CACHE_ENABLE": "1",
        "TORCH_SENDNN_CACHE_DIR": str(root / key),
        f"{prefix}REQUIRE_PRECOMPILED_DECODERS": "1" if require_precompiled else "0",
        "VLLM_PLUGINS": PLUGIN[flavour],
    }
