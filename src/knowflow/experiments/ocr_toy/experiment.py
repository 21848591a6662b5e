"""`ocr-toy`: out-of-context reasoning in a one-layer attention-only model, factorized vs merged.

Both models train on every fact (s, r1) -> b and on the implications (s, r2) -> c of a
`train_fraction` of subjects, and are tested on the implications of the rest. The factorized
model (W_O W_V^T) infers them; the merged one (W_OV) stays at chance, because gradient descent
leaves the unseen (c, s) entries where nothing pushes them (Huang et al. 2025).

Studies (`--set study=...`):
  main            factorized vs merged at the default size, all seeds (`knowflow run ocr-toy`)
  rank_sweep      the factorized model at ranks 2, 4, ..., d (plus the merged reference)
  families        main, tabulated per family: causal city -> language against the four
                  spurious pairings (a counterfactual implication is inferred just as readily)
  fraction_sweep  both models across training fractions of shown implications
Each part (one model at one setting, all seeds batched) is checkpointed; `--resume` redoes only
the missing ones. Seeds train batched; the parts of a sweep run in parallel processes, one
torch thread each.
"""

from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from knowflow.config import require
from knowflow.experiments.ocr_toy.figures import OV_BLOCKS, plot_ocr_toy
from knowflow.experiments.ocr_toy.model import ToyOCR
from knowflow.experiments.ocr_toy.train import OcrTrainConfig, train
from knowflow.experiments.ocr_toy.world import (
    CAUSAL_FAMILIES,
    OcrData,
    datasets,
    family_names,
    make_world,
)
from knowflow.experiments.parallel import run_jobs
from knowflow.experiments.registry import Summary, register
from knowflow.store.files import atomic_write_bytes, atomic_write_jsonl
from knowflow.store.identity import METRICS
from knowflow.store.run_folder import PartStore

log = logging.getLogger(__name__)

STUDIES = ("main", "rank_sweep", "families", "fraction_sweep")
FINAL_KEYS = ("train_loss", "train_fact_loss", "train_impl_loss", "test_impl_loss",
              "test_impl_loss_cand", "test_impl_acc", "test_mean_rank", "test_margin",
              "nuclear_norm", "frobenius_norm", "train_margin_min")


@dataclass(frozen=True)
class OcrWorldConfig:
    n_subjects: int = 77  # with the defaults below the vocabulary is d = 128 tokens
    n_families: int = 5  # the paper's five association types (at most 5 named, more numbered)
    n_answers: int = 4  # K: facts per family = implications per family (candidates)
    families_per_subject: int = 1
    train_fraction: float = 0.2  # share of each (family, fact) group with implications shown
    # (rounded per group, at least one: with the defaults one of ~4 subjects, 26% in all)
    seq_len: int = 3  # [s, r, <EOS>]; longer sequences pad with random noise tokens
    n_noise: int = 0  # distinct noise tokens (needed when seq_len > 3)


@dataclass(frozen=True)
class OcrModelConfig:
    rank: int | None = None  # factorized rank r; None = d (full)
    attention: Literal["linear", "softmax"] = "linear"
    train_kq: bool = False  # W_KQ fixed at kq_init (every token gets the same score)
    init_scale: float = 1e-2  # std of every initial weight entry (small: the implicit bias)
    kq_init: float = 1.0


