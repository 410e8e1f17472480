"""The compile-relevant configuration of a spec and its cacheKey.

The key changes exactly when the compiled graphs may change: the model, quantization,
backend, tensor parallelism, batching shapes, runtime flavour/version and image. Replicas,
resources, extra env/args, the Service and the served name are left out on purpose.
Unset values are omitted (not null), so adding an optional field later keeps old keys.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from spyre_operator.api.spec import SpyreModelSpec

SHORT_KEY_LENGTH = 12


def compile_config(spec: SpyreModelSpec) -> dict[str, Any]:
    cb, st = spec.batching.continuous, spec.batching.static
    if cb is not None:
        batching = {"mode": "continuous", **cb.to_k8s()}
        del batching["prefixCaching"]  # reuses KV blocks; the graphs are the same
    else:
        assert st is not None
        batching = {"mode": "static", **st.to_k8s()}
    config = {
        "model": spec.model.argument,
        "revision": spec.model.revision,
        "quantization": spec.model.quantization,
        "runner": "pooling" if spec.is_pooling else "generate",
        "backend": spec.backend,
        "tensorParallelSize": spec.tensor_parallel_size,
        "batching": batching,
        "runtime": {"flavour": spec.runtime.flavour, "version": spec.runtime_version},
        "image": spec.image_ref,
    }
    return {k: v for k, v in config.items() if v is not None}


def canonical_json(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def cache_key(spec: SpyreModelSpec) -> str:
    """sha256 hex of the canonical compile config (64 characters)."""
    return hashlib.sha256(canonical_json(compile_config(spec)).encode()).hexdigest()


def short_key(key: str) -> str:
    """The form used in names and labels."""
    return key[:SHORT_KEY_LENGTH]
