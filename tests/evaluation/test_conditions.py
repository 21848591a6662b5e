"""Context conditions: the extra contexts never leak the item's subject or answers, the
per-condition summary, and `knowflow eval --method ... --conditions ...` end to end."""

import json

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.data.conditions import condition_item, names, text_key
from knowflow.data.loaders import load_items
from knowflow.data.suites import get_suite, list_suites
from knowflow.evaluation.conditions import condition_summary, parse_conditions
from knowflow.report.tradeoff import pool_runs


def _check_irrelevant(items, min_share: float):
    by_id = {it.id: it for it in items}
    with_irrelevant = 0
    for it in items:
        shown = condition_item(it, "irrelevant")
        if shown is None:
            continue
        with_irrelevant += 1
        key = text_key(shown.context)
        for forbidden in (it.subject, it.counterfactual_answer, it.parametric_answer,
                          *it.counterfactual_aliases, *it.parametric_aliases):
            assert not (forbidden and names(key, forbidden)), (it.id, forbidden, shown.context)
        donors = [d for d in by_id.values() if d.context == shown.context]
        assert donors and all(d.id != it.id and d.relation == it.relation for d in donors)
        assert shown.parametric_answer == it.parametric_answer
        assert names(key, shown.counterfactual_answer)  # the passage's own answer
    assert with_irrelevant >= min_share * len(items)


@pytest.mark.parametrize("suite", list(list_suites()))
def test_builtin_irrelevant_and_agreeing_contexts(suite):
    items = get_suite(suite)
    _check_irrelevant(items, 0.95)
    for it in items:
        agree = condition_item(it, "agreeing")
        key = text_key(agree.context)
        assert names(key, it.parametric_answer), agree.context
        if text_key(it.counterfactual_answer) != text_key(it.parametric_answer):
            # needle-agree's context already states the true fact: its two answers coincide
            assert not names(key, it.counterfactual_answer), agree.context


def test_loaded_file_contexts(tmp_path):
    rows = [
        {"context": "The Louvre stands in Rome.", "question": "Where is the Louvre?",
         "answer": "Rome", "memory_answer": "Paris"},
        {"context": "The Prado stands in Oslo.", "question": "Where is the Prado?",
         "answer": "Oslo", "memory_answer": "Madrid",
         "agreeing_context": "The Prado is in Madrid, on the Paseo del Prado."},
        {"context": "The Uffizi stands in Paris.", "question": "Where is the Uffizi?",
         "answer": "Paris", "memory_answer": "Florence"},
        {"context": "Big Ben stands in Madrid.", "question": "Where is Big Ben?",
         "answer": "Madrid", "memory_answer": "London"},
    ]
    path = tmp_path / "museums.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_items(path)
    _check_irrelevant(items, 0.75)
    louvre, prado = items[0], items[1]
    # the Louvre's memory answer is Paris: the Uffizi passage (names Paris) is never its donor
    assert "Uffizi" not in condition_item(louvre, "irrelevant").context
    # built by substitution where the file has none; the file's own where it has one
    assert condition_item(louvre, "agreeing").context == "The Louvre stands in Paris."
    assert condition_item(prado, "agreeing").context.startswith("The Prado is in Madrid")


def test_condition_summary_against_hand_counts():
    def rec(cf, par):
        return {"generate": {"counterfactual": cf, "parametric": par}}
    by_cond = {"conflicting": [rec(True, False)] * 3 + [rec(False, True)],
               "agreeing": [rec(False, True)] * 2,
               "irrelevant": [rec(False, True), rec(True, False)]}
    out = condition_summary(by_cond, "generate", n_boot=200)
    assert out["sensitivity"] == 0.75 and out["robustness"] == 0.5
    assert out["agreeing"]["context_share"] == out["agreeing"]["memory_share"] == 1.0
    assert out["conflicting"]["n"] == 4
    lo, hi = out["sensitivity_ci"]
    assert 0.0 <= lo <= 0.75 <= hi <= 1.0
    assert parse_conditions("irrelevant, conflicting") == ("irrelevant", "conflicting")


def test_eval_sweep_writes_tradeoff_figure(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, [
        "eval", "--model", str(tiny_model_dir), "--suite", "cf-capitals", "--limit", "4",
        "--max-new-tokens", "3", "--method", "greedy,cad,adacad,opinion", "--alpha", "0,1",
        "--beta", "0",
        "--conditions", "conflicting,agreeing,irrelevant", "--no-known-filter",
        "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "sensitivity" in res.output and "cad(a=1)" in res.output
    summary = json.loads((out / "conditions.json").read_text())
    assert set(summary) == {"greedy", "cad(a=0)", "cad(a=1)", "adacad", "opinion"}
    # alpha 0 is greedy: the same numbers under every condition
    assert summary["cad(a=0)"]["all"] == summary["greedy"]["all"]
    assert (out / "figures" / "tradeoff.png").stat().st_size > 1000
    assert "tradeoff" in (out / "report.html").read_text()
    lines = (out / "conditions.jsonl").read_text().splitlines()
    assert len(lines) == 5 * 3 * 4
    # pooling runs reads the records back: one run pools to its own summary
    pooled = pool_runs([out], tmp_path / "pooled")
    assert pooled == summary
    assert (tmp_path / "pooled" / "figures" / "tradeoff.png").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--method", "beam"], "unknown method 'beam'"),
    (["--alpha", "x"], "--alpha:"),
    (["--alpha", "-1"], "--alpha:"),
    (["--conditions", "hostile"], "unknown condition 'hostile'"),
    (["--no-context", "--method", "cad"], "no context is shown"),
])
def test_bad_values_one_line_exit_2(args, fragment):
    res = CliRunner().invoke(app, ["eval", *args])
    assert res.exit_code == 2
    assert fragment in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_donors_match_the_pairwise_rule_and_saved_contexts_stay():
    """The donor set is exactly {same relation, other id, names none of the item's subject,
    answers or aliases as whole words} (checked pair by pair with `names`), so the seeded
    draw is the one the module doc promises; an item that already has an irrelevant context
    (a saved file) keeps it."""
    import dataclasses
    import random

    from knowflow.data.conditions import _forbidden, with_condition_contexts

    items = [dataclasses.replace(it, meta={}) for it in get_suite("cf-capitals", seed=0)]
    out = with_condition_contexts(items, seed=5)
    for it, got in zip(items, out, strict=True):
        donors = [d for d in items if d.relation == it.relation and d.context and d.id != it.id
                  and not any(names(text_key(d.context), a) for a in _forbidden(it))]
        if not donors:
            assert "irrelevant_context" not in got.meta
            continue
        want = random.Random(f"5:{it.id}:irrelevant").choice(donors)
        assert got.meta["irrelevant_context"] == want.context
    saved = dataclasses.replace(items[0], meta={"irrelevant_context": "kept", "irrelevant_answer":
                                                "x", "irrelevant_aliases": []})
    again = with_condition_contexts([saved, *items[1:]], seed=5)[0]
    assert again.meta["irrelevant_context"] == "kept"
