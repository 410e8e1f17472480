"""`spyre-runtime tiny-models <out-dir>`: tiny models made here, with nothing downloaded.

Writes <out-dir>/granite (a GraniteForCausalLM decoder) and <out-dir>/roberta (a RobertaModel
for embeddings): random weights, byte-level BPE tokenizers trained here on a few sentences.
Seeded, so every run gives the same models. They let the CPU tests, the demo and a cluster
without hub access run the real stack end to end; the answers are nonsense by design.
Needs transformers and tokenizers, which come with vLLM (the serving image has them).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Spyre accelerators run large language models in the data centre.",
    "A small model with random weights still produces tokens.",
    "Kubernetes operators reconcile the desired state with the observed state.",
    "Hello world, this is a tiny test model for vLLM on the CPU.",
] * 20

# The size both models share: hidden 64, 2 layers, 4 heads (~130k parameters).
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def train_tokenizer(vocab_size: int, specials: list[str]) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES, trainer)
    return tok


def make_granite(out: Path) -> None:
    import torch
    from transformers import GraniteConfig, GraniteForCausalLM, PreTrainedTokenizerFast

    specials = ["<|pad|>", "<|bos|>", "<|eos|>"]
    tok = train_tokenizer(512, specials)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|pad|>", bos_token="<|bos|>", eos_token="<|eos|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    config = GraniteConfig(
        **TINY,
        vocab_size=512,
        num_key_value_heads=4,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    GraniteForCausalLM(config).save_pretrained(out)
    fast.save_pretrained(out)


def make_roberta(out: Path) -> None:
    import torch
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaModel

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok = train_tokenizer(400, specials)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))  # type: ignore[attr-defined]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        mask_token="<mask>",
        cls_token="<s>",
        sep_token="</s>",
    )
    config = RobertaConfig(
        **TINY,
        vocab_size=400,
        max_position_embeddings=258,  # RoBERTa offsets positions by pad_token_id + 1
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    RobertaModel(config, add_pooling_layer=False).save_pretrained(out)
    fast.save_pretrained(out)


def make(out: Path) -> None:
    """Write both models under `out`, each renamed into place when complete, so a killed
    run never leaves a model that looks whole; a model already there is kept."""
    out.mkdir(parents=True, exist_ok=True)
    for name, build in (("granite", make_granite), ("roberta", make_roberta)):
        final = out / name
        if final.exists():
            continue
        partial = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out))
        build(partial)
        # mkdtemp makes 0700 and safetensors writes 0600: serving pods may run as another uid
        partial.chmod(0o755)
        for file in partial.iterdir():
            file.chmod(0o644)
        partial.rename(final)
