"""The reader's checks on the HTML alone, in the default run (the tiny-model and browser
versions are slow: test_report_kinds.py): run folders shaped as eval, heads and sft write
them (a few records each) give pages that open with a finding, with no placeholder, no
dict/repr text and no raw keys; and the check itself catches each of those faults."""

import json

import pytest

from knowflow.report.html import render_report


def _run(root, command, config, summary, files):
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"command": command}))
    (root / "config.json").write_text(json.dumps(config))
    (root / "summary.json").write_text(json.dumps(summary))
    for name, rows in files.items():
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _item(i, cf, param, choice):
    return {"id": f"cf-capitals-{i}", "suite": "cf-capitals", "question": f"Capital {i}?",
            "context": "A long context. " * 20, "counterfactual_answer": "Moundou",
            "parametric_answer": "N'Djamena", "generate_output": "Moundou\x05",
            "generate_counterfactual": cf, "generate_parametric": param,
            "loglik_choice": choice, "known": i % 2 == 0}


@pytest.fixture
def folders(tmp_path):
    mode = {"n": 2, "cf_acc": 0.5, "cf_acc_ci": [0.0, 1.0],
            "param_acc": 0.5, "param_acc_ci": [0.0, 1.0]}
    ev = _run(tmp_path / "eval", "eval", {"model": "tiny", "suites": ["cf-capitals"],
                                          "scoring": "both"},
              {"cf-capitals": {"generate": mode, "loglik": mode}},
              {"items.jsonl": [_item(0, True, False, "counterfactual"),
                               _item(1, False, True, "parametric")]})
    cell = {"layer": 1, "head": 2, "effect": -0.5, "ci": [-0.9, -0.1]}
    heads = _run(tmp_path / "heads", "probe-heads", {"probe": "heads", "model": "tiny"},
                 {"n_examples": 2, "rank_by": "mean", "mean_log_odds": 0.4,
                  "effects": {"mean": {"mean": [[-0.5, 0.1], [0.2, 0.0]],
                                       "context_heads": [cell], "memory_heads": []}},
                  "context_heads": [cell], "memory_heads": [{**cell, "effect": 0.3}],
                  "half_effect_heads": {"context": 1, "memory": 1},
                  "example_attention": {
                      "example": "cf-capitals-0", "question": "Capital 0?",
                      "tokens": ["<s>", "Context", ":", " Moundou", ".", "\n", "Answer"],
                      "context": [3, 4], "heads": [{**cell, "side": "context",
                                                    "weights": [.1, 0, 0, .6, .2, 0, .1],
                                                    "context_mass": 0.8}]}}, {})
    curve = [{"step": s, "n": 8, "cf_acc": a, "param_acc": 1 - a, "attn_context": 0.5,
              "train_loss": 2.0 - s / 10} for s, a in ((0, 0.2), (4, 0.6), (8, 0.4))]
    sft = _run(tmp_path / "sft", "sft", {"model": "tiny"}, {"steps": 8, "train_loss": 1.7},
               {"metrics.jsonl": curve})
    return {"eval": ev, "heads": heads, "sft": sft}


def test_each_kind_opens_with_its_finding_without_placeholder_or_repr(folders, browser_check):
    for kind, folder in folders.items():
        page = render_report([folder])
        assert browser_check.html_problems(page) == [], kind
    combined = render_report(list(folders.values()))
    assert browser_check.html_problems(combined) == []
    top = combined[:combined.index("<h2")]
    assert "50% (95% CI" in top                          # eval: shares with intervals
    assert "context head L1.H2 (-0.50" in top            # heads: the strongest context head
    assert "rise 0.40" in top and "fall 0.20" in top     # sft: the tracker's verdict
    assert "\x05" not in combined and "Moundou·" in combined  # control bytes made visible


def test_heads_page_shows_where_the_top_heads_look(folders):
    page = render_report([folders["heads"]])
    section = page[page.index("Where the top heads look"):]
    assert "cf-capitals-0" in section and "Capital 0?" in section
    assert "0.80 of its attention on the context" in section
    assert "“Moundou” 0.60, “.” 0.20" in section             # the most-attended tokens
    assert section.count('<span class="c"') == 2             # the context's two tokens
    assert "&lt;s&gt;" in section and "↵" in section         # escaped, newline made visible
    assert 'title="0.600"' in section and "rgba(230,120,0,0.77)" in section  # sqrt(0.6)


@pytest.mark.parametrize(("page", "fault"), [
    ("<body><table></table><div class='finding'>x</div></body>", "no finding block"),
    ('<body><table></table><div class="finding">The model follows its context here.</div>',
     "a table or figure comes before the finding"),
    ('<body><div class="finding">no verdict recorded for this run at all</div></body>',
     "placeholder 'no verdict recorded'"),
    ('<body><div class="finding">The model follows its context here.</div>'
     "<td>{'layer': 29, 'head': 1}</td></body>", "repr text"),
    ('<body><div class="finding">The model follows its context here.</div>'
     "<td>sentences.seconds_per_item.source</td></body>", "raw key"),
])
def test_the_html_check_catches_each_fault(page, fault, browser_check):
    found = browser_check.html_problems(page)
    assert any(p.startswith(fault) for p in found), found
