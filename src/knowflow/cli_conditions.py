"""`knowflow eval --method ... --conditions ...`: the per-condition table the command prints."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table


def _cell(row: dict, key: str) -> str:
    value, ci = row.get(key), row.get(f"{key}_ci")
    if value is None:
        return "-"
    return f"{value:.2f} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else f"{value:.2f}"


def _share(row: dict, cond: str) -> str:
    r = row.get(cond)
    if not r or not r.get("n"):
        return "-"
    if cond == "agreeing":
        return f"{r['context_share']:.2f}"
    return f"{r['context_share']:.2f} / {r['memory_share']:.2f}"


def show_conditions(console, conditions: dict, out_dir: Path | None) -> None:
    """Print one row per suite (then all suites pooled), scoring mode and method, and where
    the run's tradeoff figure is (drawn when the run folder was finished)."""
    table = Table("suite", "scoring", "method", "n", "conflicting ctx / mem", "agreeing",
                  "irrelevant ctx / mem", "sensitivity (95% CI)", "robustness (95% CI)",
                  caption="ctx: follows the context; mem: keeps the memorized answer; "
                          "sensitivity: ctx under conflicting; robustness: mem under irrelevant")
    methods = list(conditions)
    suites = list(next(iter(conditions.values())))
    for suite in suites:
        for mode in next(iter(conditions.values()))[suite]:
            for method in methods:
                row = conditions[method][suite][mode]
                n = max((r.get("n", 0) for r in row.values() if isinstance(r, dict)),
                        default=0)
                table.add_row(suite, mode, method, str(n), _share(row, "conflicting"),
                              _share(row, "agreeing"), _share(row, "irrelevant"),
                              _cell(row, "sensitivity"), _cell(row, "robustness"))
    console.print(table)
    if out_dir is not None:
        figure = Path(out_dir) / "figures" / "tradeoff.png"
        console.print(f"tradeoff figure: {figure if figure.exists() else '-'}",
                      highlight=False)
