"""Figures for `ocr-toy`, drawn from the run's metrics.jsonl and ov_blocks.npz.

1_training.png     losses, test accuracy, margin and norms vs step, factorized vs merged
2_wov_blocks.png   the final effective W_OV (seed 0): subject -> fact, subject -> implication,
                   and fact -> implication over the test subjects
3_rank_sweep.png   (rank_sweep) final losses and accuracy against the factorized rank
4_families.png     (families) test accuracy and loss per family, causal vs spurious
5_fraction_sweep.png  (fraction_sweep) test implication loss and accuracy vs train fraction
Curves are seed means with the min-max range over seeds shaded.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from knowflow.experiments.ocr_toy.world import CAUSAL_FAMILIES
from knowflow.report.figures import save, subplots
from knowflow.store.identity import CONFIG, METRICS
from knowflow.store.readers import read_json, read_jsonl

OV_BLOCKS = "ov_blocks.npz"
COLORS = {"factorized": "tab:blue", "merged": "tab:red"}


def _by_part(records: list[dict]) -> dict[str, list[dict]]:
    parts: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        parts[rec["part"]].append(rec)
    return parts


def seed_band(recs: list[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                   np.ndarray]:
    """(steps, mean, min, max) over seeds of `key` at each evaluation step."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for rec in recs:
        if rec.get(key) is not None:
            by_step[rec["step"]].append(rec[key])
    steps = np.array(sorted(by_step))
    vals = [np.array(by_step[s]) for s in steps]
    return (steps, np.array([v.mean() for v in vals]), np.array([v.min() for v in vals]),
            np.array([v.max() for v in vals]))


def _final(recs: list[dict], key: str) -> float:
    last = max(r["step"] for r in recs)
    return float(np.mean([r[key] for r in recs if r["step"] == last]))


def _training(parts: dict[str, list[dict]], log_k: float | None, path: Path) -> Path:
    panels = [("train_fact_loss", "train fact loss", True),
              ("train_impl_loss", "train implication loss", True),
              ("test_impl_loss", "test implication loss", True),
              ("test_impl_acc", "test implication accuracy", False),
              ("test_margin", "test margin (correct - best wrong)", False),
              ("nuclear_norm", "||W_OV||_* (solid), ||W_OV||_F (dashed)", True)]
    fig, ax = subplots(3, 2)
    for i, (key, title, logy) in enumerate(panels):
        a = ax.flat[i]
        for name in ("factorized", "merged"):
            if name not in parts:
                continue
            steps, mean, lo, hi = seed_band(parts[name], key)
            a.plot(steps, mean, color=COLORS[name], label=name)
            a.fill_between(steps, lo, hi, color=COLORS[name], alpha=0.2)
            if key == "nuclear_norm":
                steps, mean, _, _ = seed_band(parts[name], "frobenius_norm")
                a.plot(steps, mean, color=COLORS[name], ls="--")
        if key == "test_impl_loss" and log_k is not None:
            a.axhline(log_k, color="k", lw=0.8, ls=":", label="log K (chance)")
        if key == "test_margin":
            a.axhline(0, color="k", lw=0.6)
        if logy:
            a.set_yscale("log")
        a.set_title(title, fontsize=10)
        a.set_xlabel("step")
        a.legend(fontsize=8)
    return save(fig, path)


def _heat(a, mat: np.ndarray, title: str, xlabel: str, ylabel: str, fig) -> None:
    lim = float(np.abs(mat).max()) or 1.0
    im = a.imshow(mat, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto",
                  interpolation="nearest")
    fig.colorbar(im, ax=a, fraction=0.046)
    a.set_title(title, fontsize=9)
    a.set_xlabel(xlabel, fontsize=8)
    a.set_ylabel(ylabel, fontsize=8)
    a.grid(False)
    a.xaxis.set_major_locator(MaxNLocator(integer=True))
    a.yaxis.set_major_locator(MaxNLocator(integer=True))


def _blocks(npz, path: Path) -> Path | None:
    models = [m for m in ("factorized", "merged") if f"{m}__subject_fact" in npz.files]
    if not models:
        return None
    fig, ax = subplots(3, len(models), width=4.6, height=3.6)
    for row, name in enumerate(models):
        shown = npz[f"{name}__subject_shown"]
        _heat(ax[row, 0], npz[f"{name}__subject_fact"], f"{name}: subject -> fact",
              "subject (by family, fact; shown first)", "fact token", fig)
        _heat(ax[row, 1], npz[f"{name}__subject_impl"],
              f"{name}: subject -> implication ({int(shown.sum())} shown)",
              "subject (by family, fact; shown first)", "implication token", fig)
        _heat(ax[row, 2], npz[f"{name}__fact_impl"],
              f"{name}: fact -> implication (test subjects)", "fact b",
              "implication token c", fig)
        pairing = npz[f"{name}__pairing"]  # (F, K): the true c of each b
        n_fam, k = pairing.shape
        cols = np.arange(n_fam * k)
        rows = (np.arange(n_fam)[:, None] * k + pairing).flatten()
        ax[row, 2].scatter(cols, rows, s=30, facecolors="none", edgecolors="k", lw=0.8,
                           label="true pairing")
        ax[row, 2].legend(fontsize=7, loc="lower left")
    return save(fig, path)


