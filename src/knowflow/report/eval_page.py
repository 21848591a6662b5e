"""The page body of a `knowflow eval` run: its finding in one sentence (pooled over every
item: how often the model followed the context and how often it kept its memorized answer,
with 95% Wilson intervals), its figures, a table per suite and scoring mode (the glossary's
names, values with their 95% bootstrap intervals), a table per decoding method where several
ran, then one row per item: question, context excerpt, the two answers, what the model
generated and which answer that names, which answer log-likelihood scoring preferred, the
known flag and the method. The item table sorts (click a heading) and filters (a search box
and one menu per suite, method, condition, reading and known flag) with a small inline script:
no network, no server."""

from __future__ import annotations

import re
from pathlib import Path

from knowflow.evaluation.curves import wilson_interval
from knowflow.report.names import label, percent, with_interval
from knowflow.report.page import esc, run_figures, table
from knowflow.store.readers import read_json, read_jsonl
from knowflow.store.run_folder import read_result

EXCERPT = 160
MAX_ROWS = 2000          # rows drawn in the page; the rest stay in items.jsonl
MODES = {"generate": "generation", "loglik": "log-likelihood"}
CAPTIONS = {
    "context_vs_memory.png": "per suite and scoring mode: share of items answered with the "
                             "context's answer and with the memorized answer, and the context's "
                             "share on the facts the model knows (error bars: 95% bootstrap "
                             "intervals over items)",
    "methods.png": "per decoding method, pooled over the suites: share following the context "
                   "and keeping memory (error bars: 95% bootstrap intervals)",
    "tradeoff.png": "sensitivity against robustness per decoding method (up and right is "
                    "better; error bars: 95% bootstrap intervals)",
}
SHORT = {"n": "items", "cf_acc": "context's answer",
         "param_acc": "memorized answer", "known_share": "known facts",
         "memorization_ratio": "memorization ratio", "garbled_share": "misspelt context answer"}
LEGEND = ("context's answer: counterfactual accuracy (share of items answered with the answer "
          "the context asserts); memorized answer: parametric accuracy; known facts: share "
          "whose answer without the context names the memorized answer; memorization ratio: "
          "mean p(mem) / (p(mem) + p(ctx)); misspelt: names a garbled context answer. Values "
          "with their 95% bootstrap intervals over items.")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]+")


def _text(value: object, limit: int | None = None) -> str:
    text = _CONTROL.sub("·", str(value if value is not None else "")).strip()
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


def item_rows(run_dir: Path) -> list[dict]:
    """The per-item records: conditions.jsonl (one per item, method and condition) where the
    eval swept methods or conditions, else items.jsonl with the config's method."""
    run_dir = Path(run_dir)
    if (run_dir / "conditions.jsonl").exists():
        return read_jsonl(run_dir / "conditions.jsonl")
    method = str(read_json(run_dir / "config.json").get("method") or "greedy")
    return [{"method": method, **r} for r in read_jsonl(run_dir / "items.jsonl")]


def _named(cf: bool | None, param: bool | None) -> str:
    if cf is None and param is None:
        return "–"
    return {(True, True): "both", (True, False): "context's", (False, True): "memorized"}.get(
        (bool(cf), bool(param)), "neither")


def _choice(value: str | None) -> str:
    return {"counterfactual": "context's", "parametric": "memorized"}.get(value or "", "–")


