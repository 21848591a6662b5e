"""Figures for `inversion-tiny`, drawn from the run's metrics.jsonl.

1. Counterfactual accuracy per arm over finetuning steps: the seed mean and its spread (min to
   max over seeds). 2. Attention mass from the answer position to the context and to the
   subject on the counterfactual set, per layer (seed mean), for each arm. 3. The other
   accuracies (parametric, held-out C and C+S, recall without context) per arm.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from knowflow.io import read_jsonl
from knowflow.report.figures import save, subplots
from knowflow.runs import METRICS


def _curves(run_dir: Path) -> dict[str, dict[int, list[dict]]]:
    arms: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for rec in read_jsonl(Path(run_dir) / METRICS):
        arms[rec["arm"]][rec["seed"]].append(rec)
    return arms


def _stack(seeds: dict[int, list[dict]], key: str, layer: int | None = None
           ) -> tuple[list[int], list[list[float]]]:
    """Steps and, per step, the values over seeds."""
    runs = list(seeds.values())
    steps = [r["step"] for r in runs[0]]
    values = [[(run[i][key][layer] if layer is not None else run[i][key]) for run in runs]
              for i in range(len(steps))]
    return steps, values


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _cf_figure(arms: dict, path: Path) -> Path:
    fig, ax = subplots(1, width=7.0, height=4.2)
    a = ax[0, 0]
    drawn: list[list[float]] = []
    for name, seeds in arms.items():
        steps, values = _stack(seeds, "cf_acc")
        mean = [_mean(v) for v in values]
        same = mean in drawn  # an arm that is another's job (qk_only when training QK only)
        drawn.append(mean)
        label = f"{name} ({len(seeds)} seeds){' = an arm above' if same else ''}"
        line, = a.plot(steps, mean, linestyle=(0, (3, 3)) if same else "-", label=label)
        a.fill_between(steps, [min(v) for v in values], [max(v) for v in values],
                       color=line.get_color(), alpha=0.15)
    a.set_xlabel("finetuning step")
    a.set_ylabel("counterfactual accuracy (answer = context)")
    a.set_ylim(-0.02, 1.02)
    a.set_title("held-out memorized subjects, context contradicts memory")
    a.legend(fontsize=8)
    return save(fig, path)


def _attention_figure(arms: dict, path: Path) -> Path:
    names = list(arms)
    fig, ax = subplots(len(names), width=3.6, height=3.2)
    for i, name in enumerate(names):
        seeds = arms[name]
        n_layers = len(next(iter(seeds.values()))[0]["attn_context"])
        for layer in range(n_layers):
            for key, style in (("attn_context", "-"), ("attn_subject", "--")):
                steps, values = _stack(seeds, key, layer)
                ax[0, i].plot(steps, [_mean(v) for v in values], style,
                              color=f"C{layer}", label=f"L{layer} {key[5:]}")
        ax[0, i].set_title(f"{name}: attention of answer pos.")
        ax[0, i].set_xlabel("finetuning step")
        ax[0, i].set_ylim(-0.02, 1.02)
        ax[0, i].legend(fontsize=7)
    return save(fig, path)


def _accuracy_figure(arms: dict, path: Path) -> Path:
    keys = [("param_acc", "parametric answer on CF set"), ("c_acc", "held-out C"),
            ("cs_acc", "held-out C+S"), ("recall_acc", "recall, no context")]
    fig, ax = subplots(len(keys), width=3.6, height=3.2)
    for i, (key, title) in enumerate(keys):
        for name, seeds in arms.items():
            steps, values = _stack(seeds, key)
            ax[0, i].plot(steps, [_mean(v) for v in values], label=name)
        ax[0, i].set_title(title)
        ax[0, i].set_xlabel("finetuning step")
        ax[0, i].set_ylim(-0.02, 1.02)
        ax[0, i].legend(fontsize=7)
    return save(fig, path)


def plot_inversion_tiny(run_dir: Path) -> list[Path]:
    arms = _curves(Path(run_dir))
    out = Path(run_dir) / "figures"
    if not arms:
        return []
    return [_cf_figure(arms, out / "1_counterfactual_accuracy.png"),
            _attention_figure(arms, out / "2_attention.png"),
            _accuracy_figure(arms, out / "3_accuracies.png")]
