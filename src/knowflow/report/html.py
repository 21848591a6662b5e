"""A self-contained HTML report of one or more run directories.

The page opens with each run's finding in one sentence, before any figure or table: an
experiment's or an explain run's own `summary["findings"]["verdict"]`; for an eval, a heads
probe or an sft run, the sentence its own page module derives from what it measured
(`report.eval_page`, `report.heads_page`, the tracker verdict of `report.tracker_run`). Each
run is named by the command that wrote it (its `run.json`). Then, per run: its figures
(sorted by filename, so `1_*.png` leads), the tables of its kind (an eval's items, sortable and
filterable; a heads probe's ranked heads; an explain run's cards), its summary tables with the
glossary's names (`report.names`; rounded, transposed or scrolled to fit; see `report.tables`)
and its config, folded. Figures are embedded as base64 PNG, so the page can be mailed or
archived alone; the only script is the item table's sorting and filtering.

A folder a `RelianceTracker` wrote in someone's own Trainer (`metrics.jsonl`, no config.json)
is a run too: its summary and verdict are derived from its records (`report.tracker_run`:
curve, Wilson intervals, the inversion criterion). When two or more of the runs hold one
reliance curve each (tracker folders, `knowflow sft` runs), the page opens with their curves
overlaid in one figure, one colour per run, named by folder.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from knowflow.errors import DataError
from knowflow.report import eval_page, heads_page, sft_page
from knowflow.report.explain import explain_body
from knowflow.report.page import embedded_figure, page, run_figures
from knowflow.report.reliance import reliance_png
from knowflow.report.tables import key_values, summary_tables
from knowflow.report.tracker_run import (
    curve_records,
    is_tracker_folder,
    read_tracker_records,
    tracker_summary,
)
from knowflow.store.files import atomic_write_text
from knowflow.store.identity import CONFIG, METRICS, SUMMARY, TRACKER, run_command
from knowflow.store.readers import read_json
from knowflow.store.run_folder import read_result
from knowflow.store.staging import target_of

NO_VERDICT = "the summary states no finding of its own; its measurements follow"
UNFINISHED = "unfinished run: no summary.json yet"


@dataclass(frozen=True)
class RunView:
    """What the page shows of one run directory; `about`: what it ran on (`run_about`)."""

    run_dir: Path
    experiment: str
    config: dict
    summary: dict | None
    about: str = ""

    @property
    def verdict(self) -> str:
        if self.summary is None:
            return UNFINISHED
        findings = self.summary.get("findings")
        verdict = findings.get("verdict") if isinstance(findings, dict) else None
        if isinstance(verdict, str) and verdict.strip():
            return verdict
        return derived_finding(self) or NO_VERDICT


def derived_finding(run: RunView) -> str | None:
    """The finding of a run kind that writes none of its own: an eval, a heads probe, an sft
    run (its reliance curve judged by the inversion criterion)."""
    if run.experiment == "eval":
        return eval_page.finding(run.run_dir)
    if run.experiment == "probe-heads":
        return heads_page.finding(run.summary or {}, run.config)
    records = curve_records(run.run_dir)
    if records:
        return sft_page.finding(records)
    return None


def load_run(run_dir: str | Path) -> RunView:
    """Read a run directory: an experiment's, an eval's or a probe's (see `run_name`)."""
    run_dir = Path(run_dir)
    if is_tracker_folder(run_dir):
        summary = tracker_summary(read_tracker_records(run_dir))
        return RunView(run_dir, f"tracker {run_dir.resolve().name}", {}, summary,
                       run_about(run_dir, {}))
    if not (run_dir / CONFIG).exists():
        raise DataError(run_dir, f"not a knowflow run directory (no {CONFIG}) nor a "
                        f"RelianceTracker folder (no {METRICS})")
    summary = read_result(run_dir, SUMMARY) if (run_dir / SUMMARY).exists() else None
    config = read_json(run_dir / CONFIG)
    return RunView(run_dir, run_name(run_dir, config), config, summary,
                   run_about(run_dir, config))


def run_about(run_dir: Path, config: dict) -> str:
    """What a finetuning run ran on, in a few words — the model, the data and the arm (`lora
    on SmolLM2-135M-Instruct, train.jsonl`; a tracker folder's from its `tracker.json`) — so
    that overlaid runs can be told apart; "" for a run that names none of them."""
    if not config and (Path(run_dir) / TRACKER).is_file():
        try:
            config = read_json(Path(run_dir) / TRACKER)
        except DataError:
            config = {}
    if not isinstance(config, dict):
        return ""
    model, data = config.get("model"), config.get("data")
    sft = config.get("sft") if isinstance(config.get("sft"), dict) else {}
    curate = config.get("curate") if isinstance(config.get("curate"), dict) else {}
    arm = config.get("label") or config.get("arm") or sft.get("train") or ""
    if curate.get("mode") not in (None, "none"):
        arm = f"{arm}, curated ({curate['mode']})".lstrip(", ")
    names = [Path(str(model)).name if model else "",
             ", ".join(Path(str(d)).name for d in data) if isinstance(data, list) else
             Path(str(data)).name if data else ""]
    said = " on ".join(x for x in (arm, ", ".join(n for n in names if n)) if x)
    return said


