"""How the ablation surrogate's fit and its stopping rule rank held-out masks, on RAG-shaped
design items: every variant from one scoring pass per item.

    python benchmarks/studies/study_surrogate.py --tokens 1024,2048 --items 5,3 --json rows.jsonl
    python benchmarks/studies/study_surrogate.py --fit rows.jsonl

`--json` scores, per item of `rag_items` (seed 0 by default: the design items, never the
benchmarked ones, which are seed 1), explain's 64 fit masks (`ablation_masks`), the gradient
prior (`gradient_prior`) and bench_explain's 32 held-out half masks, and appends them to the
file. `--fit` refits every variant on the first K masks (K = 16, 24, ..., 64) of each item and
prints its mean LDS on the held-out masks per K, then each stopping rule's mean LDS and
ablations used. Nothing is timed: the variants differ in the fit (milliseconds), not in the
ablations scored.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from bench_explain import reference  # noqa: E402
from bench_rag import load_cases  # noqa: E402

COUNTS = (16, 24, 32, 40, 48, 56, 64)


def dump(args) -> None:
    from knowflow.explanation.attribution import ablation_masks, score_masks
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.prompts import with_lead
    from knowflow.explanation.sentences import gradient_prior
    from knowflow.lens.load import load_model
    from knowflow.lens.shared import share_prompt

    torch.set_num_threads(args.threads)
    model, tok = load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
    cfg = ExplainConfig(ablations=64, holdout=0, top_k=(), prompt_format="chat")
    cases = load_cases(model, tok, args)
    for index, (tokens, case) in enumerate(cases):
        it, n = case.item, len(case.sents)
        held, actual, full = reference(model, tok, case, 32, index)
        shared = share_prompt(model, tok, case.led_ids[:-1])
        masks, _ = ablation_masks(n, cfg, it.id + it.context)
        y = score_masks(model, tok, it, case.sents, masks, case.cont, cfg, case.lead,
                        shared=shared)
        _ = with_lead
        prior = gradient_prior(model, tok, case.led_ids, case.cont, case.spans, shared)
        row = {"id": it.id, "tokens_asked": tokens, "tokens": len(case.led_ids),
               "sentences": n, "span": case.span, "full": full,
               "span_tokens": len(tok(case.cont, add_special_tokens=False)["input_ids"]),
               "masks": masks.tolist(), "y": y.tolist(), "prior": prior.tolist(),
               "held": held.tolist(), "actual": actual.tolist()}
        with args.json.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"[{index + 1}/{len(cases)}] {it.id}: {n} sentences, y from {min(row['y']):.2f}"
              f" to {max(row['y']):.2f}", file=sys.stderr, flush=True)


def variants() -> dict:
    """name -> fit(masks, y, prior, row) -> (weights (sentences,), out-of-fold (ablations,))."""
    from knowflow.explanation.surrogate import fit_surrogate

    def ours(prior_on: bool, rank_cv: bool = False):
        def fit(x, y, prior, row):
            s = fit_surrogate(x, y, 4, 0, prior if prior_on else None)
            return s.weights, s.out_of_fold
        return fit

    def fixed(alpha: float, prior_on: bool = False, power: float = 0.5):
        """ContextCite's lasso: standardized masks, alpha on the per-token mean."""
        from sklearn.linear_model import Lasso

        def fit(x, y, prior, row):
            xs = x.double().numpy()
            ys = y.double().numpy() / row["span_tokens"]
            mu, sd = xs.mean(0), xs.std(0)
            sd[sd == 0] = 1.0
            if prior_on:
                from knowflow.explanation.surrogate import prior_scale
                sd = sd / prior_scale(prior).numpy() ** (power / 0.5)
            m = Lasso(alpha=alpha, fit_intercept=True, random_state=0)
            m.fit((xs - mu) / sd, ys)
            w = m.coef_ / sd * row["span_tokens"]
            oof = np.zeros(len(ys))
            order = np.random.default_rng(0).permutation(len(ys))
            for i in range(4):
                h = order[i::4]
                t = np.setdiff1d(np.arange(len(ys)), h)
                mt = Lasso(alpha=alpha, fit_intercept=True, random_state=0)
                mt.fit((xs[t] - mu) / sd, ys[t])
                oof[h] = mt.predict((xs[h] - mu) / sd)
            return torch.from_numpy(w), torch.from_numpy(oof)
        return fit

    def ridge(lam: float):
        def fit(x, y, prior, row):
            xs, ys = x.double().numpy(), y.double().numpy()
            xc = xs - xs.mean(0)
            w = np.linalg.solve(xc.T @ xc + lam * len(ys) * np.eye(xs.shape[1]),
                                xc.T @ (ys - ys.mean()))
            return torch.from_numpy(w), torch.from_numpy(xc @ w)
        return fit

    def centred(lam: float, lasso_alpha: float | None = None):
        """w = c prior + d: c by least squares on the masks' prior sums, d by ridge (or the
        adaptive lasso at a fixed penalty) on what is left."""
        def fit(x, y, prior, row):
            xs, ys = x.double().numpy(), y.double().numpy()
            pr = prior.double().numpy()
            xc, yc = xs - xs.mean(0), ys - ys.mean()
            z = xc @ pr
            c = max(float(z @ yc) / max(float(z @ z), 1e-12), 0.0)
            r = yc - c * z
            if lasso_alpha is None:
                d = np.linalg.solve(xc.T @ xc + lam * len(ys) * np.eye(xs.shape[1]), xc.T @ r)
            else:
                from sklearn.linear_model import Lasso
                sd = xs.std(0)
                sd[sd == 0] = 1.0
                m = Lasso(alpha=lasso_alpha, fit_intercept=False)
                m.fit(xc / sd, r / row["span_tokens"])
                d = m.coef_ / sd * row["span_tokens"]
            w = c * pr + d
            return torch.from_numpy(w), torch.from_numpy(xc @ w)
        return fit

    def cv_pick(lams=(0.03, 0.1, 0.3, 1.0), by="mse"):
        """The adaptive lasso (its penalty by CV) or a centred ridge, whichever predicts the
        held-out folds best (4-fold, the same folds)."""
        def fit(x, y, prior, row):
            lasso_fit = fit_surrogate(x, y, 4, 0, prior)
            ys = y.double().numpy()
            n = len(ys)
            order = np.random.default_rng(0).permutation(n)
            best = (score(lasso_fit.out_of_fold.numpy(), ys, by), "lasso", None)
            for lam in lams:
                oof = np.zeros(n)
                for i in range(4):
                    h = order[i::4]
                    t = np.setdiff1d(np.arange(n), h)
                    w, _ = centred(lam)(x[t], y[t], prior, row)
                    b = float(ys[t].mean() - x[t].double().numpy().mean(0) @ w.numpy())
                    oof[h] = b + x[h].double().numpy() @ w.numpy()
                best = min(best, (score(oof, ys, by), "ridge", lam), key=lambda z: z[0])
            if best[1] == "lasso":
                return lasso_fit.weights, lasso_fit.out_of_fold
            w, _ = centred(best[2])(x, y, prior, row)
            return w, torch.from_numpy(oof)
        return fit

    def score(oof, ys, by):
        if by == "mse":
            return float(((oof - ys) ** 2).mean())
        from knowflow.explanation.surrogate import spearman
        return -(spearman(torch.from_numpy(oof), torch.from_numpy(ys)) or 0.0)

    def prior_only(x, y, prior, row):
        return prior.double(), torch.zeros(len(y), dtype=torch.float64)

    return {"pick (mse)": cv_pick(), "pick (rank)": cv_pick(by="rank"),
            "prior alone": prior_only, "centred ridge 0.1": centred(0.1),
            "centred ridge 0.5": centred(0.5), "centred lasso 0.01": centred(0, 0.01),
            "cv+prior (now)": ours(True), "cv": ours(False),
            "fixed 0.01 (CC)": fixed(0.01), "fixed 0.005": fixed(0.005),
            "fixed 0.02": fixed(0.02), "fixed 0.01+prior": fixed(0.01, True),
            "fixed 0.005+prior": fixed(0.005, True), "fixed 0.01+prior^1": fixed(0.01, True, 1),
            "ridge 0.05": ridge(0.05), "ridge 0.2": ridge(0.2)}


