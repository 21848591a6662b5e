"""A self-contained HTML report of one or more run directories.

The page opens with each run's verdict, one sentence taken from `summary["findings"]["verdict"]`
(the experiment's own claim, never derived here), before any table. Then, per run: its findings
as a key/value list, its figures (sorted by filename, so `1_*.png` leads), its summary tables
(rounded, transposed or scrolled to fit the page; see `report.tables`) and its config, folded.
Figures are embedded as base64 PNG, so the page can be mailed or archived alone.

A folder a `RelianceTracker` wrote in someone's own Trainer (`metrics.jsonl`, no config.json)
is a run too: its summary and verdict are derived from its records (`report.tracker_run`:
curve, Wilson intervals, the inversion criterion). When two or more of the runs hold one
reliance curve each (tracker folders, `knowflow sft` runs), the page opens with their curves
overlaid in one figure, one colour per run, named by folder.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from pathlib import Path

from knowflow.errors import DataError
from knowflow.io import atomic_write_text, read_json
from knowflow.report.reliance import reliance_png
from knowflow.report.tables import key_values, summary_tables
from knowflow.report.tracker_run import (
    curve_records,
    is_tracker_folder,
    read_tracker_records,
    tracker_summary,
)
from knowflow.runs import CONFIG, METRICS, SUMMARY

NO_VERDICT = "no verdict recorded"
UNFINISHED = "unfinished run: no summary.json yet"

_STYLE = """
body{font-family:system-ui,-apple-system,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
h1,h2,h3,h4,p,li,td{overflow-wrap:anywhere}
.verdicts{background:#f3f7fb;border-left:4px solid #3a7bd5;padding:.6em 1em;margin:1em 0}
.verdicts p{margin:.35em 0}.verdict-none{color:#777;font-style:italic}
.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}
td,th{border:1px solid #ddd;padding:.2em .55em;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}td.num,th{white-space:nowrap}
tr:first-child th{background:#f4f4f4}th{font-weight:600}
table.kv th{background:#fafafa;font-weight:normal;color:#444}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}
details{margin:1em 0}pre{background:#f7f7f7;padding:.8em;overflow:auto;font-size:.8em}
"""


@dataclass(frozen=True)
class RunView:
    """What the page shows of one run directory."""

    run_dir: Path
    experiment: str
    config: dict
    summary: dict | None

    @property
    def verdict(self) -> str:
        if self.summary is None:
            return UNFINISHED
        findings = self.summary.get("findings")
        verdict = findings.get("verdict") if isinstance(findings, dict) else None
        return verdict if isinstance(verdict, str) and verdict.strip() else NO_VERDICT


def load_run(run_dir: str | Path) -> RunView:
    """Read a run directory: an experiment's, an eval's or a probe's (see `run_name`)."""
    run_dir = Path(run_dir)
    if is_tracker_folder(run_dir):
        summary = tracker_summary(read_tracker_records(run_dir))
        return RunView(run_dir, f"tracker {run_dir.resolve().name}", {}, summary)
    if not (run_dir / CONFIG).exists():
        raise DataError(run_dir, f"not a knowflow run directory (no {CONFIG}) nor a "
                        f"RelianceTracker folder (no {METRICS})")
    summary = read_json(run_dir / SUMMARY) if (run_dir / SUMMARY).exists() else None
    config = read_json(run_dir / CONFIG)
    return RunView(run_dir, run_name(run_dir, config), config, summary)


def run_name(run_dir: Path, config: dict) -> str:
    """What ran: `probe-<kind>` and `eval` runs say so in their config (they may sit in any
    `--out` folder); an experiment's name is its parent folder (runs/<name>/<time>)."""
    if isinstance(config, dict) and isinstance(config.get("probe"), str):
        return f"probe-{config['probe']}"
    if isinstance(config, dict) and {"suites", "scoring"} <= set(config):
        return "eval"
    return Path(run_dir).resolve().parent.name or Path(run_dir).name


def _verdicts(runs: list[RunView]) -> str:
    lines = []
    for i, run in enumerate(runs):
        cls = ' class="verdict-none"' if run.verdict in (NO_VERDICT, UNFINISHED) else ""
        lines.append(f'<p><a href="#run-{i}"><b>{html.escape(run.experiment)}</b></a>: '
                     f"<span{cls}>{html.escape(run.verdict)}</span></p>")
    return '<div class="verdicts">' + "".join(lines) + "</div>"


def _figures(run_dir: Path) -> list[str]:
    out = []
    for png in sorted((run_dir / "figures").glob("*.png")):
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        out.append(f'<figure><img alt="{html.escape(png.stem)}" '
                   f'src="data:image/png;base64,{data}"><figcaption>{html.escape(png.name)}'
                   "</figcaption></figure>")
    return out


def _run_section(run: RunView, index: int) -> str:
    parts = [f'<section id="run-{index}"><h2>{html.escape(run.experiment)} '
             f"<small>{html.escape(str(run.run_dir))}</small></h2>"]
    if run.summary is None:
        parts.append(f"<p><b>{html.escape(UNFINISHED.capitalize())}</b>.</p>")
    findings = (run.summary or {}).get("findings")
    if isinstance(findings, dict):
        rest = {k: v for k, v in findings.items() if k != "verdict"}
        if rest:
            parts.append("<h3>Findings</h3>" + key_values(rest, "kv findings"))
    figures = _figures(run.run_dir)
    if figures:
        parts.append("<h3>Figures</h3>" + "\n".join(figures))
    if run.summary is not None:
        rest = {k: v for k, v in run.summary.items() if k != "findings"}
        parts.append("<h3>Summary</h3>" + summary_tables(rest))
    parts.append("<details><summary>Config</summary><pre>"
                 + html.escape(json.dumps(run.config, indent=2)) + "</pre></details></section>")
    return "\n".join(parts)


def run_labels(run_dirs: list[Path]) -> list[str]:
    """A short, distinct name per run folder: its name, with its parent's where two share
    one (runs/sft/<time> and runs/other/<time>), else its index."""
    names = [d.resolve().name or str(d) for d in run_dirs]
    if len(set(names)) < len(names):
        names = [f"{d.resolve().parent.name}/{d.resolve().name}" for d in run_dirs]
    if len(set(names)) < len(names):
        names = [f"{i + 1}: {n}" for i, n in enumerate(names)]
    return names


def overlay_section(run_dirs: list[Path]) -> str:
    """The runs' reliance curves in one figure (one colour per run), or "" for fewer than
    two runs with a curve."""
    curves = {name: recs for name, d in zip(run_labels(run_dirs), run_dirs, strict=True)
              if (recs := curve_records(d)) is not None}
    if len(curves) < 2:
        return ""
    data = base64.b64encode(reliance_png(curves)).decode("ascii")
    return ('<section id="overlay"><h2>Reliance curves, overlaid</h2>'
            f'<figure><img alt="reliance curves of {len(curves)} runs" '
            f'src="data:image/png;base64,{data}"><figcaption>one colour per run (legend: '
            "folder names); star: each run's peak counterfactual accuracy; shaded: 95% Wilson "
            "score intervals over the items scored at each step</figcaption></figure>"
            "</section>")


def render_report(run_dirs: list[str | Path], title: str = "knowflow report") -> str:
    """The report page for `run_dirs` as an HTML string."""
    runs = [load_run(d) for d in run_dirs]
    sections = [_run_section(run, i) for i, run in enumerate(runs)]
    overlay = overlay_section([Path(d) for d in run_dirs])
    return (f"<!doctype html><html><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>{_verdicts(runs)}{overlay}" + "\n".join(sections)
            + "</body></html>\n")


def write_report(run_dirs: list[str | Path], out: str | Path, title: str = "knowflow report"
                 ) -> Path:
    """Write one self-contained HTML page covering `run_dirs`; returns its path."""
    return atomic_write_text(out, render_report(run_dirs, title))
