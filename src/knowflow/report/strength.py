"""The conflict-strength curve of an eval run: per graded suite (`cf-numeric`), the share of
answers that follow the context and the share that keep the memorized value, per strength
(closest to the truth first), with 95% bootstrap intervals, one panel per scoring mode; under
log-likelihood also the per-token (length-normalised) choice, since a value moved x10 has one
more digit, hence often one more token, than the true one.
Drawn from summary.json's `by_strength` blocks (`evaluation.strength`)."""

from __future__ import annotations

from pathlib import Path

from knowflow.report.figures import save, subplots

FIGURE = "conflict_strength.png"
_LINES = (("cf_acc", "follows the context", "o-", "C0"),
          ("cf_acc_norm", "follows the context (per-token log-lik.)", "^:", "C2"),
          ("param_acc", "keeps the memorized value", "s--", "C1"))


def strength_rows(summary: dict) -> list[tuple[str, str, list[tuple[str, dict]]]]:
    """(suite, mode, [(strength label, metrics), ...]) for every graded suite and mode."""
    out = []
    for suite, modes in summary.items():
        for mode in ("generate", "loglik"):
            block = (modes.get(mode) or {}).get("by_strength") if isinstance(modes, dict) \
                else None
            if block:
                out.append((suite, mode, sorted(block.items(),
                                                key=lambda kv: kv[1]["strength_level"])))
    return out


def strength_figure(summary: dict, path: Path, title: str = "") -> Path | None:
    """The curve per (suite, mode); None when no suite is graded."""
    rows = strength_rows(summary)
    if not rows:
        return None
    fig, axes = subplots(len(rows), width=4.6, height=3.6)
    for (suite, mode, points), ax in zip(rows, axes[0], strict=True):
        xs = list(range(1, len(points) + 1))
        for key, label, style, color in _LINES:
            ys = [m.get(key) for _, m in points]
            if any(y is None for y in ys):
                continue
            cis = [m.get(f"{key}_ci") or [m[key], m[key]] for _, m in points]
            ax.errorbar(xs, ys, yerr=[[y - c[0] for y, c in zip(ys, cis, strict=True)],
                                      [c[1] - y for y, c in zip(ys, cis, strict=True)]],
                        fmt=style, color=color, capsize=3, label=label)
        ax.set_xticks(xs, [f"{lab}\n(n={m['n']})" for lab, m in points], fontsize=7)
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("distance of the context's value from the true one")
        ax.set_ylabel("share of answers")
        ax.set_title(f"{suite}, {mode} scoring", fontsize=10)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save(fig, path)
