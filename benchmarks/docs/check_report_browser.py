"""Render a knowflow report in headless Chromium, save a screenshot, and check the page.

    python benchmarks/docs/check_report_browser.py                    # fake runs, combined report
    python benchmarks/docs/check_report_browser.py runs/x/report.html --screenshot shot.png

Without arguments it builds two small fake run folders (an inversion-tiny run with 6 arms x 3
seeds of synthetic curves, and a cpi-toy run; no experiment is run), writes their combined
report as `make demo` does, and renders it at 1280 px. Checks: the page is no wider than the
window (no sideways scrolling of the page itself), every verdict sentence is on the page, and
the verdicts (an experiment report's verdict block, an explain report's finding) come before
the first table, no placeholder text ("no verdict recorded") and no raw dict or repr text
(`{'layer': ...}`, `[{...}]`). The measurement runs in an instrumented copy of the page (a
script appended to a temporary file). `html_problems` checks the same structure on the HTML
text alone, for a machine without a browser.
Exit code 0 when the checks pass or Chromium is absent (a message says so), 1 when one fails.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1280, 2000
# where the tests copy their screenshots, to look at them (KNOWFLOW_SHOTS=folder); None: not kept
SHOTS_DIR = Path(os.environ["KNOWFLOW_SHOTS"]) if os.environ.get("KNOWFLOW_SHOTS") else None
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
ARMS = ("mixed", "c_only", "filtered", "augmented", "qk_only", "lora")
VERDICTS = {
    "inversion-tiny": "Inversion shown on the 3-seed mean (fake data): mixed rises 0.680 and "
                      "falls 0.170 while c_only falls 0.000.",
    "cpi-toy": "The theory model inverts (fake data): M_C peaks at step 21 and falls 0.362.",
}
_MEASURE = """<script>
(function(){
  var d=document.documentElement, b=document.body;
  var v=document.querySelector('.verdicts, .finding'), t=document.querySelector('table');
  var wide=[].slice.call(document.querySelectorAll('.scroll'))
    .filter(function(e){return e.scrollWidth>e.clientWidth+1;}).length;
  var m={scrollWidth:Math.max(d.scrollWidth,b.scrollWidth), clientWidth:d.clientWidth,
         verdictTop:v?v.getBoundingClientRect().top:null,
         firstTableTop:t?t.getBoundingClientRect().top:null, scrollingTables:wide,
         text:b.innerText};
  var out=document.createElement('pre'); out.id='kf-measure';
  out.textContent=JSON.stringify(m); b.appendChild(out);
})();
</script>"""


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _chromium(binary: str, args: list[str], timeout: float = 120) -> str:
    with tempfile.TemporaryDirectory(prefix="kf-chromium-") as profile:
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--hide-scrollbars",
               f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def render(page: Path, screenshot: Path, binary: str) -> dict:
    """Screenshot `page` at 1280 px and measure it; returns the measurements."""
    page, screenshot = Path(page).resolve(), Path(screenshot).resolve()
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    _chromium(binary, [f"--screenshot={screenshot}", page.as_uri()])
    with tempfile.TemporaryDirectory(prefix="kf-measure-") as tmp:
        probe = Path(tmp) / "page.html"
        probe.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
        dom = _chromium(binary, ["--dump-dom", probe.as_uri()])
    found = re.search(r'<pre id="kf-measure">(.*?)</pre>', dom, re.S)
    if not found:
        raise RuntimeError("the measuring script did not run (no #kf-measure in the DOM)")
    return json.loads(html.unescape(found.group(1)))


def problems(measure: dict, verdicts: list[str]) -> list[str]:
    """What is wrong with a rendered report (empty when it passes)."""
    out = []
    if measure["scrollWidth"] > WIDTH:
        out.append(f"page is {measure['scrollWidth']} px wide (> {WIDTH})")
    text = " ".join(measure["text"].split())
    out += [f"verdict missing: {v!r}" for v in verdicts if " ".join(v.split()) not in text]
    out += text_problems(text)
    top, table = measure["verdictTop"], measure["firstTableTop"]
    if top is None:
        out.append("no verdict block")
    elif table is not None and table < top:
        out.append("a table comes before the verdicts")
    return out


PLACEHOLDERS = ("no verdict recorded", "None", "nan", "undefined")
_REPR = re.compile(r"\{'|\[\{|\{\"|'\w+': |\[\[")
_RAW_KEY = re.compile(r"\b[a-z]+_[a-z_]+\.(?!png\b|jsonl?\b)[a-z_]+\b|\b\w+_ci\b")


def visible_text(page: str) -> str:
    """The text a reader sees: tags, scripts, styles, folded config and attributes removed."""
    page = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", page, flags=re.S)
    page = re.sub(r"<details><summary>Config</summary>.*?</details>", " ", page, flags=re.S)
    page = re.sub(r"<[^>]+>", " ", page)
    return " ".join(html.unescape(page).split())


def text_problems(text: str) -> list[str]:
    """Placeholders, raw dict/repr strings and raw dotted or `_ci` keys in visible text."""
    out = [f"placeholder {p!r}" for p in PLACEHOLDERS if re.search(rf"\b{p}\b", text)]
    out += [f"repr text near {text[max(0, m.start() - 30):m.end() + 30]!r}"
            for m in _REPR.finditer(text)][:3]
    out += [f"raw key {m.group(0)!r}" for m in _RAW_KEY.finditer(text)][:3]
    return out


def html_problems(page: str) -> list[str]:
    """What is wrong with a report page, from its HTML alone: the finding must come before the
    first figure and table and say something; no placeholder, repr text or raw key."""
    out = []
    body = page[page.find("<body"):]
    box = re.search(r'<div class="(?:verdicts|finding)">(.*?)</div>', body, re.S)
    if box is None:
        out.append("no finding block")
    else:
        first = min([i for i in (body.find("<table"), body.find("<figure")) if i >= 0],
                    default=len(body))
        if box.start() > first:
            out.append("a table or figure comes before the finding")
        if len(visible_text(box.group(1)).split()) < 6:
            out.append("the finding is not a sentence")
    return out + text_problems(visible_text(page))


# --- fake run folders (synthetic numbers, shaped like the real experiments') --------------

def _curve(arm: str, seed: int, steps: list[int]) -> list[float]:
    """Counterfactual accuracy: rise, then (for arms with C+S points) a fall."""
    rng = random.Random(f"{arm}-{seed}")
    fall = {"mixed": 0.25, "qk_only": 0.25, "filtered": 0.15, "lora": 0.02}.get(arm, 0.0)
    top = 0.99 if arm in ("c_only", "augmented") else 0.75 + 0.05 * seed
    t_fall = 150 + 60 * seed
    out = []
    for t in steps:
        up = top * (1 - math.exp(-t / 60))
        down = fall * (1 - math.exp(-max(0, t - t_fall) / 200)) * (1 + 0.4 * (seed - 1))
        out.append(min(1.0, max(0.0, 0.008 + up - down + rng.gauss(0, 0.015))))
    return out


def _records(arm: str, seed: int, steps: list[int], layers: int = 2) -> list[dict]:
    cf = _curve(arm, seed, steps)
    recs = []
    for t, acc in zip(steps, cf, strict=True):
        ctx = [0.3 + 0.3 * acc - 0.05 * layer for layer in range(layers)]
        recs.append({"arm": arm, "seed": seed, "step": t, "cf_acc": acc, "param_acc": 1 - acc,
                     "c_acc": min(1.0, 2 * acc), "cs_acc": 0.99, "recall_acc": 0.98,
                     "attn_context_layers": ctx,
                     "attn_subject_layers": [1 - c - 0.2 for c in ctx],
                     "loss": 1 - acc, "loss_C": 1 - acc, "loss_C+S": 0.1, "loss_S": 0.2})
    return recs


def _arm_summary(per_seed: dict[int, list[dict]]) -> dict:
    def summary(cf: list[float], steps: list[int]) -> dict:
        peak = max(range(len(cf)), key=cf.__getitem__)
        return {"cf_acc_start": cf[0], "cf_acc_peak": cf[peak], "cf_acc_peak_step": steps[peak],
                "cf_acc_final": cf[-1], "cf_acc_rise": cf[peak] - cf[0],
                "cf_acc_fall": cf[peak] - cf[-1]}

    runs = list(per_seed.values())
    steps = [r["step"] for r in runs[0]]
    mean = [sum(run[i]["cf_acc"] for run in runs) / len(runs) for i in range(len(steps))]
    out = summary(mean, steps)
    last = [run[-1] for run in runs]
    for key in ("param_acc", "c_acc", "cs_acc", "recall_acc"):
        out[f"{key}_final"] = sum(r[key] for r in last) / len(last)
    out["attn_context_final"] = sum(sum(r["attn_context_layers"]) / 2 for r in last) / len(last)
    out["seeds"] = list(per_seed)
    own = [summary([r["cf_acc"] for r in run], steps) for run in runs]
    for key in own[0]:
        out[f"{key}_seeds"] = [row[key] for row in own]
    out["pretrain_recall_acc_seeds"] = [0.99, 0.985, 0.992]
    return out


def _run_dir(root: Path, experiment: str) -> Path:
    path = Path(root) / experiment / "20260101-000000"
    (path / "figures").mkdir(parents=True, exist_ok=True)
    return path


def fake_inversion_tiny_run(root: Path, seeds: tuple[int, ...] = (0, 1, 2),
                            verdict: str | None = VERDICTS["inversion-tiny"]) -> Path:
    """An inversion-tiny run folder with synthetic curves, its summary and its real figures."""
    from knowflow.experiments.inversion_tiny.figures import plot_inversion_tiny
    from knowflow.store.files import atomic_write_json, atomic_write_jsonl

    run_dir = _run_dir(root, "inversion-tiny")
    steps = list(range(0, 1001, 20))
    per_arm = {arm: {s: _records(arm if arm != "qk_only" else "mixed", s, steps)
                     for s in seeds} for arm in ARMS}
    records = [{**r, "arm": arm} for arm, runs in per_arm.items() for run in runs.values()
               for r in run]
    summary: dict = {arm: _arm_summary(runs) for arm, runs in per_arm.items()}
    summary["pretrain"] = {str(s): {"steps": 3000, "recall_acc": 0.99, "lookup_acc": 0.96,
                                    "seconds": 120.123456} for s in seeds}
    findings = {"mixed_cf_acc_rise": summary["mixed"]["cf_acc_rise"],
                "mixed_cf_acc_fall": summary["mixed"]["cf_acc_fall"],
                "c_only_cf_acc_fall": summary["c_only"]["cf_acc_fall"], "inversion_shown": True}
    if verdict is not None:
        findings["verdict"] = verdict
    summary["findings"] = findings
    atomic_write_json(run_dir / "config.json", {"seeds": list(seeds), "arms": list(ARMS),
                                                "finetune": {"steps": 1000, "lr": 3e-4}})
    atomic_write_jsonl(run_dir / "metrics.jsonl", records)
    atomic_write_json(run_dir / "summary.json", summary)
    plot_inversion_tiny(run_dir)
    return run_dir


def fake_cpi_toy_run(root: Path, verdict: str | None = VERDICTS["cpi-toy"]) -> Path:
    """A cpi-toy-shaped run folder: five parts' summaries, findings and one figure."""
    from knowflow.report.figures import save, subplots
    from knowflow.store.files import atomic_write_json

    run_dir = _run_dir(root, "cpi-toy")
    keys = ("mc_start", "mc_peak", "mc_peak_step", "mc_final", "cf_acc_final",
            "attn_context_start", "attn_context_at_mc_peak", "attn_context_final",
            "attn_subject_final",
            "proj_theta_C_start", "proj_theta_S_start", "value_conf_C+S_final", "steps")
    rng = random.Random(0)

    def part() -> dict:
        return {k: (1000 if k == "steps" else 21 if k.endswith("step") else rng.random())
                for k in keys}

    summary: dict = {p: part() for p in ("inversion", "c_only", "with_s", "train_v")}
    summary["mitigations"] = {a: part() for a in ("baseline", "all_weights", "augmented",
                                                   "filtered")}
    summary["findings"] = {"inversion_mc_fall": 0.36251234,
                           "inversion_peak_in_first_quarter": True, "c_only_mc_fall": 0.0,
                           "with_s_proj_theta_S_start_ratio": 1.98912345}
    if verdict is not None:
        summary["findings"]["verdict"] = verdict
    atomic_write_json(run_dir / "config.json", {"seed": 0, "parts": "all"})
    atomic_write_json(run_dir / "summary.json", summary)
    fig, ax = subplots(1)
    ax[0, 0].plot([0, 21, 1000], [0.07, 0.47, 0.11])
    save(fig, run_dir / "figures" / "1_inversion.png")
    return run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="report.html files (default: a "
                        "combined report of fake inversion-tiny and cpi-toy runs)")
    parser.add_argument("--screenshot", type=Path, default=Path(tempfile.gettempdir())
                        / "knowflow-report-1280.png", help="where the (first) screenshot goes")
    parser.add_argument("--verdict", action="append", default=[],
                        help="text that must be on the page (repeatable)")
    args = parser.parse_args(argv)
    binary = find_chromium()
    if binary is None:
        print("skipped: no chromium on PATH (Debian: apt-get install -y chromium)")
        return 0
    with tempfile.TemporaryDirectory(prefix="kf-report-") as tmp:
        pages, verdicts = list(args.pages), list(args.verdict)
        if not pages:
            from knowflow.report.html import write_report

            runs = [fake_inversion_tiny_run(Path(tmp)), fake_cpi_toy_run(Path(tmp))]
            pages = [write_report(runs, Path(tmp) / "demo-report.html")]
            verdicts += list(VERDICTS.values())
        failed = False
        for i, page in enumerate(pages):
            shot = args.screenshot if i == 0 else args.screenshot.with_stem(
                f"{args.screenshot.stem}-{i}")
            measure = render(page, shot, binary)
            bad = problems(measure, verdicts)
            failed |= bool(bad)
            print(f"{page}: {measure['scrollWidth']} px wide (window {WIDTH}), verdicts at "
                  f"y={measure['verdictTop']}, first table at y={measure['firstTableTop']}, "
                  f"{measure['scrollingTables']} tables scroll inside their box; "
                  f"screenshot {shot}")
            for line in bad:
                print(f"  FAIL {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
