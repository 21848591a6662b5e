"""Context heads and memory heads: the causal effect of each attention head on the choice
between the context's answer and the memorized one.

On a knowledge-conflict item (a context asserting a counterfactual answer, a question whose
memorized answer differs) the model's preference is the log-odds at the answer position,
`log p(cf) - log p(parametric)` = the difference of the two answers' logits at their first
differing token (the tokens they share are fed first). For every (layer, head) three edits of
that one position measure what the head does for it:

* `zero`: the head's output (its slice of o_proj's input) is set to zero;
* `mean`: it is replaced by its mean over the items (mean ablation: removes what the head
  says about *this* item, keeps what it says about every item);
* `block`: the head may not attend from the answer position to the context's tokens (only
  that head, only that layer; its other edges and every other head are untouched).

The effect is the change in log-odds. Heads whose removal lowers it carry the context's answer
(*context heads*, Yu et al. 2023; PH3, Jin et al. 2024); heads whose removal raises it carry the
memorized one (*memory heads*). Means carry 95% percentile-bootstrap intervals over items.

All (layer, head, edit) variants of an item run as the rows of a few batches that share the
prompt prefix's KV cache and recompute only the answer position (`lens.heads`), so the full
sweep costs about one single-token forward per variant, not one prompt forward per head.
The same pass reads every head's output through its slice of o_proj, the final norm and the
unembedding (its top token: the prediction? the context's answer? the memorized one?).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from knowflow.config import option
from knowflow.data.facts import ConflictItem
from knowflow.data.prompts import FORMAT_HELP, FORMATS, PromptConfig, render
from knowflow.errors import ConfigError, KnowflowError
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.heads import (
    HeadVariant,
    ablation_rows,
    answer_split,
    head_shape,
    last_position_sweep,
    log_odds_rows,
)
from knowflow.lens.memory import ROWS_MEMORY_HELP, check_max_memory, prompt_rows
from knowflow.probes.examples import ProbeExample, find_text
from knowflow.probes.head_projection import head_top_tokens
from knowflow.probes.spans import locate
from knowflow.store.run_folder import Progress

ABLATIONS = ("zero", "mean", "block")


@dataclass(frozen=True)
class HeadsConfig:
    ablations: tuple[str, ...] = option(ABLATIONS, "zero, mean and/or block (repeatable).",
                                        flag="ablation")
    rank_by: str = option("mean", "The ablation that ranks the heads.")
    top: int = 10                            # heads listed per side in the summary
    prompt_format: str = option("auto", FORMAT_HELP)  # how items are rendered (as eval)
    batch_size: int = 64                     # variant rows per forward pass
    max_memory: float | None = option(None, ROWS_MEMORY_HELP)  # fewer rows where 64 won't fit
    n_bootstrap: int = 1000
    seed: int = option(0, "Seed of the --limit sample.")

    def validate(self) -> None:
        bad = [a for a in self.ablations if a not in ABLATIONS]
        if bad or not self.ablations:
            raise ConfigError(f"unknown ablation {bad[0] if bad else '(none)'!r} (known: "
                              f"{', '.join(ABLATIONS)})", "ablations")
        if self.rank_by not in self.ablations:
            raise ConfigError(f"{self.rank_by!r} is not one of the swept ablations "
                              f"({', '.join(self.ablations)})", "rank_by")
        if self.prompt_format not in FORMATS:
            raise ConfigError(f"{self.prompt_format!r} is not one of {', '.join(FORMATS)}",
                              "prompt_format")
        for name in ("top", "batch_size", "n_bootstrap"):
            if getattr(self, name) < 1:
                raise ConfigError("must be at least 1", name)
        check_max_memory(self.max_memory)


@dataclass(frozen=True)
class ConflictPrompt:
    """An item ready for the sweep: prompt tokens (plus the answers' shared first tokens),
    the two answers' first differing tokens, and the context's token positions."""

    id: str
    ids: tuple[int, ...]
    cf_token: int
    par_token: int
    context: tuple[int, ...]


def first_answer_word(answer: str) -> str:
    """The first alternative of an answer as written ("A; B" -> "A")."""
    return answer.split(";")[0].strip() or answer.strip()


def conflict_prompt(item: ConflictItem, tokenizer, prompt_format: str = "auto"
                    ) -> ConflictPrompt | None:
    """The sweep's view of `item`; None when no token tells its two answers apart."""
    prompt = render(item, tokenizer, PromptConfig(prompt_format))
    span = find_text(prompt.text, item.context) if item.context else None
    if span is None:
        raise KnowflowError(f"item {item.id}: its context is not in the rendered prompt; the "
                            "heads probe needs conflict items shown with their context")
    loc = locate(tokenizer, ProbeExample(prompt=prompt.text, context=span, id=item.id))
    split = answer_split(tokenizer, *(prompt.answer_prefix + first_answer_word(a) for a in
                                      (item.counterfactual_answer, item.parametric_answer)))
    if split is None:
        return None
    shared, cf, par = split
    return ConflictPrompt(item.id, tuple(loc.input_ids) + shared, cf, par, loc.context)


def _block_plan(variants: list[HeadVariant], prompt: ConflictPrompt, n_heads: int,
                layer_of: dict[int, int]):
    """Per slice of rows, the attention plan that cuts the `block` rows' head's edges from
    the answer position to the context (rows are numbered from the base row 0)."""
    k_len = len(prompt.ids)
    ctx = torch.tensor(prompt.context, dtype=torch.long)

    def extra(rows: slice) -> dict:
        block: dict[int, torch.Tensor] = {}
        n = rows.stop - rows.start
        for r in range(rows.start, rows.stop):
            if r == 0 or variants[r - 1][0] != "block":
                continue
            _, layer, head = variants[r - 1]
            mask = block.setdefault(layer, torch.zeros(n, n_heads, 1, k_len, dtype=torch.bool))
            mask[r - rows.start, head, 0, ctx] = True
        return {"knowflow_plan": AttentionPlan(block=block, layer_of=layer_of)}
    return extra


@torch.no_grad()
def head_effects(model, prompt: ConflictPrompt, kinds: Sequence[str],
                 mean: torch.Tensor | None = None, batch_size: int = 64,
                 layer_of: dict[int, int] | None = None) -> tuple[float, torch.Tensor]:
    """(base log-odds, effects (kinds, layers, heads)): each edit's change in
    log p(cf) - log p(parametric) at the answer position. `mean` (layers, heads, head_dim)
    is each head's mean output for `mean` ablation; `block` needs `intercepted(model)`'s
    `layer_of`."""
    n_layers, n_heads, head_dim = head_shape(model)
    variants, scale, fill = ablation_rows(kinds, n_layers, n_heads, head_dim, mean)
    extra = None
    if "block" in kinds:
        if layer_of is None:
            raise KnowflowError("blocking attention to the context needs intercepted(model)")
        extra = _block_plan(variants, prompt, n_heads, layer_of)
    odds = log_odds_rows(model, prompt.ids, prompt.cf_token, prompt.par_token, scale, fill,
                         batch_size, extra)                            # (rows,)
    effects = (odds[1:] - odds[0]).view(len(kinds), n_layers, n_heads)
    return float(odds[0]), effects


def bootstrap_grid(values: np.ndarray, n_boot: int = 1000, seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Mean over items and its 95% percentile-bootstrap interval, for every cell at once:
    values (items, ...) -> (mean (...), ci (..., 2))."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))   # (n_boot, items)
    means = values[idx].mean(axis=1)                                   # (n_boot, ...)
    ci = np.stack([np.quantile(means, 0.025, axis=0), np.quantile(means, 0.975, axis=0)], -1)
    return values.mean(axis=0), ci


def heads(model, tokenizer, items: Sequence[ConflictItem], cfg: HeadsConfig = HeadsConfig(),
          progress: Progress | None = None) -> list[dict]:
    """One record per (item, layer, head): the head's effect under each edit, and its top
    projected token (and whether it is the prediction, the context's or the memorized
    answer's first differing token). Items whose answers share every token are skipped."""
    n_layers, n_heads, head_dim = head_shape(model)
    prompts = [p for p in (conflict_prompt(it, tokenizer, cfg.prompt_format) for it in items)
               if p is not None]
    if not prompts:
        raise KnowflowError("no item has two answers that differ in a token")
    for p in prompts:                # refused here, before any model work, where a row won't fit
        prompt_rows(model, len(p.ids), cfg.batch_size, cfg.max_memory)
    total = 2 * len(prompts) if "mean" in cfg.ablations else len(prompts)
    base = []
    for i, p in enumerate(prompts):  # each head's output at the answer position, unchanged
        hidden, z = last_position_sweep(model, p.ids, torch.ones(1, n_layers, n_heads))
        base.append((hidden[0], z[0].view(n_layers, n_heads, head_dim)))
        if progress and "mean" in cfg.ablations:
            progress(i + 1, total)
    mean = torch.stack([z for _, z in base]).mean(0)               # (layers, heads, head_dim)
    records: list[dict] = []
    with intercepted(model) as layer_of:
        for i, p in enumerate(prompts):
            odds, effects = head_effects(model, p, cfg.ablations, mean,
                                         prompt_rows(model, len(p.ids), cfg.batch_size,
                                                     cfg.max_memory), layer_of)
            hidden, z = base[i]
            pred = int(model.get_output_embeddings()(hidden.to(
                model.get_output_embeddings().weight)).argmax())
            top = head_top_tokens(model, z.view(n_layers, -1))          # (layers, heads)
            for layer in range(n_layers):
                for head in range(n_heads):
                    t = int(top[layer, head])
                    records.append({
                        "example": p.id, "layer": layer, "head": head, "log_odds": odds,
                        **{f"effect_{k}": float(effects[j, layer, head])
                           for j, k in enumerate(cfg.ablations)},
                        "top_token": t, "top_is_prediction": t == pred,
                        "top_is_counterfactual": t == p.cf_token,
                        "top_is_parametric": t == p.par_token})
            if progress:
                progress(total - len(prompts) + i + 1, total)
    return records


def half_effect_count(effects: Sequence[float]) -> int:
    """How many of the largest same-signed effects add up to half of their total."""
    mags = sorted((abs(e) for e in effects), reverse=True)
    total, acc = sum(mags), 0.0
    for n, m in enumerate(mags, start=1):
        acc += m
        if acc >= total / 2:
            return n
    return 0


def summarize_heads(records: Sequence[dict], cfg: HeadsConfig = HeadsConfig()) -> dict:
    """Context and memory heads by `cfg.rank_by` (each `{"layer", "head", "effect", "ci"}`,
    sorted by effect, `cfg.top` per side), how many heads carry half of each side's total
    effect, the full (layers, heads) grids of mean effects per edit, and the projection
    shares per head."""
    if not records:
        return {"n_examples": 0, "context_heads": [], "memory_heads": []}
    examples = list(dict.fromkeys(r["example"] for r in records))
    n_layers = max(r["layer"] for r in records) + 1
    n_heads = max(r["head"] for r in records) + 1
    pos = {e: i for i, e in enumerate(examples)}

    def grid(key: str) -> np.ndarray:                               # (items, layers, heads)
        out = np.zeros((len(examples), n_layers, n_heads))
        for r in records:
            out[pos[r["example"]], r["layer"], r["head"]] = float(r[key])
        return out

    kinds = [k for k in ABLATIONS if f"effect_{k}" in records[0]]
    summary: dict = {"n_examples": len(examples), "rank_by": cfg.rank_by,
                     "mean_log_odds": float(np.mean([r["log_odds"] for r in records])),
                     "effects": {}, "context_heads": [], "memory_heads": []}
    for kind in kinds:
        mean, ci = bootstrap_grid(grid(f"effect_{kind}"), cfg.n_bootstrap, cfg.seed)
        cells = [{"layer": layer, "head": head, "effect": float(mean[layer, head]),
                  "ci": [float(ci[layer, head, 0]), float(ci[layer, head, 1])]}
                 for layer in range(n_layers) for head in range(n_heads)]
        ctx = sorted((c for c in cells if c["effect"] < 0), key=lambda c: c["effect"])
        mem = sorted((c for c in cells if c["effect"] > 0), key=lambda c: -c["effect"])
        summary["effects"][kind] = {
            "mean": mean.tolist(), "context_heads": ctx[: cfg.top],
            "memory_heads": mem[: cfg.top],
            "half_effect_heads": {"context": half_effect_count([c["effect"] for c in ctx]),
                                  "memory": half_effect_count([c["effect"] for c in mem])},
            "total_effect": {"context": sum(c["effect"] for c in ctx),
                             "memory": sum(c["effect"] for c in mem)}}
        if kind == cfg.rank_by:
            summary["context_heads"] = ctx[: cfg.top]
            summary["memory_heads"] = mem[: cfg.top]
            summary["half_effect_heads"] = summary["effects"][kind]["half_effect_heads"]
    summary["projection"] = {key: grid(f"top_is_{key}").mean(0).tolist()
                             for key in ("prediction", "counterfactual", "parametric")}
    return summary
