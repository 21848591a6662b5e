"""Any causal LM without flags: eval, explain, probe knockout, probe heads
and a 2-step sft on a tiny random model of each family knowflow maps (`lens.arch.FAMILIES`),
saved as a model folder with its tokenizer and run through the `knowflow` CLI in-process with
the same flags for every family. The base-model families (GPT-2, GPT-NeoX, OPT) get a tokenizer
without a chat template, so their prompt format resolves to plain; the others get one with a
template (chat)."""

from __future__ import annotations

import math

import pytest
import torch
import transformers
from typer.testing import CliRunner

from helpers import byte_bpe, byte_tokenizer, save_model_folder
from knowflow.cli import app
from knowflow.lens.arch import FAMILIES
from knowflow.store.readers import read_json, read_jsonl

runner = CliRunner()
WINDOW = 512
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=WINDOW)
# family: (config class, model class, sizes, has a chat template)
FAMILY_MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", SIZES, True),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", SIZES, True),
    "mistral": ("MistralConfig", "MistralForCausalLM", SIZES, True),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {**SIZES, "head_dim": 8}, True),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", SIZES, True),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=4,
                                                    n_positions=WINDOW), False),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 {k: v for k, v in SIZES.items() if k != "num_key_value_heads"}, False),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                                 num_attention_heads=4, word_embed_proj_dim=32,
                                                 max_position_embeddings=WINDOW), False),
}
CONTEXT = "Paris is in France. The sky is blue today. Rome is in Italy."


def test_every_mapped_family_is_in_the_matrix():
    assert set(FAMILY_MODELS) == set(FAMILIES)


@pytest.fixture(scope="module", params=sorted(FAMILY_MODELS))
def family_dir(request, tmp_path_factory):
    """(family, model folder, whether its tokenizer has a chat template)."""
    family = request.param
    config_cls, model_cls, sizes, chat = FAMILY_MODELS[family]
    tok = byte_tokenizer() if chat else byte_bpe()
    # Embedding rows to spare, as released models pad theirs: Qwen2's tokenizer class reloads
    # this tokenizer with <|endoftext|> added (id 260), which the model must be able to embed.
    ids = {"vocab_size": len(tok) + 8, "eos_token_id": tok.eos_token_id,
           "pad_token_id": tok.pad_token_id,
           "bos_token_id": tok.bos_token_id if tok.bos_token_id is not None else
           tok.eos_token_id}
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**sizes, **ids))
    folder = save_model_folder(tmp_path_factory.mktemp(f"tiny-{family}"), model.eval(), tok)
    return family, folder, chat


def _run(args: list[str]):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _expected_format(chat: bool) -> str:
    return "chat" if chat else "plain"


def test_family_eval(family_dir, tmp_path):
    family, model, chat = family_dir
    out = tmp_path / "eval"
    result = _run(["eval", "--model", str(model), "--suite", "cf-capitals", "--limit", "2",
                   "--max-new-tokens", "3", "--out", str(out)])
    config = read_json(out / "config.json")
    assert config["prompt_format"] == _expected_format(chat)
    assert f"prompt format: {_expected_format(chat)}" in result.output
    records = read_jsonl(out / "items.jsonl")
    assert len(records) == 2
    for r in records:
        assert math.isfinite(r["loglik_margin"]) if "loglik_margin" in r else True
    summary = read_json(out / "summary.json")["cf-capitals"]
    assert 0.0 <= summary["loglik"]["cf_acc"] <= 1.0
    assert all(r["suite"] == "cf-capitals" for r in records)
    assert all(math.isfinite(r["loglik_counterfactual_logprob"])
               and math.isfinite(r["loglik_parametric_logprob"]) for r in records)
    assert all(isinstance(r["generate_output"], str) for r in records)


def test_family_explain(family_dir, tmp_path):
    family, model, chat = family_dir
    out = tmp_path / "explain"
    result = _run(["explain", "--model", str(model), "--context", CONTEXT, "--question",
                   "Where is Rome?", "--ablations", "8", "--holdout", "4", "--out", str(out)])
    assert f"prompt format: {_expected_format(chat)}" in result.output
    assert read_json(out / "config.json")["prompt_format"] == _expected_format(chat)
    (rec,) = read_jsonl(out / "records.jsonl")
    assert rec["verdict"] in ("context", "memory", "both", "neither", "undetermined") or \
        isinstance(rec["verdict"], str)
    assert math.isfinite(rec["logprob_context"]) and math.isfinite(rec["logprob_no_context"])
    assert len(rec["sentences"]) == 3
    assert all(math.isfinite(s["attribution"]) for s in rec["sentences"])
    assert len(rec["mechanism"]["layers"]) == 2



