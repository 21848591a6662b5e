"""Finishing a run folder, the same way for every command and API call (experiment, eval,
probe, explain): its figures, then `summary.json` (which marks the run finished), then the
self-contained `report.html`; then the folder is let go (`runs.RunFolder.close`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from knowflow.report.html import write_report
from knowflow.runs import REPORT, RunFolder


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