@dataclass(frozen=True)
class SweepConfig:
    ranks: tuple[int, ...] = ()  # rank_sweep; empty = 2, 4, 8, ... up to d, and d
    # fraction_sweep; a (family, fact) group of n subjects shows round(f * n) of them, at
    # least 1 and at most n - 1, so with ~4 subjects per group only steps of ~1/4 resolve
    fractions: tuple[float, ...] = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class OcrToyConfig:
    study: Literal["main", "rank_sweep", "families", "fraction_sweep"] = "main"
    seeds: tuple[int, ...] = (0, 1, 2)
    dtype: Literal["float32", "float64"] = "float32"
    # processes, one torch thread each. Seeds are batched inside a part, so a study of two
    # parts (main, families) runs in this process: a spawned worker spends ~3 s importing
    # torch and knowflow, more than it saves. Sweeps (6-8 parts) use the workers.
    workers: int = 2
    world: OcrWorldConfig = field(default_factory=OcrWorldConfig)
    model: OcrModelConfig = field(default_factory=OcrModelConfig)
    train: OcrTrainConfig = field(default_factory=OcrTrainConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)

    def validate(self) -> None:
        w, m, t = self.world, self.model, self.train
        require(len(self.seeds) >= 1, "seeds", "give at least one seed")
        require(len(set(self.seeds)) == len(self.seeds), "seeds", "seeds must be distinct")
        require(w.n_families >= 1, "world.n_families", "must be at least 1")
        require(w.n_subjects >= w.n_families, "world.n_subjects",
                f"{w.n_subjects} subjects cannot fill {w.n_families} families "
                "(need at least one subject per family)")
        require(w.n_answers >= 2, "world.n_answers", "must be at least 2")
        require(1 <= w.families_per_subject <= w.n_families, "world.families_per_subject",
                "must lie between 1 and n_families")
        _require_fraction(w.train_fraction, "world.train_fraction")
        per_family = w.n_subjects * w.families_per_subject // w.n_families
        require(per_family >= 2 * w.n_answers, "world.n_subjects",
                f"each family has ~{per_family} subjects; every one of its {w.n_answers} facts "
                f"needs a train and a test subject, so at least {2 * w.n_answers} "
                "(raise n_subjects or families_per_subject, or lower n_answers)")
        require(w.seq_len >= 3, "world.seq_len", "must be at least 3 ([s, r, <EOS>])")
        require(w.seq_len == 3 or w.n_noise >= 1, "world.n_noise",
                "sequences longer than 3 need at least one noise token")
        require(w.n_noise >= 0, "world.n_noise", "must not be negative")
        d = vocab_dim(w)
        if m.rank is not None:
            require(1 <= m.rank <= d, "model.rank", f"must lie between 1 and d = {d}")
        for r in self.sweep.ranks:
            require(1 <= r <= d, "sweep.ranks", f"rank {r} is not between 1 and d = {d}")
        for f in self.sweep.fractions:
            _require_fraction(f, "sweep.fractions")
        require(m.init_scale > 0, "model.init_scale", "must be positive")
        require(t.steps >= 1, "train.steps", "must be at least 1")
        require(t.lr > 0, "train.lr", "must be positive")
        require(t.eval_every >= 1, "train.eval_every", "must be at least 1")
        require(t.weight_decay >= 0, "train.weight_decay", "must not be negative")
        require(self.workers >= 1, "workers", "must be at least 1")


def _require_fraction(value: float, name: str) -> None:
    require(0 < value < 1, name, f"must lie strictly between 0 and 1, got {value}")


def vocab_dim(w: OcrWorldConfig) -> int:
    """d: subjects, two relations per family, 2K answers per family, noise tokens, <EOS>."""
    return w.n_subjects + w.n_families * (2 + 2 * w.n_answers) + w.n_noise + 1


@dataclass(frozen=True)
class Part:
    """One model at one setting; all seeds train together."""

    name: str
    model: Literal["factorized", "merged"]
    rank: int | None
    train_fraction: float


def sweep_ranks(cfg: OcrToyConfig) -> list[int]:
    d = vocab_dim(cfg.world)
    if cfg.sweep.ranks:
        return sorted(set(cfg.sweep.ranks))
    return sorted({2 ** k for k in range(1, int(math.log2(d)) + 1)} | {d})


def parts_of(cfg: OcrToyConfig) -> list[Part]:
    frac, rank = cfg.world.train_fraction, cfg.model.rank
    parts = [Part("factorized", "factorized", rank, frac), Part("merged", "merged", None, frac)]
    if cfg.study == "rank_sweep":
        full = rank or vocab_dim(cfg.world)
        parts += [Part(f"rank_{r}", "factorized", r, frac) for r in sweep_ranks(cfg) if r != full]
    if cfg.study == "fraction_sweep":
        parts += [Part(f"fraction_{f:g}_{kind}", kind, rank if kind == "factorized" else None, f)
                  for f in distinct_fractions(cfg) for kind in ("factorized", "merged")]
    return parts


def distinct_fractions(cfg: OcrToyConfig) -> list[float]:
    """Sweep fractions whose rounded split differs from the default's and from each other's.

    The split rounds per (family, fact) group, so nearby fractions can show the very same
    subjects (a seed draws the same order whatever the fraction); those would be recomputed
    for nothing. Equal shown counts mean equal splits, since rounding is monotone in f.
    """
    w = cfg.world

    def shown(f: float) -> int:
        return int(make_world(w.n_subjects, w.n_families, w.n_answers, w.families_per_subject,
                              f, 0, w.n_noise).impl_train.sum())

    seen, out = {shown(w.train_fraction)}, []
    for f in sorted(set(cfg.sweep.fractions)):
        if shown(f) not in seen:
            seen.add(shown(f))
            out.append(f)
        else:
            log.info("fraction %g shows the same subjects as a fraction already run", f)
    return out


