"""What an `inversion-tiny` run shows: the inversion criterion on every seed, the mitigations
against `mixed`, and the mechanism (does accuracy fall when attention leaves the context, and
which examples' gradients move it), each with a sentence for the report."""

from __future__ import annotations

from knowflow.evaluation.curves import TINY
from knowflow.experiments.inversion_tiny.world import Mixture
from knowflow.experiments.mitigations import TINY_MITIGATIONS, fall_removed, meets_goal

# The reproduction's criterion (`curves.TINY`), on every seed: `mixed` rises and then falls,
# while `c_only` does not fall.


def findings(summary: dict) -> dict:
    """The inversion criterion checked on every seed, the verdict in one sentence, and each
    mitigation's fall against `mixed`'s."""
    out: dict = {}
    mixed, c_only = summary.get("mixed"), summary.get("c_only")
    if mixed:
        out["mixed_cf_acc_rise"] = mixed["cf_acc_rise"]
        out["mixed_cf_acc_fall"] = mixed["cf_acc_fall"]
        out["mixed_inverts_seeds"] = [TINY.inverts(r, f) for r, f in zip(
            mixed["cf_acc_rise_seeds"], mixed["cf_acc_fall_seeds"], strict=True)]
    if c_only:
        out["c_only_cf_acc_fall"] = c_only["cf_acc_fall"]
    if mixed and c_only:
        steady = [TINY.steady(f) for f in c_only["cf_acc_fall_seeds"]]
        out["inversion_shown"] = all(out["mixed_inverts_seeds"]) and all(steady)
        n, k = len(steady), sum(out["mixed_inverts_seeds"])
        out["verdict"] = (
            f"{'Inversion shown' if out['inversion_shown'] else 'No robust inversion'}: "
            f"counterfactual accuracy under the mixed finetuning rises {mixed['cf_acc_rise']:.2f} "
            f"and falls {mixed['cf_acc_fall']:.2f} (means of the per-seed values), meeting rise >= "
            f"{TINY.rise} and fall >= {TINY.fall} on {k} of {n} seeds, while C-only "
            f"finetuning falls {max(c_only['cf_acc_fall_seeds']):.2f} at most "
            f"(< {TINY.no_fall} needed).")
    for arm in TINY_MITIGATIONS:
        if mixed and summary.get(arm):
            row = summary[arm]
            out[f"{arm}_cf_acc_fall_minus_mixed"] = row["cf_acc_fall"] - mixed["cf_acc_fall"]
            out[f"{arm}_reduces_fall_every_seed"] = all(a < m for a, m in zip(
                row["cf_acc_fall_seeds"], mixed["cf_acc_fall_seeds"], strict=True))
            # in-distribution accuracy: held-out C and C+S items at the end, as mixed keeps it
            out[f"{arm}_indist_minus_mixed"] = _indist(row) - _indist(mixed)
            # per-seed falls, as the 95% intervals use
            removed = fall_removed(_mean(mixed["cf_acc_fall_seeds"]),
                                   _mean(row["cf_acc_fall_seeds"]))
            if removed is not None:
                out[f"{arm}_fall_removed"] = removed
    if "dynamic_fall_removed" in out:  # the goal for dynamic curation
        out["dynamic_meets_goal"] = meets_goal(out["dynamic_fall_removed"],
                                               out["dynamic_indist_minus_mixed"])
    mech = summary.get("mechanism")
    if mech:
        out["mechanism_verdict"] = mechanism_verdict(mech)
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _indist(row: dict) -> float:
    """Mean final accuracy on held-out C and C+S items (seed-mean curve)."""
    return (row["c_acc_final"] + row["cs_acc_final"]) / 2


def _corr(xs: list[float], ys: list[float]) -> float:
    """Pearson correlation (0 when either series is constant)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sx = sum((x - mx) ** 2 for x in xs) ** 0.5
    sy = sum((y - my) ** 2 for y in ys) ** 0.5
    return sxy / (sx * sy) if sx > 0 and sy > 0 else 0.0


def _tracking_heads(records: list[dict], threshold: float = 0.5) -> dict:
    """One seed: the heads whose context attention tracks counterfactual accuracy over the
    run (Pearson r > threshold), and how much context attention they lose after the peak.
    Heads are matched within a seed only: a head's index means nothing across seeds."""
    cf = [r["cf_acc"] for r in records]
    peak = max(range(len(cf)), key=lambda i: (cf[i], -i))
    heads = []
    for layer, row in enumerate(records[0]["attn_context_heads"]):
        for head in range(len(row)):
            series = [r["attn_context_heads"][layer][head] for r in records]
            heads.append({"head": f"L{layer}H{head}", "r": _corr(series, cf),
                          "at_peak": series[peak], "final": series[-1]})
    best = max(heads, key=lambda h: h["r"])
    tracking = [h for h in heads if h["r"] > threshold]
    drop = (sum(h["at_peak"] - h["final"] for h in tracking) / len(tracking)
            if tracking else 0.0)
    return {"best_head": best["head"], "best_r": best["r"], "n_tracking": len(tracking),
            "tracking_drop": drop}


