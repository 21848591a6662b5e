"""The HTML report: verdicts first, findings readable, numbers rounded, tables narrow, figures
embedded in filename order, unfinished runs said so."""

import json
import re

import pytest

from knowflow.errors import DataError
from knowflow.report.html import NO_VERDICT, render_report, write_report
from knowflow.report.tables import fmt, summary_tables
from knowflow.store.files import atomic_write_json
from knowflow.store.readers import read_json


def _body(page: str) -> str:
    """The page without the config block and embedded images (raw JSON / base64 there)."""
    page = re.sub(r"<details>.*?</details>", "", page, flags=re.S)
    return re.sub(r'src="data:image/png;base64,[^"]*"', 'src=""', page)


def test_each_verdict_opens_the_page_before_any_table(inversion_run, cpi_run, browser_check):
    page = render_report([inversion_run, cpi_run])
    first_table = page.index("<table")
    first_figure = page.index("<figure")
    spots = [page.index(browser_check.VERDICTS[name]) for name in ("inversion-tiny", "cpi-toy")]
    assert spots == sorted(spots)  # in the order the runs were given
    assert max(spots) < min(first_table, first_figure, page.index("<h2"))
    assert page.count("<h2>") == 2  # one section per run, the verdict block has none


def test_a_run_without_a_verdict_says_so_and_invents_none(tmp_path, browser_check):
    run = browser_check.fake_cpi_toy_run(tmp_path, verdict=None)
    page = render_report([run])
    top = page[:page.index("<h2")]
    assert NO_VERDICT in top
    assert "inverts" not in page
    summary = read_json(run / "summary.json")
    del summary["findings"]
    atomic_write_json(run / "summary.json", summary)
    page = render_report([run])
    assert NO_VERDICT in page[:page.index("<h2")]


def test_a_missing_summary_says_unfinished_and_still_shows_figures(inversion_run):
    (inversion_run / "summary.json").unlink()
    page = render_report([inversion_run])
    top = page[:page.index("<h2")]
    assert "unfinished" in top.lower()
    n_figures = len(list((inversion_run / "figures").glob("*.png")))
    assert n_figures >= 3 and page.count("data:image/png;base64,") == n_figures
    assert "Summary" not in page


def test_numbers_are_rounded_to_three_decimals_and_ints_stay_ints(inversion_run):
    summary = read_json(inversion_run / "summary.json")
    summary["mixed"]["cf_acc_peak"] = 0.123456789
    summary["mixed"]["n_examples"] = 3000
    summary["findings"]["mixed_cf_acc_fall"] = 0.98765432
    atomic_write_json(inversion_run / "summary.json", summary)
    body = _body(render_report([inversion_run]))
    assert ">0.123<" in body and ">0.988<" in body and ">3000<" in body
    assert "0.1234" not in body and "3000.0" not in body
    assert not re.findall(r"\d\.\d{4,}", body), re.findall(r".{40}\d\.\d{4,}.{10}", body)


def test_long_lists_are_summarized_not_dumped(inversion_run):
    summary = read_json(inversion_run / "summary.json")
    summary["mixed"]["loss_curve"] = [i / 7 for i in range(50)]
    atomic_write_json(inversion_run / "summary.json", summary)
    body = _body(render_report([inversion_run]))
    assert "50 values: min 0.000 · mean 3.500 · max 7.000" in body
    assert "0.143" not in body  # 1/7, the second value, is not listed


def test_findings_are_a_key_value_list_without_the_verdict(inversion_run, browser_check):
    page = render_report([inversion_run])
    found = re.search(r'<table class="kv findings">(.*?)</table>', page, re.S)
    assert found, "no findings list"
    rows = re.findall(r"<tr><th>(.*?)</th><td[^>]*>(.*?)</td></tr>", found.group(1))
    keys = dict(rows)
    assert keys["inversion shown"] == "yes"  # the glossary's words, not the raw key
    assert re.fullmatch(r"0\.\d{3}", keys["mixed cf acc fall"])
    assert "verdict" not in keys
    assert page.count(browser_check.VERDICTS["inversion-tiny"]) == 1


def test_wide_arm_tables_are_transposed_and_per_seed_lists_get_their_own_table(inversion_run):
    page = render_report([inversion_run])
    summary_part = page[page.index("<h3>Summary"):]
    header = re.search(r"<table><tr>(.*?)</tr>", summary_part).group(1)
    assert all(f"<th>{arm}</th>" in header
               for arm in ("mixed", "c_only", "lora"))
    assert "mixed · seed 2" in summary_part and "lora · seed 0" in summary_part
    assert "_seeds" not in summary_part
    assert '<div class="scroll"><table' in summary_part


def test_figures_are_embedded_in_filename_order_inversion_first(inversion_run):
    page = render_report([inversion_run])
    assert page.count("data:image/png;base64,") == 4
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert captions == ["1_counterfactual_accuracy.png", "2_attention.png", "3_accuracies.png",
                        "4_mechanism.png"]


def test_write_report_writes_the_page_and_rejects_a_non_run(tmp_path, inversion_run):
    out = write_report([inversion_run], tmp_path / "r.html")
    assert out.read_text() == render_report([inversion_run])
    with pytest.raises(DataError, match="not a knowflow run directory"):
        render_report([tmp_path / "nothing"])


def test_config_is_shown_whole(inversion_run):
    page = render_report([inversion_run])
    config = read_json(inversion_run / "config.json")
    assert json.dumps(config, indent=2).replace('"', "&quot;") in page


@pytest.mark.parametrize(("value", "text"), [
    (1, "1"), (3000, "3000"), (0.5, "0.500"), (2 / 3, "0.667"), (1e-5, "1.0e-05"),
    (0.0, "0.000"), (float("nan"), "nan"), (True, "yes"), (False, "no"), (None, "–"),
    ([0, 1, 2], "0 · 1 · 2"), ({"C": 3, "C+S": 0.25}, "C: 3, C+S: 0.250"), ("x_y", "x_y"),
])
def test_fmt(value, text):
    assert fmt(value) == text


def test_models_with_nested_parts_still_stand_side_by_side():
    def model(loss: float) -> dict:
        return {"loss": loss, "acc": 1.0, "margin": 2.0,
                "per_seed": {f"m{i}": [loss, 0.5] for i in range(10)}}

    page = summary_tables({"study": "main", "factorized": model(0.1), "merged": model(0.9)})
    tables = re.findall(r"<table.*?</table>", page, re.S)
    assert "<td>main</td>" in tables[0]  # the top-level scalars, as a key/value list
    shared = re.search(r"<tr>(.*?)</tr>", tables[1]).group(1)
    assert "<th>factorized</th>" in shared and "<th>merged</th>" in shared
    assert re.search(r"<th>loss</th><td class=\"num\">0.100</td><td class=\"num\">0.900</td>",
                     tables[1])
    assert page.count("<h4>") == 2 and "0.100 · 0.500" in page  # each model's per-seed part
