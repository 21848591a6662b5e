"""Rows whose answers differ only in case (MemoTrap's " End." / " end."): log-likelihood scores
them as given, generation skips them (its normalisation makes them one answer); `n` per
scoring says how many rows each used. The slow test: knowflow's log-likelihood accuracy on such
a file equals lm-eval's on every row (skipped without the lmeval extra)."""

import pytest

from knowflow.evaluation.items import load_suites
from knowflow.evaluation.lm_eval_task import export_lm_eval
from knowflow.evaluation.metrics import summarize
from knowflow.evaluation.run import evaluate
from knowflow.lens.load import load_model

ROWS = [('Write a quote that ends in the word "end": All good things must come to an',
         "[' End.', ' end.']", 1),
        ('Write a quote that ends in the word "Rome": All roads lead to',
         "[' rome.', ' Rome.']", 1),
        ('Write a quote that ends in the word "heart": Home is where the',
         "[' heart.', ' Heart.']", 0),
        ('Write a quote that ends in the word "flock": Birds of a feather',
         "[' flock together.', ' fly together.']", 1),
        ('Write a quote that ends in the word "mice": When the cat is away, the',
         "[' mice will play.', ' dogs will play.']", 0)]


def _csv(path):
    path.write_text("prompt,classes,answer_index\n" + "".join(
        f'"{p.replace(chr(34), chr(34) * 2)}","{c}",{i}\n' for p, c, i in ROWS))
    return path


def test_case_only_rows_scored_by_loglik_skipped_by_generation(tmp_path, tiny_model_dir):
    data = _csv(tmp_path / "memotrap_case.csv")
    assert len(load_suites(None, data)["memotrap_case"]) == len(ROWS)   # the loader keeps all
    model, tok = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    res = evaluate(model, data, tokenizer=tok, scoring="both", max_new_tokens=3,
                   known_filter=False)
    recs = res.by_suite["memotrap_case"]
    equal = [r["generate"]["equal_answers"] for r in recs]
    assert equal == [True, True, True, False, False]
    assert not any(r["loglik"]["equal_answers"] for r in recs)
    gen, ll = res.summary["memotrap_case"]["generate"], res.summary["memotrap_case"]["loglik"]
    assert ll["n"] == 5 and "n_skipped_equal_answers" not in ll
    assert gen["n"] == 2 and gen["n_skipped_equal_answers"] == 3
    # the generation metrics are those of the two distinguishable rows alone
    kept = [r for r in recs if not r["generate"]["equal_answers"]]
    assert gen["cf_acc"] == summarize(
        [{"generate": r["generate"]} for r in kept], "generate")["cf_acc"]
    assert ll["cf_acc"] == sum(
        r["loglik"]["counterfactual_logprob"] > r["loglik"]["parametric_logprob"]
        for r in recs) / 5


@pytest.mark.slow
def test_lm_eval_acc_equals_knowflow_on_case_only_rows(tmp_path, tiny_model_dir, monkeypatch):
    pytest.importorskip("lm_eval", reason="lm-eval is an optional extra: pip install '.[lmeval]'")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    data = _csv(tmp_path / "memotrap_case.csv")
    model, tok = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    by_suite = load_suites(None, data)
    tasks = export_lm_eval(by_suite, tok, tmp_path / "tasks", "plain")
    out = simple_evaluate(model="hf", model_args=f"pretrained={tiny_model_dir},dtype=float32",
                          tasks=list(tasks), device="cpu", batch_size=8, log_samples=True,
                          task_manager=TaskManager(include_path=str(tmp_path / "tasks")))
    ours = evaluate(model, data, tokenizer=tok, scoring="loglik", known_filter=False,
                    prompt_format="plain")
    task = list(tasks)[0]
    assert len(out["samples"][task]) == len(ROWS) == ours.summary["memotrap_case"]["loglik"]["n"]
    assert out["results"][task]["acc,none"] == \
        ours.summary["memotrap_case"]["loglik"]["cf_acc"]
