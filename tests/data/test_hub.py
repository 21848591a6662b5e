"""Hub datasets as `--data hf:ORG/NAME[:CONFIG][@SPLIT]` (`knowflow.data.hub`), offline: the
tests lay out a `datasets` cache in a temporary HF_HOME (`hub_cache.lay_out_hub_dataset`) and
read it with HF_DATASETS_OFFLINE=1 / HF_HUB_OFFLINE=1 in a subprocess (datasets reads its
cache location and offline switches when imported); one runs `knowflow eval` with every
socket refused. The parsing and the missing-`datasets` message need no `datasets`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hub_env import NO_NETWORK, READ, offline_env

from knowflow.data.hub import HubSpec, parse_spec
from knowflow.data.loaders import load_items
from knowflow.errors import DataError

LAYOUTS = Path(__file__).parent / "layouts"
NQ_ROWS = [json.loads(line) for line in (LAYOUTS / "nq_swap.jsonl").read_text().splitlines()]
CQ_ROWS = json.loads((LAYOUTS / "conflictqa.json").read_text())


@pytest.mark.parametrize("text, spec", [
    ("hf:pminervini/NQ-Swap", HubSpec("pminervini/NQ-Swap")),
    ("hf:pminervini/NQ-Swap@dev", HubSpec("pminervini/NQ-Swap", None, "dev")),
    ("hf:osunlp/ConflictQA:ConflictQA-popQA-chatgpt@test",
     HubSpec("osunlp/ConflictQA", "ConflictQA-popQA-chatgpt", "test")),
    ("hf:org/name:cfg", HubSpec("org/name", "cfg")),
    ("hf:org/name@test[:10]", HubSpec("org/name", None, "test[:10]")),
])
def test_parse_spec(text, spec):
    assert parse_spec(text) == spec
    assert str(spec) == text


@pytest.mark.parametrize("text", ["hf:", "hf:org", "hf:org/", "hf:org/name/x", "hf:org/name:",
                                  "hf:org/name@", "hf:org/name@a@b", "hf:/name"])
def test_malformed_spec_is_one_data_error(text):
    with pytest.raises(DataError, match=rf"^{text}: not a hub dataset: expected "
                                        r"hf:ORG/NAME\[:CONFIG\]\[@SPLIT\]"):
        load_items(text)


def test_missing_datasets_is_one_line(monkeypatch):
    """datasets is one of knowflow's dependencies; a broken install says how to mend it."""
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(DataError, match=r"^hf:org/name: reading a hub dataset needs the "
                                        r"datasets package, one of knowflow's dependencies; "
                                        r"pip install datasets \(or reinstall knowflow\)$"):
        load_items("hf:org/name")


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    """A HF_HOME whose datasets cache holds three tiny hub datasets, as if downloaded."""
    from knowflow.data.hub_cache import lay_out_hub_dataset

    home = tmp_path_factory.mktemp("hf-home")
    lay_out_hub_dataset(home, "knowflow-test/nq-swap-mini", NQ_ROWS, split="dev")
    lay_out_hub_dataset(home, "knowflow-test/ConflictQA-mini", CQ_ROWS, config="popQA-chatgpt")
    lay_out_hub_dataset(home, "knowflow-test/two-splits", {"train": NQ_ROWS[:2], "test": NQ_ROWS})
    return home


