"""Published benchmarks by name (`knowflow.data.benchmarks`): `--data nq-swap` reads the
registered hub dataset with its preset. Offline, as everywhere: each registered hub id is laid
out in a temporary `datasets` cache (`hub_cache.lay_out_hub_dataset`) with a few rows in the
benchmark's published columns (tests/data/layouts/), read with HF_HUB_OFFLINE=1 and
HF_DATASETS_OFFLINE=1 in a subprocess; a file of a benchmark's name in the working folder is
read as the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hub_env import NO_NETWORK, READ, offline_env
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.data.benchmarks import BENCHMARKS, list_benchmarks, named
from knowflow.data.hub import _load_error, is_hub, parse_spec, resolve
from knowflow.data.loaders import load_items, load_items_checked
from knowflow.data.presets import PRESETS
from knowflow.errors import DataError

LAYOUTS = Path(__file__).parent / "layouts"
NQ_ROWS = [json.loads(line) for line in (LAYOUTS / "nq_swap.jsonl").read_text().splitlines()]
CQ_ROWS = json.loads((LAYOUTS / "conflictqa.json").read_text())
# a benchmark with a hub copy -> rows in its published layout, and its first item's answers
CACHED = {"nq-swap": (NQ_ROWS, ["Jane Austen", "Mary Shelley"]),
          "conflictqa": (CQ_ROWS, ["composer", "politician"])}
runner = CliRunner()


def test_list_benchmarks_rows():
    rows = list_benchmarks()
    assert [r["name"] for r in rows] == ["nq-swap", "conflictqa", "memotrap", "clasheval"]
    assert all(set(r) == {"name", "hub", "preset", "rows", "source"} for r in rows)
    assert {r["name"]: r["hub"] for r in rows} == {
        "nq-swap": "hf:pminervini/NQ-Swap@dev",
        "conflictqa": "hf:osunlp/ConflictQA:ConflictQA-popQA-chatgpt@test",
        "memotrap": None, "clasheval": None}
    for r in rows:
        assert r["preset"] in PRESETS and r["source"]
        assert r["rows"] is None or r["rows"] > 0
        if r["hub"]:
            assert str(parse_spec(r["hub"])) == r["hub"]


def test_every_benchmark_has_cached_rows_or_files():
    """Each name with a hub copy has rows laid out below; each without names its files."""
    assert {n for n, b in BENCHMARKS.items() if b.hub} == set(CACHED)
    assert all(b.files and b.files_from for b in BENCHMARKS.values() if not b.hub)


def test_names_resolve_to_the_registered_dataset_and_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = resolve("NQ-Swap")  # names ignore case
    assert (spec.repo, spec.config, spec.split, spec.preset, spec.suite) == \
        ("pminervini/NQ-Swap", None, "dev", "nq-swap", "nq-swap")
    assert str(spec) == "nq-swap (hf:pminervini/NQ-Swap@dev)"
    assert is_hub("conflictqa") and is_hub(Path("nq-swap")) and not is_hub("nq_swap.jsonl")


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    """A HF_HOME whose datasets cache holds every registered hub id, as if downloaded."""
    from knowflow.data.hub_cache import lay_out_hub_dataset

    home = tmp_path_factory.mktemp("hf-home")
    for name, (rows, _) in CACHED.items():
        spec = parse_spec(BENCHMARKS[name].hub)
        lay_out_hub_dataset(home, spec.repo, rows, config=spec.config, split=spec.split)
    return home


def test_benchmark_names_read_the_cache_offline(hf_home, tmp_path):
    res = subprocess.run([sys.executable, "-c", READ, *CACHED, "NQ-Swap"],
                         env=offline_env(hf_home), capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    for name, (rows, first) in CACHED.items():
        assert got[name] == {"suite": name, "n": len(rows), "preset": name, "first": first}
    assert got["NQ-Swap"]["suite"] == "nq-swap"


def test_not_cached_offline_is_one_line_naming_the_id(tmp_path):
    res = subprocess.run([sys.executable, "-c", READ, "nq-swap"],
                         env=offline_env(tmp_path / "empty-home"), capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["nq-swap"]["error"] == (
        "nq-swap (hf:pminervini/NQ-Swap@dev): not in the datasets cache, and "
        "HF_DATASETS_OFFLINE / HF_HUB_OFFLINE forbid downloading it; run once online to "
        "download it into the cache (HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 knowflow eval "
        "--data nq-swap ...)")


def test_eval_by_benchmark_name_offline(hf_home, tiny_model_dir, tmp_path):
    """`knowflow eval --data nq-swap --limit 2`: the cached NQ-Swap, read with its preset, with
    every connection refused."""
    report, out = tmp_path / "attempts.json", tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-c", NO_NETWORK, str(report), "eval", "--model", str(tiny_model_dir),
         "--data", "nq-swap", "--limit", "2", "--scoring", "loglik", "--no-known-filter",
         "--out", str(out)],
        env=offline_env(hf_home), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(report.read_text()) == []
    assert "nq-swap: columns read with the nq-swap preset" in res.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["presets"] == {"nq-swap": "nq-swap"}
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert len(items) == 2 and {it["suite"] for it in items} == {"nq-swap"}
    assert json.loads((out / "summary.json").read_text())["nq-swap"]["loglik"]["n"] == 2


def test_a_file_named_like_a_benchmark_is_read_as_the_file(tmp_path, monkeypatch,
                                                           tiny_model_dir):
    """The working folder's `nq-swap` wins over the benchmark: no hub, no cache asked."""
    monkeypatch.chdir(tmp_path)
    rows = [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the "
             f"capital of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"}
            for i in range(3)]
    Path("nq-swap").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert named("nq-swap") is None and not is_hub("nq-swap")
    items, counts = load_items_checked("nq-swap")
    assert [it.counterfactual_answer for it in items] == ["Zorb0", "Zorb1", "Zorb2"]
    assert "preset" not in counts  # knowflow's own columns, not NQ-Swap's
    res = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--data", "nq-swap",
                              "--limit", "2", "--scoring", "loglik", "--no-known-filter",
                              "--out", "run"])
    assert res.exit_code == 0, res.output
    items = [json.loads(line) for line in Path("run/items.jsonl").read_text().splitlines()]
    assert {it["counterfactual_answer"] for it in items} <= {"Zorb0", "Zorb1", "Zorb2"}


