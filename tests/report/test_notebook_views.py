"""A Result shows itself in a notebook (`_repr_html_`): an eval its metrics per suite, an
explain run its cards (sentences shaded by attribution), a heads probe its ranked heads, an
experiment its finding and summary tables; `item(i)` one record; no style reaches outside."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import knowflow
from helpers import byte_tokenizer, tiny_llama

OLD = Path(__file__).resolve().parents[1] / "data" / "runs-6e7d8bb"
CONTEXT = "Paris is in France. The sky is blue today. Rome is in Italy."


@pytest.fixture(scope="module")
def lm():
    tok = byte_tokenizer()
    return tiny_llama(tok), tok


def _scoped(html: str) -> None:
    """Every style rule is under `.knowflow`: the notebook's own look is kept."""
    css = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
    selectors = [s.strip() for rule in css.split("}") if "{" in rule
                 for s in rule.split("{")[0].split(",")]
    assert selectors and all(s.startswith(".knowflow ") for s in selectors)


def test_an_eval_shows_its_metrics_per_suite():
    res = knowflow.Result.load(OLD / "eval")
    html = res._repr_html_()
    _scoped(html)
    cf = res.summary["cf-capitals"]["loglik"]["cf_acc"]
    assert "cf-capitals" in html and "context&#x27;s answer" in html and f"{cf:.3f}" in html
    assert "<b>eval</b> · 2 records" in html


def test_an_experiment_shows_its_finding_and_tables():
    res = knowflow.Result.load(OLD / "inversion-tiny")
    html = res._repr_html_()
    _scoped(html)
    assert 'class="finding">No robust inversion' in html
    assert "<table" in html and "cf_acc" in html.replace("cf acc", "cf_acc")


def test_an_explained_answer_shows_its_shaded_context(lm):
    model, tok = lm
    res = knowflow.explain(model, CONTEXT, "Where is Rome?", " Italy", tokenizer=tok,
                           ablations=8, holdout=4, max_new_tokens=3)
    html = res._repr_html_()
    _scoped(html)
    assert html.count('class="card"') == 1 and "Where is Rome?" in html
    assert len(re.findall(r"background:rgba\(", html)) == 3  # one shade per sentence
    assert 'class="top"' in html
    item = res.item(0)
    assert item == res.records[0]  # a record, as a dict
    card = item._repr_html_()
    _scoped(card)
    assert card.count('class="card"') == 1 and "Rome is in Italy." in card


def test_a_heads_probe_shows_its_ranked_heads(lm):
    model, tok = lm
    res = knowflow.probe(model, "cf-capitals", tokenizer=tok, kind="heads", limit=3,
                         prompt_format="plain")
    html = res._repr_html_()
    _scoped(html)
    assert "Context heads" in html and "Memory heads" in html
    ranked = res.summary["context_heads"] + res.summary["memory_heads"]
    assert all(f"L{c['layer']}.H{c['head']}" in html for c in ranked[:3])
