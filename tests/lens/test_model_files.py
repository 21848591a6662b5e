"""Model folders and hub snapshots broken the ways a new user's break (`helpers.
broken_model_folders`): each refused by `lens/checks.py` in one line naming the file and the
fix (exit 2), before the weights load and before anything is written, by every entry point
(eval, sft, probe heads, export lm-eval, `check_model`, the Python API with a loaded model);
their sound near-misses run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from typer.testing import CliRunner

import knowflow
from helpers import broken_model_folders, byte_tokenizer, tiny_llama
from hub_cache import lay_out_hub_folder
from knowflow.cli import app
from knowflow.errors import KnowflowError
from knowflow.lens.hub import ModelSource
from knowflow.lens.load import check_model, load_model
from test_families import FAMILY_MODELS

runner = CliRunner()
ITEMS = [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the capital "
          f"of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"} for i in range(2)]
ROWS = [{"instruction": f"Where does Vol{i} live?", "input": f"Vol{i} lives in Kem{i}.",
         "output": f"Kem{i}"} for i in range(4)]

# case: what the one line says (the file first, then what is wrong)
REFUSED = {
    "no-tokenizer": "no-tokenizer: no tokenizer files (tokenizer.json, tokenizer.model, "
                    "vocab.json, ...): the model was saved without its tokenizer; save the "
                    "tokenizer beside the model",
    "no-tokenizer-gpt2": "no-tokenizer-gpt2: no tokenizer files",
    "empty-vocab": "empty-vocab: the tokenizer has no usable vocabulary ('The capital of "
                   "France is Paris.' encodes to no tokens; 1 token(s) in all)",
    "empty-weights": "empty-weights/model.safetensors: damaged weights file (the file is "
                     "empty)",
    "added-tokens": "added-tokens: the tokenizer has token ids up to 261, but the model embeds "
                    "only 260 (config.json vocab_size; token 261 is '<|result|>')",
    "template-raises": "template-raises/chat_template.jinja: its chat template fails on a "
                       "two-turn conversation (TemplateError: no system role)",
    "template-empty": "template-empty/chat_template.jinja: its chat template renders a "
                      "conversation to nothing; fix chat_template.jinja",
    "template-drops": "template-drops/chat_template.jinja: its chat template drops the "
                      "messages' text (a conversation renders as '<|end|>')",
    "bert": "bert/config.json: a bert encoder (is_decoder is not true: it reads the text both "
            "ways), not a causal language model",
    "nan": "weight model.layers.0.mlp.up_proj.weight holds NaN or infinite values",
    "empty-index": "empty-index/model.safetensors.index.json: the weight_map is empty",
    "wrong-embedding": "wrong-embedding/model.safetensors: tensor model.embed_tokens.weight is "
                       "300 x 64, but config.json gives 260 x 64 (vocab_size x hidden size); "
                       "save the model and its config.json together",
    "missing-block": "missing-block/config.json: num_hidden_layers is 3, but the weights hold "
                     "2 blocks (0 to 1)",
}
# refused from the files alone: `check_model`, before any tokenizer or weight loads
BEFORE_LOADING = ["no-tokenizer", "no-tokenizer-gpt2", "empty-weights", "bert", "empty-index",
                  "wrong-embedding", "missing-block"]
SOUND = ["ok", "padded-vocab", "own-template", "sharded"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return broken_model_folders(tmp_path_factory.mktemp("models"))


def _invoke(args: list[str], cwd: Path, monkeypatch):
    monkeypatch.chdir(cwd)
    (cwd / "items.jsonl").write_text("".join(json.dumps(it) + "\n" for it in ITEMS))
    (cwd / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return runner.invoke(app, args)


def _eval(model: Path, cwd: Path, monkeypatch, *extra: str):
    return _invoke(["eval", "--model", str(model), "--data", "items.jsonl", "--scoring",
                    "loglik", "--no-known-filter", "--threads", "1", "--out", "out", *extra],
                   cwd, monkeypatch)


def _one_line(result, fragment: str, cwd: Path) -> None:
    out = result.output
    assert result.exit_code == 2, out
    assert "Traceback" not in out and fragment in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    assert sorted(p.name for p in cwd.iterdir()) == ["items.jsonl", "rows.jsonl"]


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_eval_refuses_the_folder_in_one_line(case, models, tmp_path, monkeypatch):
    _one_line(_eval(models[case], tmp_path, monkeypatch), REFUSED[case], tmp_path)


@pytest.mark.parametrize("case", SOUND)
def test_the_sound_near_misses_run(case, models, tmp_path, monkeypatch):
    result = _eval(models[case], tmp_path, monkeypatch, "--prompt-format", "chat")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("case", BEFORE_LOADING)
def test_check_model_reads_only_the_files(case, models, monkeypatch):
    """The checks before any work (`check_model`, which every command calls first) refuse the
    folder without loading a tokenizer or a weight."""
    def never(*args, **kwargs):
        raise AssertionError("check_model loaded something")

    for auto in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(auto, "from_pretrained", never)
    with pytest.raises(KnowflowError) as err:
        check_model(str(models[case]))
    assert REFUSED[case] in str(err.value)
    check_model(str(models["sharded"]))  # a sound folder passes


SFT = "sft --model {} --data rows.jsonl --steps 1 --batch-size 4 --no-track --runs-dir runs " \
      "--threads 1"
HEADS = "probe heads --model {} --data items.jsonl --runs-dir runs --threads 1"
EXPORT = "export lm-eval --model {} --out tasks --suite cf-capitals --limit 2 --prompt-format"


@pytest.mark.parametrize(("command", "case"), [
    (SFT, "no-tokenizer-gpt2"), (SFT, "empty-vocab"), (HEADS, "no-tokenizer-gpt2"),
    (HEADS, "empty-vocab"), (f"{EXPORT} chat", "template-raises"),
    (f"{EXPORT} auto", "template-empty")],
    ids=["sft-no-tokenizer", "sft-empty-vocab", "heads-no-tokenizer", "heads-empty-vocab",
         "export-template-raises", "export-template-empty"])
def test_other_commands_name_the_folder(command, case, models, tmp_path, monkeypatch):
    """sft and probe heads blamed the prompt for a tokenizer without a vocabulary; export
    lm-eval ended in an internal error on a chat template that raises."""
    args = [a.format(models[case]) for a in command.split()]
    _one_line(_invoke(args, tmp_path, monkeypatch), REFUSED[case], tmp_path)


@pytest.mark.parametrize("case", ["empty-weights", "empty-index", "wrong-embedding",
                                  "missing-block", "no-tokenizer", "no-tokenizer-gpt2",
                                  "empty-vocab", "template-empty", "added-tokens"])
def test_a_hub_snapshot_is_checked_as_a_folder(case, models, hf_home):
    """The same folder as a hub model in the Hugging Face cache: the same check, naming the
    snapshot's file."""
    commit = lay_out_hub_folder(hf_home, f"knowflow-test/{case}", models[case])
    with pytest.raises(KnowflowError) as err:
        load_model(f"knowflow-test/{case}", device="cpu", source=ModelSource(offline=True))
    text = str(err.value)
    snapshot = f"snapshots/{commit}"
    assert REFUSED[case].replace(case, snapshot, 1) in text, text


