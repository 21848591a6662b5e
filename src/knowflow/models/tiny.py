"""The tiny Llama that knowflow trains from scratch, and its word-level tokenizer.

`make_model` builds a randomly initialized HF `LlamaForCausalLM` of a `TinyModelConfig`'s
size (the model `inversion-tiny` pretrains and `ocr-smollm2 --set model=tiny` finetunes).
The tokenizer is a `tokenizers` WordLevel model (one id per word, split on whitespace)
wrapped in `PreTrainedTokenizerFast`, so it is saved with `save_pretrained` next to the model
and loads back with `AutoTokenizer.from_pretrained`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.worlds.tiny_world import BOS, EOS, PAD, UNK


@dataclass(frozen=True)
class TinyModelConfig:
    layers: int = 2
    heads: int = 4
    d_model: int = 64
    d_ff: int = 256


def make_model(model_cfg: TinyModelConfig, vocab_size: int, max_len: int, seed: int,
               attn_implementation: str = "sdpa"):
    """A randomly initialized Llama of `model_cfg`'s size. SDPA attention trains about a
    quarter faster on CPU; probes that read attention weights switch to eager
    (`tiny_track.eager_attention`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=model_cfg.d_model,
        intermediate_size=model_cfg.d_ff, num_hidden_layers=model_cfg.layers,
        num_attention_heads=model_cfg.heads, num_key_value_heads=model_cfg.heads,
        max_position_embeddings=max(64, max_len), bos_token_id=2, eos_token_id=3,
        pad_token_id=0, tie_word_embeddings=False, attn_implementation=attn_implementation)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)



def build_tokenizer(vocab: Sequence[str]):
    """A PreTrainedTokenizerFast whose ids are the positions of `vocab` (no duplicates)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    if len(set(vocab)) != len(vocab):
        raise ValueError("duplicate words in the vocabulary")
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=UNK))
    core.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, unk_token=UNK)


def encode_words(tokenizer, words: Sequence[str]) -> list[int]:
    """Ids of pre-split words (no special tokens added; <bos> is part of the words)."""
    return tokenizer.convert_tokens_to_ids(list(words))
