"""The tables `knowflow eval` prints: one row per suite and scoring mode, and (with --method
or --conditions) one per suite, mode and method."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from knowflow.cli.common import console


def _fmt(value, ci=None) -> str:
    if value is None:
        return "-"
    text = f"{value:.3f}"
    return f"{text} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else text


def print_eval(summary: dict) -> None:
    """One row per suite and scoring mode: all items, then the known-fact subset."""
    table = Table("suite", "scoring", "n", "cf_acc (95% CI)", "param_acc (95% CI)",
                  "memorization_ratio", "known_share", "cf_acc | known", "param_acc | known",
                  "n known", caption="cf: the context's answer; param: the memorized answer; "
                  "known: " + _known_caption(summary))
    for suite, modes in summary.items():
        for mode, m in modes.items():
            known = m.get("known", {})
            table.add_row(
                suite, mode, str(m["n"]),
                _fmt(m["cf_acc"], m.get("cf_acc_ci")),
                _fmt(m["param_acc"], m.get("param_acc_ci")),
                _fmt(m.get("memorization_ratio"), m.get("memorization_ratio_ci")),
                _fmt(m.get("known_share")), _fmt(known.get("cf_acc")),
                _fmt(known.get("param_acc")), str(known.get("n", "-")))
    console.print(table)
    print_outcomes([(suite, "", m) for suite, modes in summary.items()
                    for mode, m in modes.items() if mode == "generate"])


OUTCOME_COLUMNS = (("context", "context"), ("memory", "memory"), ("both", "both"),
                   ("cut off", "cut_off"), ("garbled", "garbled"), ("other", "other"))


def print_outcomes(rows: list[tuple[str, str, dict]]) -> None:
    """One row per (suite, method) of generation blocks: the share of answers in each class
    (`evaluation/outcomes.py`) with its Wilson interval; nothing when no block has them."""
    rows = [r for r in rows if isinstance(r[2], dict) and "outcome_context" in r[2]]
    if not rows:
        return
    table = Table("suite", "method", "n", *(f"{label} (95% CI)" for label, _ in OUTCOME_COLUMNS),
                  caption="what each generated answer names: the context's answer only, the "
                          "memorized one only, both; neither: cut off (no name at all), garbled "
                          "(a near-miss of the context's answer), other; Wilson intervals")
    for suite, method, m in rows:
        table.add_row(suite, method or "-", str(m.get("n", "-")),
                      *(_cell(m, f"outcome_{key}") for _, key in OUTCOME_COLUMNS))
    console.print(table)


KNOWN_BY = {"generate": "its greedy answer without the context names the memorized answer",
            "loglik": "without the context the memorized answer is the likelier of the two",
            "off": "not computed (--known-filter computes it)"}


def _known_caption(summary: dict) -> str:
    """What the known columns rest on, from each block's `known_by`."""
    ways = dict.fromkeys(m.get("known_by") for modes in summary.values()
                         for m in modes.values() if isinstance(m, dict) and m.get("known_by"))
    if not ways:
        return "items whose memorized answer the model gives without the context"
    return "; ".join(f"{w}: {KNOWN_BY.get(w, w)}" if len(ways) > 1 else KNOWN_BY.get(w, w)
                     for w in ways)


def print_strength(summary: dict) -> None:
    """Per graded suite (cf-numeric): the share that follows the context, and that keeps the
    memorized value, per conflict strength and scoring mode (nothing without one)."""
    rows = [(suite, mode, label, m) for suite, modes in summary.items()
            for mode, metrics in modes.items() if isinstance(metrics, dict)
            for label, m in (metrics.get("by_strength") or {}).items()]
    if not rows:
        return
    table = Table("suite", "scoring", "strength", "n", "cf_acc (95% CI)",
                  "cf_acc_norm (95% CI)", "param_acc (95% CI)",
                  caption="strength: how far the context's value is from the true one; "
                          "cf_acc: follows the context; param_acc: keeps the memorized value; "
                          "_norm: log-likelihood choice divided by token count")
    for suite, mode, label, m in rows:
        table.add_row(suite, mode, label, str(m["n"]), _cell(m, "cf_acc"),
                      _cell(m, "cf_acc_norm"), _cell(m, "param_acc"))
    console.print(table)


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


def show_conditions(conditions: dict, out_dir: Path | None) -> None:
    """Print one row per suite (then all suites pooled), scoring mode and method, and where
    the run's tradeoff figure is (drawn when the run folder was finished)."""
    table = Table("suite", "scoring", "method", "n", "conflicting ctx / mem", "agreeing",
                  "irrelevant ctx / mem", "sensitivity (95% CI)", "robustness (95% CI)",
                  "garbled",
                  caption="ctx: follows the context; mem: keeps the memorized answer; "
                          "sensitivity: ctx under conflicting; robustness: mem under irrelevant; "
                          "garbled: names a misspelt context answer (conflicting, generation)")
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
                              _cell(row, "sensitivity"), _cell(row, "robustness"),
                              _cell(row.get("conflicting", {}), "garbled_share"))
    console.print(table)
    print_outcomes([(suite, method, conditions[method][suite].get("generate", {})
                     .get("conflicting", {})) for suite in suites for method in methods])
    if out_dir is not None:
        figure = Path(out_dir) / "figures" / "tradeoff.png"
        console.print(f"tradeoff figure: {figure if figure.exists() else '-'}",
                      highlight=False)
