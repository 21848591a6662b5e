"""The Python API checks its arguments before any work: a wrong type or an unloaded
model is one `ConfigError` naming the argument, as the CLI names its option, never a TypeError
or a torch error from deep inside."""

from __future__ import annotations

import pytest
import torch

import knowflow
from helpers import tiny_llama

SUITE = "cf-capitals"


@pytest.fixture(scope="module")
def meta_model(tok):
    with torch.device("meta"):
        return tiny_llama(tok)


@pytest.mark.parametrize(("call", "field", "fragment"), [
    (lambda m, t: knowflow.evaluate(m, 5, tokenizer=t), "data", "got int 5"),
    (lambda m, t: knowflow.probe(m, 5, tokenizer=t), "data", "a suite name, a file path"),
    (lambda m, t: knowflow.curate(m, 5, tokenizer=t), "data", "got int 5"),
    (lambda m, t: knowflow.augment(5), "data", "got int 5"),
    (lambda m, t: knowflow.explain(m, 5, tokenizer=t), "data", "got int 5"),
    (lambda m, t: knowflow.explain(m, "ctx", question=5, tokenizer=t), "question",
     "expected text"),
    (lambda m, t: knowflow.finetune("m", 5), "data", "an instruction file"),
    (lambda m, t: knowflow.evaluate(3, SUITE), "model", "expected a hub id, a local folder"),
    (lambda m, t: knowflow.evaluate(m, SUITE), "tokenizer", "needs its tokenizer"),
    (lambda m, t: knowflow.evaluate(m, SUITE, tokenizer=5), "tokenizer", "got int"),
    (lambda m, t: knowflow.evaluate(m, SUITE, tokenizer=t, fields=5), "fields", "got int"),
    (lambda m, t: knowflow.evaluate(m, "x.jsonl", tokenizer=t, fields="context"), "fields",
     "is not FIELD=COLUMN"),
    (lambda m, t: knowflow.probe(m, tokenizer=t, limit=0), "limit", "must be at least 1"),
    (lambda m, t: knowflow.load_model(5), "model", "got int 5"),
    (lambda m, t: knowflow.load_items(5), "path", "expected a file path"),
    # keywords of earlier versions: one line naming the new one
    (lambda m, t: knowflow.evaluate(m, SUITE, tokenizer=t, out_dir="x"), None,
     "out_dir= is renamed to out="),
    (lambda m, t: knowflow.probe(m, tokenizer=t, out_dir="x"), None, "renamed to out="),
    (lambda m, t: knowflow.run_experiment("cpi-toy", runs_root="x"), None,
     "runs_root= is renamed to runs_dir="),
    (lambda m, t: knowflow.explain(m, "c", "q?", tokenizer=t, n_ablations=8), "n_ablations",
     "renamed to ablations"),
    (lambda m, t: knowflow.explain(m, "c", "q?", tokenizer=t, n_holdout=4), "n_holdout",
     "renamed to holdout"),
    (lambda m, t: knowflow.probe(m, tokenizer=t, sources=("last",)), "sources",
     "renamed to source"),
], ids=["evaluate-data", "probe-data", "curate-data", "augment-data", "explain-data",
        "explain-question", "finetune-data", "evaluate-model", "no-tokenizer", "bad-tokenizer",
        "fields-type", "fields-text", "probe-limit", "load_model", "load_items",
        "out_dir", "probe-out_dir", "runs_root", "n_ablations", "n_holdout", "sources"])
def test_wrong_arguments_are_one_config_error(call, field, fragment, tiny_lm, tok):
    with pytest.raises(knowflow.ConfigError) as err:
        call(tiny_lm, tok)
    assert err.value.field == field and fragment in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_a_model_never_loaded_is_refused(meta_model, tok):
    """A meta-device skeleton (from_config under torch.device('meta')) was an internal
    'Tensor.item() cannot be called on meta tensors'."""
    for call in (lambda: knowflow.evaluate(meta_model, SUITE, tokenizer=tok, limit=1),
                 lambda: knowflow.probe(meta_model, SUITE, tokenizer=tok, limit=1)):
        with pytest.raises(knowflow.ConfigError, match="weights are on the meta device"):
            call()


def test_result_load_and_run_experiment_refuse_arguments_of_the_wrong_type():
    from knowflow.errors import ConfigError

    with pytest.raises(ConfigError, match="run_dir"):
        knowflow.Result.load(5)
    with pytest.raises(ConfigError, match="overrides"):
        knowflow.run_experiment("cpi-toy", overrides=5)
    with pytest.raises(ConfigError, match="key=value"):
        knowflow.run_experiment("cpi-toy", overrides=[5])
