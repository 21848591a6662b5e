"""The pieces every report page shares: one style sheet, the page shell, figures embedded as
base64 PNG (a page can be mailed or archived alone), the one-sentence finding box and plain
HTML tables. No page loads anything from the network."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

STYLE = """
body{font-family:system-ui,-apple-system,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
h1,h2,h3,h4,p,li,td{overflow-wrap:anywhere}
.finding,.verdicts{background:#f3f7fb;border-left:4px solid #3a7bd5;padding:.6em 1em;
margin:1em 0}
.verdicts p{margin:.35em 0}
.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}
td,th{border:1px solid #ddd;padding:.2em .55em;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th{white-space:nowrap}
tr:first-child th{background:#f4f4f4}th{font-weight:600}
table.kv th{background:#fafafa;font-weight:normal;color:#444;white-space:normal}
table.wrap th{white-space:normal}
table.items{width:100%;table-layout:fixed}table.items td{font-size:.95em}
table.items th{cursor:pointer;white-space:normal;overflow-wrap:normal;font-size:.9em}
.filters{display:flex;gap:.6em;flex-wrap:wrap;align-items:center;font-size:.9em}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}.note{font-size:.85em;color:#555}
.tokens{font-family:ui-monospace,monospace;font-size:.8em;line-height:1.9;white-space:pre-wrap;
overflow-wrap:anywhere;border:1px solid #eee;padding:.4em;margin:.2em 0 1em}
.tokens .c{border-bottom:2px solid #3a7bd5}.tokens span:last-child{outline:1px solid #222}
details{margin:1em 0}pre{background:#f7f7f7;padding:.8em;overflow:auto;font-size:.8em}
"""


def esc(value: object) -> str:
    return html.escape(str(value))


def finding_box(text: str) -> str:
    """The run's finding in one sentence, the first thing its page shows."""
    return f'<div class="finding">{esc(text)}</div>'


def embedded_figure(data: bytes, alt: str, caption: str) -> str:
    src = base64.b64encode(data).decode("ascii")
    return (f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{src}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def run_figures(run_dir: Path, captions: dict[str, str] | None = None) -> list[str]:
    """Every `figures/*.png` of a run, sorted by file name, with its caption (or name)."""
    captions = captions or {}
    return [embedded_figure(p.read_bytes(), p.stem,
                            f"{captions[p.name]} (figures/{p.name})" if p.name in captions
                            else p.name)
            for p in sorted((Path(run_dir) / "figures").glob("*.png"))]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], cls: str = "",
          numeric: Sequence[bool] | None = None, row_attrs: Sequence[str] | None = None
          ) -> str:
    """A plain table in a sideways-scrolling box; cells are escaped text."""
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        attrs = f" {row_attrs[i]}" if row_attrs else ""
        cells = "".join(f"<td{' class=num' if n else ''}>{esc(c)}</td>"
                        for c, n in zip(row, numeric, strict=True))
        body.append(f"<tr{attrs}>{cells}</tr>")
    klass = f' class="{cls}"' if cls else ""
    return f'<div class="scroll"><table{klass}><tr>{head}</tr>{"".join(body)}</table></div>'


def page(title: str, body: str, script: str = "") -> str:
    """A whole self-contained page."""
    tail = f"<script>{script}</script>" if script else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{esc(title)}</h1>{body}{tail}</body></html>\n")
