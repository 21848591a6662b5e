"""Figures for `inversion-tiny`, drawn from the run's metrics.jsonl.

1. Counterfactual accuracy per arm over finetuning steps: each seed as a thin line under the
   bold seed mean (same colour), the mean's peak marked with a dot and its step and value.
   An arm whose curves equal an arm drawn before (qk_only under QK-only training is `mixed`'s
   job, read back) is drawn as one dashed mean line, so it neither hides nor doubles the other.
2. Attention mass from the answer position to the context and to the subject on the
   counterfactual set, per layer (seed mean), one panel per arm.
3. The other accuracies (parametric, held-out C and C+S, recall without context) per arm.

Records are read by key: unknown keys are ignored, and a record missing a key is left out of
that key's curves (never a crash), so new metrics can be added to the run without touching this.
"""

from __future__ import annotations

import math
from pathlib import Path

from knowflow.experiments.inversion_tiny.curve_figures import (
    Curves,
    load_curves,
    mean_series,
    seed_series,
)
from knowflow.experiments.inversion_tiny.mechanism_figures import mechanism_figure
from knowflow.report.figures import save, subplots
from knowflow.store.identity import METRICS
from knowflow.store.run_folder import read_result


def _peak_label_offsets(peaks: list[tuple[float, float]], x_span: float) -> list[float]:
    """Vertical offsets (points) that keep peak labels of nearby peaks from overlapping."""
    offsets: list[float] = []
    for i, (x, y) in enumerate(peaks):
        near = [offsets[j] for j, (x2, y2) in enumerate(peaks[:i])
                if abs(x2 - x) < 0.18 * x_span and abs(y2 - y) < 0.08]
        offset = 6.0
        while any(abs(offset - o) < 11 for o in near):
            offset += 11
        offsets.append(offset)
    return offsets


def cf_figure(arms: Curves):
    """Counterfactual accuracy: per-seed lines, the bold seed mean and its peak, per arm.
    Returns the matplotlib figure (lines carry gids `arm/seed<s>`, `arm/mean`, `arm/peak`)."""
    fig, ax = subplots(1, width=8.6, height=5.0)
    a = ax[0, 0]
    drawn: dict[str, list[float]] = {}
    peaks: list[tuple[str, int, float, str]] = []
    for i, (name, seeds) in enumerate(arms.items()):
        steps, mean = mean_series(seeds, "cf_acc")
        if not steps:
            continue
        color = f"C{i % 10}"
        twin = next((other for other, curve in drawn.items() if curve == mean), None)
        drawn[name] = mean
        if twin is not None:
            line, = a.plot(steps, mean, color=color, linewidth=2.0, linestyle=(0, (4, 3)),
                           label=f"{name} = {twin} (same job)")
            line.set_gid(f"{name}/mean")
            continue
        for seed, recs in seeds.items():
            line, = a.plot(*seed_series(recs, "cf_acc"), color=color, linewidth=0.8,
                           alpha=0.35, zorder=2)
            line.set_gid(f"{name}/seed{seed}")
        top = max(range(len(mean)), key=mean.__getitem__)
        own = [seed_series(recs, "cf_acc")[1] for recs in seeds.values()]
        fall = sum(max(v) - v[-1] for v in own) / len(own)  # the summary's `cf_acc_fall`
        line, = a.plot(steps, mean, color=color, linewidth=2.6, zorder=3,
                       label=f"{name} ({len(seeds)} seeds): fall {fall:.2f}")
        line.set_gid(f"{name}/mean")
        dot, = a.plot([steps[top]], [mean[top]], "o", color=color, markersize=7,
                      markeredgecolor="white", markeredgewidth=1.2, zorder=5)
        dot.set_gid(f"{name}/peak")
        peaks.append((name, steps[top], mean[top], color))
    span = max(1, max(a.get_xlim()) - min(a.get_xlim()))
    offsets = _peak_label_offsets([(x, y) for _, x, y, _ in peaks], span)
    for (_, x, y, color), dy in zip(peaks, offsets, strict=True):
        a.annotate(f"peak {y:.2f} @ {x}", (x, y), xytext=(6, dy), textcoords="offset points",
                   fontsize=8, color=color, fontweight="bold", zorder=6,
                   bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                         "alpha": 0.8})
    a.set_xlabel("finetuning step")
    a.set_ylabel("counterfactual accuracy (answer = context)")
    a.set_ylim(-0.02, 1.15)
    a.set_title("held-out memorized subjects, context contradicts memory\n"
                "thin: each seed; bold: seed mean; dot: peak of the mean; "
                "fall: mean of the seeds' own falls", fontsize=10)
    if peaks or drawn:
        a.legend(fontsize=8, loc="lower right")
    return fig