def _rank_sweep(parts: dict[str, list[dict]], path: Path) -> Path | None:
    fact = {recs[0]["rank"]: recs for recs in parts.values() if recs[0]["model"] ==
            "factorized" and recs[0]["part"] != "merged"}
    if len(fact) < 2:
        return None
    ranks = sorted(fact)
    fig, ax = subplots(3)
    for i, (key, title, logy) in enumerate((("train_loss", "final train loss", True),
                                            ("test_impl_loss", "final test impl. loss", True),
                                            ("test_impl_acc", "final test impl. accuracy",
                                             False))):
        a = ax[0, i]
        a.plot(ranks, [_final(fact[r], key) for r in ranks], "o-", color=COLORS["factorized"],
               label="factorized, rank r")
        if "merged" in parts:
            a.axhline(_final(parts["merged"], key), color=COLORS["merged"], ls="--",
                      label="merged W_OV")
        a.set_xscale("log", base=2)
        if logy:
            a.set_yscale("log")
        a.set_xlabel("rank r")
        a.set_title(title, fontsize=10)
        a.legend(fontsize=8)
    return save(fig, path)


def _chance(a, key: str, log_k: float) -> None:
    """Dotted line at chance: accuracy 1/K, loss log K (uniform over the K candidates)."""
    value = float(np.exp(-log_k)) if "acc" in key else log_k
    a.axhline(value, color="k", lw=0.8, ls=":", label="chance (1/K, log K)")


def _families(parts: dict[str, list[dict]], path: Path, log_k: float) -> Path | None:
    if "factorized" not in parts:
        return None
    names = [k[len("test_acc_"):] for k in parts["factorized"][0] if k.startswith("test_acc_")]
    fig, ax = subplots(2, width=5.5)
    x = np.arange(len(names))
    for i, (prefix, title) in enumerate((("test_acc_", "test implication accuracy"),
                                         ("test_loss_", "test implication loss"))):
        a = ax[0, i]
        for j, model in enumerate(("factorized", "merged")):
            if model in parts:
                vals = [_final(parts[model], prefix + n) for n in names]
                a.bar(x + (j - 0.5) * 0.4, vals, 0.4, color=COLORS[model], label=model)
        a.set_xticks(x, [n + (" (causal)" if n in CAUSAL_FAMILIES else "") for n in names],
                     rotation=30, ha="right", fontsize=8)
        _chance(a, prefix, log_k)
        if "loss" in prefix:
            a.set_yscale("log")
        a.set_title(title, fontsize=10)
        a.legend(fontsize=7, loc="center right")
    return save(fig, path)


def _fraction_sweep(parts: dict[str, list[dict]], path: Path, log_k: float) -> Path | None:
    by_model: dict[str, dict[float, list[dict]]] = defaultdict(dict)
    for recs in parts.values():
        by_model[recs[0]["model"]][recs[0]["train_fraction_realized"]] = recs
    if len(by_model.get("factorized", {})) < 2:
        return None
    fig, ax = subplots(2)
    for i, (key, title) in enumerate((("test_impl_loss", "final test implication loss"),
                                      ("test_impl_acc", "final test implication accuracy"))):
        a = ax[0, i]
        for model, runs in by_model.items():
            fr = sorted(runs)
            a.plot(fr, [_final(runs[f], key) for f in fr], "o-", color=COLORS[model],
                   label=model)
        _chance(a, key, log_k)
        if "loss" in key:
            a.set_yscale("log")
        a.set_xlabel("share of subjects with implications shown (realized)")
        a.set_title(title, fontsize=10)
        a.legend(fontsize=8)
    return save(fig, path)


def plot_ocr_toy(run_dir: Path) -> list[Path]:
    run_dir = Path(run_dir)
    out = run_dir / "figures"
    records = read_jsonl(run_dir / METRICS)
    parts = _by_part(records)
    config = read_json(run_dir / CONFIG)
    study = config.get("study", "main")
    log_k = float(np.log(config["world"]["n_answers"]))
    paths = [_training(parts, log_k, out / "1_training.png")]
    if (run_dir / OV_BLOCKS).exists():
        with np.load(run_dir / OV_BLOCKS) as npz:
            paths.append(_blocks(npz, out / "2_wov_blocks.png"))
    if study == "rank_sweep":
        paths.append(_rank_sweep(parts, out / "3_rank_sweep.png"))
    if study == "families":
        paths.append(_families(parts, out / "4_families.png", log_k))
    if study == "fraction_sweep":
        paths.append(_fraction_sweep(parts, out / "5_fraction_sweep.png", log_k))
    return [p for p in paths if p is not None]
