"""Shared builders for the probe tests: tiny tokenizers trained in-process and tiny random
causal LMs (no files, no downloads). Imported by the probe, lens and CLI tests."""

from __future__ import annotations

import functools

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

CORPUS = [
    "The capital of France is Paris.", "The Eiffel Tower is located in the city of Paris.",
    "The Colosseum is in Rome, the capital of Italy.", "Coca-Cola's founder was a pharmacist.",
    "São Paulo is the largest city of Brazil.", "Mount Fuji is a volcano in Japan.",
    "The iPhone is made by Apple.", "Big Ben is a clock in London, England.",
    "Context: the capital of France is Lyon. Question: what is the capital of France?",
] * 3
SPECIALS = ["<s>", "</s>", "<pad>"]


@functools.cache
def byte_bpe(bos: bool = False, vocab_size: int = 200) -> PreTrainedTokenizerFast:
    """A GPT-2 style byte-level BPE (leading-space tokens); `bos` prepends <s>."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    if bos:
        tk.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                          special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


@functools.cache
def metaspace_bpe() -> PreTrainedTokenizerFast:
    """A SentencePiece-like tokenizer ("▁" marks a word start), with a BOS."""
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tk.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=150, special_tokens=[*SPECIALS, "<unk>"], show_progress=False))
    tk.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                      special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


def tiny_llama(vocab_size: int = 200, layers: int = 4, seed: int = 0,
               attn: str = "sdpa") -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128, attn_implementation=attn,
                      bos_token_id=0, eos_token_id=1, pad_token_id=2)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # larger weights: sharper attention, so knockouts matter
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return model


def tiny_gpt2(vocab_size: int = 200, layers: int = 3, seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=layers, n_head=4,
                     n_positions=128, bos_token_id=0, eos_token_id=1)
    return GPT2LMHeadModel(cfg).eval()