def fit_all(paths: list[Path]) -> None:
    from sklearn.exceptions import ConvergenceWarning

    from knowflow.explanation.surrogate import spearman

    warnings.simplefilter("ignore", ConvergenceWarning)

    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines() if line]
    table: dict[str, dict[int, list[float]]] = {}
    per_item: dict[str, list[dict]] = {}
    for row in rows:
        x, y = torch.tensor(row["masks"]), torch.tensor(row["y"], dtype=torch.float64)
        held = torch.tensor(row["held"]).double()
        actual = torch.tensor(row["actual"], dtype=torch.float64)
        prior = torch.tensor(row["prior"], dtype=torch.float64)
        for name, fit in variants().items():
            for k in COUNTS:
                w, oof = fit(x[:k], y[:k], prior, row)
                lds = spearman(held @ w, actual)
                table.setdefault(name, {}).setdefault(k, []).append(lds or 0.0)
                per_item.setdefault(name, []).append(
                    {"id": row["id"], "k": k, "lds": lds or 0.0,
                     "own": spearman(oof, y[:k]) or 0.0})
    print(f"{len(rows)} items; mean held-out LDS by ablations")
    print(f"{'variant':<20}" + "".join(f"{k:>7}" for k in COUNTS))
    for name, by_k in table.items():
        print(f"{name:<20}" + "".join(f"{statistics.mean(by_k[k]):>7.3f}" for k in COUNTS))
    print("\nper item at 64 (ids):", ", ".join(r["id"] for r in rows))
    for name, by_k in table.items():
        print(f"{name:<20}" + " ".join(f"{v:.2f}" for v in by_k[64]))
    print("\nstopping rules: mean held-out LDS, mean ablations (per variant)")
    for rule, stop in RULES.items():
        cells = []
        for name, got in per_item.items():
            lds, used = [], []
            for row in rows:
                seq = [g for g in got if g["id"] == row["id"]]
                end = next((i for i in range(len(seq)) if stop(seq[:i + 1])), len(seq) - 1)
                lds.append(seq[end]["lds"])
                used.append(seq[end]["k"])
            cells.append(f"{name}: {statistics.mean(lds):.3f} / {statistics.mean(used):.0f}")
        print(f"  {rule}: " + "; ".join(cells))


def _rise(seq, tol):
    return len(seq) >= 2 and seq[-1]["own"] - seq[-2]["own"] < tol


RULES = {
    "rise<0.02 (now)": lambda s: _rise(s, 0.02),
    "rise<0.02 & own>=0.6": lambda s: _rise(s, 0.02) and s[-1]["own"] >= 0.6,
    "rise<0.02 & own>=0.7": lambda s: _rise(s, 0.02) and s[-1]["own"] >= 0.7,
    "own>=0.85 | rise<0.02 & own>=0.6": lambda s: s[-1]["own"] >= 0.85 or (
        _rise(s, 0.02) and s[-1]["own"] >= 0.6),
    "own>=0.9 | rise<0.02 & own>=0.7": lambda s: s[-1]["own"] >= 0.9 or (
        _rise(s, 0.02) and s[-1]["own"] >= 0.7),
    "always 32": lambda s: s[-1]["k"] >= 32,
    "always 64": lambda s: False,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1024,2048")
    ap.add_argument("--items", default="5,3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fit", type=Path, nargs="+")
    args = ap.parse_args()
    if args.fit:
        fit_all(args.fit)
        return 0
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.items = [int(n) for n in args.items.split(",")]
    args.hotpot = None
    dump(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
