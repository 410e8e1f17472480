"""The compile-relevant configuration of a spec and its cacheKey.

The key changes exactly when the compiled graphs may change: the model (its argument, the
commit a hub revision resolved to, or the volume it is read from), quantization, backend,
tensor parallelism, batching shapes, the runtime flavour/version, the architecture (other
than amd64), the image when it is not
the operator's own for that flavour/version (its digest when one is given, else its path and
tag: never the registry), and the env and extra args that are not known to be
graph-neutral. The operator's version never enters it: an operator upgrade must not
recompile the fleet, nor does the image profile (spyre-runtime built in or injected runs the
same vLLM and plugin). Unset values are omitted (not null), so
adding an optional field later keeps old keys. docs/api.md lists what is in and out.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from spyre_operator.api import imageref, profiles, runtimes
from spyre_operator.api.spec import SpyreModelSpec

SHORT_KEY_LENGTH = 12

# `vllm serve` flags that never change the graphs: the HTTP front end, logging, chat and
# tool parsing. Every other extraArgs flag (with its values) is part of the key.
GRAPH_NEUTRAL_FLAGS = frozenset(
    {
        "--host",
        "--root-path",
        "--allowed-origins",
        "--allowed-methods",
        "--allowed-headers",
        "--allow-credentials",
        "--ssl-keyfile",
        "--ssl-certfile",
        "--ssl-ca-certs",
        "--ssl-cert-reqs",
        "--uvicorn-log-level",
        "--disable-uvicorn-access-log",
        "--disable-log-requests",
        "--enable-log-requests",
        "--disable-log-stats",
        "--max-log-len",
        "--chat-template",
        "--chat-template-content-format",
        "--response-role",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "--tool-parser-plugin",
        "--reasoning-parser",
        "--return-tokens-as-token-ids",
        "--enable-prompt-tokens-details",
        "--enable-server-load-tracking",
        "--enable-force-include-usage",
    }
)


def _model_volume(spec: SpyreModelSpec) -> dict[str, Any] | None:
    """Which volume the model is read from: two claims mounted at the same path hold
    different weights."""
    src = spec.model.source
    if src.pvc is not None:
        claim = {"claimName": src.pvc.claim_name, "subPath": src.pvc.sub_path}
        return {"pvc": {k: v for k, v in claim.items() if v is not None}}
    if src.host_path is not None:
        return {"hostPath": {"path": src.host_path.path}}
    return None  # the hub: id and revision say it


def _image(spec: SpyreModelSpec) -> str | None:
    """The image's part of the key, never its registry (a mirror or an air-gapped copy of
    the same image keeps every key): its digest when given; nothing for the operator's own
    image of the flavour/version (of any operator version, under any registry:
    runtime.flavour/version already name its base image); else path:tag."""
    image = spec.image
    if image is None or runtimes.is_default_image(
        image, spec.runtime.flavour, spec.runtime_version
    ):
        return None
    ref = imageref.parse(image)
    return ref.digest or ref.without_registry


def _flag_groups(args: list[str]) -> list[list[str]]:
    """extraArgs as [flag, values...] groups (a leading value forms a group of its own)."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("-") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def _graph_args(spec: SpyreModelSpec) -> list[str]:
    groups = _flag_groups(spec.extra_args)
    kept = [g for g in groups if g[0].split("=", 1)[0] not in GRAPH_NEUTRAL_FLAGS]
    return [arg for group in kept for arg in group]


def _graph_env(spec: SpyreModelSpec) -> list[dict[str, Any]]:
    """Env entries that may change the graphs, by name; a valueFrom counts by its reference
    (the operator never reads Secrets or ConfigMaps)."""
    kept = [e.to_k8s() for e in spec.env if not runtimes.is_graph_neutral_env(e.name)]
    return sorted(kept, key=lambda e: str(e["name"]))


def compile_config(spec: SpyreModelSpec, commit: str | None = None) -> dict[str, Any]:
    """`commit`: the commit a hub model's revision resolved to (the weights Job's), which
    takes the revision's place: a branch that moves on then changes the key only when the
    weights are resolved again, never behind the user's back."""
    cb, st = spec.batching.continuous, spec.batching.static
    arch = spec.runtime.architecture
    if cb is not None:
        batching = {"mode": "continuous", **cb.to_k8s()}
        del batching["prefixCaching"]  # reuses KV blocks; the graphs are the same
    else:
        assert st is not None
        batching = {"mode": "static", **st.to_k8s()}
    config = {
        "model": spec.model.argument,
        "revision": commit or spec.model.revision,
        "modelVolume": _model_volume(spec),
        "quantization": spec.model.quantization,
        "runner": "pooling" if spec.is_pooling else "generate",
        "backend": spec.backend,
        "tensorParallelSize": spec.tensor_parallel_size,
        "batching": batching,
        "runtime": {"flavour": spec.runtime.flavour, "version": spec.runtime_version},
        # compiled code is the CPU's (inductor's kernels, the host side of sendnn's); amd64
        # is left out, as unset is, so the keys from before the field stay
        "architecture": None if arch == profiles.DEFAULT_ARCHITECTURE else arch,
        "image": _image(spec),
        "env": _graph_env(spec) or None,
        "extraArgs": _graph_args(spec) or None,
    }
    return {k: v for k, v in config.items() if v is not None}


def canonical_json(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def cache_key(spec: SpyreModelSpec, commit: str | None = None) -> str:
    """sha256 hex of the canonical compile config (64 characters)."""
    return hashlib.sha256(canonical_json(compile_config(spec, commit)).encode()).hexdigest()


def short_key(key: str) -> str:
    """The form used in names and labels."""
    return key[:SHORT_KEY_LENGTH]