def _grid(n: int, max_cols: int = 3, width: float = 3.6, height: float = 3.0):
    ncols = max(1, min(n, max_cols))
    fig, ax = subplots(ncols, nrows=math.ceil(max(n, 1) / ncols), width=width, height=height)
    panels = list(ax.flat)
    for extra in panels[n:]:
        extra.set_visible(False)
    return fig, panels


def _n_layers(seeds: dict[int, list[dict]], key: str) -> int:
    return max((len(r[key]) for recs in seeds.values() for r in recs
                if isinstance(r.get(key), list)), default=0)


def _attention_figure(arms: Curves, path: Path) -> Path:
    names = list(arms)
    fig, panels = _grid(len(names))
    for name, a in zip(names, panels, strict=False):
        seeds = arms[name]
        for layer in range(_n_layers(seeds, "attn_context_layers")):
            for key, style in (("attn_context_layers", "-"), ("attn_subject_layers", "--")):
                steps, mean = mean_series(seeds, key, layer)
                if steps:
                    a.plot(steps, mean, style, color=f"C{layer}", label=f"L{layer} {key[5:]}")
        a.set_title(f"{name}: attention of answer pos.", fontsize=10)
        a.set_xlabel("finetuning step")
        a.set_ylim(-0.02, 1.02)
        if a.lines:
            a.legend(fontsize=7)
    return save(fig, path)


def _accuracy_figure(arms: Curves, path: Path) -> Path:
    keys = [("param_acc", "parametric answer on CF set"), ("c_acc", "held-out C"),
            ("cs_acc", "held-out C+S"), ("recall_acc", "recall, no context")]
    fig, panels = _grid(len(keys), max_cols=2)
    for (key, title), a in zip(keys, panels, strict=True):
        for i, (name, seeds) in enumerate(arms.items()):
            steps, mean = mean_series(seeds, key)
            if steps:
                a.plot(steps, mean, color=f"C{i % 10}", label=name)
        a.set_title(title, fontsize=10)
        a.set_xlabel("finetuning step")
        a.set_ylim(-0.02, 1.02)
        if a.lines:
            a.legend(fontsize=7)
    return save(fig, path)


def plot_inversion_tiny(run_dir: Path) -> list[Path]:
    arms = load_curves(Path(run_dir))
    out = Path(run_dir) / "figures"
    if not arms:
        return []
    figures = [save(cf_figure(arms), out / "1_counterfactual_accuracy.png"),
               _attention_figure(arms, out / "2_attention.png"),
               _accuracy_figure(arms, out / "3_accuracies.png")]
    mechanism = mechanism_figure(Path(run_dir))
    return figures + ([mechanism] if mechanism is not None else [])


def tiny_heads_figure(run_dir: Path) -> list[Path]:
    """`inversion-tiny-heads`: per seed, counterfactual accuracy at the peak, at the end and
    at the end with the context heads steered (held-out half), and the head sets' overlap."""
    path = Path(run_dir) / METRICS
    if not path.exists():
        return []
    seeds = read_result(run_dir, METRICS)
    fig, axes = subplots(2, width=4.6, height=3.4)
    ax = axes[0, 0]
    xs = list(range(len(seeds)))
    for offset, key, label in ((-0.25, "cf_acc_peak", "peak"), (0.0, "cf_acc_final", "end"),
                               (0.25, "cf_acc_steered", "end, heads steered")):
        ax.bar([x + offset for x in xs], [s["steering"][key] for s in seeds], width=0.25,
               label=label)
    ax.set_xticks(xs, [f"seed {s['seed']}" for s in seeds])
    ax.set_ylabel("counterfactual accuracy (held-out half)")
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    ax.bar([x - 0.2 for x in xs], [len(s["context_heads"]) for s in seeds], width=0.2,
           label="context heads (sweep at peak)")
    ax.bar(xs, [len(s["tracking_heads"]) for s in seeds], width=0.2,
           label="tracking heads (attention)")
    ax.bar([x + 0.2 for x in xs], [s["overlap"] for s in seeds], width=0.2, label="both")
    ax.set_xticks(xs, [f"seed {s['seed']}" for s in seeds])
    ax.set_ylabel("heads")
    ax.legend(fontsize=8)
    return [save(fig, Path(run_dir) / "figures" / "tiny_heads.png")]