def mechanism_summary(curve: list[dict], mixture: Mixture, train: str,
                      per_seed: list[list[dict]] | None = None) -> dict:
    """From `mixed`'s seed-mean curve: per layer, context and subject attention at the start,
    the peak of counterfactual accuracy and the end, and their correlation with it over
    steps; per example kind, the mean share-weighted gradient projection on context attention
    (layers summed) before and after the peak. With `per_seed` records carrying per-head
    attention: per seed, the head whose context attention tracks accuracy best, and the mean
    context attention the tracking heads (r > 0.5) lose from the peak to the end."""
    cf = [r["cf_acc"] for r in curve]
    peak = max(range(len(cf)), key=lambda i: (cf[i], -i))
    out: dict = {"train": train, "peak_step": curve[peak]["step"]}
    for layer in range(len(curve[0]["attn_context_layers"])):
        for name in ("attn_context", "attn_subject"):
            series = [r[f"{name}_layers"][layer] for r in curve]
            out[f"L{layer}_{name}_start"] = series[0]
            out[f"L{layer}_{name}_at_peak"] = series[peak]
            out[f"L{layer}_{name}_final"] = series[-1]
            out[f"L{layer}_{name}_corr_cf_acc"] = _corr(series, cf)
    shares = {"C": mixture.c, "C+S": mixture.cs, "S": mixture.s}
    for kind, share in shares.items():
        key = f"grad_ctx_{kind}"
        if key not in curve[0]:
            continue
        total = [share * sum(r[key]) for r in curve]
        out[f"grad_{kind}_before_peak"] = sum(total[1:peak + 1]) / max(1, peak)
        out[f"grad_{kind}_after_peak"] = sum(total[peak + 1:]) / max(1, len(total) - peak - 1)
    if per_seed and all("attn_context_heads" in recs[0] for recs in per_seed):
        rows = [_tracking_heads(recs) for recs in per_seed]
        for key in rows[0]:
            out[f"{key}_seeds"] = [row[key] for row in rows]
    return out


def mechanism_verdict(m: dict) -> str:
    """Where the fall comes from, in a few sentences."""
    layers = sorted({k.split("_")[0] for k in m if k.startswith("L")})
    ctx = {layer: {part: m[f"{layer}_attn_context_{part}"] for part in
                   ("start", "at_peak", "final", "corr_cf_acc")} for layer in layers}
    drops = {layer: ctx[layer]["at_peak"] - ctx[layer]["final"] for layer in layers}
    top = max(layers, key=lambda layer: drops[layer])
    pull = m.get("grad_C+S_after_peak")
    push = m.get("grad_C_after_peak")
    grads = (f" After the peak the C+S examples' gradient {'lowers' if pull < 0 else 'raises'} "
             f"context attention (share-weighted rate {pull:.2e} per step) and the C "
             f"examples' {'raises' if push > 0 else 'lowers'} it ({push:.2e})."
             if pull is not None and push is not None else "")
    frozen = (" Only q_proj and k_proj train, so values and MLPs cannot write the memorized "
              "answer over the copied one: the fall can only come from attention."
              if m["train"] == "qk_only" else "")
    if "tracking_drop_seeds" in m:
        n = len(m["tracking_drop_seeds"])
        leaving = sum(d >= 0.05 for d in m["tracking_drop_seeds"])
        head = (f"{'The fall comes from' if 2 * leaving > n else 'Only in part from'} "
                f"attention leaving the context in particular heads: in {leaving} of {n} seeds "
                f"the heads whose context attention tracks counterfactual accuracy (r > 0.5; "
                f"best r per seed {', '.join(f'{r:.2f}' for r in m['best_r_seeds'])}) lose "
                f"at least 0.05 of it after the peak (mean loss per seed "
                f"{', '.join(f'{d:.2f}' for d in m['tracking_drop_seeds'])}), while the head "
                f"mean moves little ({top}: {ctx[top]['at_peak']:.2f} at the peak -> "
                f"{ctx[top]['final']:.2f}), other heads moving the other way.")
    elif drops[top] > 0.02 and ctx[top]["corr_cf_acc"] > 0.5:
        head = (f"The fall comes from attention leaving the context, as in the theory: "
                f"{top} context attention goes {ctx[top]['start']:.2f} -> "
                f"{ctx[top]['at_peak']:.2f} at the peak -> {ctx[top]['final']:.2f} and "
                f"tracks counterfactual accuracy (r = {ctx[top]['corr_cf_acc']:.2f}).")
    else:
        head = (f"Context attention (head mean) does not explain the fall: it drops by at most "
                f"{drops[top]:.2f} after the peak ({top}, r = {ctx[top]['corr_cf_acc']:.2f} "
                "with counterfactual accuracy).")
    return head + grads + frozen
