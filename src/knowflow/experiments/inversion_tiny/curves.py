"""`inversion-tiny`'s curves: the summary of one counterfactual-accuracy curve (start, peak,
peak step, final, rise, fall, with the other accuracies and the attention mass), the seed mean
of a set of curves, and an arm's summary over seeds."""

from __future__ import annotations

from knowflow.evaluation import curves


def run_curve_summary(records: list[dict]) -> dict:
    """Start, peak, peak step, final, rise and fall of counterfactual accuracy, with the other
    accuracies at the end and the attention mass (layer mean) at the start, peak and end."""
    out = curves.named_curve("cf_acc", [r["step"] for r in records],
                             [r["cf_acc"] for r in records])
    peak = next(i for i, r in enumerate(records) if r["step"] == out["cf_acc_peak_step"])

    def layer_mean(r: dict, key: str) -> float:
        return sum(r[key]) / len(r[key])

    for key in ("param_acc", "c_acc", "cs_acc", "recall_acc"):
        out[f"{key}_final"] = records[-1][key]
    for name in ("attn_context", "attn_subject"):
        out[f"{name}_start"] = layer_mean(records[0], f"{name}_layers")
        out[f"{name}_at_peak"] = layer_mean(records[peak], f"{name}_layers")
        out[f"{name}_final"] = layer_mean(records[-1], f"{name}_layers")
    return out


def mean_curve(per_seed: list[list[dict]]) -> list[dict]:
    """The seed mean of every metric all seeds have, step by step (curves share their steps)."""
    out = []
    for rows in zip(*per_seed, strict=True):
        rec: dict = {"step": rows[0]["step"]}
        for key, value in rows[0].items():
            if key == "step" or any(key not in r for r in rows):  # e.g. a kind filtered out
                continue
            if isinstance(value, (int, float, list)) and not isinstance(value, bool):
                rec[key] = _mean_of([r[key] for r in rows])
        out.append(rec)
    return out


def _mean_of(values: list):
    """Element-wise mean of numbers or of equally shaped (nested) lists of numbers."""
    if isinstance(values[0], list):
        return [_mean_of([v[i] for v in values]) for i in range(len(values[0]))]
    return sum(values) / len(values)


def arm_summary(per_seed: dict[int, list[dict]], extras: dict[int, dict]) -> dict:
    """An arm over seeds, as one flat row of the report's table, with each seed's own start,
    peak, peak step, final, rise and fall as lists in seed order (`seeds`).

    One definition of the fall everywhere: a seed's fall is its own peak - final, and the
    arm's `cf_acc_fall` (and `cf_acc_rise`, `cf_acc_peak`) is the **mean over seeds** of the
    seeds' own values, so that `cf_acc_peak - cf_acc_final == cf_acc_fall` holds in the row;
    `cf_acc_peak_step` is the median seed's peak step. The other keys (accuracies at the end,
    attention mass) are read from the seed-mean curve, whose own fall is kept as
    `mean_curve_fall`."""
    curve = run_curve_summary(mean_curve(list(per_seed.values())))
    own = [run_curve_summary(recs) for recs in per_seed.values()]
    out = dict(curve)
    out["seeds"] = list(per_seed)
    for key in ("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                "cf_acc_rise", "cf_acc_fall"):
        out[f"{key}_seeds"] = [row[key] for row in own]
    for key in ("cf_acc_start", "cf_acc_peak", "cf_acc_final", "cf_acc_rise", "cf_acc_fall"):
        out[key] = _mean_of(out[f"{key}_seeds"])
    out["cf_acc_peak_step"] = sorted(out["cf_acc_peak_step_seeds"])[len(own) // 2]
    out["mean_curve_fall"] = curve["cf_acc_fall"]
    out["cf_acc_fall_ci95"] = curves.seed_interval(out["cf_acc_fall_seeds"])
    for key in sorted({k for extra in extras.values() for k in extra}):
        out[f"{key}_seeds"] = [extras[seed].get(key) for seed in per_seed]
    return out
