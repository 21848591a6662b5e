"""Readable names for the keys of summaries and records (the glossary's, docs/concepts.md),
and one way to show a value with its interval, so a page never shows `cf_acc_ci` or a dotted
path like `sentences.seconds_per_item.source`.

`label(key)` gives a key's reading name: a known metric its glossary name (with its unit where
it has one), any other key its words (`_` and `.` as spaces and ` · `); `with_interval(value,
ci)` the value followed by its 95% interval, `0.500 (0.167–0.833)`."""

from __future__ import annotations

import math

CI = "_ci"
NAMES = {
    "cf_acc": "context's answer (counterfactual accuracy)",
    "param_acc": "memorized answer (parametric accuracy)",
    "cf_acc_norm": "context's answer, per-token likelihood",
    "param_acc_norm": "memorized answer, per-token likelihood",
    "memorization_ratio": "memorization ratio p(mem) / (p(mem) + p(ctx))",
    "garbled_share": "misspelt context answer (share)",
    "known_share": "known facts (share answered from memory without the context)",
    "known_by": "known facts found by",
    "context_share": "follows the context (share)",
    "memory_share": "keeps the memorized answer (share)",
    "sensitivity": "sensitivity (follows a conflicting context)",
    "robustness": "robustness (keeps memory under an irrelevant context)",
    "n_items": "items",
    "cf_acc_gen": "context's answer, generation-scored (counterfactual accuracy)",
    "param_acc_gen": "memorized answer, generation-scored (parametric accuracy)",
    "attn_context": "attention on the context",
    "train_loss": "training loss (nats per token)",
    "seconds": "seconds",
    "seconds_per_item": "seconds per item",
    "lds": "linear datamodeling score (LDS)",
    "effect": "change in log-odds log p(cf) − log p(param)",
}
PARTS = {"start": "at the start", "peak": "at the peak", "peak_step": "peak step",
         "final": "at the end", "rise": "rise (peak − start)", "fall": "fall (peak − end)"}


def label(key: object) -> str:
    """A key's reading name (see the module docstring)."""
    key = str(key)
    if key in NAMES:
        return NAMES[key]
    if key.endswith(CI) and key[:-len(CI)] in NAMES:
        return f"{NAMES[key[:-len(CI)]]}, 95% interval"
    for part, words in PARTS.items():
        stem = key[:-len(part) - 1]
        if key.endswith("_" + part) and stem in NAMES:
            return f"{NAMES[stem]} {words}"
    if "." in key:
        return " · ".join(label(k) for k in key.split("."))
    return key.replace("_", " ")


def number(value: float, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}f}"


def with_interval(value: float | None, ci: list | tuple | None, digits: int = 3) -> str:
    """`0.500 (0.167–0.833)`; the value alone without an interval; – for no value."""
    if value is None:
        return "–"
    text = number(value, digits)
    if ci and len(ci) == 2 and all(isinstance(c, (int, float)) for c in ci):
        text += f" ({number(ci[0], digits)}–{number(ci[1], digits)})"
    return text


def percent(value: float, ci: list | tuple | None = None) -> str:
    """`42% (17–67%)`: a share as a percentage with its interval."""
    text = f"{100 * value:.0f}%"
    if ci and len(ci) == 2:
        text += f" (95% CI {100 * ci[0]:.0f}–{100 * ci[1]:.0f}%)"
    return text
