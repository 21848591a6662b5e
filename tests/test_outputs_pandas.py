"""`items.jsonl` and `metrics.jsonl` load in one line with pandas, one flat column per field
(pandas is in the base install)."""

import pandas as pd
import pytest

from knowflow.data.instruction_rows import encode_all
from knowflow.data.suites import get_suite
from knowflow.evaluation.run import evaluate
from knowflow.train.sft import SFTConfig, train_model
from knowflow.train.tracker import RelianceTracker, TrackerConfig


def _no_dicts(df) -> None:
    for column in df.columns:
        assert not df[column].map(lambda v: isinstance(v, dict)).any(), column


def test_items_jsonl_is_flat(make_tiny_llama, tmp_path, tok):
    res = evaluate(make_tiny_llama(tok), "cf-capitals,cf-quotes", tokenizer=tok, limit=3,
                   max_new_tokens=4, out_dir=tmp_path)
    df = pd.read_json(tmp_path / "items.jsonl", lines=True)
    _no_dicts(df)
    assert len(df) == 6
    assert {"suite", "loglik_choice", "loglik_memorization_ratio", "generate_output",
            "generate_counterfactual", "known"} <= set(df.columns)
    by_suite = df.groupby("suite")["loglik_choice"].apply(lambda c: (c == "counterfactual")
                                                          .mean())
    for suite, acc in by_suite.items():
        assert acc == pytest.approx(res.summary[suite]["loglik"]["cf_acc"])


def test_metrics_jsonl_is_flat(make_tiny_llama, tmp_path, tok, rows):
    data, _ = encode_all(tok, rows, "chat", 512)
    tracker = RelianceTracker(tok, TrackerConfig(every=2, batch_size=4), tmp_path,
                              items={"cf-capitals": get_suite("cf-capitals", limit=3),
                                     "cf-world": get_suite("cf-world", limit=3)})
    train_model(make_tiny_llama(tok), tok, data, SFTConfig(steps=2, batch_size=4, save_every=10),
             tmp_path, [tracker])
    df = pd.read_json(tmp_path / "metrics.jsonl", lines=True)
    _no_dicts(df)
    assert list(df["step"]) == [0, 2]
    assert {"cf_acc", "cf-capitals/cf_acc", "cf-world/param_acc", "attn_context",
            "train_loss"} <= set(df.columns)
    mean = (df["cf-capitals/cf_acc"] + df["cf-world/cf_acc"]) / 2
    assert list(mean) == pytest.approx(list(df["cf_acc"]))
