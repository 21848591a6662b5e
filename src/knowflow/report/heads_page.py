"""The page body of a `knowflow probe heads` run: its finding in one sentence (the strongest
context head and memory head with their 95% bootstrap intervals), the layer x head heatmaps
(one per ablation kind, one shared colour scale), the ranked context and memory head tables
the CLI prints (for the ranking ablation and, folded, for every other one), then where the top
heads look: their attention from the answer position over one item's prompt, token by token."""

from __future__ import annotations

from pathlib import Path

from knowflow.report.names import with_interval
from knowflow.report.page import esc, run_figures, table
from knowflow.store.run_folder import read_result

CAPTIONS = {"heads.png": "change in log p(cf) − log p(param) when one head is removed, per "
                         "layer and head, one panel per ablation, one colour scale: red "
                         "(negative) a context head, blue (positive) a memory head"}
HEADERS = ["rank", "head", "change in log-odds", "95% interval"]


def _head(cell: dict) -> str:
    return f"L{cell['layer']}.H{cell['head']}"


def ranked(cells: list[dict]) -> str:
    rows = [[i, _head(c), f"{c['effect']:+.3f}",
             f"{c['ci'][0]:+.3f} to {c['ci'][1]:+.3f}" if c.get("ci") else "–"]
            for i, c in enumerate(cells, start=1)]
    return table(HEADERS, rows, numeric=[True, False, True, True]) if rows else \
        '<p class="note">none: no head moves the log-odds this way.</p>'


def _strength(cell: dict, kind: str) -> str:
    ci = cell.get("ci")
    inside = f" (95% interval {ci[0]:+.2f} to {ci[1]:+.2f})" if ci else ""
    return f"{kind} head {_head(cell)} ({cell['effect']:+.2f}{inside})"


def finding(summary: dict, config: dict) -> str:
    """The strongest context and memory heads, in one sentence."""
    n = summary.get("n_examples", 0)
    model = config.get("model", "the model")
    if not n:
        return f"No item was probed, so no head of {model} was ranked."
    ctx, mem = summary.get("context_heads") or [], summary.get("memory_heads") or []
    found = [_strength(c[0], k) for c, k in ((ctx, "context"), (mem, "memory")) if c]
    if not found:
        return f"Removing any one head of {model} did not move the log-odds on {n} items."
    base = summary.get("mean_log_odds")
    tail = f"; without any ablation the mean log-odds is {base:+.2f}" if base is not None else ""
    return (f"Removing one attention head at a time of {model} on {n} items "
            f"({summary.get('rank_by', 'mean')} ablation), the strongest "
            + " and the strongest ".join(found)
            + f" change log p(cf) − log p(param) the most{tail}.")


def _shaded(tokens: list[str], weights: list[float], context: set[int]) -> str:
    """The prompt's tokens, each shaded by the attention it gets (square-root scale, so small
    weights stay visible; white 0, full orange 1), context tokens underlined."""
    spans = []
    for i, (tok, w) in enumerate(zip(tokens, weights, strict=True)):
        cls = ' class="c"' if i in context else ""
        shown = esc(tok.replace("\n", "↵"))
        spans.append(f'<span{cls} title="{w:.3f}" style="background:rgba(230,120,0,'
                     f'{max(w, 0.0) ** 0.5:.2f})">{shown}</span>')
    return f'<div class="tokens">{"".join(spans)}</div>'


def _top_tokens(tokens: list[str], weights: list[float], n: int = 3) -> str:
    best = sorted(range(len(weights)), key=lambda i: -weights[i])[:n]
    return ", ".join(f"“{esc(tokens[i].strip() or '␣')}” {weights[i]:.2f}" for i in best)


def attention_section(example: dict | None) -> str:
    """The top heads' attention pattern on the probe's example item ('' without one)."""
    if not example or not example.get("heads"):
        return ""
    tokens, context = example["tokens"], set(example.get("context", []))
    rows = []
    for h in example["heads"]:
        rows.append(f"<p><b>{_head(h)}</b> {esc(h['side'])} head (change in log-odds "
                    f"{h['effect']:+.3f}): {h['context_mass']:.2f} of its attention on the "
                    f"context; most on {_top_tokens(tokens, h['weights'])}</p>"
                    + _shaded(tokens, h["weights"], context))
    return (f"<h3>Where the top heads look, on item {esc(example['example'])}: "
            f"“{esc(example.get('question', ''))}”</h3>"
            '<p class="note">attention from the answer position (the last token, outlined) '
            "to every prompt token; shade = square root of the attention weight (white 0, "
            "full orange 1; hover a token for its weight); context tokens underlined.</p>"
            + "".join(rows))


def heads_body(run_dir: Path) -> str:
    """The section of a heads probe run, after its finding."""
    summary = read_result(run_dir, "summary.json")
    parts = run_figures(run_dir, CAPTIONS)
    rank_by = summary.get("rank_by", "mean")
    half = summary.get("half_effect_heads") or {}
    note = (f'<p class="note">heads carrying half of the total effect: context '
            f"{half.get('context', '–')}, memory {half.get('memory', '–')}. Intervals: 95% "
            "bootstrap over items.</p>")
    parts.append(f"<h3>Context heads ({esc(rank_by)} ablation): removing them lowers "
                 "log p(cf) − log p(param)</h3>" + ranked(summary.get("context_heads", []))
                 + f"<h3>Memory heads ({esc(rank_by)} ablation): removing them raises it</h3>"
                 + ranked(summary.get("memory_heads", [])) + note)
    for kind, block in (summary.get("effects") or {}).items():
        if kind == rank_by:
            continue
        parts.append(f"<details><summary>{esc(kind)} ablation: ranked heads</summary>"
                     "<h4>context heads</h4>" + ranked(block.get("context_heads", []))
                     + "<h4>memory heads</h4>" + ranked(block.get("memory_heads", []))
                     + "</details>")
    parts.append(attention_section(summary.get("example_attention")))
    projection = summary.get("projection")
    if isinstance(projection, dict) and projection:
        rows = []
        for name, grid in projection.items():
            best = max(((v, layer, head) for layer, row in enumerate(grid)
                        for head, v in enumerate(row)), default=None)
            if best is not None:
                rows.append([name, f"L{best[1]}.H{best[2]}", with_interval(best[0], None)])
        parts.append("<h3>Which head's output names the answer</h3>"
                     + table(["answer", "head with the highest share",
                              "share of items"], rows, numeric=[False, False, True]))
    return "\n".join(parts)
