"""lm-eval interop: exported tasks carry knowflow's prompts and candidates; lm-eval's samples
read back give knowflow's metrics; lm-eval's `acc` equals knowflow's log-likelihood
counterfactual accuracy (slow; skipped without the `lmeval` extra)."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.data.prompts import PromptConfig, render
from knowflow.errors import DataError
from knowflow.evaluation.items import load_suites
from knowflow.evaluation.lm_eval_task import export_lm_eval, read_lm_eval_samples, task_docs
from knowflow.evaluation.run import evaluate, from_lm_eval
from knowflow.lens.load import load_model

SUITES = "cf-capitals,cf-quotes"


def _fake_samples(path: Path, docs: list[dict], records: list[dict]) -> Path:
    """An lm-eval --log_samples file with knowflow's own log-likelihoods as the responses."""
    lines = []
    for i, (doc, rec) in enumerate(zip(docs, records, strict=True)):
        ll = rec["loglik"]
        resps = [[ll["parametric_logprob"], False], [ll["counterfactual_logprob"], False]]
        lines.append(json.dumps({"doc_id": i, "doc": doc, "target": "1",
                                 "resps": [[r] for r in resps], "filtered_resps": resps,
                                 "filter": "none", "metrics": ["acc"], "acc": 1.0}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("fmt", ["chat", "plain"])
def test_docs_hold_knowflow_prompts_and_candidates(tiny_model_dir, fmt):
    _, tok = load_model(str(tiny_model_dir), device="cpu")
    items = load_suites(SUITES, limit=4)["cf-quotes"]
    docs = task_docs(items, tok, fmt)
    for doc, it in zip(docs, items, strict=True):
        p = render(it, tok, PromptConfig(fmt))
        assert doc["prompt"] == p.text
        assert doc["choices"] == [p.answer_prefix + it.parametric_answer,
                                  p.answer_prefix + it.counterfactual_answer]
        assert doc["gold"] == 1 and doc["id"] == it.id


def test_export_writes_yaml_data_and_loader(tmp_path, tiny_model_dir):
    _, tok = load_model(str(tiny_model_dir), device="cpu")
    tasks = export_lm_eval(load_suites(SUITES, limit=3), tok, tmp_path / "tasks")
    assert list(tasks) == ["knowflow_cf-capitals", "knowflow_cf-quotes"]
    text = tasks["knowflow_cf-capitals"].read_text()
    cfg = yaml.load(text.replace("!function ", ""), Loader=yaml.SafeLoader)
    assert cfg["task"] == "knowflow_cf-capitals" and cfg["output_type"] == "multiple_choice"
    assert cfg["target_delimiter"] == "" and cfg["doc_to_target"] == "gold"
    assert cfg["dataset_kwargs"]["data_file"] == "knowflow_cf-capitals.jsonl"
    data = tmp_path / "tasks" / "knowflow_cf-capitals.jsonl"
    assert len(data.read_text().splitlines()) == 3
    assert (tmp_path / "tasks" / "knowflow_lmeval_loader.py").exists()


def test_samples_give_knowflow_metrics(tmp_path, tiny_model_dir):
    model, tok = load_model(str(tiny_model_dir), device="cpu")
    ours = evaluate(model, SUITES, tokenizer=tok, limit=5, scoring="loglik", known_filter=False)
    files = []
    for suite, items in load_suites(SUITES, limit=5).items():
        files.append(_fake_samples(tmp_path / f"samples_{suite}.jsonl",
                                   task_docs(items, tok, "chat"), ours.by_suite[suite]))
    theirs = from_lm_eval(files, out_dir=tmp_path / "out")
    for suite in ours.summary:
        a, b = ours.summary[suite]["loglik"], theirs.summary[suite]["loglik"]
        for key in ("n", "cf_acc", "param_acc",
                    "memorization_ratio", "cf_acc_ci"):
            assert a[key] == b[key], key
        assert "cf_acc_norm" not in b  # lm-eval logs no token counts
    assert (tmp_path / "out" / "summary.json").exists()


def test_cli_export_and_from_lm_eval(tmp_path, tiny_model_dir):
    runner = CliRunner()
    res = runner.invoke(app, ["export", "lm-eval", "--suite", "cf-bio", "--limit", "3",
                              "--model", str(tiny_model_dir), "--out", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    assert "knowflow_cf-bio: 3 items" in res.output
    docs = [json.loads(line) for line in
            (tmp_path / "t" / "knowflow_cf-bio.jsonl").read_text().splitlines()]
    recs = [{"loglik": {"parametric_logprob": -2.0, "counterfactual_logprob": cf}}
            for cf in (-1.0, -2.0, -3.0)]  # choices: cf, a tie (neither), parametric
    path = _fake_samples(tmp_path / "s.jsonl", docs, recs)
    res = runner.invoke(app, ["eval", "--from-lm-eval", str(path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["cf-bio"]["loglik"]["cf_acc"] == pytest.approx(1 / 3)
    assert summary["cf-bio"]["loglik"]["param_acc"] == pytest.approx(1 / 3)


def test_bad_samples_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"doc_id": 0, "doc": {"query": "x"}, "resps": []}) + "\n")
    with pytest.raises(DataError, match="bad.jsonl, line 1: field 'doc': not a sample of a task"):
        read_lm_eval_samples(bad)
    with pytest.raises(DataError, match="no such file"):
        read_lm_eval_samples(tmp_path / "nope.jsonl")
    res = CliRunner().invoke(app, ["eval", "--from-lm-eval", str(bad), "--suite", "cf-bio"])
    assert res.exit_code == 2 and "takes no --suite or --data" in res.output


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["chat", "plain"])
def test_lm_eval_acc_equals_knowflow_loglik_accuracy(tmp_path, tiny_model_dir, monkeypatch, fmt):
    """lm-eval runs the exported tasks offline; its acc is knowflow's cf accuracy exactly."""
    pytest.importorskip("lm_eval", reason="lm-eval is an optional extra: pip install '.[lmeval]'")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    model, tok = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    by_suite = load_suites(SUITES, limit=12)
    tasks = export_lm_eval(by_suite, tok, tmp_path / "tasks", fmt)
    out = simple_evaluate(model="hf", model_args=f"pretrained={tiny_model_dir},dtype=float32",
                          tasks=list(tasks), device="cpu", batch_size=8, log_samples=True,
                          task_manager=TaskManager(include_path=str(tmp_path / "tasks")))
    ours = evaluate(model, SUITES, tokenizer=tok, limit=12, scoring="loglik",
                    known_filter=False, prompt_format=fmt)
    files = []
    for suite in by_suite:
        task = f"knowflow_{suite}"
        acc = out["results"][task]["acc,none"]
        assert acc == ours.summary[suite]["loglik"]["cf_acc"]
        path = tmp_path / f"samples_{task}.jsonl"
        path.write_text("\n".join(json.dumps(s, default=str) for s in out["samples"][task]))
        files.append(path)
    back = from_lm_eval(files)
    for suite in by_suite:
        mine = {r["id"]: r["loglik"] for r in ours.by_suite[suite]}
        for rec in back.by_suite[suite]:
            assert rec["loglik"]["choice"] == mine[rec["id"]]["choice"]
            assert rec["loglik"]["counterfactual_logprob"] == pytest.approx(
                mine[rec["id"]]["counterfactual_logprob"], abs=1e-3)
        assert back.summary[suite]["loglik"]["cf_acc"] == \
            ours.summary[suite]["loglik"]["cf_acc"]