def finding(run_dir: Path) -> str:
    """What the eval measured and what it shows, in one sentence."""
    rows = [r for r in item_rows(run_dir) if r.get("condition", "conflicting") == "conflicting"]
    config = read_json(Path(run_dir) / "config.json")
    methods = list(dict.fromkeys(str(r["method"]) for r in rows))
    first = [r for r in rows if r["method"] == methods[0]] if methods else []
    suites = sorted({str(r["suite"]) for r in first})
    parts = []
    gen = [r for r in first if r.get("generate_counterfactual") is not None]
    if gen:
        n = len(gen)
        cf = sum(bool(r["generate_counterfactual"]) for r in gen) / n
        mem = sum(bool(r["generate_parametric"]) for r in gen) / n
        parts.append(f"its generated answer named the context's answer on "
                     f"{percent(cf, wilson_interval(cf, n))} of them and the memorized "
                     f"answer on {percent(mem, wilson_interval(mem, n))}")
    ll = [r for r in first if r.get("loglik_choice") is not None]
    if ll:
        n = len(ll)
        cf = sum(r["loglik_choice"] == "counterfactual" for r in ll) / n
        parts.append(f"log-likelihood scoring preferred the context's answer on "
                     f"{percent(cf, wilson_interval(cf, n))}")
    if not parts:
        return f"{config.get('model', 'The model')} was evaluated on no items."
    known = [r for r in first if r.get("known") is not None]
    tail = (f"; it knew {sum(bool(r['known']) for r in known)} of the facts without the context"
            if known else "")
    others = len(methods) - 1
    more = "one other method" if others == 1 else f"{others} other methods"
    who = f" ({methods[0]} decoding; {more} below)" if others else ""
    return (f"On {len(first)} counterfactual-context items ({', '.join(suites)}), "
            f"{config.get('model', 'the model')}{who}: " + "; ".join(parts) + tail
            + " (95% Wilson intervals).")


def suite_table(summary: dict) -> str:
    keys = ("n", "cf_acc", "param_acc", "known_share",
            "memorization_ratio", "garbled_share")
    shown = [k for k in keys if any(k in m for s in summary.values() if isinstance(s, dict)
                                    for m in s.values() if isinstance(m, dict))]
    rows = []
    for suite, modes in summary.items():
        for mode, m in (modes or {}).items():
            if isinstance(m, dict):
                rows.append([suite, MODES.get(mode, mode)]
                            + [with_interval(m.get(k), m.get(f"{k}_ci")) for k in shown])
    return table(["suite", "scoring", *(SHORT.get(k, label(k)) for k in shown)], rows,
                 cls="wrap", numeric=[False, False] + [True] * len(shown))


def _methods_table(conditions: dict) -> str:
    rows = []
    for method, suites in conditions.items():
        for mode, m in suites.get("all", {}).items():
            c = m.get("conflicting", {})
            rows.append([method, MODES.get(mode, mode), c.get("n", "–"),
                         with_interval(c.get("context_share"), c.get("context_share_ci")),
                         with_interval(c.get("memory_share"), c.get("memory_share_ci")),
                         with_interval(m.get("sensitivity"), m.get("sensitivity_ci")),
                         with_interval(m.get("robustness"), m.get("robustness_ci"))])
    heads = ["method", "scoring", "items", "follows the context", "keeps the memorized answer",
             "sensitivity", "robustness"]
    keep = [i for i in range(len(heads)) if i < 3 or any(r[i] != "–" for r in rows)]
    return table([heads[i] for i in keep], [[r[i] for i in keep] for r in rows], cls="wrap",
                 numeric=[i >= 2 for i in keep])


WIDTHS = {"item": 9, "suite": 7, "method": 7, "condition": 7, "question": 13,
          "context (excerpt)": 21, "context's answer": 8, "memorized answer": 9, "generated": 11,
          "generated names": 8, "likelier answer": 8, "known": 5}  # relative column widths
