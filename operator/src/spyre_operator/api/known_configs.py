"""The plugins' known-config registries (`config/model_configs.yaml` in each wheel) as data,
matched the way the plugins match them.

Each plugin version ships its own registry: vllm-spyre 1.10.0 and sendnn-inference 2.6.3
are written out here exactly (ids, architecture patterns, continuous batching tuples,
static warmup shapes; not the device settings, which the plugin applies itself), and
tests/runtime/test_runtime_registry.py compares them with the installed wheels. Configs
off the registry may still work, but upstream only tests these: the operator surfaces the
warning as a condition, the CLI prints it.

The plugins find a model's entry by its architecture (the HF config: model_type plus the
entry's attributes, the most specific match wins), never by name. The operator sees no
model config, so it looks the entry up by `model.id`; `spyre-operator validate
--model-config config.json` matches by architecture as the plugins do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spyre_operator.api.spec import CPU_BACKENDS, SpyreModelSpec
from spyre_runtime.contract import SENDNN_INFERENCE, VLLM_SPYRE

Shape = tuple[int, ...]


@dataclass(frozen=True)
class KnownModel:
    architecture: Mapping[str, Any]
    """model_type and the HF config attributes that must match (nested dicts: sub-configs)."""
    continuous: tuple[tuple[int, int, int], ...] = ()
    """(tensorParallelSize, maxModelLen, maxNumSeqs)."""
    static: tuple[tuple[int, tuple[Shape, ...]], ...] = ()
    """(tensorParallelSize, warmup shapes): a spec's shapes must all fit ONE entry. A shape
    is the plugin's tuple: (promptLen, newTokens, batchSize) in 1.x (newTokens 0 for
    pooling), (promptLen, batchSize) in 2.x."""

    @property
    def field_count(self) -> int:
        """The plugins' specificity: each attribute, plus each key of a nested one."""
        attributes = [v for k, v in self.architecture.items() if k != "model_type"]
        return len(attributes) + sum(len(v) for v in attributes if isinstance(v, Mapping))


@dataclass(frozen=True)
class Registry:
    flavour: str
    version: str
    models: Mapping[str, KnownModel]


def _arch(model_type: str, **attributes: Any) -> dict[str, Any]:
    return {"model_type": model_type, **attributes}


def _decoder(layers: int, positions: int, hidden: int, vocab: int) -> dict[str, int]:
    return {
        "num_hidden_layers": layers,
        "max_position_embeddings": positions,
        "hidden_size": hidden,
        "vocab_size": vocab,
        "num_key_value_heads": 8,
        "num_attention_heads": 32,
    }


FP8 = {"quantization_config": {"format": "float-quantized"}}
GRANITE_33_8B = _arch("granite", **_decoder(40, 131072, 4096, 49159))
GRANITE_4_8B = _arch("granite", **_decoder(40, 131072, 4096, 100352))
# 1.x's dense Granite 4 pattern is 2.x's dense-hybrid one.
GRANITE_4_HYBRID = GRANITE_4_8B | {"model_type": "granitemoehybrid", "num_experts_per_tok": 0}
LLAMA3_8B = _arch("llama", **_decoder(32, 131072, 4096, 128256))
PIXTRAL_VISION = {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16}


def _pixtral(layers: int, positions: int, hidden: int) -> dict[str, Any]:
    """Mistral 3 models (vLLM loads their config with model_type pixtral)."""
    text = _decoder(layers, positions, hidden, 131072)
    return _arch("pixtral", text_config=text, vision_config=PIXTRAL_VISION)


GRANITE_8B_CB = ((1, 3072, 16), (1, 8192, 4), (2, 8192, 4), (4, 32768, 32))
FP8_8B_CB = ((1, 3072, 16), (4, 16384, 4), (4, 32768, 32))
GRANITE_8B_STATIC = (
    (1, ((2048, 1024, 16),)),
    (4, ((6144, 2048, 1),)),
    (4, ((7168, 1024, 4),)),
)


def _roberta(kind: str, layers: int, **more: int) -> dict[str, Any]:
    vocab = 50265 if kind == "roberta" else 250002
    return _arch(kind, num_hidden_layers=layers, vocab_size=vocab, **more)