def _blocks(world, wov: np.ndarray) -> dict[str, np.ndarray]:
    """The final W_OV of one seed, cut into the blocks the heatmap figure draws.

    subject_fact / subject_impl: rows = each family's fact / implication tokens, columns =
    subjects ordered by (first family, fact, implication shown first). fact_impl[c, b]: the
    mean of W_OV[c, s] over test subjects s whose fact is b: which implication the model
    attaches to a fact it never saw implied for those subjects.
    """
    v = world.vocab
    first = world.member.float().argmax(1)  # (n_subjects,) first family of each subject
    rows = np.arange(v.n_subjects)
    fact0 = world.fact[rows, first].numpy()
    shown = world.impl_train[rows, first].numpy()
    order = np.lexsort((~shown, fact0, first.numpy()))
    fact_tok = v.fact_candidates().flatten().numpy()  # (F*K,)
    impl_tok = v.impl_candidates().flatten().numpy()  # (F*K,)
    fact_impl = np.zeros((len(impl_tok), len(fact_tok)), dtype=np.float32)
    for f in range(v.n_families):
        for b in range(v.n_answers):
            sel = (world.fact[:, f] == b) & world.member[:, f] & ~world.impl_train[:, f]
            if sel.any():
                fact_impl[:, f * v.n_answers + b] = wov[np.ix_(impl_tok, sel.numpy())].mean(1)
    return {"subject_fact": wov[np.ix_(fact_tok, order)],
            "subject_impl": wov[np.ix_(impl_tok, order)],
            "subject_shown": shown[order], "subject_family": first.numpy()[order],
            "fact_impl": fact_impl, "pairing": world.pairing.numpy()}


def run_part(cfg: OcrToyConfig, part: Part) -> tuple[list[dict], dict, dict[str, np.ndarray]]:
    """Build each seed's world, train the part's model on all seeds at once, summarize."""
    import torch

    torch.set_num_threads(1)
    w, m = cfg.world, cfg.model
    seeds = list(cfg.seeds)
    worlds = [make_world(w.n_subjects, w.n_families, w.n_answers, w.families_per_subject,
                         part.train_fraction, s, w.n_noise) for s in seeds]
    splits = [datasets(world, w.seq_len, s) for world, s in zip(worlds, seeds, strict=True)]
    train_data = OcrData.stack([tr for tr, _ in splits])
    test_data = OcrData.stack([te for _, te in splits])
    vocab = worlds[0].vocab
    realized = float(np.mean([(world.impl_train.sum() / world.member.sum()).item()
                              for world in worlds]))
    model = ToyOCR(vocab.dim, seeds, part.model == "factorized", part.rank, m.attention,
                   m.train_kq, m.init_scale, m.kq_init, getattr(torch, cfg.dtype))
    per_seed = train(model, train_data, test_data, vocab.impl_candidates(), cfg.train,
                     worlds[0].names)
    records = []
    for seed, recs in zip(seeds, per_seed, strict=True):
        for rec in recs:
            records.append({"part": part.name, "model": part.model, "rank": model.rank,
                            "train_fraction": part.train_fraction,
                            "train_fraction_realized": realized, "seed": seed, **rec})
    finals = [recs[-1] for recs in per_seed]
    summary = {k: float(np.mean([f[k] for f in finals])) for k in finals[0] if k != "step"}
    for norm in ("nuclear", "frobenius"):  # the max-margin view; undefined unless fitted
        summary[f"{norm}_per_margin"] = float(np.mean(
            [f[f"{norm}_norm"] / f["train_margin_min"] if f["train_margin_min"] > 0
             else float("nan") for f in finals]))
    summary.update(rank=model.rank, train_fraction=part.train_fraction,
                   train_fraction_realized=realized,
                   log_candidates=math.log(w.n_answers), n_train=len(train_data.answer[0]),
                   n_test=len(test_data.answer[0]),
                   per_seed={k: [f[k] for f in finals] for k in FINAL_KEYS})
    with torch.no_grad():
        wov = model.effective_ov()[0].double().numpy()
    return records, summary, _blocks(worlds[0], wov)


def _run_one(cfg: OcrToyConfig, part: Part):
    return part, *run_part(cfg, part)