def test_cached_hub_datasets_read_offline(hf_home):
    specs = ["hf:knowflow-test/nq-swap-mini", "hf:knowflow-test/nq-swap-mini@dev",
             "hf:knowflow-test/ConflictQA-mini:popQA-chatgpt@test",
             "hf:knowflow-test/two-splits", "hf:knowflow-test/two-splits@train",
             "hf:knowflow-test/nq-swap-mini@train", "hf:knowflow-test/not-cached"]
    res = subprocess.run([sys.executable, "-c", READ, *specs], env=offline_env(hf_home),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    nq = {"suite": "nq-swap-mini", "n": 3, "preset": "nq-swap",
          "first": ["Jane Austen", "Mary Shelley"]}
    assert got["hf:knowflow-test/nq-swap-mini"] == nq
    assert got["hf:knowflow-test/nq-swap-mini@dev"] == nq
    assert got["hf:knowflow-test/ConflictQA-mini:popQA-chatgpt@test"] == {
        "suite": "popQA-chatgpt", "n": 2, "preset": "conflictqa",
        "first": ["composer", "politician"]}
    assert got["hf:knowflow-test/two-splits"]["n"] == 3  # test, not train
    assert got["hf:knowflow-test/two-splits@train"]["n"] == 2
    assert got["hf:knowflow-test/nq-swap-mini@train"]["error"].startswith(
        "hf:knowflow-test/nq-swap-mini@train: no such split (Unknown split \"train\"")
    assert got["hf:knowflow-test/not-cached"]["error"] == (
        "hf:knowflow-test/not-cached: not in the datasets cache, and HF_DATASETS_OFFLINE / "
        "HF_HUB_OFFLINE forbid downloading it; fetch it once online: python -c \"import "
        "datasets; datasets.load_dataset('knowflow-test/not-cached')\"")


def test_eval_on_a_cached_hub_dataset_without_network(hf_home, tiny_model_dir, tmp_path):
    """The closing transcript's command, offline: `knowflow eval --data hf:ORG/NAME --preset
    nq-swap` with a local model folder and every connection refused."""
    report, out = tmp_path / "attempts.json", tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-c", NO_NETWORK, str(report), "eval", "--model", str(tiny_model_dir),
         "--data", "hf:knowflow-test/nq-swap-mini", "--preset", "nq-swap",
         "--scoring", "loglik", "--no-known-filter", "--out", str(out)],
        env=offline_env(hf_home), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(report.read_text()) == []
    assert "nq-swap-mini: columns read with the nq-swap preset" in res.stdout
    config = json.loads((out / "config.json").read_text())
    assert (config["preset"], config["presets"]) == ("nq-swap", {"nq-swap-mini": "nq-swap"})
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert [it["counterfactual_answer"] for it in items] == \
        ["Jane Austen", "Winnipeg", "Claude Monet"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nq-swap-mini"]["loglik"]["n"] == 3


API = """
import json, sys
import knowflow
result = knowflow.evaluate(sys.argv[1], "hf:knowflow-test/ConflictQA-mini:popQA-chatgpt",
                           scoring="loglik", known_filter=False, n_bootstrap=10)
print(json.dumps({"suites": list(result.summary), "presets": result.config["presets"],
                  "n": result.summary["popQA-chatgpt"]["loglik"]["n"]}))
"""


def test_python_api_reads_a_hub_dataset(hf_home, tiny_model_dir, tmp_path):
    res = subprocess.run([sys.executable, "-c", API, str(tiny_model_dir)],
                         env=offline_env(hf_home), capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {
        "suites": ["popQA-chatgpt"], "presets": {"popQA-chatgpt": "conflictqa"}, "n": 2}


def test_demo_script_lays_out_nq_swap_mini(tmp_path):
    """benchmarks/data/hub_dataset_demo.py: the dataset the closing transcript evaluates."""
    script = Path(__file__).parents[2] / "benchmarks" / "data" / "hub_dataset_demo.py"
    home = tmp_path / "home"
    made = subprocess.run([sys.executable, str(script), str(home)], capture_output=True,
                          text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert "knowflow eval --data hf:knowflow-test/nq-swap-mini --preset nq-swap" in made.stdout
    res = subprocess.run([sys.executable, "-c", READ, "hf:knowflow-test/nq-swap-mini"],
                         env=offline_env(home), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["hf:knowflow-test/nq-swap-mini"] == {
        "suite": "nq-swap-mini", "n": 6, "preset": "nq-swap",
        "first": ["Jane Austen", "Mary Shelley"]}


@pytest.mark.parametrize("exc, message", [
    (RuntimeError("Dataset scripts are no longer supported, but found ConflictQA.py"),
     "hf:osunlp/ConflictQA: could not be loaded (Dataset scripts are no longer supported, but "
     "found ConflictQA.py); download one of its data files and give it to --data (the presets "
     "read files too)"),
    (type("DatasetNotFoundError", (Exception,), {})("Dataset 'osunlp/ConflictQA' doesn't "
                                                     "exist on the Hub"),
     "hf:osunlp/ConflictQA: not found on the Hub (Dataset 'osunlp/ConflictQA' doesn't exist "
     "on the Hub); check ORG/NAME; a gated dataset needs `hf auth login`"),
    (ValueError("BuilderConfig 'x' not found. Available: ['a', 'b']"),
     "hf:osunlp/ConflictQA: no such config (BuilderConfig 'x' not found. Available: ['a', "
     "'b']); name one: hf:osunlp/ConflictQA:CONFIG"),
    (OSError("Connection reset by peer\nmore"),
     "hf:osunlp/ConflictQA: could not be loaded (OSError: Connection reset by peer)"),
])
def test_load_failures_are_one_line_naming_the_dataset(monkeypatch, exc, message):
    from knowflow.data.hub import _load_error

    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert str(_load_error(parse_spec("hf:osunlp/ConflictQA"), exc)) == message