@pytest.mark.parametrize("name, message", [
    ("nq-swapp", "nq-swapp: no such file, nor a benchmark name (nq-swap, conflictqa, memotrap, "
                 "clasheval); did you mean nq-swap?"),
    ("nothing", "nothing: no such file, nor a benchmark name (nq-swap, conflictqa, memotrap, "
                "clasheval)"),
    ("missing.jsonl", "missing.jsonl: no such file"),
    ("memotrap", "memotrap: no hub copy of this benchmark is registered; download "
                 "1-proverb-ending.csv, 2-proverb-translation.csv, 3-hate-speech-ending.csv, "
                 "4-history-of-science-qa.csv from MemoTrap's release; --data reads each with "
                 "the memotrap preset"),
    ("clasheval", "clasheval: no hub copy of this benchmark is registered; download "
                  "dataset.pqt from ClashEval's release; --data reads it with the clasheval "
                  "preset"),
])
def test_unknown_names_and_names_without_a_hub_copy(tmp_path, monkeypatch, name, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as err:
        load_items(name)
    assert str(err.value) == message


def test_a_hub_copy_kept_as_a_loading_script_names_the_file_to_download(monkeypatch):
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    exc = RuntimeError("Dataset scripts are no longer supported, but found ConflictQA.py")
    assert str(_load_error(resolve("conflictqa"), exc)) == (
        "conflictqa (hf:osunlp/ConflictQA:ConflictQA-popQA-chatgpt@test): could not be loaded "
        "(Dataset scripts are no longer supported, but found ConflictQA.py); download "
        "conflictQA-popQA-chatgpt.json from the osunlp/ConflictQA repository; --data reads it "
        "with the conflictqa preset")


def test_a_tracked_entry_may_be_a_benchmark_name(tmp_path, monkeypatch):
    """`sft --track nq-swap` (and `RelianceTracker` suites) take the name as data, not as a
    built-in suite, while a built-in suite stays one."""
    from knowflow.train.tracker import is_data

    monkeypatch.chdir(tmp_path)
    assert is_data("nq-swap") and is_data("hf:org/name") and not is_data("cf-capitals")
