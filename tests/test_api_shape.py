"""One API shape (knowflow/api.py): `f(model, data, *, config=None, **overrides) -> Result`,
each Result with `.save(dir)` and `.to_pandas()`, and the run folder the API writes is the one
the CLI writes (same files, same summary and records, byte for byte)."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

import knowflow
from knowflow.cli import app
from knowflow.data.suites import get_suite
from knowflow.probes import KnockoutConfig, ProbeExample, knockout
from knowflow.train.augment import augment as augment_rows
from knowflow.train.criticality import CurateConfig, curate_examples

FACT = {"prompt": "The Eiffel Tower is located in the city of", "subject": "The Eiffel Tower",
        "answer": "Paris"}
RUN_FILES = {"config.json", "items.jsonl", "summary.json", "figures", "report.html"}


def test_evaluate_out_writes_the_cli_folder(tiny_model_dir, tmp_path):
    res = knowflow.evaluate(str(tiny_model_dir), "cf-capitals", limit=2, max_new_tokens=2,
                            out=tmp_path / "api")
    cli = CliRunner().invoke(app, ["eval", "--model", str(tiny_model_dir), "--suite",
                                   "cf-capitals", "--limit", "2", "--max-new-tokens", "2",
                                   "--threads", str(torch.get_num_threads()),  # as the API's
                                   "--out", str(tmp_path / "cli")])
    assert cli.exit_code == 0, cli.output
    api_dir, cli_dir = tmp_path / "api", tmp_path / "cli"
    assert res.out_dir == api_dir
    assert {p.name for p in api_dir.iterdir()} == {p.name for p in cli_dir.iterdir()} \
        >= RUN_FILES
    for name in ("items.jsonl", "summary.json"):
        assert (api_dir / name).read_bytes() == (cli_dir / name).read_bytes(), name
    # the same figure files, and a report for each
    assert sorted(p.name for p in (api_dir / "figures").iterdir()) == \
        sorted(p.name for p in (cli_dir / "figures").iterdir())


def test_eval_result_save_is_the_out_folder(make_tiny_llama, tok, tmp_path):
    model = make_tiny_llama(tok)
    data = get_suite("cf-capitals", limit=3)  # items in memory
    kept = knowflow.evaluate(model, data, tokenizer=tok, max_new_tokens=2, n_bootstrap=10,
                             out=tmp_path / "run")
    later = knowflow.evaluate(model, data, tokenizer=tok, max_new_tokens=2, n_bootstrap=10)
    assert later.out_dir is None and later.summary == kept.summary
    assert later.save(tmp_path / "saved") == tmp_path / "saved"
    for name in ("items.jsonl", "summary.json"):
        assert (tmp_path / "saved" / name).read_bytes() == (tmp_path / "run" / name).read_bytes()
    assert {p.name for p in (tmp_path / "saved").iterdir()} == \
        {p.name for p in (tmp_path / "run").iterdir()} >= RUN_FILES
    import pandas as pd
    df = later.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == 3
    assert list(df["loglik_choice"]) == [r["loglik"]["choice"] for r in
                                         later.by_suite["cf-capitals"]]
    assert list(df["loglik_choice"]) == [r["loglik_choice"] for r in later.records]


def test_probe_by_config_or_by_kind_gives_the_probe_records(make_tiny_llama, tok, tmp_path):
    model = make_tiny_llama(tok)
    cfg = KnockoutConfig(window=1, known_only=False, source=("subject", "last"))
    ref = knockout(model, tok, [ProbeExample(**FACT)], cfg)
    new = knowflow.probe(model, [FACT], tokenizer=tok, config=cfg)
    by_kind = knowflow.probe(model, [FACT], tokenizer=tok, kind="knockout", window=1,
                             known_only=False, source=("subject", "last"))
    assert new.command == by_kind.command == "probe-knockout" and len(ref) > 0
    for got in (new.records, by_kind.records):
        assert [(r["source"], r["layer"], r["p"]) for r in got] == \
            [(r["source"], r["layer"], r["p"]) for r in ref]
    saved = new.save(tmp_path / "ko")
    assert {p.name for p in saved.iterdir()} >= {"config.json", "records.jsonl",
                                                 "summary.json", "figures", "report.html"}
    assert {k: v["n_examples"] for k, v in new.summary.items()} == {"subject": 1, "last": 1}


@pytest.mark.parametrize("kind,args", [
    ("knockout", ["--window", "1", "--all"]),
    ("head-project", ["--all"]),
])
def test_probe_out_dir_writes_the_cli_folder(kind, args, tiny_model_dir, tmp_path):
    """`knowflow probe <kind>` and `knowflow.probe(..., out=)` write one folder: the same
    files, records and summary byte for byte, and config.json alike."""
    fields = {"window": 1} if kind == "knockout" else {}
    res = knowflow.probe(str(tiny_model_dir), kind=kind, limit=2, known_only=False,
                         out=tmp_path / "api", **fields)
    cli = CliRunner().invoke(app, ["probe", kind, "--model", str(tiny_model_dir), "--limit",
                                   "2", *args, "--threads", str(torch.get_num_threads()),
                                   "--out", str(tmp_path / "cli")])
    assert cli.exit_code == 0, cli.output
    api_dir, cli_dir = tmp_path / "api", tmp_path / "cli"
    assert res.out_dir == api_dir and res.summary and res.records
    files = {p.relative_to(api_dir) for p in api_dir.rglob("*")}
    assert files == {p.relative_to(cli_dir) for p in cli_dir.rglob("*")}
    assert {str(p) for p in files} >= {"config.json", "records.jsonl", "summary.json",
                                       f"figures/{kind}.png", "report.html"}
    for name in ("records.jsonl", "summary.json", "config.json"):
        assert (api_dir / name).read_bytes() == (cli_dir / name).read_bytes(), name


def test_curate_and_augment_results(make_tiny_llama, tok, rows, tmp_path):
    model = make_tiny_llama(tok)
    res = knowflow.curate(model, rows, tokenizer=tok, drop=0.25, batch_size=4)
    kept, scores = curate_examples(model, tok, rows, CurateConfig(drop=0.25, batch_size=4))
    assert res.kept == kept and res.records == scores
    assert len(res.kept) == len(rows) - round(0.25 * len(rows))
    res.save(tmp_path / "cur")
    assert {"curated.jsonl", "curated.scores.jsonl", "curated.png", "config.json",
            "summary.json"} <= {p.name for p in (tmp_path / "cur").iterdir()}
    aug = knowflow.augment(rows, ratio=0.5, seed=3)
    assert aug.records == [r.to_dict() for r in augment_rows(rows, 0.5, 3)]
    assert aug.summary["n_added"] == sum(bool(r.get("augmented")) for r in aug.records) > 0
    assert (aug.save(tmp_path / "aug") / "augmented.jsonl").is_file()
    # the legacy positional forms are gone: one shape, keyword config and fields
    with pytest.raises(TypeError):
        knowflow.curate(model, tok, rows, CurateConfig(drop=0.25, batch_size=4))
    with pytest.raises(TypeError):
        knowflow.augment(rows, 0.5, 3)
