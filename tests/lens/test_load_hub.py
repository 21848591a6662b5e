"""Hub ids load as transformers loads them, from a hub cache the tests lay out
(`tests/hub_cache.py`): the cache offline, a revision's own snapshot, one line when a model is
neither cached nor reachable, and no repository code without trust_remote_code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants

from helpers import byte_tokenizer, tiny_llama
from hub_cache import lay_out_hub_folder, lay_out_hub_model, repo_folder
from knowflow.errors import ConfigError, KnowflowError
from knowflow.lens.hub import ModelSource
from knowflow.lens.load import check_model, load_model, load_tokenizer

REPO = "knowflow-test/tiny-llama"
OFFLINE = ModelSource(offline=True)


def _embedding(model) -> torch.Tensor:
    return model.get_input_embeddings().weight.detach()


def test_the_laid_out_cache_has_huggingface_hubs_layout(hf_home):
    tok = byte_tokenizer()
    commit = lay_out_hub_model(hf_home, REPO, tiny_llama(tok), tok)
    repo = repo_folder(hf_home, REPO)
    assert (repo / "refs" / "main").read_text() == commit
    weights = repo / "snapshots" / commit / "model.safetensors"
    assert weights.is_symlink() and weights.resolve().parent == (repo / "blobs").resolve()
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache(REPO, "config.json") == str(repo / "snapshots" / commit /
                                                              "config.json")


def test_a_cached_hub_id_loads_offline_with_its_own_weights(hf_home):
    tok = byte_tokenizer()
    model = tiny_llama(tok, seed=3)
    lay_out_hub_model(hf_home, REPO, model, tok)
    loaded, tokenizer = load_model(REPO, device="cpu", source=OFFLINE)
    assert torch.equal(_embedding(loaded), _embedding(model))
    assert tokenizer("Paris")["input_ids"] == tok("Paris")["input_ids"]
    assert load_tokenizer(REPO, OFFLINE).chat_template == tok.chat_template


def test_revision_picks_its_own_snapshot(hf_home):
    tok = byte_tokenizer()
    main, v2 = tiny_llama(tok, seed=0), tiny_llama(tok, seed=1)
    first = lay_out_hub_model(hf_home, REPO, main, tok)
    second = lay_out_hub_model(hf_home, REPO, v2, tok, revision="v2")
    assert first != second
    for revision, expected in ((None, main), ("main", main), ("v2", v2), (second, v2),
                               (first, main)):
        loaded, _ = load_model(REPO, device="cpu",
                               source=ModelSource(revision=revision, offline=True))
        assert torch.equal(_embedding(loaded), _embedding(expected)), revision


def test_an_uncached_hub_id_offline_is_one_line_naming_the_download(hf_home):
    with pytest.raises(KnowflowError) as err:
        check_model("knowflow-test/absent", OFFLINE)
    text = str(err.value)
    assert "'knowflow-test/absent'" in text and "not in the Hugging Face cache" in text
    assert "`hf download knowflow-test/absent`" in text and "\n" not in text
    tok = byte_tokenizer()
    lay_out_hub_model(hf_home, REPO, tiny_llama(tok), tok)
    with pytest.raises(KnowflowError, match=r"hf download knowflow-test/tiny-llama --revision "
                                            r"v9`"):
        load_model(REPO, device="cpu", source=ModelSource(revision="v9", offline=True))


def test_an_unreachable_hub_falls_back_to_the_cache_at_once(hf_home, monkeypatch):
    """Online but no network: one quick request fails and the cached files load, without the
    retries transformers makes for every file it looks for (each would try the network)."""
    import socket

    tok = byte_tokenizer()
    model = tiny_llama(tok, seed=2)
    lay_out_hub_model(hf_home, REPO, model, tok)
    tries = []

    def refuse(*args, **kwargs):
        tries.append(args[1:2] or args[:1])
        raise ConnectionRefusedError("network disabled by the test")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("getaddrinfo", "create_connection"):
        monkeypatch.setattr(socket, name, refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    loaded, _ = load_model(REPO, device="cpu")
    assert torch.equal(_embedding(loaded), _embedding(model))
    assert 1 <= len(tries) <= 4, tries  # check_model's and load_model's one request each
    with pytest.raises(KnowflowError, match="the Hugging Face Hub cannot be reached"):
        check_model("knowflow-test/absent")


def test_a_lora_adapter_loads_its_hub_base_at_the_recorded_revision(hf_home, tmp_path):
    """An adapter whose base is a hub id: the base resolves as --model would, at the revision
    the adapter recorded (or the one given), and the adapter is merged into it."""
    from peft import LoraConfig, get_peft_model

    tok = byte_tokenizer()
    main, v2 = tiny_llama(tok, seed=0), tiny_llama(tok, seed=1)
    lay_out_hub_model(hf_home, REPO, main, tok)
    lay_out_hub_model(hf_home, REPO, v2, tok, revision="v2")
    peft = get_peft_model(tiny_llama(tok, seed=1), LoraConfig(
        r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False, revision="v2"))
    peft.peft_config["default"].base_model_name_or_path = REPO
    peft.save_pretrained(tmp_path / "adapter")
    expected = peft.merge_and_unload()
    loaded, _ = load_model(str(tmp_path / "adapter"), device="cpu", source=OFFLINE)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert torch.allclose(loaded.state_dict()[q], expected.state_dict()[q], atol=1e-6)
    assert not torch.allclose(loaded.state_dict()[q], v2.state_dict()[q])
    with pytest.raises(KnowflowError, match="--revision v9"):
        check_model(str(tmp_path / "adapter"), ModelSource(revision="v9", offline=True))


def test_a_missing_local_path_says_so_and_suggests_no_download(tmp_path):
    for name in (str(tmp_path / "gone"), "./gone/model", "~/gone-model-folder"):
        with pytest.raises(KnowflowError) as err:
            check_model(name)
        assert "no such folder" in str(err.value) and "download" not in str(err.value)


def test_a_revision_needs_a_hub_id(tiny_model_dir):
    with pytest.raises(ConfigError) as err:
        check_model(str(tiny_model_dir), ModelSource(revision="v2"))
    assert err.value.field == "revision"
    with pytest.raises(ConfigError, match="revision"):
        ModelSource(revision=" main").validate()


# ---- remote code ------------------------------------------------------------------------

def custom_code_folder(folder: Path, marker: Path, model_type: str = "knowflow-custom") -> Path:
    """A tiny Llama whose config.json names its own code (auto_map); importing that code
    writes `marker`, so a test sees whether it ran."""
    tok = byte_tokenizer()
    tiny_llama(tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type=model_type, auto_map={
        "AutoConfig": "configuration_custom.CustomConfig",
        "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_custom.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('the repository code ran')\n"
        "from transformers import LlamaConfig\n\n\n"
        "class CustomConfig(LlamaConfig):\n"
        f"    model_type = {model_type!r}\n")
    (folder / "modeling_custom.py").write_text(
        "from transformers import LlamaForCausalLM\n\n"
        "from .configuration_custom import CustomConfig\n\n\n"
        "class CustomForCausalLM(LlamaForCausalLM):\n"
        "    config_class = CustomConfig\n")
    return folder


def test_custom_code_is_refused_without_trust_remote_code(tmp_path, hf_home):
    marker = tmp_path / "ran.txt"
    folder = custom_code_folder(tmp_path / "custom", marker)
    for name in (str(folder), "knowflow-test/custom"):
        if "/" in name and not name.startswith("/"):
            lay_out_hub_folder(hf_home, name, folder)
        for call in (lambda n=name: check_model(n, OFFLINE),
                     lambda n=name: load_model(n, device="cpu", source=OFFLINE)):
            with pytest.raises(ConfigError) as err:
                call()
            assert "--trust-remote-code" in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_custom_code_beside_a_builtin_model_type_never_runs(tmp_path):
    """auto_map on a model transformers has built in (a llama): transformers' own classes
    load it, as transformers does with trust_remote_code=False."""
    marker = tmp_path / "ran.txt"
    folder = custom_code_folder(tmp_path / "llama", marker, model_type="llama")
    model, _ = load_model(str(folder), device="cpu")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not marker.exists()


def _run_python(code: str, home: Path, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(home)}
    return subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True,
                          text=True, env=env, timeout=300)


def test_trust_remote_code_runs_the_code_and_nothing_else_does(tmp_path):
    """The marker is a working detector: --trust-remote-code runs the code; without it, the
    CLI refuses in one line even when stdin says yes."""
    marker = tmp_path / "ran.txt"
    folder = custom_code_folder(tmp_path / "custom", marker)
    exe = str(Path(sys.executable).parent / "knowflow")
    refused = subprocess.run([exe, "eval", "--model", str(folder), "--suite", "cf-capitals",
                              "--limit", "1", "--out", str(tmp_path / "out")], input="y\ny\n",
                             capture_output=True, text=True, cwd=tmp_path, timeout=300,
                             env={**os.environ, "HF_HOME": str(tmp_path / "hf")})
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "--trust-remote-code" in refused.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()
    trusted = _run_python(
        "from knowflow.lens.hub import ModelSource\n"
        "from knowflow.lens.load import load_model\n"
        f"load_model({str(folder)!r}, device='cpu', "
        "source=ModelSource(trust_remote_code=True))\n", tmp_path / "hf")
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    assert marker.read_text() == "the repository code ran"