def _save_blocks(store: PartStore, part: str, blocks: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **blocks)
    atomic_write_bytes(store.dir / f"{part}_ov.npz", buf.getvalue())


def _at_level(recs: list[dict], level: float, key: str) -> float:
    """`key` where the train loss first falls to `level`, interpolated linearly in
    log(train loss) between the two evaluations that bracket the crossing."""
    for prev, rec in zip(recs, recs[1:], strict=False):
        if rec["train_loss"] <= level:
            lo, hi = math.log(rec["train_loss"]), math.log(prev["train_loss"])
            t = 0.0 if hi == lo else (hi - math.log(level)) / (hi - lo)
            return prev[key] + min(max(t, 0.0), 1.0) * (rec[key] - prev[key])
    return recs[-1][key]


def matched_loss_norms(records: list[dict]) -> dict:
    """Norms of both models at the same train loss, seed by seed, then averaged over seeds.

    The level is the higher of the two final train losses (both models reach it); each
    model's norms are read where its train loss first falls to that level.
    """
    by: dict[tuple[str, int], list[dict]] = {}
    for rec in records:
        if rec["part"] in ("factorized", "merged"):
            by.setdefault((rec["part"], rec["seed"]), []).append(rec)
    seeds = sorted({s for _, s in by})
    out: dict[str, list[float]] = {}
    for seed in seeds:
        recs = {p: sorted(by[(p, seed)], key=lambda r: r["step"]) for p in ("factorized",
                                                                             "merged")}
        level = max(r[-1]["train_loss"] for r in recs.values())
        out.setdefault("matched_train_loss", []).append(level)
        for p, rs in recs.items():
            for key in ("nuclear_norm", "frobenius_norm", "step"):
                out.setdefault(f"{p}_{key}_at_matched_loss", []).append(_at_level(rs, level,
                                                                                   key))
    return {k: float(np.mean(v)) for k, v in out.items()}


def findings(summary: dict, records: list[dict]) -> dict:
    """The paper's claims, each checked against this run's numbers."""
    f, m = summary["factorized"], summary["merged"]
    out = {
        "factorized_test_impl_loss_below_0.1": f["test_impl_loss"] < 0.1,
        "factorized_test_impl_acc_is_1": f["test_impl_acc"] == 1.0,
        "merged_test_impl_loss_over_log_candidates": m["test_impl_loss"] / m["log_candidates"],
        "merged_test_impl_loss_at_least_0.9_log_candidates":
            m["test_impl_loss"] >= 0.9 * m["log_candidates"],
        "both_train_loss_below_0.05": max(f["train_loss"], m["train_loss"]) < 0.05,
        "test_margin_factorized": f["test_margin"], "test_margin_merged": m["test_margin"],
        "nuclear_per_margin_factorized": f["nuclear_per_margin"],
        "nuclear_per_margin_merged": m["nuclear_per_margin"],
        "frobenius_per_margin_factorized": f["frobenius_per_margin"],
        "frobenius_per_margin_merged": m["frobenius_per_margin"],
    }
    matched = matched_loss_norms(records)
    out.update(matched)
    out["factorized_nuclear_lower_at_matched_loss"] = (
        matched["factorized_nuclear_norm_at_matched_loss"]
        < matched["merged_nuclear_norm_at_matched_loss"])
    return {"verdict": verdict(out, f, m), **out}


def verdict(claims: dict, f: dict, m: dict) -> str:
    """One sentence for the report: does only the factorized model infer the held-out
    implications, with both models fitting their training set?"""
    numbers = (f"factorized test implication accuracy {f['test_impl_acc']:.3f} (loss "
               f"{f['test_impl_loss']:.3f}), merged {m['test_impl_acc']:.3f} (loss "
               f"{claims['merged_test_impl_loss_over_log_candidates']:.2f} x log #candidates)")
    if not claims["both_train_loss_below_0.05"]:
        head = "Inconclusive: a model did not fit its training set (train loss >= 0.05)"
    elif not claims["factorized_test_impl_loss_below_0.1"]:
        head = ("Not as the paper finds it: the factorized model does not infer the unseen "
                "implications (test loss >= 0.1)")
    elif not claims["merged_test_impl_loss_at_least_0.9_log_candidates"]:
        head = ("Not as the paper finds it: the merged model infers the unseen implications "
                "too (test loss < 0.9 x log #candidates)")
    else:
        head = ("Out-of-context reasoning as the paper finds it: only the factorized model "
                "infers the unseen implications")
    return f"{head}; {numbers}."


