"""The mechanism figure of `inversion-tiny`, for the `mixed` arm (seed means).

Left: counterfactual accuracy with the answer position's attention on the context, one line
per layer (the head mean), so one sees whether accuracy falls when attention leaves the
context. Right: the per-kind gradient projections D_k (see
`experiments.inversion_tiny.mechanism`), each
weighted by its kind's share of the mixture: the rate at which that kind's part of a training
step raises (> 0) or lowers (< 0) context attention, layers summed. Drawn from metrics.jsonl.
"""

from __future__ import annotations

from pathlib import Path

from knowflow.experiments.inversion_tiny.curve_figures import load_curves, mean_series
from knowflow.report.figures import save, subplots
from knowflow.store.identity import CONFIG
from knowflow.store.readers import read_json

SHARES = {"C": "c", "C+S": "cs", "S": "s"}
COLORS = {"C": "C0", "C+S": "C3", "S": "C2", "CF": "C4"}


def mechanism_figure(run_dir: Path, arm: str = "mixed") -> Path | None:
    seeds = load_curves(Path(run_dir)).get(arm)
    if not seeds:
        return None
    first = next(iter(seeds.values()))[0]
    layers = len(first.get("attn_context_layers", []))
    mix = read_json(Path(run_dir) / CONFIG).get("mixture", {})
    fig, ax = subplots(2, width=5.2, height=3.6)
    a = ax[0, 0]
    steps, cf = mean_series(seeds, "cf_acc")
    a.plot(steps, cf, color="k", linewidth=2.2, label="cf accuracy")
    for layer in range(layers):
        s, v = mean_series(seeds, "attn_context_layers", layer)
        a.plot(s, v, color=f"C{layer}", label=f"attention on context, L{layer}")
        s, v = mean_series(seeds, "attn_subject_layers", layer)
        a.plot(s, v, color=f"C{layer}", linestyle=":", label=f"attention on subject, L{layer}")
    a.set_xlabel("finetuning step")
    a.set_ylim(-0.02, 1.02)
    a.set_title(f"{arm}: accuracy and where the answer position looks", fontsize=10)
    a.legend(fontsize=7)
    b = ax[0, 1]
    for kind, share_key in SHARES.items():
        key = f"grad_ctx_{kind}"
        if key not in first:
            continue
        share = mix.get(share_key, mix.get(f"share_{share_key}", 1.0))  # older runs: share_c
        per_layer = [mean_series(seeds, key, layer) for layer in range(layers)]
        s = per_layer[0][0]
        total = [share * sum(p[1][i] for p in per_layer) for i in range(len(s))]
        b.plot(s, total, color=COLORS[kind], label=f"{kind} (share {share:g})")
    b.axhline(0, color="k", linewidth=0.8)
    b.set_yscale("symlog", linthresh=1e-3)
    b.set_xlabel("finetuning step")
    b.set_title("d(context attention)/dt from each kind's gradient", fontsize=10)
    if b.get_legend_handles_labels()[0]:
        b.legend(fontsize=7)
    return save(fig, Path(run_dir) / "figures" / "4_mechanism.png")
