"""How a Result shows itself in a notebook: `Result._repr_html_` renders with `result_html`,
a Result's item (`Result.item(i)`) with `item_html`, looked up by name as the finishers are
(`store.result.VIEWS`). Everything is drawn from the Result in memory, so a Result need not
have been saved to show itself.

An eval shows its metrics per suite and scoring with their 95% intervals; an explain run the
headline numbers and one card per item (the context's sentences shaded by their attribution,
green raising the answer, red lowering it, the top one outlined; the verdict with its
numbers); a heads probe its finding and the ranked context and memory heads; any other run its
finding and summary tables. Only class-scoped styles are added, never page-wide ones, so the
notebook's own look is kept.
"""

from __future__ import annotations

import html

from knowflow.report import heads_page
from knowflow.report.eval_page import LEGEND, suite_table
from knowflow.report.explain import CARD_CSS, _card, _headline, _measured
from knowflow.report.tables import key_values, summary_tables

CARDS = 5      # explain items drawn as cards in a Result's view; `item(i)` shows any other


def _scoped(css: str) -> str:
    """`css` with every selector under `.knowflow`, so no rule reaches the notebook itself."""
    rules = [r.split("{", 1) for r in css.replace("\n", "").split("}") if "{" in r]
    return "".join(",".join(f".knowflow {sel.strip()}" for sel in head.split(",")) + "{"
                   + body + "}" for head, body in rules)


STYLE = "<style>" + _scoped(
    "table{border-collapse:collapse;font-size:.85em}"
    "td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left}"
    ".finding{background:#f3f7fb;border-left:4px solid #3a7bd5;padding:.4em .8em;margin:.4em 0}"
    ".note{font-size:.85em;color:#555}" + CARD_CSS) + "</style>"


def _wrap(command: str, body: str, finding: str | None, n: int) -> str:
    head = (f"<p><b>{html.escape(command)}</b> · {n} record{'s' * (n != 1)} · "
            "<code>.to_pandas()</code> has one row per record, <code>.save(dir)</code> writes "
            "the run folder and its report</p>")
    box = f'<div class="finding">{html.escape(finding)}</div>' if finding else ""
    return f'{STYLE}<div class="knowflow">{head}{box}{body}</div>'


def _verdict(summary: dict) -> str | None:
    findings = summary.get("findings")
    verdict = findings.get("verdict") if isinstance(findings, dict) else None
    return verdict if isinstance(verdict, str) and verdict.strip() else None


def result_html(result) -> str:
    """The HTML a notebook shows for `result` (see the module docstring)."""
    summary, command = result.summary or {}, result.command
    if command == "eval":
        body = suite_table(summary) + f'<p class="note">{html.escape(LEGEND)}</p>'
        return _wrap(command, body, None, len(result.records))
    if command == "explain":
        rest = _measured({k: v for k, v in summary.items() if k not in ("findings", "mechanism")})
        cards = "".join(item_html(r, command, styled=False) for r in result.records[:CARDS])
        more = len(result.records) - CARDS
        tail = (f'<p class="note">{more} more: <code>.item(i)</code> shows item i.</p>'
                if more > 0 else "")
        return _wrap(command, _headline(rest) + cards + tail, _verdict(summary),
                     len(result.records))
    if command == "probe-heads":
        rank_by = html.escape(str(summary.get("rank_by", "mean")))
        body = (f"<h4>Context heads ({rank_by} ablation): removing them lowers "
                "log p(cf) − log p(param)</h4>" + heads_page.ranked(
                    summary.get("context_heads", [])[:10])
                + f"<h4>Memory heads ({rank_by} ablation): removing them raises it</h4>"
                + heads_page.ranked(summary.get("memory_heads", [])[:10]))
        return _wrap(command, body, heads_page.finding(summary, result.config),
                     len(result.records))
    rest = {k: v for k, v in summary.items() if k != "findings"}
    findings = {k: v for k, v in (summary.get("findings") or {}).items() if k != "verdict"}
    body = (key_values(findings, "kv") if findings else "") + summary_tables(rest)
    return _wrap(command, body, _verdict(summary), len(result.records))


def item_html(record: dict, command: str, styled: bool = True) -> str:
    """One record as a notebook shows it: an explained answer's card, any other record's
    fields as a key-value table."""
    body = _card(record) if command == "explain" and "verdict" in record else \
        key_values(record, "kv")
    return f'{STYLE}<div class="knowflow">{body}</div>' if styled else body
