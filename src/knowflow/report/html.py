"""A self-contained HTML report of one or more run directories.

Figures are embedded as base64 PNG, so the page can be mailed or archived alone. Each run gets
its summary as tables (a dict of dicts becomes one table: rows are the outer keys, columns the
inner metrics), its figures, and its full config.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from knowflow.errors import DataError
from knowflow.io import atomic_write_text, read_json
from knowflow.runs import CONFIG, SUMMARY

_STYLE = """
body{font-family:system-ui,-apple-system,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}
pre{background:#f7f7f7;padding:.8em;overflow:auto;font-size:.8em}
"""


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list) and len(value) > 8:
        return html.escape(f"[{len(value)} values]")
    if isinstance(value, (list, dict)):
        return html.escape(json.dumps(value))
    return html.escape(str(value))


def _table(rows: dict[str, dict]) -> str:
    columns: list[str] = []
    for row in rows.values():
        for key, value in row.items():
            if key not in columns and not isinstance(value, dict):
                columns.append(key)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["", *columns])
    body = "".join(
        "<tr><td>" + html.escape(name) + "</td>"
        + "".join(f"<td>{_fmt(row.get(c, ''))}</td>" for c in columns) + "</tr>"
        for name, row in rows.items()
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def summary_tables(summary: dict, title: str = "summary") -> str:
    """Render a summary dict as HTML tables, recursing into nested sections."""
    scalars = {k: v for k, v in summary.items() if not isinstance(v, dict)}
    sections = {k: v for k, v in summary.items() if isinstance(v, dict)}
    parts = []
    if scalars:
        parts.append(_table({title: scalars}))
    flat_rows = {k: v for k, v in sections.items()
                 if not any(isinstance(x, dict) for x in v.values())}
    if flat_rows:
        parts.append(_table(flat_rows))
    for key, value in sections.items():
        if key not in flat_rows:
            parts.append(f"<h4>{html.escape(key)}</h4>" + summary_tables(value, key))
    return "".join(parts)


def _run_section(run_dir: Path) -> str:
    if not (run_dir / CONFIG).exists():
        raise DataError(run_dir, f"not a knowflow run directory (no {CONFIG})")
    config = read_json(run_dir / CONFIG)
    summary = read_json(run_dir / SUMMARY) if (run_dir / SUMMARY).exists() else None
    parts = [f"<h2>{html.escape(str(run_dir))}</h2>"]
    if summary is None:
        parts.append("<p><b>Unfinished run</b>: no summary.json yet.</p>")
    else:
        parts.append("<h3>Summary</h3>" + summary_tables(summary))
    for png in sorted((run_dir / "figures").glob("*.png")):
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f'<figure><img alt="{html.escape(png.stem)}" '
                     f'src="data:image/png;base64,{data}"><figcaption>{html.escape(png.name)}'
                     "</figcaption></figure>")
    parts.append("<h3>Config</h3><pre>" + html.escape(json.dumps(config, indent=2)) + "</pre>")
    return "\n".join(parts)


def write_report(run_dirs: list[str | Path], out: str | Path, title: str = "knowflow report"
                 ) -> Path:
    """Write one self-contained HTML page covering `run_dirs`; returns its path."""
    sections = [_run_section(Path(d)) for d in run_dirs]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            + "\n".join(sections) + "</body></html>\n")
    return atomic_write_text(out, page)
