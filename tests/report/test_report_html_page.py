"""report.html.write_report on a hand-made experiment run folder (runs/<name>/<stamp>): the
verdict line, the findings rows and every figure's exact bytes, with text escaped."""

import base64
import re

from knowflow.report.figures import save, subplots
from knowflow.report.html import write_report
from knowflow.store.files import atomic_write_json


def _run(root):
    run = root / "my-exp" / "20260101-000000"
    atomic_write_json(run / "config.json", {"seed": 3, "note": "<i>"})
    atomic_write_json(run / "summary.json", {
        "arm": {"acc": 0.87654, "n": 12},
        "findings": {"verdict": "Accuracy <falls> & recovers.", "fall": 0.3333333,
                     "shown": True}})
    for name, ys in (("2_b.png", [1, 0]), ("1_a.png", [0, 1]), ("3_c.png", [0.5, 0.5])):
        fig, ax = subplots(1)
        ax[0, 0].plot([0, 1], ys)
        save(fig, run / "figures" / name)
    return run


def test_the_page_has_the_verdict_findings_and_every_figure(tmp_path):
    run = _run(tmp_path)
    out = write_report([run], tmp_path / "report.html", title="T & co")
    page = out.read_text()
    assert "<title>T &amp; co</title>" in page
    top = page[:page.index("<h2")]
    assert "<b>my-exp</b>" in top and "Accuracy &lt;falls&gt; &amp; recovers." in top
    assert "<falls>" not in page
    findings = re.search(r'<table class="kv findings">(.*?)</table>', page).group(1)
    assert re.findall(r"<tr><th>(.*?)</th><td[^>]*>(.*?)</td></tr>", findings) == [
        ("fall", "0.333"), ("shown", "yes")]
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    names = ["1_a.png", "2_b.png", "3_c.png"]
    assert embedded == [base64.b64encode((run / "figures" / n).read_bytes()).decode()
                        for n in names]
    assert re.findall(r"<figcaption>(.*?)</figcaption>", page) == names
    assert ">0.877<" in page and ">12<" in page  # the summary table, rounded
    assert "&quot;note&quot;: &quot;&lt;i&gt;&quot;" in page  # the config, escaped