@pytest.mark.parametrize("masks", [0, 4])
def test_family_explain_gradient(family_dir, tmp_path, masks):
    """The one-pass `--attribution gradient` (the keep-weight gradient through each family's
    own eager attention, the context as a KV cache), and at 4 mask points (each family's
    cache repeated for a batch of readers): finite, not all zero, recorded as such."""
    family, model, chat = family_dir
    out = tmp_path / "explain"
    result = _run(["explain", "--model", str(model), "--context", CONTEXT, "--question",
                   "Where is Rome?", "--attribution", "gradient", "--holdout", "4",
                   "--answer", "Italy", "--set", f"gradient_masks={masks}", "--out", str(out)])
    assert "attribution: gradient" in result.output
    (rec,) = read_jsonl(out / "records.jsonl")
    assert rec["attribution_method"] == ("gradient@4" if masks else "gradient")
    scores = [s["attribution"] for s in rec["sentences"]]
    assert len(scores) == 3 and all(math.isfinite(x) for x in scores)
    assert max(abs(x) for x in scores) > 0

def test_family_probe_knockout(family_dir, tmp_path):
    family, model, _ = family_dir
    out = tmp_path / "knockout"
    _run(["probe", "knockout", "--model", str(model), "--limit", "2", "--all", "--window", "1",
          "--out", str(out)])
    config = read_json(out / "config.json")
    assert config["n_layers"] == 2 and config["n_heads"] == 4
    records = read_jsonl(out / "records.jsonl")
    assert {r["layer"] for r in records} == {0, 1}
    assert all(0 <= r["p"] <= 1 and math.isfinite(r["rel_change"]) for r in records)
    assert (out / "summary.json").exists()


def test_family_probe_heads(family_dir, tmp_path):
    family, model, chat = family_dir
    out = tmp_path / "heads"
    result = _run(["probe", "heads", "--model", str(model), "--limit", "2", "--set",
                   "n_bootstrap=20", "--out", str(out)])
    assert f"prompt format: {_expected_format(chat)}" in result.output
    config = read_json(out / "config.json")
    assert config["config"]["prompt_format"] == _expected_format(chat)
    records = read_jsonl(out / "records.jsonl")
    assert {(r["layer"], r["head"]) for r in records} == {(ly, h) for ly in range(2)
                                                         for h in range(4)}
    assert all(math.isfinite(r[f"effect_{a}"]) for r in records for a in ("zero", "mean", "block"))


def _weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


def test_family_sft(family_dir, tmp_path):
    family, model, chat = family_dir
    result = _run(["sft", "--model", str(model), "--steps", "2", "--batch-size", "2",
                   "--lr", "1e-2", "--track-limit", "2", "--track-every", "2",
                   "--runs-dir", str(tmp_path)])
    assert f"prompt format: {_expected_format(chat)}" in result.output
    (run,) = (tmp_path / "sft").iterdir()
    summary = read_json(run / "summary.json")
    assert summary["steps"] == 2 and math.isfinite(summary["train_loss"])
    assert summary["prompt_format"] == _expected_format(chat)
    assert summary["lora_targets"] and f"LoRA targets: {summary['lora_targets'][0]}" in \
        result.output
    adapter = _weights(run / "model")  # LoRA: only the adapter is saved
    assert adapter and all("lora_" in k for k in adapter)
    assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in adapter.items())
    assert len(read_jsonl(run / "metrics.jsonl")) >= 1


def test_explicit_chat_on_a_base_model_is_refused(tmp_path):
    """--prompt-format chat on a tokenizer without a chat template: exit 2, the field named,
    nothing written."""
    tok = byte_bpe()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=WINDOW))
    folder = save_model_folder(tmp_path / "gpt2", model, tok)
    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", "--model", str(folder), "--suite", "cf-capitals",
                                 "--limit", "1", "--prompt-format", "chat", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "--prompt-format:" in result.output and "no chat template" in result.output
    assert not out.exists()
