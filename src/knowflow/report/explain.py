"""The page and figure of a `knowflow explain` run: read from its run folder, never a model.

The page opens with the run's one-sentence finding, then one card per item: the question,
the answer with the context beside the answer without it, the verdict with the numbers that
decided it, the context with each sentence shaded by its attribution (green: the sentence
raises the answer's log-probability, red: lowers it; the top sentence outlined), and, where
the mechanism ran, a small plot of the knockout effect per layer. The aggregate figures
(verdict counts, agreement, hit rates, LDS) follow in a table, with the mean layer plot.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from knowflow.report.figures import save, subplots
from knowflow.report.page import finding_box, run_figures, table
from knowflow.report.page import page as whole_page
from knowflow.report.tables import key_values
from knowflow.store.files import atomic_write_text
from knowflow.store.identity import CONFIG, RECORDS, REPORT, SUMMARY
from knowflow.store.readers import read_json
from knowflow.store.run_folder import read_result

MAX_ITEMS = 60          # items drawn as cards; the rest are in records.jsonl

CARD_CSS = """
.card{border:1px solid #ddd;border-radius:6px;padding:.8em 1em;margin:1.2em 0}
.q{font-weight:600;margin-bottom:.5em}
.answers{display:flex;gap:1em;flex-wrap:wrap}
.answers div{flex:1;min-width:240px;background:#fafafa;border:1px solid #eee;padding:.5em .7em}
.answers b{display:block;font-size:.8em;color:#666;font-weight:normal}
.verdict{display:inline-block;padding:.1em .6em;border-radius:4px;color:#fff;font-weight:600}
.v-context{background:#2b8a3e}.v-memory{background:#c92a2a}.v-both{background:#5f3dc4}
.v-neither{background:#868e96}
.numbers{font-size:.85em;color:#444;margin:.4em 0}
.ctx{margin:.6em 0;line-height:1.9}.ctx span{padding:.1em .15em;border-radius:3px}
.ctx span.top{outline:2px solid #1c7ed6}
.legend{font-size:.8em;color:#666}
"""


def _shade(value: float, scale: float) -> str:
    """Background for an attribution: green for positive, red for negative."""
    alpha = min(abs(value) / scale, 1.0) * 0.75 if scale > 0 else 0.0
    rgb = "43,138,62" if value >= 0 else "201,42,42"
    return f"background:rgba({rgb},{alpha:.2f})"


def _context(rec: dict) -> str:
    sents = rec["sentences"]
    scale = max((abs(s["attribution"]) for s in sents), default=0.0)
    parts = []
    for i, s in enumerate(sents):
        top = ' class="top"' if i == rec.get("top_sentence") else ""
        tip = f"attribution {s['attribution']:+.3f}" + (
            f"; gradient x input {s['one_pass']:.3f}" if "one_pass" in s else "")
        parts.append(f'<span{top} style="{_shade(s["attribution"], scale)}" '
                     f'title="{html.escape(tip)}">{html.escape(s["text"])}</span>')
    return '<div class="ctx">' + " ".join(parts) + "</div>"


# matplotlib's first two cycle colours, so the inline plot and figures/layers.png agree
LINE_COLORS = ("#1f77b4", "#ff7f0e")


def _svg_layers(mech: dict, width: int = 520, height: int = 150) -> str:
    """An inline line plot of the per-layer knockout effects (context, top sentence)."""
    layers = mech["layers"]
    series = {"whole context": [row["context"] for row in layers],
              "top sentence": [row["top_sentence"] for row in layers]}
    values = [v for vs in series.values() for v in vs] + [0.0]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    pad = 28

    def xy(i: int, v: float) -> str:
        x = pad + i * (width - 2 * pad) / max(len(layers) - 1, 1)
        y = 8 + (hi - v) * (height - 30) / span
        return f"{x:.1f},{y:.1f}"

    zero = xy(0, 0.0).split(",")[1]
    out = [f'<svg width="{width}" height="{height}" role="img" '
           f'aria-label="knockout effect per layer">',
           f'<line x1="{pad}" x2="{width - pad}" y1="{zero}" y2="{zero}" stroke="#aaa"/>']
    for (name, vs), color in zip(series.items(), LINE_COLORS, strict=True):
        pts = " ".join(xy(i, v) for i, v in enumerate(vs))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}">'
                   f"<title>{html.escape(name)}</title></polyline>")
    out.append(f'<line x1="{pad}" x2="{pad}" y1="8" y2="{height - 22}" stroke="#aaa"/>'
               f'<text x="{width / 2 - 20:.0f}" y="{height - 4}" font-size="11">layer</text>'
               f'<text x="{pad + 4}" y="{height - 26}" font-size="10" fill="#666">'
               "change in log p(answer)</text>")
    out.append(f'<text x="{pad}" y="{height - 4}" font-size="11">layer 0</text>'
               f'<text x="{width - pad - 50}" y="{height - 4}" font-size="11">'
               f"layer {len(layers) - 1}</text>"
               f'<text x="2" y="14" font-size="10">{hi:+.2f}</text>'
               f'<text x="2" y="{height - 18}" font-size="10">{lo:+.2f}</text></svg>')
    return "".join(out)


def _yes(value: object) -> str:
    return "yes" if value is True else "no" if value is False else html.escape(str(value))


def _unexplained_card(rec: dict) -> str:
    """The card of an item explain could not explain: its answers and the reason."""
    return (f'<div class="card"><div class="q">{html.escape(rec["id"])}: '
            f'{html.escape(rec["question"])}</div><div class="answers">'
            f'<div><b>answer with the context</b>{html.escape(rec.get("answer") or "")}</div>'
            f'<div><b>answer without the context</b>'
            f'{html.escape(rec.get("answer_no_context") or "")}</div></div>'
            f'<p><span class="verdict v-neither">not explained</span> '
            f'{html.escape(rec["unexplained"])}</p></div>')


def _card(rec: dict) -> str:
    if rec.get("unexplained"):                 # records written before the field: explained
        return _unexplained_card(rec)
    v = rec["verdict"]
    nums = rec["verdict_numbers"]
    p = math.exp(rec["logprob_context"]), math.exp(rec["logprob_no_context"])
    expected = rec.get("expected_verdict")
    check = "" if expected is None else (f" (expected {html.escape(expected)}: "
                                         f"{'agrees' if rec['verdict_agrees'] else 'differs'})")
    parts = [f'<div class="card"><div class="q">{html.escape(rec["id"])}: '
             f'{html.escape(rec["question"])}</div><div class="answers">'
             f'<div><b>answer with the context (explained)</b>{html.escape(rec["answer"])}</div>'
             f'<div><b>answer without the context</b>{html.escape(rec["answer_no_context"])}'
             "</div></div>",
             f'<p><span class="verdict v-{v}">{v}</span>{check}</p>'
             f'<div class="numbers">explained: “{html.escape(str(rec.get("explained", "")))}”; '
             f'log p(answer | context) = {rec["logprob_context"]:.3f} '
             f"(p = {p[0]:.3g}); log p(answer | no context) = {rec['logprob_no_context']:.3f} "
             f"(p = {p[1]:.3g}); context contribution = {nums['context_contribution']:+.3f}; "
             f"context supports: {_yes(nums['context_supports'])}; memory agrees: "
             f"{_yes(nums['memory_agrees'])}</div>"]
    if "sentences" in rec:
        lds = rec.get("lds")
        drops = ", ".join(f"top-{k}: {d:+.2f}" for k, d in rec["topk_drop"].items())
        parts.append(_context(rec) + f'<div class="legend">green raises, red lowers the '
                     f"answer's log-probability; outlined: top sentence "
                     f"({rec['top_sentence']}). LDS {'-' if lds is None else f'{lds:.2f}'}; "
                     f"drop when removed: {drops or '-'}" + (
                         f"; gradient x input's top: {rec['one_pass']['one_pass_top']}"
                         if "one_pass" in rec else "") + "</div>")
    if "mechanism" in rec:
        parts.append('<div class="legend">knockout from the answer positions: change in '
                     "log p(answer) per layer (blue: whole context, orange: top sentence)"
                     "</div>" + _svg_layers(rec["mechanism"]))
        heads = rec["mechanism"]["heads"]
        if heads:
            parts.append("<table><tr><th>head</th><th>attention to top sentence</th>"
                         "<th>effect of knocking it out</th></tr>" + "".join(
                             f"<tr><td>L{h['layer']}.H{h['head']}</td><td>{h['attention']:.3f}"
                             f"</td><td>{h['effect']:+.3f}</td></tr>" for h in heads)
                         + "</table>")
    return "\n".join(parts) + "</div>"


def layers_figure(summary: dict, path: Path, title: str = "knockout from the answer positions"
                  ) -> Path | None:
    """The mean per-layer knockout effect over items (context, top sentence)."""
    mech = summary.get("mechanism")
    if not mech:
        return None
    fig, axes = subplots(1, width=6.0, height=3.6)
    ax = axes[0, 0]
    for key, label in (("context", "whole context"), ("top_sentence", "top sentence")):
        ax.plot(range(len(mech[key])), mech[key], marker="o", markersize=3, label=label)
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer")
    ax.set_ylabel("change in log p(answer)")
    n = mech['n_items']
    ax.set_title(f"{title} ({n} item{'' if n == 1 else 's'})", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)


def explain_figures(run_dir: Path) -> list[Path]:
    fig = layers_figure(read_result(run_dir, SUMMARY), Path(run_dir) / "figures" /
                        "layers.png")
    return [fig] if fig is not None else []


def _measured(tree: dict) -> dict:
    """`tree` without what was not measured (None, empty tables), so a one-item run's summary
    does not list a confusion table and agreements it has no items for."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            value = _measured(value)
        if value is not None and value != {} and value != []:
            out[key] = value
    return out


CARD_STYLE = f"<style>{CARD_CSS}</style>"


def explain_body(run_dir: str | Path) -> str:
    """An explain run's cards, summary and figures (after its finding): the page's body, and
    its section in a combined report."""
    run_dir = Path(run_dir)
    summary = read_result(run_dir, SUMMARY)
    records = read_result(run_dir, RECORDS)
    rest = _measured({k: v for k, v in summary.items() if k not in ("findings", "mechanism")})
    cards = [_card(r) for r in records[:MAX_ITEMS]]
    more = (f"<p>{len(records) - MAX_ITEMS} more items in records.jsonl.</p>"
            if len(records) > MAX_ITEMS else "")
    return (CARD_STYLE + "\n".join(cards) + more
            + "\n".join(run_figures(run_dir, {"layers.png": "mean knockout effect per layer"}))
            + "<h3>Summary</h3>" + _headline(rest)
            + "<details><summary>Every summary number</summary>" + key_values(rest, "kv")
            + "</details>")


def _headline(summary: dict) -> str:
    """What a reader asks first: how many items, where the answers came from, whether the
    verdicts matched the expected source, and how well the sentence attributions predict
    ablations (LDS)."""
    verdicts = summary.get("verdicts") or {}
    sentences = summary.get("sentences") or {}
    missed = (summary.get("unexplained") or {}).get("n_items", 0)
    rows = [["items explained", summary.get("n_items", 0) - missed
             if missed else summary.get("n_items", "–")],
            *([["items not explained", missed]] if missed else []),
            ["verdicts", ", ".join(f"{k} {v}" for k, v in verdicts.items()) or "–"]]
    if summary.get("agreement") is not None:
        rows.append(["verdict matches the expected source (labelled items)",
                     f"{summary['agreement']:.0%} of {summary.get('n_checked', '–')}"])
    if sentences.get("lds") is not None:
        rows.append(["linear datamodeling score (LDS) of the sentence attributions",
                     f"{sentences['lds']:.3f}"])
    if sentences.get("hit_rate") is not None:
        rows.append(["needle sentence ranked first", f"{sentences['hit_rate']:.0%}"])
    return table(["measure", "value"], rows, cls="kv", numeric=[False, True])


def render_explain(run_dir: str | Path, title: str = "knowflow explain") -> str:
    run_dir = Path(run_dir)
    summary = read_result(run_dir, SUMMARY)
    config = read_json(run_dir / CONFIG)
    return whole_page(f"{title}: {config.get('model', '')}",
                      finding_box(summary["findings"]["verdict"]) + explain_body(run_dir))


def write_explain_report(run_dir: str | Path) -> Path:
    """figures/layers.png (where the mechanism ran) and report.html of an explain run."""
    explain_figures(Path(run_dir))
    return atomic_write_text(Path(run_dir) / REPORT, render_explain(run_dir))
