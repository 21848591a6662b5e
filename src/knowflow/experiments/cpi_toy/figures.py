"""Figures for `cpi-toy`, drawn from the run's metrics.jsonl (one figure per part)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from knowflow.report.figures import save, series, subplots
from knowflow.store.identity import METRICS
from knowflow.store.readers import read_jsonl


def _by_arm(run_dir: Path) -> dict[tuple[str, str], list[dict]]:
    arms: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for rec in read_jsonl(run_dir / METRICS):
        arms[(rec["part"], rec["arm"])].append(rec)
    return arms


def _inversion(recs: list[dict], path: Path, title: str) -> Path:
    fig, ax = subplots(3)
    for key, label in (("mc", "M_C (p of context answer)"), ("cf_acc", "counterfactual acc"),
                       ("param_acc", "parametric acc")):
        ax[0, 0].plot(*series(recs, key), label=label)
    ax[0, 0].set_title(f"{title}: counterfactual test")
    for part in ("context", "subject", "relation"):
        ax[0, 1].plot(*series(recs, f"attn_{part}_test"), label=part)
    ax[0, 1].set_title("attention of r (test)")
    for key, label in (("proj_theta_C", "theta_C proj."), ("proj_theta_S", "theta_S proj.")):
        ax[0, 2].plot(*series(recs, key), label=label)
    ax[0, 2].axhline(0, color="k", lw=0.6)
    ax[0, 2].set_title("theta^T (-grad W_KQ) phi(r)")
    ax[0, 2].set_yscale("symlog", linthresh=1e-4)
    for a in ax.flat:
        a.set_xlabel("finetuning step")
        a.legend(fontsize=8)
    return save(fig, path)


def _compare(arms: dict[str, list[dict]], keys: list[tuple[str, str]], path: Path,
             title: str) -> Path:
    fig, ax = subplots(len(keys))
    for i, (key, label) in enumerate(keys):
        for name, recs in arms.items():
            steps, values = series(recs, key)
            if steps:
                ax[0, i].plot(steps, values, label=name)
        ax[0, i].set_title(label)
        ax[0, i].set_xlabel("finetuning step")
        ax[0, i].legend(fontsize=8)
    fig.suptitle(title)
    return save(fig, path)


def plot_cpi_toy(run_dir: Path) -> list[Path]:
    arms = _by_arm(Path(run_dir))
    out = Path(run_dir) / "figures"
    paths = []
    mixed = arms.get(("inversion", "mixed"))
    if mixed:
        paths.append(_inversion(mixed, out / "1_inversion.png", "C + C+S, W_KQ only"))
    base = {"C + C+S": mixed} if mixed else {}
    if ("c_only", "c_only") in arms:
        paths.append(_compare({**base, "C only": arms[("c_only", "c_only")]},
                              [("mc", "M_C"), ("attn_context_test", "attention on context")],
                              out / "2_c_only.png", "C only: no inversion"))
    if ("with_s", "with_s") in arms:
        paths.append(_compare({**base, "+ S points": arms[("with_s", "with_s")]},
                              [("mc", "M_C"), ("attn_subject_test", "attention on subject (test)"),
                               ("attn_subject_C+S", "attention on subject (C+S train)")],
                              out / "3_with_s.png", "memorized S points (Prop. 2)"))
    if ("train_v", "train_v") in arms:
        paths.append(_compare({"W_KQ only": mixed or [], "W_KQ + W_V": arms[("train_v",
                                                                              "train_v")]},
                              [("mc", "M_C"), ("attn_context_test", "attention on context"),
                               ("value_conf_C+S", "C+S subject value: p(its context)")],
                              out / "4_train_v.png", "trainable W_V (Prop. 3)"))
    mitigations = {name: recs for (part, name), recs in arms.items() if part == "mitigations"}
    if mitigations:
        paths.append(_compare(mitigations, [("mc", "M_C"), ("cf_acc", "counterfactual acc"),
                                            ("attn_context_test", "attention on context")],
                              out / "5_mitigations.png", "mitigations"))
    return paths
