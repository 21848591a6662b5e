"""Summary dicts as HTML that fits a page: rounded numbers, summarized lists, narrow tables.

Rules, so that any experiment's summary reads well without per-experiment code:
- numbers: ints as ints, floats to 3 decimals (tiny ones in scientific notation), bools yes/no;
- lists: up to `SHORT_LIST` numbers inline (`0.1 · 0.2 · 0.3`); longer ones as count/min/mean/max;
- a dict of flat dicts is one table (rows = outer keys); when it has more columns than rows it is
  transposed (metrics down the side), so six arms by thirty metrics is 7 columns wide, not 31;
- per-seed lists (`<metric>_seeds` beside a `seeds` list) leave the row and become their own
  table, one row per (row, seed);
- every table sits in a container that scrolls sideways rather than widening the page;
- keys show as the glossary's names (`report.names.label`), and a `<metric>_ci` beside its
  `<metric>` joins it: `0.500 (0.167–0.833)`.
"""

from __future__ import annotations

import html
import math
from typing import Any

from knowflow.report.names import CI, label, with_interval

SHORT_LIST = 8
SEED_SUFFIX = "_seeds"


def fmt(value: Any) -> str:
    """One value as display text (not escaped)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.1e}"
        return f"{value:.3f}"
    if value is None:
        return "–"
    if isinstance(value, dict):
        return ", ".join(f"{label(k)}: {fmt(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return _fmt_list(list(value))
    return str(value)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _fmt_list(values: list) -> str:
    if len(values) <= SHORT_LIST:
        return " · ".join(fmt(v) for v in values)
    numbers = [float(v) for v in values if _is_number(v)]
    if len(numbers) == len(values):
        return (f"{len(values)} values: min {fmt(min(numbers))} · "
                f"mean {fmt(sum(numbers) / len(numbers))} · max {fmt(max(numbers))}")
    return f"{len(values)} items: {fmt(values[0])}, {fmt(values[1])}, …"


def _cell(value: Any) -> str:
    text = html.escape(fmt(value))
    cls = ' class="num"' if _is_number(value) or isinstance(value, (list, tuple, _Joined)) \
        else ""
    return f"<td{cls}>{text}</td>"


def _esc(key: object) -> str:
    return html.escape(str(key))


def _name(key: object) -> str:
    """A metric key as the glossary names it (row and arm names stay as they are)."""
    return html.escape(label(key))


class _Joined(str):
    """A value already joined with its interval (shown as a number)."""


def _join_intervals(row: dict) -> dict:
    """`row` with each `<metric>_ci` folded into its `<metric>`."""
    out = {}
    for key, value in row.items():
        if key.endswith(CI) and key[:-len(CI)] in row:
            continue
        ci = row.get(f"{key}{CI}")
        if _is_number(value) and isinstance(ci, (list, tuple)) and len(ci) == 2:
            value = _Joined(with_interval(value, ci))
        out[key] = value
    return out


def _grid(corner: str, row_names: list[str], col_names: list[str],
          value: Any, metrics_down: bool = False) -> str:
    """A table; the metric keys (the columns, or the rows when `metrics_down`) are named."""
    col_esc, row_esc = (_esc, _name) if metrics_down else (_name, _esc)
    head = "".join(f"<th>{_esc(corner)}</th>" + "".join(f"<th>{col_esc(c)}</th>"
                                                       for c in col_names))
    body = "".join(
        f"<tr><th>{row_esc(r)}</th>" + "".join(_cell(value(r, c)) for c in col_names) + "</tr>"
        for r in row_names)
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


def _seed_columns(row: dict) -> list[str]:
    seeds = row.get("seeds")
    if not isinstance(seeds, list):
        return []
    return [k for k, v in row.items() if k.endswith(SEED_SUFFIX) and isinstance(v, list)
            and len(v) == len(seeds)]


def rows_table(rows: dict[str, dict], corner: str = "") -> str:
    """A dict of flat dicts as a table (transposed when wider than long), plus a per-seed
    table for `<metric>_seeds` lists."""
    rows = {name: _join_intervals(row) for name, row in rows.items()}
    per_seed = {name: _seed_columns(row) for name, row in rows.items()}
    columns: list[str] = []
    for name, row in rows.items():
        skip = set(per_seed[name]) | ({"seeds"} if per_seed[name] else set())
        columns += [k for k in row if k not in skip and k not in columns]
    names = list(rows)
    if len(columns) > len(names):
        out = _grid(corner, columns, names, lambda c, r: rows[r].get(c), metrics_down=True)
    else:
        out = _grid(corner, names, columns, lambda r, c: rows[r].get(c))
    if any(per_seed.values()):
        out += _seed_table(rows, per_seed, corner)
    return out


def _seed_table(rows: dict[str, dict], per_seed: dict[str, list[str]], corner: str) -> str:
    metrics: list[str] = []
    for keys in per_seed.values():
        metrics += [k for k in keys if k not in metrics]
    lines: dict[str, dict] = {}
    for name, keys in per_seed.items():
        for i, seed in enumerate(rows[name].get("seeds", [])):
            lines[f"{name} · seed {seed}"] = {k[:-len(SEED_SUFFIX)]: rows[name][k][i]
                                              for k in keys}
    cols = [k[:-len(SEED_SUFFIX)] for k in metrics]
    title = f"<h4>per seed{' (' + html.escape(corner) + ')' if corner else ''}</h4>"
    return title + _grid(corner, list(lines), cols, lambda r, c: lines[r].get(c))


def key_values(items: dict[str, Any], cls: str = "kv") -> str:
    """A readable two-column list; nested dicts are flattened to dotted keys."""
    flat = _join_intervals(_flatten(items))
    body = "".join(f"<tr><th>{_name(k)}</th>{_cell(v)}</tr>" for k, v in flat.items())
    return f'<div class="scroll"><table class="{cls}">{body}</table></div>'


def _flatten(items: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in items.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _is_cell(value: Any) -> bool:
    """Fits one table cell: not a dict, or a short dict of non-dicts (`{"C": 3, "S": 1}`)."""
    return not isinstance(value, dict) or (len(value) <= SHORT_LIST and not any(
        isinstance(v, dict) for v in value.values()))


def _is_rows(section: dict) -> bool:
    return bool(section) and all(isinstance(v, dict) and all(map(_is_cell, v.values()))
                                 for v in section.values())


def summary_tables(summary: dict, title: str = "") -> str:
    """A summary dict as HTML: top-level scalars as a key/value list; the cells of each
    section (an arm's or a model's metrics) as one row of a shared table, so arms stand side
    by side; a section of only dicts (per-seed pretraining stats) as a table of its own; what
    is nested deeper, recursively under a `section · key` heading."""
    scalars = {k: v for k, v in summary.items() if not isinstance(v, dict)}
    parts = [key_values(scalars)] if scalars else []
    rows: dict[str, dict] = {}
    later: list[tuple[str, str]] = []
    for key, value in summary.items():
        if not isinstance(value, dict) or not value:
            continue
        if all(isinstance(x, dict) for x in value.values()) and _is_rows(value):
            later.append((key, rows_table(value, key)))
            continue
        cells = {k: x for k, x in value.items() if _is_cell(x)}
        if cells and not all(isinstance(x, dict) for x in cells.values()):
            rows[key] = cells
        nested = {k: x for k, x in value.items() if k not in rows.get(key, {})}
        if nested:
            later.append((key, summary_tables(nested, key)))
    if rows:
        parts.append(rows_table(rows, title))
    parts += [f"<h4>{html.escape(key)}</h4>{body}" for key, body in later]
    return "".join(parts)