# Pooling models, one tp-1 shape each: (id, architecture, promptLen, batchSize, since
# which major version), in the registries' order.
_POOLING = (
    ("ibm-granite/granite-embedding-30m-english", _roberta("roberta", 6), 512, 64, 2),
    ("ibm-granite/granite-embedding-107m-multilingual", _roberta("xlm-roberta", 6), 512, 64, 2),
    ("ibm-granite/granite-embedding-125m-english", _roberta("roberta", 12), 512, 64, 1),
    ("ibm-granite/granite-embedding-278m-multilingual", _roberta("xlm-roberta", 12), 512, 64, 1),
    ("intfloat/multilingual-e5-large", _roberta("xlm-roberta", 24), 512, 64, 1),
    ("intfloat/multilingual-e5-large-instruct", _roberta("xlm-roberta", 24), 512, 4, 2),
    (
        "BAAI/bge-reranker-v2-m3",
        _roberta("xlm-roberta", 24, max_position_embeddings=8194),
        8192,
        1,
        1,
    ),
    (
        "BAAI/bge-reranker-large",
        _roberta("xlm-roberta", 24, max_position_embeddings=514),
        512,
        64,
        1,
    ),
    ("sentence-transformers/all-roberta-large-v1", _roberta("roberta", 24), 128, 8, 1),
)


def _pooling_models(major: int) -> dict[str, KnownModel]:
    """1.x shapes are (promptLen, newTokens 0, batchSize), 2.x ones (promptLen, batchSize)."""
    return {
        name: KnownModel(arch, static=((1, ((pl, bs) if major == 2 else (pl, 0, bs),)),))
        for name, arch, pl, bs, since in _POOLING
        if major >= since
    }


VLLM_SPYRE_1_10_0 = Registry(
    VLLM_SPYRE,
    "1.10.0",
    {
        "ibm-granite/granite-3.3-8b-instruct": KnownModel(
            GRANITE_33_8B, GRANITE_8B_CB, GRANITE_8B_STATIC
        ),
        "ibm-granite/granite-3.3-8b-instruct-FP8": KnownModel(GRANITE_33_8B | FP8, FP8_8B_CB),
        "meta-llama/Llama-3.1-8B-Instruct": KnownModel(LLAMA3_8B, FP8_8B_CB),
        "ibm-granite/granite-4-8b-dense": KnownModel(
            GRANITE_4_HYBRID, GRANITE_8B_CB, GRANITE_8B_STATIC
        ),
        **_pooling_models(1),
    },
)

SENDNN_INFERENCE_2_6_3 = Registry(
    SENDNN_INFERENCE,
    "2.6.3",
    {
        "ibm-granite/granite-3.3-8b-instruct": KnownModel(GRANITE_33_8B, GRANITE_8B_CB),
        "ibm-granite/granite-3.3-8b-instruct-FP8": KnownModel(GRANITE_33_8B | FP8, FP8_8B_CB),
        "meta-llama/Llama-3.1-8B-Instruct": KnownModel(LLAMA3_8B, FP8_8B_CB),
        "ibm-granite/granite-4-8b-dense-hybrid": KnownModel(GRANITE_4_HYBRID, GRANITE_8B_CB),
        "ibm-granite/granite-4-8b-dense": KnownModel(GRANITE_4_8B, GRANITE_8B_CB),
        "ibm-granite/granite-4.1-8b-fp8": KnownModel(GRANITE_4_8B | FP8, FP8_8B_CB),
        "ibm-granite/granite-4.2-8b": KnownModel(GRANITE_4_8B, GRANITE_8B_CB),
        "ibm-granite/granite-4.2-8b-fp8": KnownModel(GRANITE_4_8B | FP8, FP8_8B_CB),
        "ibm-granite/granite-4.1-30b": KnownModel(
            _arch("granite", **_decoder(64, 131072, 4096, 100352)), ((4, 32768, 32),)
        ),
        "ibm-granite/swa-20b": KnownModel(
            _arch("granite_swa", **_decoder(44, 131072, 4096, 100352)), ((4, 32768, 32),)
        ),
        "ibm-granite/granite-vision-3.3-2b": KnownModel(
            _arch(
                "llava_next",
                text_config=_decoder(40, 131072, 2048, 49156),
                vision_config={
                    "num_hidden_layers": 27,
                    "hidden_size": 1152,
                    "num_attention_heads": 16,
                },
            ),
            ((1, 8192, 16), (2, 16384, 16), (4, 32768, 32)),
        ),
        "mistralai/Mistral-Small-3.2-24B-Instruct-2506": KnownModel(
            _pixtral(40, 131072, 5120),
            ((2, 8192, 32), (4, 32768, 32)),
        ),
        "mistralai/Ministral-3-14B-Instruct-2512-BF16": KnownModel(
            _pixtral(40, 262144, 5120),
            ((1, 4096, 32), (4, 32768, 32)),
        ),
        "mistralai/Ministral-3-8B-Instruct-2512-BF16": KnownModel(
            _pixtral(34, 262144, 4096),
            ((1, 4096, 32), (4, 32768, 32)),
        ),
        **_pooling_models(2),
    },
)

