"""`--model ORG/NAME` from the Hugging Face cache, in the commands a user runs: offline by
HF_HUB_OFFLINE and by --offline, with the network disabled, at a --revision; an uncached id
is one line and exit code 2. The cache is laid out by tests/hub_cache.py; nothing here touches
the network (the subprocesses that run online refuse every connection)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from helpers import byte_tokenizer, tiny_llama
from hub_cache import lay_out_hub_model
from knowflow.cli.main import app

REPO = "knowflow-test/tiny-llama"
EVAL = ["eval", "--model", REPO, "--suite", "cf-capitals", "--limit", "2", "--scoring",
        "loglik"]

# Runs the knowflow CLI with every connection refused, counting the attempts in argv[1].
NO_NETWORK = """
import socket, sys
count = sys.argv.pop(1)
def refuse(*args, **kwargs):
    with open(count, "a") as f:
        f.write("x")
    raise ConnectionRefusedError("network disabled by the test")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from knowflow.cli.main import app
sys.argv[0] = "knowflow"
app()
"""


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    """A hub cache holding REPO at main (seed 0) and at the branch v2 (seed 1)."""
    home = tmp_path_factory.mktemp("hf")
    tok = byte_tokenizer()
    lay_out_hub_model(home, REPO, tiny_llama(tok, seed=0), tok)
    lay_out_hub_model(home, REPO, tiny_llama(tok, seed=1), tok, revision="v2")
    return home


def _env(hf_home: Path, offline: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE",
                                                            "TRANSFORMERS_OFFLINE")}
    return {**env, "HF_HOME": str(hf_home), **({"HF_HUB_OFFLINE": "1"} if offline else {})}


def _knowflow(args: list[str], hf_home: Path, cwd: Path, offline: bool = True):
    exe = str(Path(sys.executable).parent / "knowflow")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=_env(hf_home, offline))


def _without_network(args: list[str], hf_home: Path, cwd: Path):
    """(the run, how many connections it tried) with HF_HUB_OFFLINE unset."""
    count = cwd / "connections.txt"
    run = subprocess.run([sys.executable, "-c", NO_NETWORK, str(count), *args], cwd=cwd,
                         capture_output=True, text=True, timeout=600,
                         env=_env(hf_home, offline=False))
    return run, len(count.read_text()) if count.exists() else 0


def test_eval_loads_a_cached_hub_id_with_hf_hub_offline(hf_home, tmp_path):
    run = _knowflow([*EVAL, "--out", "out"], hf_home, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model"] == REPO and "revision" not in config
    assert len((tmp_path / "out" / "items.jsonl").read_text().splitlines()) == 2


def test_eval_loads_a_cached_hub_id_with_the_network_disabled(hf_home, tmp_path):
    run, tries = _without_network([*EVAL, "--out", "out"], hf_home, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert tries >= 1  # it was online: it asked the Hub, was refused, and used the cache
    assert "cannot be reached" in run.stderr
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model"] == REPO


def test_offline_flag_and_revision_load_the_branch_without_asking(hf_home, tmp_path):
    run, tries = _without_network([*EVAL, "--offline", "--revision", "v2", "--out", "out"],
                                  hf_home, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert tries == 0  # --offline: not one connection tried
    assert json.loads((tmp_path / "out" / "config.json").read_text())["revision"] == "v2"


def test_an_uncached_hub_id_offline_is_one_line_exit_2(hf_home, tmp_path):
    run = _knowflow(["eval", "--model", "knowflow-test/absent", "--suite", "cf-capitals",
                     "--limit", "1", "--out", "out"], hf_home, tmp_path)
    assert run.returncode == 2
    line = run.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "'knowflow-test/absent'" in line and "`hf download knowflow-test/absent`" in line
    assert not (tmp_path / "out").exists()


@pytest.fixture
def in_process_cache(hf_home, monkeypatch):
    """The module's hub cache for commands run in this process (CliRunner)."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_home / "hub"))
    return hf_home


@pytest.mark.parametrize("command", [
    ["probe", "knockout", "--all", "--limit", "1", "--window", "1", "--runs-dir", "runs"],
    ["export", "lm-eval", "--out", "tasks", "--suite", "cf-capitals", "--limit", "1"],
])
def test_other_commands_take_the_same_model_flags(in_process_cache, tmp_path, monkeypatch,
                                                  command):
    monkeypatch.chdir(tmp_path)
    args = [*command, "--model", REPO, "--revision", "v2", "--offline"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(app, [*command, "--model", REPO, "--revision", "v9", "--offline"])
    assert bad.exit_code == 2
    assert "hf download knowflow-test/tiny-llama --revision v9" in bad.output.replace("\n", "")


def test_sft_on_a_hub_id_offline_saves_its_adapter_without_peft_asking_the_hub(
        in_process_cache, tmp_path, monkeypatch):
    """Saving a LoRA adapter offline, peft cannot ask the hub whether the base's vocabulary
    changed and warned at every save (a checkpoint, the model); knowflow never resizes it."""
    monkeypatch.chdir(tmp_path)
    rows = [{"instruction": f"Where does Vol{i} live?", "input": f"Vol{i} lives in Kem{i}.",
             "output": f"Kem{i}", "kind": "C"} for i in range(4)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, ["sft", "--model", REPO, "--offline", "--data",
                                          "train.jsonl", "--steps", "1", "--batch-size", "4",
                                          "--no-track", "--runs-dir", "runs"])
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs" / "sft").iterdir()
    assert (run / "model" / "adapter_config.json").exists()
    assert not [w for w in said if "Could not find a config file" in str(w.message)]
