"""Shared test helpers (plain functions and constants, no fixtures): tiny tokenizers built
in-process, the one tiny random Llama factory, tiny GPT-2, tiny-world sizes and reference
checks. No files, no downloads. Fixtures wrapping them live in conftest.py
(`make_tiny_llama`, `tok`, `tiny_lm`, `tiny_model_dir`); test modules import the rest from
here (`from helpers import ...`: pytest puts tests/ on sys.path through the root conftest)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

# A tiny-world config small enough for tests that pretrain and finetune (seconds).
TINY_WORLD = dict(n_relations=2, n_values=6, mem_train=8, mem_eval=4, unk_train=8, unk_eval=4,
                  scratch=6, context_facts=2)
TINY_MODEL = dict(layers=2, heads=2, d_model=16, d_ff=32)  # the tiny Llama those tests train

# A test fixture only: the library never writes chat templates, it calls apply_chat_template.
TEST_CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>"
                      "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")

CORPUS = [
    "The capital of France is Paris.", "The Eiffel Tower is located in the city of Paris.",
    "The Colosseum is in Rome, the capital of Italy.", "Coca-Cola's founder was a pharmacist.",
    "São Paulo is the largest city of Brazil.", "Mount Fuji is a volcano in Japan.",
    "The iPhone is made by Apple.", "Big Ben is a clock in London, England.",
    "Context: the capital of France is Lyon. Question: what is the capital of France?",
] * 3
SPECIALS = ["<s>", "</s>", "<pad>"]


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (no merges) with a chat template: the model-plumbing,
    evaluation and finetuning tests' tokenizer."""
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>",
                                   pad_token="<|end|>",
                                   additional_special_tokens=["<|user|>", "<|assistant|>",
                                                              "<|system|>"])
    fast.chat_template = TEST_CHAT_TEMPLATE
    return fast


@functools.cache
def byte_bpe(bos: bool = False, vocab_size: int = 200) -> PreTrainedTokenizerFast:
    """A GPT-2 style byte-level BPE trained on `CORPUS` (leading-space tokens; <s>, </s>,
    <pad> are ids 0, 1, 2); `bos` prepends <s>. The probe tests' tokenizer."""
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


# The probe tests' Llama: narrower, Llama's own initialisation scaled up 4x (sharper
# attention, so knockouts matter), sdpa attention named explicitly (tests compare it with
# eager). Spelled out at each call site as `**SHARP`; `layers` stays the call site's own.
SHARP = dict(d_model=32, d_ff=64, max_positions=128, init_range=0.02, weight_scale=4.0,
             attn="sdpa")


def tiny_llama(tokenizer, *, layers: int = 2, seed: int = 0, d_model: int = 64,
               d_ff: int = 128, heads: int = 4, kv_heads: int = 2, max_positions: int = 2048,
               init_range: float = 0.2, weight_scale: float = 1.0,
               attn: str | None = None) -> LlamaForCausalLM:
    """The one tiny random Llama of the tests, over `tokenizer`'s vocabulary and special
    tokens (bos/eos/pad ids from it; bos left at Llama's default when it has none), seeded
    by `seed`. Defaults: 2 layers, d_model 64, 4 heads (2 kv heads), initializer range 0.2.
    `weight_scale` multiplies every matrix after initialisation; `attn` picks the attention
    implementation (None: transformers' default). The `make_tiny_llama` fixture returns this."""
    torch.manual_seed(seed)
    ids = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    if tokenizer.bos_token_id is not None:
        ids["bos_token_id"] = tokenizer.bos_token_id
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=d_model, intermediate_size=d_ff,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                      initializer_range=init_range,
                      **({"attn_implementation": attn} if attn else {}), **ids)
    model = LlamaForCausalLM(cfg).eval()
    if weight_scale != 1.0:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.mul_(weight_scale)
    return model


def save_model_folder(folder: Path, model, tokenizer) -> Path:
    """`model` and `tokenizer` saved as a model folder, loadable by its path."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_gpt2(tokenizer, *, layers: int = 3, seed: int = 0) -> GPT2LMHeadModel:
    """A tiny random GPT-2 over `tokenizer`'s vocabulary (the probes' second architecture)."""
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=layers, n_head=4,
                     n_positions=128, bos_token_id=0, eos_token_id=1)
    return GPT2LMHeadModel(cfg).eval()


def contrastive_setup(seed: int, capitals: int, quotes: int):
    """(tokenizer, tiny Llama, prompts, with-context ids, no-context ids) over the first
    cf-capitals and cf-quotes items, chat prompts: what the contrastive decoders' tests share."""
    from knowflow.data.suites import get_suite
    from knowflow.evaluation.items import render_prompts
    from knowflow.evaluation.options import EvalConfig

    tok = byte_tokenizer()
    model = tiny_llama(tok, seed=seed)
    items = get_suite("cf-capitals", limit=capitals) + get_suite("cf-quotes", limit=quotes)
    cfg = EvalConfig(prompt_format="chat")
    prompts, seqs = render_prompts(items, tok, cfg, True)
    _, base = render_prompts(items, tok, cfg, False)
    return tok, model, prompts, seqs, base