REGISTRIES = {r.flavour: r for r in (VLLM_SPYRE_1_10_0, SENDNN_INFERENCE_2_6_3)}


def _matches(config: Mapping[str, Any], pattern: Mapping[str, Any]) -> bool:
    """The plugins' ModelMatcher on a config.json: every pattern attribute equal, nested
    patterns key by key."""
    for name, want in pattern.items():
        if name not in config:
            return False
        have = config[name]
        if isinstance(want, Mapping):
            if not isinstance(have, Mapping) or not _matches(have, want):
                return False
        elif have != want:
            return False
    return True


def match_architecture(registry: Registry, model_config: Mapping[str, Any]) -> str | None:
    """The entry the plugin picks for a model's config.json: of the matching patterns the
    one with the most fields, the first on a tie. vLLM may adjust a config while loading it
    (e.g. models in Mistral's own format); the plugin's log line "Matched model ..." is then
    the final word."""
    best, best_count = None, -1
    for name, known in registry.models.items():
        if _matches(model_config, known.architecture) and known.field_count > best_count:
            best, best_count = name, known.field_count
    return best


def _spec_shapes(spec: SpyreModelSpec) -> tuple[str, list[Shape]]:
    """(what is compared, the spec's configs) in the registry's tuple form."""
    tp, cb, st = spec.tensor_parallel_size, spec.batching.continuous, spec.batching.static
    if cb is not None:
        return "(tensorParallelSize, maxModelLen, maxNumSeqs)", [
            (tp, cb.max_model_len, cb.max_num_seqs)
        ]
    assert st is not None
    at = f"at tensorParallelSize {tp}"
    if not spec.flavour.static_decoders:  # 2.x: (promptLen, batchSize)
        shapes = zip(st.prompt_lens, st.batch_sizes, strict=False)
        return f"(promptLen, batchSize) {at}", list(shapes)
    new_tokens = st.new_tokens if st.new_tokens is not None else [0] * len(st.prompt_lens)
    shapes3 = zip(st.prompt_lens, new_tokens, st.batch_sizes, strict=False)
    return f"(promptLen, newTokens, batchSize) {at}", list(shapes3)


def _fits(spec: SpyreModelSpec, known: KnownModel, shapes: list[Shape]) -> bool:
    if spec.batching.continuous is not None:
        return shapes[0] in known.continuous
    tp = spec.tensor_parallel_size
    return any(t == tp and set(shapes) <= set(listed) for t, listed in known.static)


def _listing(spec: SpyreModelSpec, known: KnownModel) -> str:
    if spec.batching.continuous is not None:
        return ", ".join(str(c) for c in known.continuous)
    return "; ".join(
        f"tensorParallelSize {tp}: {', '.join(str(s) for s in shapes)}"
        for tp, shapes in known.static
    )


def _caps(spec: SpyreModelSpec) -> str:
    """What sendnn-inference does to a decoder off its registry (platform.py, 2.6.3)."""
    if spec.flavour.static_decoders or spec.is_pooling:
        return ""
    return (
        "; sendnn-inference then caps maxModelLen at 32768 and maxNumSeqs at 32 and the TKV "
        "limit at 131072"
    )


def known_config_warning(
    spec: SpyreModelSpec, model_config: Mapping[str, Any] | None = None
) -> str | None:
    """A warning when the model or its config is not in the flavour's registry, else None.

    Only for Spyre backends. The entry is found by architecture with a model_config (the
    model's config.json), else by `model.id` (case-insensitive); a model given only by path
    and no config cannot be looked up.
    """
    if spec.backend in CPU_BACKENDS:
        return None
    registry = REGISTRIES[spec.flavour.name]
    where = f"{registry.flavour} {registry.version}'s known-config registry"
    if model_config is not None:
        name = match_architecture(registry, model_config)
        subject = f"{spec.model.argument} (matched by its model config)"
    elif spec.model.id:
        folded = {n.lower(): n for n in registry.models}
        name = folded.get(spec.model.id.lower())
        subject = spec.model.id
    else:
        return None
    if name is None:
        return f"{subject} is not in {where}: it may not compile or fit on the cards{_caps(spec)}"
    known = registry.models[name]
    what, shapes = _spec_shapes(spec)
    if _fits(spec, known, shapes):
        return None
    listed = _listing(spec, known) or "nothing for this batching mode"
    return (
        f"{subject}: {what} {', '.join(str(s) for s in shapes)} is not in {where}, which "
        f"has for {name}: {listed} (static shapes must all fit one entry); other configs "
        f"may not compile or fit on the cards{_caps(spec)}"
    )
