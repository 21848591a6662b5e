"""The report in a real headless browser (Debian's chromium) at 1280 px: no wider than the
window, every verdict on the page and above the first table; a screenshot is written."""

import struct

import pytest

from knowflow.report.html import write_report
from knowflow.store.files import atomic_write_json
from knowflow.store.readers import read_json

pytestmark = pytest.mark.slow


@pytest.fixture
def chromium(browser_check):
    binary = browser_check.find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    return binary


def _png_size(path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_demo_like_report_fits_1280_px_with_the_verdicts_on_top(
        tmp_path, inversion_run, cpi_run, browser_check, chromium):
    page = write_report([inversion_run, cpi_run], tmp_path / "demo-report.html")
    shot = tmp_path / "shot.png"
    measure = browser_check.render(page, shot, chromium)
    assert browser_check.problems(measure, list(browser_check.VERDICTS.values())) == []
    assert measure["verdictTop"] < 300  # in the first screenful, under the title
    assert _png_size(shot) == (browser_check.WIDTH, browser_check.HEIGHT)


def test_hostile_summary_still_fits(tmp_path, inversion_run, browser_check, chromium):
    """40 x 40 metrics, an unbroken 300-character value and a deep run folder stay inside."""
    summary = read_json(inversion_run / "summary.json")
    summary["grid"] = {f"row_{i}": {f"metric_number_{j}": i * j / 7 for j in range(40)}
                       for i in range(40)}
    summary["model"] = "x" * 300
    atomic_write_json(inversion_run / "summary.json", summary)
    page = write_report([inversion_run], tmp_path / "r.html")
    measure = browser_check.render(page, tmp_path / "shot.png", chromium)
    assert browser_check.problems(measure, [browser_check.VERDICTS["inversion-tiny"]]) == []
    assert measure["scrollingTables"] == 1  # the 40-column grid scrolls inside its own box


def test_the_check_catches_a_page_that_overflows(tmp_path, browser_check, chromium):
    page = tmp_path / "wide.html"
    page.write_text("<html><body><div style='width:3000px'>wide</div>"
                    "<table><tr><td>x</td></tr></table></body></html>")
    measure = browser_check.render(page, tmp_path / "shot.png", chromium)
    found = browser_check.problems(measure, ["a verdict"])
    assert any("px wide" in p for p in found)
    assert any("verdict missing" in p for p in found) and "no verdict block" in found
