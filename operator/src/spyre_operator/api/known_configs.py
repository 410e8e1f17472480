"""vLLM-Spyre's known-config registry (config/model_configs.yaml upstream) as data.

Configs off the registry may still work, but upstream only tests these; the operator
surfaces the warning as a condition, the CLI prints it. Source: the vLLM-Spyre 2.0 and
1.x registries and sendnn-inference v2.5.2 (shared/notes/vllm-spyre-facts.md section 8).
"""

from __future__ import annotations

from spyre_operator.api.spec import SpyreModelSpec

Configs = tuple[tuple[int, ...], ...]

_GRANITE_8B = ((1, 3072, 16), (1, 8192, 4), (2, 8192, 4), (4, 32768, 32))
_FP8_8B = ((1, 3072, 16), (4, 16384, 4), (4, 32768, 32))

# Decoders with continuous batching: (tensorParallelSize, maxModelLen, maxNumSeqs).
CONTINUOUS: dict[str, Configs] = {
    "ibm-granite/granite-3.3-8b-instruct": _GRANITE_8B,
    "ibm-granite/granite-4-8b-dense": _GRANITE_8B,
    "ibm-granite/granite-4-8b-dense-hybrid": _GRANITE_8B,
    "ibm-granite/granite-3.3-8b-instruct-FP8": _FP8_8B,
    "ibm-granite/granite-4-8b-dense-FP8": _FP8_8B,
    "meta-llama/Llama-3.1-8B-Instruct": _FP8_8B,
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": ((2, 8192, 32), (4, 32768, 32)),
    "mistralai/Ministral-3-14B-Instruct-2512-BF16": ((1, 4096, 32), (4, 32768, 32)),
    "ibm-granite/granite-vision-3.3-2b": ((1, 8192, 16), (2, 16384, 16), (4, 32768, 32)),
}

# Decoders with static batching (vllm-spyre 1.x): (tp, promptLen, newTokens, batchSize).
STATIC_DECODERS: dict[str, Configs] = {
    "ibm-granite/granite-3.3-8b-instruct": (
        (1, 2048, 1024, 16),
        (4, 6144, 2048, 1),
        (4, 7168, 1024, 4),
    ),
}

# Pooling models (static warmup shapes): (tp, promptLen, batchSize).
POOLING: dict[str, Configs] = {
    "ibm-granite/granite-embedding-125m-english": ((1, 512, 64),),
    "ibm-granite/granite-embedding-278m-multilingual": ((1, 512, 64),),
    "intfloat/multilingual-e5-large": ((1, 512, 64),),
    "intfloat/multilingual-e5-large-instruct": ((1, 512, 4),),
    "BAAI/bge-reranker-large": ((1, 512, 64),),
    "BAAI/bge-reranker-v2-m3": ((1, 8192, 1),),
    "sentence-transformers/all-roberta-large-v1": ((1, 128, 8),),
}


def _lookup(table: dict[str, Configs], model_id: str) -> Configs | None:
    folded = {name.lower(): configs for name, configs in table.items()}
    return folded.get(model_id.lower())


def _shapes(spec: SpyreModelSpec) -> tuple[str, dict[str, Configs], list[tuple[int, ...]]]:
    """(what is compared, the table, the spec's configs) for the spec's batching mode."""
    tp, cb, st = spec.tensor_parallel_size, spec.batching.continuous, spec.batching.static
    if cb is not None:
        return (
            "(tensorParallelSize, maxModelLen, maxNumSeqs)",
            CONTINUOUS,
            [(tp, cb.max_model_len, cb.max_num_seqs)],
        )
    assert st is not None
    if spec.is_pooling:
        shapes = zip(st.prompt_lens, st.batch_sizes, strict=False)
        return "(tensorParallelSize, promptLen, batchSize)", POOLING, [(tp, *s) for s in shapes]
    shapes3 = zip(st.prompt_lens, st.new_tokens or [], st.batch_sizes, strict=False)
    return (
        "(tensorParallelSize, promptLen, newTokens, batchSize)",
        STATIC_DECODERS,
        [(tp, *s) for s in shapes3],
    )


def known_config_warning(spec: SpyreModelSpec) -> str | None:
    """A warning when the model or its config is not in the registry, else None.

    Only for Spyre backends and models named by a hub id (the registry is keyed by it).
    """
    if spec.backend == "eager" or not spec.model.id:
        return None
    what, table, configs = _shapes(spec)
    known = _lookup(table, spec.model.id)
    if known is None:
        return (
            f"{spec.model.id} is not in vLLM-Spyre's known-config registry for this batching "
            "mode: it may not compile or fit on the cards, and sendnn-inference caps unknown "
            "models at maxModelLen 32768 and maxNumSeqs 32"
        )
    unknown = [c for c in configs if c not in known]
    if not unknown:
        return None
    listed = ", ".join(str(c) for c in known)
    off = ", ".join(str(c) for c in unknown)
    return (
        f"{spec.model.id}: {what} {off} is not in vLLM-Spyre's known-config registry, "
        f"which has {listed}; other configs may not compile or fit on the cards"
    )
