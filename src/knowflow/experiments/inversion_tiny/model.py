"""The tiny Llama that knowflow trains from scratch, and its word-level tokenizer.

`make_model` builds a randomly initialized HF `LlamaForCausalLM` of a `TinyModelConfig`'s
size (the model `inversion-tiny` pretrains and `ocr-smollm2 --set model=tiny` finetunes).
The tokenizer is a `tokenizers` WordLevel model (one id per word, split on whitespace)
wrapped in `PreTrainedTokenizerFast`, so it is saved with `save_pretrained` next to the model
and loads back with `AutoTokenizer.from_pretrained`.

`encode` turns tiny-world examples into one right-padded batch; `answer_logits` and
`per_example_loss` score it at the answer position (the last prompt token). Tracking
(`experiments.inversion_tiny.track`) and curation (`train.criticality`) both score through them.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from knowflow.config import option
from knowflow.experiments.inversion_tiny.world import BOS, EOS, PAD, UNK, Example, no_context
from knowflow.lens.batching import right_pad
from knowflow.train.criticality import register_no_context


@dataclass(frozen=True)
class TinyModelConfig:
    layers: int = option(2, ge=1)
    heads: int = option(4, ge=1)
    d_model: int = option(64, ge=1)
    d_ff: int = option(256, ge=1)


def make_model(model_cfg: TinyModelConfig, vocab_size: int, max_len: int, seed: int,
               attn_implementation: str = "sdpa"):
    """A randomly initialized Llama of `model_cfg`'s size. SDPA attention trains about a
    quarter faster on CPU; probes that read attention weights switch to eager
    (`eager_attention`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=model_cfg.d_model,
        intermediate_size=model_cfg.d_ff, num_hidden_layers=model_cfg.layers,
        num_attention_heads=model_cfg.heads, num_key_value_heads=model_cfg.heads,
        max_position_embeddings=max(64, max_len), bos_token_id=2, eos_token_id=3,
        pad_token_id=0, tie_word_embeddings=False, attn_implementation=attn_implementation)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)



def build_tokenizer(vocab: Sequence[str], split_punctuation: bool = False):
    """A PreTrainedTokenizerFast whose ids are the positions of `vocab` (no duplicates).
    Words are split on whitespace; with `split_punctuation`, punctuation is a word of its own
    (`tokenizers`' Whitespace pre-tokenizer: "Paris." is "Paris", ".")."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace, WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    if len(set(vocab)) != len(vocab):
        raise ValueError("duplicate words in the vocabulary")
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=UNK))
    core.pre_tokenizer = Whitespace() if split_punctuation else WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, unk_token=UNK)


def encode_words(tokenizer, words: Sequence[str]) -> list[int]:
    """Ids of pre-split words (no special tokens added; <bos> is part of the words)."""
    return tokenizer.convert_tokens_to_ids(list(words))


def encode(tokenizer, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
    """Right-padded ids, mask, last prompt position, answer and memory ids."""
    rows = [encode_words(tokenizer, ex.tokens) for ex in examples]
    ids, mask = right_pad(rows, tokenizer.pad_token_id)  # (n, seq) x2
    return {"ids": ids, "mask": mask, "last": mask.sum(1) - 1,
            "answer": torch.tensor(encode_words(tokenizer, [ex.answer for ex in examples])),
            "memory": torch.tensor(encode_words(tokenizer, [ex.memory for ex in examples]))}


@contextmanager
def eager_attention(model):
    """Run the model with eager attention inside the block (attention weights are only
    returned by eager; SDPA, faster, is restored after)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        yield model
    finally:
        config._attn_implementation = before


def answer_logits(model, batch: dict[str, torch.Tensor], output_attentions: bool = False):
    """Logits at each row's last prompt position (batch, vocab), and the attentions if asked
    (read with eager attention)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    with eager_attention(base) if output_attentions else nullcontext():
        out = base.model(input_ids=batch["ids"], attention_mask=batch["mask"],
                         output_attentions=output_attentions)
    hidden = out.last_hidden_state  # (batch, seq, d_model)
    rows = torch.arange(hidden.shape[0])
    logits = base.lm_head(hidden[rows, batch["last"]])  # (batch, vocab)
    return logits, out.attentions


def select_rows(batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rows `idx` of every tensor of an encoded batch."""
    return {k: v[idx] for k, v in batch.items()}


@torch.no_grad()
def per_example_loss(model, batch: dict[str, torch.Tensor], chunk: int = 256) -> torch.Tensor:
    """Answer loss of every row. (n,)"""
    out = []
    for start in range(0, len(batch["ids"]), chunk):
        part = select_rows(batch, torch.arange(start, min(start + chunk, len(batch["ids"]))))
        logits, _ = answer_logits(model, part)
        out.append(F.cross_entropy(logits, part["answer"], reduction="none"))
    return torch.cat(out)


@register_no_context(Example)
@torch.no_grad()
def no_context_loss(model, examples: Sequence[Example], tokenizer) -> torch.Tensor:
    """Each example's answer loss without its context, for curation. (n,)"""
    return per_example_loss(model, encode(tokenizer, [no_context(ex) for ex in examples]))
