"""Broken model folders: each refused by `lens/checks.py` in one line with exit 2
before any output is written, instead of an internal error or a run on broken weights; code a
folder names (a pickle, an auto_map) never runs."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from helpers import byte_tokenizer, save_model_folder, tiny_llama
from knowflow.cli import app
from knowflow.errors import KnowflowError
from knowflow.lens.checks import check_finite, check_pad_token

runner = CliRunner()
ITEMS = [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the capital "
          f"of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"} for i in range(2)]


class _Marker:
    """Unpickling this object writes the marker file (what a malicious pickle would do)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "the pickle ran"))


def _edit(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _template(folder: Path, text: str) -> None:
    if (folder / "chat_template.jinja").exists():
        (folder / "chat_template.jinja").write_text(text)
    else:
        _edit(folder / "tokenizer_config.json", chat_template=text)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{case: model folder}: one sound tiny Llama and copies broken in one way each."""
    from transformers import BertConfig, BertForMaskedLM

    root = tmp_path_factory.mktemp("models")
    tok = byte_tokenizer()
    ok = save_model_folder(root / "ok", tiny_llama(tok), tok)
    made = {"ok": ok}

    def copy(name: str) -> Path:
        made[name] = root / name
        shutil.copytree(ok, made[name])
        return made[name]

    weights = (ok / "model.safetensors").read_bytes()
    (copy("empty-weights") / "model.safetensors").write_bytes(b"")
    (copy("cut-weights") / "model.safetensors").write_bytes(weights[:len(weights) // 2])
    (copy("garbled-weights") / "model.safetensors").write_bytes(b"\x93\x01" * 3000)
    small = tiny_llama(tok)
    small.resize_token_embeddings(100)
    small.save_pretrained(copy("small-vocab"))
    _template(copy("template-raises"), "{{ raise_exception('no system role') }}")
    _template(copy("template-syntax"), "{% for m in messages %}{{ m['content'] }")
    bert = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64)
    BertForMaskedLM(bert).save_pretrained(copy("bert"))
    _edit(copy("string-layers") / "config.json", num_hidden_layers="2")
    pickled = copy("pickle")
    (pickled / "model.safetensors").unlink()
    with open(pickled / "pytorch_model.bin", "wb") as f:
        pickle.dump(_Marker(root / "pickle-ran.txt"), f)
    for name, key in (("nan", "model.layers.0.mlp.up_proj.weight"),
                      ("inf", "lm_head.weight")):
        broken = tiny_llama(tok)
        with torch.no_grad():
            broken.get_parameter(key)[0, 0] = float("nan" if name == "nan" else "inf")
        broken.save_pretrained(copy(name))
    no_pad = copy("no-pad")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (no_pad / name).exists():
            config = json.loads((no_pad / name).read_text())
            config.pop("pad_token", None), config.pop("eos_token", None)
            (no_pad / name).write_text(json.dumps(config))
    # a tokenizer class only the folder's own code defines; importing it writes a marker
    remote = copy("remote-tokenizer")
    (remote / "tokenization_custom.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(root / 'remote-ran.txt')!r}).write_text('ran')\n"
        "from transformers import PreTrainedTokenizerFast\n\n\n"
        "class CustomTokenizer(PreTrainedTokenizerFast):\n    pass\n")
    _edit(remote / "tokenizer_config.json", tokenizer_class="CustomTokenizer",
          auto_map={"AutoTokenizer": [None, "tokenization_custom.CustomTokenizer"]})
    return made


CASES = [
    ("empty-weights", "model.safetensors: damaged weights file (the file is empty)"),
    ("cut-weights", "model.safetensors: damaged weights file (Error while deserializing "
     "header: incomplete metadata, file not fully covered)"),
    ("garbled-weights", "model.safetensors: damaged weights file"),
    ("small-vocab", "the tokenizer has token ids up to 259, but the model embeds only 100"),
    ("template-raises", "its chat template fails on a two-turn conversation (TemplateError: "
     "no system role)"),
    ("template-syntax", "(TemplateSyntaxError: unexpected '}')"),
    ("bert", "config.json: a BertForMaskedLM, not a causal language model"),
    ("string-layers", "config.json: field 'num_hidden_layers': expected an integer, got '2'"),
    ("pickle", "pytorch_model.bin: weights saved as a pickle, which can run code"),
    ("nan", "weight model.layers.0.mlp.up_proj.weight holds NaN or infinite values"),
    ("inf", "weight lm_head.weight holds NaN or infinite values"),
    ("remote-tokenizer", "its tokenizer_config.json asks to run the repository's own Python "
     "code (auto_map), which knowflow runs only when asked; pass --trust-remote-code"),
]


def _invoke(args: list[str], cwd: Path, monkeypatch, stdin: str | None = None):
    monkeypatch.chdir(cwd)
    (cwd / "items.jsonl").write_text("".join(json.dumps(it) + "\n" for it in ITEMS))
    return runner.invoke(app, args, input=stdin)


def _one_line(result, fragment: str) -> None:
    out = result.output
    assert result.exit_code == 2, out
    assert "Traceback" not in out and fragment in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out


@pytest.mark.parametrize(("case", "fragment"), CASES, ids=[c for c, _ in CASES])
def test_broken_model_folder_is_one_line(case, fragment, folders, tmp_path, monkeypatch):
    result = _invoke(["eval", "--model", str(folders[case]), "--data", "items.jsonl",
                      "--scoring", "loglik", "--no-known-filter", "--threads", "1",
                      "--out", "out"], tmp_path, monkeypatch, stdin="y\ny\n")
    _one_line(result, fragment)
    assert not (tmp_path / "out").exists()
    root = folders["ok"].parent
    assert not (root / "pickle-ran.txt").exists() and not (root / "remote-ran.txt").exists()


def test_the_sound_folder_runs(folders, tmp_path, monkeypatch):
    """The checks pass a sound folder (the reference the broken copies differ from)."""
    result = _invoke(["eval", "--model", str(folders["ok"]), "--data", "items.jsonl",
                      "--scoring", "loglik", "--no-known-filter", "--threads", "1",
                      "--out", "out"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output


def test_sft_needs_a_pad_or_eos_token(folders, tmp_path, monkeypatch):
    rows = [{"instruction": f"Where does Vol{i} live?", "input": f"Vol{i} lives in Kem{i}.",
             "output": f"Kem{i}"} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = _invoke(["sft", "--model", str(folders["no-pad"]), "--data", "rows.jsonl",
                      "--steps", "1", "--batch-size", "4", "--no-track", "--threads", "1",
                      "--runs-dir", "runs"], tmp_path, monkeypatch)
    _one_line(result, "the tokenizer has neither a pad token nor an end-of-sequence token")
    assert not (tmp_path / "runs").exists()


def test_check_finite_and_pad_token_directly(tiny_lm, tok):
    check_finite(tiny_lm, "tiny")  # a sound model passes
    broken = tiny_llama(tok)
    with torch.no_grad():
        broken.model.norm.weight[3] = float("-inf")
    with pytest.raises(KnowflowError, match="model.norm.weight holds NaN or infinite"):
        check_finite(broken, "tiny")
    check_pad_token(tok, "tiny")


def test_a_model_found_finite_is_read_again_once_a_weight_changes(tok):
    model = tiny_llama(tok)
    check_finite(model, "tiny")
    check_finite(model, "tiny")                      # unchanged: remembered, passes
    with torch.no_grad():
        model.model.norm.weight[0] = float("nan")    # an in-place write after the check
    with pytest.raises(KnowflowError, match="model.norm.weight holds NaN or infinite"):
        check_finite(model, "tiny")
    opt = torch.optim.SGD(model.parameters(), lr=1e30)
    with torch.no_grad():
        model.model.norm.weight[0] = 1.0
    check_finite(model, "tiny")
    model.model.embed_tokens.weight.grad = torch.full_like(model.model.embed_tokens.weight,
                                                           1e30)
    opt.step()                                       # an optimizer step that overflows
    with pytest.raises(KnowflowError, match="embed_tokens.weight holds NaN or infinite"):
        check_finite(model, "tiny")
    bare = byte_tokenizer()
    bare.pad_token = bare.eos_token = None
    with pytest.raises(KnowflowError, match="neither a pad token"):
        check_pad_token(bare, "tiny")
