"""An `inversion-tiny` run's metrics.jsonl as curves: records by arm and seed, and the seed
mean of one metric (per layer for per-layer metrics). Every inversion-tiny figure reads these."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from knowflow.store.identity import METRICS
from knowflow.store.readers import read_jsonl

Curves = dict[str, dict[int, list[dict]]]  # arm -> seed -> records in step order


def load_curves(run_dir: Path) -> Curves:
    """The run's records grouped by arm and seed (records without arm/seed/step skipped)."""
    arms: Curves = defaultdict(lambda: defaultdict(list))
    path = Path(run_dir) / METRICS
    if not path.exists():
        return {}
    for rec in read_jsonl(path):
        if all(k in rec for k in ("arm", "seed", "step")):
            arms[rec["arm"]][rec["seed"]].append(rec)
    for seeds in arms.values():
        for recs in seeds.values():
            recs.sort(key=lambda r: r["step"])
    return {arm: dict(seeds) for arm, seeds in arms.items()}


def _value(rec: dict, key: str, layer: int | None) -> float | None:
    value = rec.get(key)
    if layer is not None:
        value = value[layer] if isinstance(value, list) and layer < len(value) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def seed_series(recs: list[dict], key: str, layer: int | None = None
                ) -> tuple[list[int], list[float]]:
    """One seed's curve of `key` (or of its `layer` entry): the steps that have it."""
    points = [(r["step"], _value(r, key, layer)) for r in recs]
    points = [(s, v) for s, v in points if v is not None]
    return [s for s, _ in points], [v for _, v in points]


def mean_series(seeds: dict[int, list[dict]], key: str, layer: int | None = None
                ) -> tuple[list[int], list[float]]:
    """The seed mean of `key` at each step, over the seeds that recorded it there."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for recs in seeds.values():
        for step, value in zip(*seed_series(recs, key, layer), strict=True):
            by_step[step].append(value)
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]
