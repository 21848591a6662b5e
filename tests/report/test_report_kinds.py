"""Every report kind rendered from tiny-model runs (eval with two decoding methods, a heads
probe, explain, sft, a tracker folder (the sft run's records alone, as a RelianceTracker on
another Trainer leaves them), and the combined report over eval + explain + heads) checked as a
reader would meet it: the finding first, no placeholder, no raw dict/repr text or raw keys
(`check_report_browser.html_problems`, on the HTML alone); in headless Chromium at 1280 px
where one is installed (no sideways scroll; the same checks on the rendered text)."""

import shutil

import pytest

import knowflow
from knowflow.report.explain import render_explain
from knowflow.report.html import NO_VERDICT, write_report
from knowflow.store.readers import read_json

pytestmark = pytest.mark.slow  # four tiny-model runs, about a minute on two cores


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("kinds")
    model = str(tiny_model_dir)
    knowflow.evaluate(model, "cf-capitals,cf-world", limit=2, max_new_tokens=4,
                      method="greedy,cad", out=root / "eval", device="cpu")
    knowflow.probe(model, "cf-capitals", kind="heads", limit=3, out=root / "heads",
                   device="cpu")
    knowflow.explain(model, "cf-capitals", limit=1, offset=1, ablations=8, holdout=4,
                     device="cpu").save(root / "explain")
    knowflow.finetune(model, None, runs_dir=root / "sftruns", device="cpu", save_model=False,
                      **{"sft.steps": 2, "sft.batch_size": 4, "track.every": 1,
                         "track.limit": 2, "sft.max_length": 512, "mixture.size": 16})
    (sft,) = (root / "sftruns" / "sft").iterdir()
    tracker = root / "tracker"  # what a RelianceTracker on someone's Trainer leaves: records only
    tracker.mkdir()
    shutil.copy(sft / "metrics.jsonl", tracker / "metrics.jsonl")
    return {"eval": root / "eval", "heads": root / "heads", "explain": root / "explain",
            "sft": sft, "tracker": tracker}


@pytest.fixture(scope="module")
def pages(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("pages")
    pages = {kind: write_report([path], out / f"{kind}.html", title=f"knowflow {kind}")
             for kind, path in runs.items() if kind != "explain"}
    pages["explain"] = out / "explain.html"
    pages["explain"].write_text(render_explain(runs["explain"]))
    pages["combined"] = write_report([runs["eval"], runs["explain"], runs["heads"]],
                                     out / "combined.html")
    return pages


KINDS = ["eval", "heads", "sft", "tracker", "explain", "combined"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_report_opens_with_its_finding_and_shows_no_placeholder(pages, kind,
                                                                     browser_check):
    page = pages[kind].read_text()
    assert browser_check.html_problems(page) == []
    assert NO_VERDICT not in page and "no verdict recorded" not in page
    assert "https://" not in page and "http://" not in page  # self-contained


def test_eval_page_has_the_item_table_and_both_methods(pages, runs):
    page = pages["eval"].read_text()
    n_items = 2 * 2 * 2  # two suites, two items each, two methods
    assert page.count("<tr><td") >= n_items and "<script>" in page
    assert "greedy" in page and "cad(" in page and "Per decoding method" in page
    assert "figures/methods.png" in page and "figures/context_vs_memory.png" in page
    summary = read_json(runs["eval"] / "summary.json")
    shares = summary["cf-capitals"]["loglik"]
    assert f"{shares['cf_acc']:.3f} (" in page  # a value with its interval


def test_heads_page_ranks_the_heads_the_summary_ranks(pages, runs):
    page = pages["heads"].read_text()
    summary = read_json(runs["heads"] / "summary.json")
    for cell in summary["context_heads"] + summary["memory_heads"]:
        assert f"L{cell['layer']}.H{cell['head']}" in page
        assert f"{cell['effect']:+.3f}" in page
    assert "'layer'" not in page and "layer: " not in page
    example = summary["example_attention"]
    assert f"Where the top heads look, on item {example['example']}" in page
    for h in example["heads"]:
        assert f"L{h['layer']}.H{h['head']}</b> {h['side']} head" in page


@pytest.mark.parametrize("kind", ["sft", "tracker"])
def test_sft_and_tracker_pages_show_the_verdict_and_the_loss(pages, kind):
    page = pages[kind].read_text()
    assert "inversion" in page.split("<h2")[0]  # the verdict, in the finding block
    assert "training loss" in page and "Wilson" in page


def test_combined_report_names_each_run_by_its_command_with_its_own_cards(pages, runs):
    page = pages["combined"].read_text()
    top = page[:page.index("<h2")]
    for name in ("eval", "explain", "probe-heads"):
        assert f"<b>{name}</b>" in top
    record = read_json(runs["explain"] / "summary.json")
    assert record["findings"]["verdict"].split(";")[0] in page
    assert 'class="card"' in page and 'class="ctx"' in page  # explain's sentence card


@pytest.fixture
def chromium(browser_check):
    binary = browser_check.find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); the "
                    "HTML checks above still ran")
    return binary


KINDS = ["eval", "heads", "sft", "tracker", "explain", "combined"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_report_in_chromium_at_1280_px(pages, kind, browser_check, chromium, tmp_path):
    shot = tmp_path / f"{kind}.png"
    measure = browser_check.render(pages[kind], shot, chromium)
    assert browser_check.problems(measure, []) == []
    assert measure["scrollWidth"] <= browser_check.WIDTH
    assert measure["scrollingTables"] == 0  # no table needs a sideways scroll either
    assert measure["verdictTop"] < 200
    keep = browser_check.SHOTS_DIR
    if keep:
        shutil.copy(shot, keep / shot.name)
