"""Metrics per conflict strength: the items of a graded suite (`data.numeric`) carry their
strength in `meta`, and the summary repeats the scoring mode's metrics per strength (in the
order of `meta["strength_level"]`), so the share that follows the context can be read against
the distance between the context's value and the true one."""

from __future__ import annotations

from knowflow.evaluation.metrics import summarize


def by_strength(records: list[dict], mode: str, n_boot: int = 1000, seed: int = 0) -> dict:
    """{"by_strength": {label: metrics}} when the records carry a strength, else {}."""
    levels: dict[str, int] = {}
    for r in records:
        meta = r.get("meta") or {}
        if "strength" not in meta:
            return {}
        levels.setdefault(meta["strength"], meta.get("strength_level", len(levels)))
    if not levels:
        return {}
    out = {}
    for label in sorted(levels, key=levels.get):
        recs = [r for r in records if r["meta"]["strength"] == label]
        out[label] = {"strength_level": levels[label], **summarize(recs, mode, n_boot, seed)}
    return {"by_strength": out}