FILTERS = ("suite", "method", "condition", "generated names", "likelier answer", "known")
SCRIPT = """
[].forEach.call(document.querySelectorAll('.item-table'),function(w){
var t=w.querySelector('table'),body=t.tBodies[0],rows=[].slice.call(body.rows);
var heads=[].slice.call(t.tHead.rows[0].cells),box=w.querySelector('input');
var menus=[].slice.call(w.querySelectorAll('select')),count=w.querySelector('.count');
function apply(){var q=box.value.toLowerCase(),shown=0;rows.forEach(function(r){
 var ok=r.textContent.toLowerCase().indexOf(q)>=0;menus.forEach(function(m){
  if(m.value&&r.cells[+m.dataset.col].textContent!==m.value)ok=false;});
 r.style.display=ok?'':'none';if(ok)shown++;});
 count.textContent=shown+' of '+rows.length+' rows shown';}
box.addEventListener('input',apply);menus.forEach(function(m){m.addEventListener('change',apply);});
heads.forEach(function(h,i){h.title='click to sort';h.addEventListener('click',function(){
 var dir=h.dataset.dir==='asc'?-1:1;heads.forEach(function(o){delete o.dataset.dir;});
 h.dataset.dir=dir>0?'asc':'desc';rows.sort(function(a,b){
  var x=a.cells[i].textContent,y=b.cells[i].textContent,u=parseFloat(x),v=parseFloat(y);
  return dir*(isNaN(u)||isNaN(v)?x.localeCompare(y):u-v);});
 rows.forEach(function(r){body.appendChild(r);});});});
apply();});
"""


def items_table(records: list[dict]) -> str:
    """One row per item (and method, condition): sortable and filterable in the page."""
    conditions = len({r.get("condition") for r in records}) > 1
    columns = ["item", "suite", "method", *(["condition"] if conditions else []), "question",
               "context (excerpt)", "context's answer", "memorized answer", "generated",
               "generated names", "likelier answer", "known"]
    rows = []
    for r in records[:MAX_ROWS]:
        known = r.get("known")
        cells = [r.get("id", ""), r.get("suite", ""), r.get("method", ""),
                 *([r.get("condition", "")] if conditions else []), _text(r.get("question")),
                 _text(r.get("context"), EXCERPT), _text(r.get("counterfactual_answer")),
                 _text(r.get("parametric_answer")), _text(r.get("generate_output"), 80) or "–",
                 _named(r.get("generate_counterfactual"), r.get("generate_parametric")),
                 _choice(r.get("loglik_choice")),
                 "–" if known is None else "yes" if known else "no"]
        full = esc(_text(r.get("context")))
        rows.append("<tr>" + "".join(
            f'<td title="{full}">{esc(c)}</td>' if columns[i] == "context (excerpt)"
            else f"<td>{esc(c)}</td>" for i, c in enumerate(cells)) + "</tr>")
    menus = []
    for name in FILTERS:
        if name not in columns:
            continue
        col = columns.index(name)
        values = sorted({_cell_text(row, col) for row in rows})
        if len(values) > 1:
            options = "".join(f"<option>{v}</option>" for v in values)
            menus.append(f'<label>{esc(name)} <select data-col="{col}"><option value="">all'
                         f"</option>{options}</select></label>")
    more = (f'<p class="note">{len(records) - MAX_ROWS} more rows in the run folder\'s '
            "records.</p>" if len(records) > MAX_ROWS else "")
    total = sum(WIDTHS[c] for c in columns)
    head = "".join(f'<th style="width:{100 * WIDTHS[c] / total:.1f}%">{esc(c)}</th>'
                   for c in columns)
    return ('<div class="item-table"><div class="filters"><label>search <input '
            'type="search" placeholder="any text"></label>' + "".join(menus)
            + '<span class="count note"></span></div>'
            f'<div class="scroll"><table class="items"><thead><tr>{head}</tr>'
            f"</thead><tbody>{''.join(rows)}</tbody></table></div></div>{more}")


def _cell_text(row_html: str, col: int) -> str:
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row_html)
    return cells[col] if col < len(cells) else ""


def eval_body(run_dir: Path) -> tuple[str, str]:
    """(body, inline script) of an eval run's section, after its finding."""
    run_dir = Path(run_dir)
    summary = read_result(run_dir, "summary.json")
    parts = run_figures(run_dir, CAPTIONS)
    parts.append("<h3>Per suite</h3>" + suite_table(summary)
                 + f'<p class="note">{LEGEND}</p>')
    if (run_dir / "conditions.json").exists():
        parts.append("<h3>Per decoding method (all suites)</h3>"
                     + _methods_table(read_result(run_dir, "conditions.json")))
    parts.append("<h3>Items</h3>" + items_table(item_rows(run_dir)))
    return "\n".join(parts), SCRIPT
