"""Finishing a run folder, the same way for every command and API call (experiment, eval,
probe, explain): its figures, then `summary.json` (which marks the run finished), then the
self-contained `report.html`; then the folder is let go (`RunFolder.close`).

`finish_eval`, `finish_probe` and `finish_explain` are the *finishers* `Result.save` looks up
by command (`store.result.FINISHERS`): `fn(result, run)` after the records are written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from knowflow.report.eval_run import eval_figures
from knowflow.report.explain import write_explain_report
from knowflow.report.html import write_report
from knowflow.report.probe_run import probe_figures
from knowflow.store.identity import REPORT
from knowflow.store.result import Result
from knowflow.store.run_folder import RunFolder


def finish_run(run: RunFolder | Path, summary: dict | None,
               figures: Callable[[Path], list[Path | None] | None] | None = None,
               title: str = "knowflow report") -> tuple[list[Path], Path]:
    """Finish a run folder the same way for every command (experiment, eval, probe): its
    figures (`figures(run_dir)` draws them under `run_dir/figures/`), then `summary.json`
    (None: already written), then `report.html`, and lets go of the folder (a staged run is
    published by the caller's `with run:` block). Returns (figure paths, report path)."""
    run = run if isinstance(run, RunFolder) else RunFolder(Path(run))
    try:
        drawn = [Path(p) for p in (figures(run.path) or []) if p is not None] if figures \
            else []
        if summary is not None:
            run.write_summary(summary)
        report = write_report([run.path], run.path / REPORT, title=title)
    finally:
        run.close()  # the run is complete: another process may write the folder now
    return drawn, report


def finish_eval(result: Result, run: RunFolder) -> None:
    """An eval run folder's figures and report.html, before it is published."""
    finish_run(run, None, eval_figures, title="knowflow eval")


def finish_probe(result: Result, run: RunFolder) -> None:
    """A probe run folder's figure, summary.json and report.html."""
    kind, summary = result.config["probe"], result.summary
    finish_run(run, summary, lambda out: probe_figures(kind, summary, out, result.config["model"]),
               title=f"knowflow probe {kind}")


def finish_explain(result: Result, run: RunFolder) -> None:
    """An explain run folder's summary.json, figures/layers.png and report.html."""
    run.write_summary(result.summary)
    run.close()
    write_explain_report(run.path)
