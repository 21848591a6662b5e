"""Three context conditions per item, and a sweep of decoding methods over them.

Every item is shown with a `conflicting` context (its own counterfactual passage), an
`agreeing` one (the passage states the memorized fact) and an `irrelevant` one (another item's
passage about another subject of the same relation; see `data.conditions`). Per condition the
summary gives the share of answers that follow the context (name the answer the passage
asserts) and the share that follow memory (name the memorized answer); under an agreeing context
the two coincide. Two numbers summarise a method: **sensitivity**, the share that follows a
conflicting context, and **robustness**, the share that keeps the memorized answer under an
irrelevant one. Recent benchmark work finds context-utilisation methods trade one for the other,
so each method (and each CAD alpha) is one point of the tradeoff figure. Every share carries a
95% bootstrap interval over items; "all" pools the suites' items.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from knowflow.data.conditions import condition_item
from knowflow.evaluation.decoding import Method, methods_of
from knowflow.evaluation.items import evaluate_items, flat
from knowflow.evaluation.metrics import summarize
from knowflow.evaluation.options import MODES, parse_conditions
from knowflow.store.files import atomic_write_json, atomic_write_jsonl
from knowflow.store.run_folder import Progress

ALL = "all"  # the suites' items pooled


@dataclass
class Swept:
    summary: dict        # {method label: {suite|all: {mode: {...}}}}
    records: list[dict]  # one per (method, condition, item)


@dataclass(frozen=True)
class Sweep:
    """The methods and conditions of one evaluation; `main` is the first method's config."""

    methods: tuple[Method, ...]
    conditions: tuple[str, ...]
    main: object  # EvalConfig

    @classmethod
    def of(cls, cfg) -> Sweep:
        methods = tuple(methods_of(cfg))
        first = methods[0]
        return cls(methods, parse_conditions(cfg.conditions),
                   dataclasses.replace(cfg, method=first.spec, alpha=first.alpha,
                                       beta=first.beta))

    @property
    def active(self) -> bool:
        return len(self.methods) > 1 or self.conditions != ("conflicting",)

    def run(self, model, tokenizer, by_suite: dict, main_records: dict,
            progress: Progress | None = None) -> Swept:
        """Every (method, condition) pass; the main pass's records are reused."""
        records: list[dict] = []
        summary: dict = {}
        for k, method in enumerate(self.methods):
            cfg = dataclasses.replace(self.main, method=method.spec, alpha=method.alpha,
                                      beta=method.beta,
                                      known_filter=False)
            per_suite: dict[str, dict[str, list[dict]]] = {}
            for cond in self.conditions:
                for name, items in by_suite.items():
                    if k == 0 and cond == "conflicting":
                        recs = main_records[name]
                    else:
                        shown = [c for c in (condition_item(it, cond) for it in items) if c]
                        recs = evaluate_items(model, tokenizer,
                                              f"{name} [{method.label}, {cond}]", shown, cfg,
                                              progress) if shown else []
                    recs = [{**r, "method": method.label, "alpha": method.alpha,
                             "beta": method.beta,
                             "condition": cond} for r in recs]
                    per_suite.setdefault(name, {})[cond] = recs
                    records.extend(recs)
            pooled = {c: [r for s in per_suite.values() for r in s[c]] for c in self.conditions}
            summary[method.label] = {
                name: self._modes(recs) for name, recs in {**per_suite, ALL: pooled}.items()}
        return Swept(summary, records)

    def _modes(self, by_condition: dict[str, list[dict]]) -> dict:
        return {mode: condition_summary(by_condition, mode, self.main.n_bootstrap,
                                        self.main.seed) for mode in MODES[self.main.scoring]}

    @staticmethod
    def write(target: Path, swept: Swept) -> None:
        """conditions.json and conditions.jsonl (`report.tradeoff.tradeoff_from_run` draws
        the figure from them)."""
        atomic_write_json(target / "conditions.json", swept.summary)
        atomic_write_jsonl(target / "conditions.jsonl", [flat(r) for r in swept.records])


def condition_summary(by_condition: dict[str, list[dict]], mode: str, n_boot: int = 1000,
                      seed: int = 0) -> dict:
    """Per condition: n, context_share and memory_share (with `_ci`; `_norm` variants under
    log-likelihood scoring); then sensitivity and robustness (with `_ci`) where measured."""
    out: dict = {}
    for cond, recs in by_condition.items():
        if not recs:
            out[cond] = {"n": 0}
            continue
        m = summarize(recs, mode, n_boot, seed)
        row: dict = {"n": m["n"]}
        for suffix in ("", "_norm"):
            if f"param_acc{suffix}" not in m:
                continue
            # agreeing: the passage states the memorized answer, so both shares are that one
            ctx = "param_acc" if cond == "agreeing" else "cf_acc"
            for share, key in ((f"context_share{suffix}", f"{ctx}{suffix}"),
                               (f"memory_share{suffix}", f"param_acc{suffix}")):
                row[share], row[f"{share}_ci"] = m[key], m[f"{key}_ci"]
        row.update({k: v for k, v in m.items() if k.startswith("outcome_")})  # outcomes.py
        if "garbled_share" in m:  # generation: names a misspelt context answer (garbled.py)
            row["garbled_share"], row["garbled_share_ci"] = m["garbled_share"], \
                m["garbled_share_ci"]
        out[cond] = row
    for name, cond, share in (("sensitivity", "conflicting", "context_share"),
                              ("robustness", "irrelevant", "memory_share")):
        row = out.get(cond, {})
        for suffix in ("", "_norm"):
            if f"{share}{suffix}" in row:
                out[f"{name}{suffix}"] = row[f"{share}{suffix}"]
                out[f"{name}{suffix}_ci"] = row[f"{share}{suffix}_ci"]
    return out
