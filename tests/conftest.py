import importlib.util
from pathlib import Path

import pytest
import torch
from hypothesis import settings
from tokenizers import Tokenizer, decoders, models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# Property tests draw the same examples on every run, so CI results do not depend on luck.
settings.register_profile("knowflow", derandomize=True)
settings.load_profile("knowflow")

# A test fixture only: the library never writes chat templates, it calls apply_chat_template.
# A tiny-world config small enough for tests that pretrain and finetune (seconds).
TINY_WORLD = dict(n_relations=2, n_values=6, mem_train=8, mem_eval=4, unk_train=8, unk_eval=4,
                  scratch=6, context_facts=2)
TINY_MODEL = dict(layers=2, heads=2, d_model=16, d_ff=32)  # the tiny Llama those tests train

TEST_CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>"
                      "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(autouse=True)
def _one_thread():
    """Small models run fastest (and most reproducibly) on one thread."""
    torch.set_num_threads(1)
    yield


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with a chat template (no downloads)."""
    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>",
                                   pad_token="<|end|>",
                                   additional_special_tokens=["<|user|>", "<|assistant|>",
                                                              "<|system|>"])
    fast.chat_template = TEST_CHAT_TEMPLATE
    return fast


def tiny_llama(tokenizer, seed: int = 0, layers: int = 2) -> LlamaForCausalLM:
    """A randomly initialised 2-layer, 4-head Llama over `tokenizer`'s vocabulary."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=2048, initializer_range=0.2,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(cfg).eval()


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


@pytest.fixture(scope="module")
def tok():
    """The byte tokenizer (finetuning tests)."""
    return byte_tokenizer()


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


@pytest.fixture(scope="module")
def tiny_lm(tok):
    """A tiny random Llama over the byte tokenizer (model plumbing tests)."""
    return tiny_llama(tok)


@pytest.fixture(scope="module")
def rows():
    """24 rows of the built-in C/C+S/S instruction mixture (finetuning tests)."""
    from knowflow.data.instructions import MixtureConfig, builtin_mixture

    return builtin_mixture(MixtureConfig(size=24, seed=1))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama and its tokenizer saved as a model folder (loadable by name)."""
    path = tmp_path_factory.mktemp("tiny-model")
    tok = byte_tokenizer()
    tiny_llama(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def load_benchmark(name: str):
    """A script of benchmarks/ as a module (tests reuse its code instead of copying it)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
