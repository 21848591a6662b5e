"""Attention mass on the context: per layer and head, the share of the attention from the
answer position (the last prompt token, which predicts the answer) that lands on the
context's tokens.

This is the diagnostic of context-parametric inversion (Goyal et al. 2025): as finetuning
proceeds past its peak, attention moves from the context to the subject. Other parts of
knowflow call `attention_mass` on each checkpoint and plot `mean_attention_mass` over time.
`span_mass` is the one computation of a mass that every attention reading in knowflow uses:
this probe, the reliance tracker's one-pass scoring and the tiny-world tracker (which also
differentiates it for the mechanism's gradient projections).

    records = attention_mass(model, tokenizer,
                             [{"prompt": text, "context": [start, end]}], cfg)
    grid = mean_attention_mass(records)  # (layers, heads) nested lists
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from knowflow.config import option
from knowflow.data.prompts import FORMATS
from knowflow.errors import KnowflowError
from knowflow.lens.arch import arch_of
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.batching import model_device, pad_id, right_pad
from knowflow.probes.examples import ProbeExample, as_example
from knowflow.probes.spans import locate
from knowflow.store.run_folder import Progress


def span_mass(rows: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """Attention mass on a span of keys: `rows` (..., keys) attention probabilities from the
    answer position; `span` either the span's key positions (an integer tensor) or a boolean /
    0-1 float mask over the keys, broadcastable to `rows`. Returns (...), the probability
    summed over the span; differentiable."""
    if span.dtype != torch.bool and not span.dtype.is_floating_point:
        return rows[..., span].sum(-1)
    return (rows * span).sum(-1)


@dataclass(frozen=True)
class AttentionMassConfig:
    batch_size: int = option(8, ge=1)
    prompt_format: str = option("plain", "With --suite: chat, alpaca, tulu or plain.",
                                one_of=FORMATS)  # how a suite's prompts are rendered


@torch.no_grad()
def attention_mass(model, tokenizer, examples: Sequence[ProbeExample | Mapping[str, Any]],
                   cfg: AttentionMassConfig = AttentionMassConfig(),
                   progress: Progress | None = None) -> list[dict]:
    """One record per example: `mass[layer][head]`, the attention probability from the last
    prompt token to the context tokens (0..1), plus per-layer head means."""
    exs = [as_example(e) for e in examples]
    for i, ex in enumerate(exs):
        if ex.context is None:
            raise KnowflowError(f"attention mass: example {ex.id or i} ({ex.prompt[:40]!r}) "
                                "has no context span")
    arch = arch_of(model)
    located = [locate(tokenizer, ex) for ex in exs]
    dev = model_device(model)
    records: list[dict] = []
    with intercepted(model) as layer_of:
        for start in range(0, len(exs), cfg.batch_size):
            chunk = located[start: start + cfg.batch_size]
            ids, mask = right_pad([c.input_ids for c in chunk], pad_id(tokenizer), dev)
            last = mask.sum(-1) - 1  # (batch,) each prompt's last position
            plan = AttentionPlan(capture=frozenset(range(arch.n_layers)), capture_rows=last,
                                 layer_of=layer_of)
            model(input_ids=ids, attention_mask=mask, knowflow_plan=plan, logits_to_keep=1)
            weights = torch.stack([plan.captured[layer] for layer in range(arch.n_layers)],
                                  dim=1).cpu()  # (batch, layers, heads, seq)
            for j, loc in enumerate(chunk):
                ex = exs[start + j]
                ctx = torch.tensor(loc.context, dtype=torch.long)
                mass = span_mass(weights[j], ctx)  # (layers, heads)
                records.append({"example": ex.id or str(start + j),
                                "n_context_tokens": len(loc.context),
                                "n_tokens": len(loc.input_ids),
                                "mass": mass.tolist(),
                                "layer_mean": mass.mean(-1).tolist()})
            if progress:
                progress(min(start + cfg.batch_size, len(exs)), len(exs))
    return records


def mean_attention_mass(records: Sequence[dict]) -> list[list[float]]:
    """The (layers, heads) mean of `mass` over records."""
    if not records:
        return []
    return torch.tensor([r["mass"] for r in records]).mean(0).tolist()