def run_name(run_dir: Path, config: dict) -> str:
    """What ran: the command its `run.json` names (`eval`, `explain`, `probe-<kind>`, `sft`,
    an experiment's name); for an older folder without one, `probe-<kind>` and `eval` from
    the config, else the parent folder's name (runs/<name>/<time>)."""
    command = run_command(Path(run_dir))
    if command:
        return command
    if isinstance(config, dict) and isinstance(config.get("probe"), str):
        return f"probe-{config['probe']}"
    if isinstance(config, dict) and {"suites", "scoring"} <= set(config):
        return "eval"
    return Path(run_dir).resolve().parent.name or Path(run_dir).name


def _verdicts(runs: list[RunView]) -> str:
    lines = [f'<p><a href="#run-{i}"><b>{html.escape(run.experiment)}</b></a>'
             + (f" ({html.escape(run.about)})" if run.about else "")
             + f": {html.escape(run.verdict)}</p>" for i, run in enumerate(runs)]
    return '<div class="verdicts">' + "".join(lines) + "</div>"


def _generic_body(run: RunView) -> str:
    parts = []
    findings = (run.summary or {}).get("findings")
    if isinstance(findings, dict):
        rest = {k: v for k, v in findings.items() if k != "verdict"}
        if rest:
            parts.append("<h3>Findings</h3>" + key_values(rest, "kv findings"))
    figures = run_figures(run.run_dir)
    if figures:
        parts.append("<h3>Figures</h3>" + "\n".join(figures))
    return "\n".join(parts)


def _kind_body(run: RunView) -> tuple[str, str, set[str]]:
    """(body, inline script, summary keys the body already shows) of a run's kind."""
    if run.summary is None:
        return _generic_body(run), "", set()
    if run.experiment == "eval":
        body, script = eval_page.eval_body(run.run_dir)
        return body, script, set(run.summary)
    if run.experiment == "probe-heads":
        return heads_page.heads_body(run.run_dir), "", set(run.summary)
    if run.experiment == "explain":
        return explain_body(run.run_dir), "", set(run.summary)
    records = curve_records(run.run_dir)
    if records:
        return sft_page.sft_body(run.run_dir, records, run.summary, run.about), "", \
            sft_page.SHOWN
    return _generic_body(run), "", {"findings"}


def _run_section(run: RunView, index: int) -> tuple[str, str]:
    about = f" ({html.escape(run.about)})" if run.about else ""
    parts = [f'<section id="run-{index}"><h2>{html.escape(run.experiment)}{about} '
             f"<small>{html.escape(str(target_of(run.run_dir)))}</small></h2>"]
    if run.summary is None:
        parts.append(f"<p><b>{html.escape(UNFINISHED.capitalize())}</b>.</p>")
    body, script, shown = _kind_body(run)
    parts.append(body)
    if run.summary is not None:
        rest = {k: v for k, v in run.summary.items() if k not in shown and k != "findings"}
        if rest:
            parts.append("<h3>Summary</h3>" + summary_tables(rest))
    parts.append("<details><summary>Config</summary><pre>"
                 + html.escape(json.dumps(run.config, indent=2)) + "</pre></details></section>")
    return "\n".join(parts), script


def run_labels(run_dirs: list[Path]) -> list[str]:
    """A short, distinct name per run folder: what it ran on (`run_about`: the arm, model and
    data) where every run says, else its folder name, with its parent's where two share one
    (runs/sft/<time> and runs/other/<time>); the folder name is added where two still share
    one, else the index."""
    abouts = [load_run(d).about for d in run_dirs]
    folders = [d.resolve().name or str(d) for d in run_dirs]
    if all(abouts):
        names = abouts if len(set(abouts)) == len(abouts) else \
            [f"{a} ({f})" for a, f in zip(abouts, folders, strict=True)]
        if len(set(names)) == len(names):
            return names
    names = folders
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
    caption = ("one colour per run (legend: what each ran on, or its folder); star: each "
               "run's peak "
               "counterfactual accuracy; shaded: 95% Wilson score intervals over the items "
               "scored at each step")
    return ('<section id="overlay"><h2>Reliance curves, overlaid</h2>'
            + embedded_figure(reliance_png(curves), f"reliance curves of {len(curves)} runs",
                              caption) + "</section>")


def render_report(run_dirs: list[str | Path], title: str = "knowflow report") -> str:
    """The report page for `run_dirs` as an HTML string."""
    runs = [load_run(d) for d in run_dirs]
    sections = [_run_section(run, i) for i, run in enumerate(runs)]
    overlay = overlay_section([Path(d) for d in run_dirs])
    scripts = list(dict.fromkeys(script for _, script in sections if script))
    return page(title, _verdicts(runs) + overlay + "\n".join(s for s, _ in sections),
                "".join(scripts))


def write_report(run_dirs: list[str | Path], out: str | Path, title: str = "knowflow report"
                 ) -> Path:
    """Write one self-contained HTML page covering `run_dirs`; returns its path."""
    return atomic_write_text(out, render_report(run_dirs, title))