def test_a_sound_hub_snapshot_loads(models, hf_home):
    lay_out_hub_folder(hf_home, "knowflow-test/sharded", models["sharded"])
    model, _ = load_model("knowflow-test/sharded", device="cpu",
                          source=ModelSource(offline=True))
    assert model.config.num_hidden_layers == 2


@pytest.fixture(scope="module")
def loaded(tok):
    """Models passed to the Python API in memory, broken as the folders are."""
    from transformers import BertConfig, BertForMaskedLM

    nan = tiny_llama(tok)
    with torch.no_grad():
        nan.model.norm.weight[1] = float("nan")
    past = byte_tokenizer()
    past.add_tokens(["<|tool|>"], special_tokens=True)
    bert = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64))
    template = byte_tokenizer()
    template.chat_template = "{% for m in messages %}{% endfor %}"
    return {"nan": (nan, tok, "the loaded model (LlamaForCausalLM): weight model.norm.weight "
                    "holds NaN"),
            "added-tokens": (tiny_llama(tok), past, "the tokenizer has token ids up to 260, "
                             "but the model embeds only 260"),
            "bert": (bert, tok, "the loaded model (BertForMaskedLM): a BertForMaskedLM, not a "
                     "causal language model"),
            "template-empty": (tiny_llama(tok), template, "renders a conversation to nothing")}


@pytest.mark.parametrize("case", ["nan", "added-tokens", "bert", "template-empty"])
@pytest.mark.parametrize("call", ["evaluate", "probe", "explain"])
def test_a_loaded_model_gets_the_same_checks(call, case, loaded, tmp_path):
    model, tokenizer, fragment = loaded[case]
    run = {"evaluate": lambda: knowflow.evaluate(model, "cf-capitals", tokenizer=tokenizer,
                                                 limit=2, scoring="loglik",
                                                 out=tmp_path / "out"),
           "probe": lambda: knowflow.probe(model, "cf-capitals", tokenizer=tokenizer, limit=2,
                                           out=tmp_path / "out"),
           "explain": lambda: knowflow.explain(model, "Zorb is the capital of Land.",
                                               question="What is the capital of Land?",
                                               tokenizer=tokenizer)}[call]
    with pytest.raises(KnowflowError) as err:
        run()
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("family", sorted(FAMILY_MODELS))
def test_shapes_are_read_for_every_family(family, tmp_path):
    """Each mapped family's embedding and block names: a config.json with another vocabulary
    or another number of blocks than its weights is refused, naming the tensor."""
    from knowflow.lens.checks import check_shapes

    config_cls, model_cls, sizes, _ = FAMILY_MODELS[family]
    ids = {"vocab_size": 64, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**sizes, **ids))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    check_shapes(tmp_path, config)
    with pytest.raises(KnowflowError, match=r"model\.safetensors: tensor \S*(embed|wte)\S* is "
                                            r"64 x 32, but config.json gives 70 x 32"):
        check_shapes(tmp_path, {**config, "vocab_size": 70})
    layers = "n_layer" if "n_layer" in config else "num_hidden_layers"
    with pytest.raises(KnowflowError, match="num_hidden_layers is 3, but the weights hold 2"):
        check_shapes(tmp_path, {**config, layers: 3})


def test_a_lora_adapter_with_its_own_tokenizer_needs_none_beside_its_base(models, tmp_path):
    """The tokenizer files are looked for where the tokenizer loads from: an adapter that saved
    its own needs none beside its base."""
    from peft import LoraConfig, get_peft_model

    tok = byte_tokenizer()
    base = tmp_path / "base"
    shutil.copytree(models["no-tokenizer"], base)
    adapter = get_peft_model(tiny_llama(tok), LoraConfig(r=2, target_modules=["q_proj"]))
    adapter.save_pretrained(tmp_path / "adapter")
    tok.save_pretrained(tmp_path / "adapter")
    config = tmp_path / "adapter" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()),
                                  "base_model_name_or_path": str(base)}))
    check_model(str(tmp_path / "adapter"))
    with pytest.raises(KnowflowError, match="no tokenizer files"):
        check_model(str(base))