def family_summary(summary: dict, names: tuple[str, ...]) -> dict:
    """One row per (family, model): its test implication accuracy and loss."""
    return {f"{name}/{model}": {"causal": name in CAUSAL_FAMILIES,
                                "test_impl_acc": summary[model][f"test_acc_{name}"],
                                "test_impl_loss": summary[model][f"test_loss_{name}"]}
            for name in names for model in ("factorized", "merged")}


def causal_vs_spurious(table: dict) -> dict:
    """Mean test implication accuracy and loss of causal vs spurious families, per model."""
    out = {}
    for model in ("factorized", "merged"):
        for causal, label in ((True, "causal"), (False, "spurious")):
            rows = [r for key, r in table.items()
                    if key.endswith(f"/{model}") and r["causal"] == causal]
            for key in ("test_impl_acc", "test_impl_loss"):
                out[f"{model}_{label}_{key}"] = (float(np.mean([r[key] for r in rows]))
                                                 if rows else float("nan"))
    return out


@register("ocr-toy", OcrToyConfig, plot_ocr_toy,
          "Out-of-context reasoning: factorized vs merged one-layer attention (4 studies)",
          columns=("train_fact_loss", "train_impl_loss", "test_impl_loss", "test_impl_acc",
                   "test_margin", "nuclear_norm", "frobenius_norm"))
def run(cfg: OcrToyConfig, out_dir: Path) -> Summary:
    store = PartStore(out_dir)
    parts = parts_of(cfg)
    todo = [p for p in parts if store.load(p.name) is None]
    if len(todo) < len(parts):
        log.info("resuming: %d of %d parts already done", len(parts) - len(todo), len(parts))
    workers = cfg.workers if len(todo) > 2 else 1  # two parts: cheaper in this process
    run_jobs(_run_one, [(cfg, p) for p in todo], workers,
             lambda job, result: _store_part(store, *result))
    records: list[dict] = []
    summary: dict = {"study": cfg.study}
    blocks: dict[str, np.ndarray] = {}
    for p in parts:
        saved = store.load(p.name)
        records.extend(saved["records"])
        summary[p.name] = saved["summary"]
        with np.load(store.dir / f"{p.name}_ov.npz") as npz:
            blocks.update({f"{p.name}__{k}": npz[k] for k in npz.files})
    atomic_write_jsonl(out_dir / METRICS, records)
    buf = io.BytesIO()
    np.savez(buf, **blocks)
    atomic_write_bytes(out_dir / OV_BLOCKS, buf.getvalue())
    _sweep_tables(cfg, summary)
    summary["findings"] = findings(summary, records)
    if cfg.study == "families":
        summary["families"] = family_summary(summary, family_names(cfg.world.n_families))
        summary["findings"].update(causal_vs_spurious(summary["families"]))
    return summary


def _store_part(store: PartStore, part: Part, records, summary, blocks) -> None:
    _save_blocks(store, part.name, blocks)
    store.save(part.name, records, summary)  # last: its presence marks the part done
    log.info("part %s done", part.name)


def _sweep_tables(cfg: OcrToyConfig, summary: dict) -> None:
    """Move sweep parts into `rank_sweep` / `fraction_sweep` tables (one row per setting)."""
    if cfg.study == "rank_sweep":
        table = {}
        for name in [n for n in list(summary) if n.startswith("rank_")] + ["factorized"]:
            row = summary.pop(name) if name != "factorized" else summary[name]
            table[f"r={row['rank']}"] = {k: row[k] for k in FINAL_KEYS}
        summary["rank_sweep"] = dict(sorted(table.items(), key=lambda kv: int(kv[0][2:])))
    if cfg.study == "fraction_sweep":
        rows = {}
        for name in [n for n in list(summary) if n.startswith("fraction_")]:
            row = summary.pop(name)
            model = "factorized" if name.endswith("_factorized") else "merged"
            rows[(row["train_fraction"], model)] = row
        for model in ("factorized", "merged"):
            rows[(cfg.world.train_fraction, model)] = summary[model]
        rows = {key: {"train_fraction_realized": row["train_fraction_realized"],
                      **{k: row[k] for k in FINAL_KEYS}} for key, row in rows.items()}
        summary["fraction_sweep"] = {f"{frac:g}/{model}": row
                                     for (frac, model), row in sorted(rows.items())}
