"""The summary of explain's records (one per item); the records and it make explain's
`knowflow.store.result.Result`, saved as the run folder `knowflow explain` writes (config.json,
records.jsonl, summary.json, then figures/ and report.html from `report.explain`).
"""

from __future__ import annotations

from collections import Counter
from statistics import mean

from knowflow.explanation.source import KNOWN, ONE, VERDICTS, confusion


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return mean(values) if values else None


def _agreement(records: list[dict]) -> dict:
    """How many records carry an expected verdict, the share whose verdict matches it, and
    the confusion table."""
    checked = [r for r in records if r["expected_verdict"] is not None]
    return {"n_checked": len(checked),
            "agreement": _mean([float(r["verdict_agrees"]) for r in checked]),
            "confusion": confusion([r["expected_verdict"] for r in records],
                                   [r["verdict"] for r in records])}


def summarize(records: list[dict]) -> dict:
    """Verdict counts, agreement with the expected verdicts and its confusion table, on every
    labelled item, (`one_answer`) on those whose answer names exactly one of the item's
    answers (`produced`: how many name which) and (`known_answer`) on those of them where the
    model's no-context answer names the parametric answer, so that the labels' premise (the
    model's memory holds the parametric answer) holds; the items that could not be explained
    (`unexplained`: how many, and why: `record.py`); where
    sentences were attributed, the needle hit rates, LDS, top-k drops and (null where it was
    not asked for) the one-pass estimate's agreement; where mechanisms ran, the mean effect
    per layer."""
    unexplained = [r["unexplained"] for r in records if r.get("unexplained")]
    counts = Counter(r["verdict"] for r in records)
    out: dict = {"n_items": len(records),
                 "unexplained": {"n_items": len(unexplained),
                                 "reasons": dict(Counter(unexplained))},
                 "verdicts": {v: counts.get(v, 0) for v in VERDICTS},
                 **_agreement(records),
                 "produced": dict(Counter(r["produced"] for r in records
                                          if r.get("produced") is not None)),
                 "one_answer": _agreement([r for r in records if r.get("produced") in ONE]),
                 "known_answer": _agreement([r for r in records if r.get("produced") in ONE
                                             and r.get("produced_no_context") in KNOWN])}
    attributed = [r for r in records if "sentences" in r]
    if attributed:
        hits = [r for r in attributed if "top_hit" in r]
        one_pass = [r for r in attributed if "one_pass" in r]     # --levels ...,one_pass
        ks = sorted({k for r in attributed for k in r["topk_drop"]}, key=int)
        out["sentences"] = {
            "n_items": len(attributed), "n_needle_items": len(hits),
            "hit_rate": _mean([float(r["top_hit"]) for r in hits]),
            "one_pass_hit_rate": _mean([float(r["one_pass_hit"]) for r in hits
                                        if "one_pass_hit" in r]),
            "lds": _mean([r["lds"] for r in attributed]),
            "topk_drop": {k: _mean([r["topk_drop"].get(k) for r in attributed]) for k in ks},
            "one_pass_same_top": _mean([float(r["one_pass"]["same_top"]) for r in one_pass]),
            "one_pass_spearman": _mean([r["one_pass"]["spearman"] for r in one_pass]),
            "ablations_used": _mean([r.get("ablations_used") for r in attributed]),
            "converged": _mean([float(r["ablations_stopped"] == "converged")
                                for r in attributed if r.get("ablations_stopped")]),
            "seconds_per_item": {stage: _mean([r["seconds"].get(stage) for r in attributed])
                                 for stage in ("source", "ablation", "learned", "one_pass",
                                               "mechanism")}}
    mech = [r["mechanism"] for r in attributed if "mechanism" in r]
    if mech:
        n = len(mech[0]["layers"])
        out["mechanism"] = {
            "n_items": len(mech),
            "context": [mean(m["layers"][i]["context"] for m in mech) for i in range(n)],
            "top_sentence": [mean(m["layers"][i]["top_sentence"] for m in mech)
                             for i in range(n)]}
    out["findings"] = {"verdict": _sentence(out)}
    return out


def _sentence(summary: dict) -> str:
    """One sentence saying what the run found (the report's opening line)."""
    counts = summary["verdicts"]
    top = max(counts, key=counts.get)
    text = (f"{counts[top]} of {summary['n_items']} answers came from {top}"
            if top != "both" else f"{counts[top]} of {summary['n_items']} answers are backed "
                                  "by both context and memory")
    if not any(counts.values()):
        text = f"none of the {summary['n_items']} answers was explained"
    if summary["agreement"] is not None:
        text += (f"; the verdict matches the produced answer on "
                 f"{100 * summary['agreement']:.0f}% of {summary['n_checked']} labelled items")
        one = summary["one_answer"]
        if one["agreement"] is not None and one["n_checked"] < summary["n_checked"]:
            text += (f" ({100 * one['agreement']:.0f}% of the {one['n_checked']} that name "
                     "exactly one of the item's answers)")
    sent = summary.get("sentences")
    if sent and sent["hit_rate"] is not None:
        text += f"; the top sentence is the answer sentence in {100 * sent['hit_rate']:.0f}%"
    missed = (summary.get("unexplained") or {}).get("n_items", 0)
    if missed:
        reasons = summary["unexplained"]["reasons"]
        text += (f"; {missed} of {summary['n_items']} could not be explained ("
                 + "; ".join(f"{n}: {why}" for why, n in reasons.items()) + ")")
    return text + "."