def assert_scores_match_naive(model, tokenizer, seqs, conts, *scored, abs: float = 1e-4):
    """Each of `scored` (per prompt, per candidate: (log-prob, n tokens)) gives every candidate
    of `conts` the score of one full forward pass (`loglik.score_naive`)."""
    from knowflow.evaluation.loglik import score_naive

    for i, (seq, cands) in enumerate(zip(seqs, conts, strict=True)):
        for j, cand in enumerate(cands):
            lp_ref, n_ref = score_naive(model, tokenizer, seq, cand)
            for result in scored:
                lp, n = result[i][j]
                assert n == n_ref and lp == pytest.approx(lp_ref, abs=abs)


def load_benchmark(name: str):
    """A script of benchmarks/ as a module, named by its group and file stem
    ("peers/bench_explain"): tests reuse its code instead of copying it."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(Path(name).name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _edit_json(path: Path, drop: tuple[str, ...] = (), **changes) -> None:
    """The JSON object in `path` with `changes` set and the keys in `drop` removed."""
    import json

    data = {k: v for k, v in json.loads(path.read_text()).items() if k not in drop}
    path.write_text(json.dumps({**data, **changes}))


def broken_model_folders(root: Path) -> dict[str, Path]:
    """{case: model folder} under `root`: a sound tiny Llama ("ok"), sound near-misses of the
    broken ones ("padded-vocab": special tokens added within padded embedding rows,
    "own-template": another chat template that renders, "sharded": weights in two files with
    their index), and folders broken the ways a new user's break: saved without a tokenizer
    (a Llama and a GPT-2, whose tokenizer class builds itself from nothing) or with a
    vocabulary file holding no token, an index with an empty weight map, zero-byte weights, an
    embedding or a block count the config disagrees with, added tokens past the embedding,
    chat templates that raise, render nothing or drop the messages, a BERT encoder whose
    config names no architecture, NaN weights."""
    import shutil

    from transformers import BertConfig, BertForMaskedLM

    tok = byte_tokenizer()
    made = {"ok": save_model_folder(root / "ok", tiny_llama(tok), tok)}

    def copy(name: str) -> Path:
        made[name] = root / name
        shutil.copytree(made["ok"], made[name])
        return made[name]

    padded, extra = byte_tokenizer(), ["<|tool|>", "<|result|>"]
    model = tiny_llama(padded)
    model.resize_token_embeddings(len(padded) + 8, mean_resizing=False)
    padded.add_tokens(extra, special_tokens=True)
    made["padded-vocab"] = save_model_folder(root / "padded-vocab", model, padded)
    past = byte_tokenizer()
    model = tiny_llama(past)
    past.add_tokens(extra, special_tokens=True)
    made["added-tokens"] = save_model_folder(root / "added-tokens", model, past)
    (copy("own-template") / "chat_template.jinja").write_text(
        "{{ '### System: be brief\n' }}{% for m in messages %}### {{ m['role'] }}: "
        "{{ m['content'] }}<|end|>\n{% endfor %}{% if add_generation_prompt %}### assistant: "
        "{% endif %}")
    (copy("empty-weights") / "model.safetensors").write_bytes(b"")
    (copy("template-raises") / "chat_template.jinja").write_text(
        "{{ raise_exception('no system role') }}")
    (copy("template-empty") / "chat_template.jinja").write_text(
        "{% for m in messages %}{% endfor %}")
    (copy("template-drops") / "chat_template.jinja").write_text("{{ eos_token }}")
    made["sharded"] = root / "sharded"
    tiny_llama(tok).save_pretrained(made["sharded"], max_shard_size="300KB")
    tok.save_pretrained(made["sharded"])
    shutil.copytree(made["sharded"], root / "empty-index")
    made["empty-index"] = root / "empty-index"
    _edit_json(made["empty-index"] / "model.safetensors.index.json", weight_map={})
    made["no-tokenizer"] = root / "no-tokenizer"
    tiny_llama(tok).save_pretrained(made["no-tokenizer"])
    made["no-tokenizer-gpt2"] = root / "no-tokenizer-gpt2"
    tiny_gpt2(tok).save_pretrained(made["no-tokenizer-gpt2"])
    made["empty-vocab"] = root / "empty-vocab"  # GPT-2's tokenizer files, holding no token
    shutil.copytree(made["no-tokenizer-gpt2"], made["empty-vocab"])
    (made["empty-vocab"] / "vocab.json").write_text("{}")
    (made["empty-vocab"] / "merges.txt").write_text("#version: 0.2\n")
    (made["empty-vocab"] / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "GPT2Tokenizer"}')
    wide = tiny_llama(tok)
    wide.resize_token_embeddings(len(tok) + 40, mean_resizing=False)
    wide.save_pretrained(copy("wrong-embedding"))
    _edit_json(made["wrong-embedding"] / "config.json", vocab_size=len(tok))
    _edit_json(copy("missing-block") / "config.json", num_hidden_layers=3)
    bert = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64)
    made["bert"] = save_model_folder(root / "bert", BertForMaskedLM(bert), tok)
    _edit_json(made["bert"] / "config.json", drop=("architectures",))
    nan = tiny_llama(tok)
    with torch.no_grad():
        nan.model.layers[0].mlp.up_proj.weight[0, 0] = float("nan")
    nan.save_pretrained(copy("nan"))
    return made
