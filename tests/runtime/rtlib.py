"""Helpers shared by the runtime tests: the contract env as the operator renders it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

PREFIX = {"vllm-spyre": "VLLM_SPYRE_", "sendnn-inference": "SENDNN_INFERENCE_"}
PLUGIN = {"vllm-spyre": "spyre", "sendnn-inference": "sendnn_inference"}


def cache_key(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def contract_env(
    flavour: str,
    root: Path,
    config: dict[str, Any],
    termination_log: Path,
    require_precompiled: bool = False,
    key: str | None = None,
) -> dict[str, str]:
    """The env docs/contract.md says the operator sets, for one compile config."""
    key = key or cache_key(config)
    prefix = PREFIX[flavour]
    return {
        "SPYRE_SERVING_FLAVOUR": flavour,
        "SPYRE_SERVING_CACHE_KEY": key,
        "SPYRE_SERVING_CACHE_ROOT": str(root),
        "SPYRE_SERVING_COMPILE_CONFIG": json.dumps(config, sort_keys=True),
        "SPYRE_SERVING_TERMINATION_LOG": str(termination_log),
        "TORCH_SENDNN_CACHE_ENABLE": "1",
        "TORCH_SENDNN_CACHE_DIR": str(root / key),
        f"{prefix}REQUIRE_PRECOMPILED_DECODERS": "1" if require_precompiled else "0",
        "VLLM_PLUGINS": PLUGIN[flavour],
    }
