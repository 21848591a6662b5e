"""Vocabulary projection of single attention heads (attribute extraction at head level).

Geva et al. (2023) find that upper-layer attention *heads* extract the attribute from the
subject: a head's output, read through the unembedding, names it. `probe project` measures
it for whole attention sublayers; here each head's output at the last position, its slice of
o_proj's input through its columns of o_proj (`lens.heads.head_contributions`; the heads'
contributions sum to the sublayer's output, less o_proj's bias), goes through the final norm
and the unembedding. Per head: the share of known facts whose top projected token is the
model's prediction, next to the whole sublayer's share from the same forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.config import option
from knowflow.lens.arch import arch_of
from knowflow.lens.batching import model_device, pad_id, right_pad
from knowflow.lens.heads import head_contributions, head_shape
from knowflow.lens.hooks import captured, hook_name
from knowflow.probes.common import recall_examples
from knowflow.probes.examples import ProbeExample
from knowflow.probes.projection import project
from knowflow.store.run_folder import Progress


@dataclass(frozen=True)
class HeadProjectionConfig:
    final_norm: bool = True   # apply the model's final norm before the unembedding
    top: int = 10             # best heads listed in the summary
    batch_size: int = option(16, ge=1)
    known_only: bool = option(True, "Also probe facts the model gets wrong.", flag="all")


def head_top_tokens(model, z: torch.Tensor, final_norm: bool = True) -> torch.Tensor:
    """Top projected token of every head: z (..., layers, heads * head_dim), the o_proj
    inputs at one position -> (..., layers, heads)."""
    n_layers = head_shape(model)[0]
    dev = next(model.parameters()).device
    out = []
    for layer in range(n_layers):
        with torch.no_grad():
            parts = head_contributions(model, layer, z[..., layer, :].to(dev))  # (..., H, d)
            out.append(project(model, parts, final_norm).argmax(-1).cpu())       # (..., H)
    return torch.stack(out, dim=-2)


@torch.no_grad()
def head_projection(model, tokenizer, examples: Sequence[ProbeExample],
                    cfg: HeadProjectionConfig = HeadProjectionConfig(),
                    progress: Progress | None = None) -> list[dict]:
    """One record per (example, layer): whether each head's top projected token at the last
    position is the model's prediction (`head_extracts`, one per head), and whether the whole
    attention sublayer's is (`attn_extracts`)."""
    arch = arch_of(model)
    n_layers = head_shape(model)[0]
    located, preds, chosen = recall_examples(model, tokenizer, examples, cfg.known_only,
                                             "head-project", cfg.batch_size)
    dev = model_device(model)
    records: list[dict] = []
    for start in range(0, len(chosen), cfg.batch_size):
        idx = chosen[start: start + cfg.batch_size]
        ids, mask = right_pad([located[i].input_ids for i in idx], pad_id(tokenizer), dev)
        last = mask.sum(-1) - 1  # (batch,) each prompt's last position
        rows = torch.arange(len(idx), device=dev)
        names = [hook_name(layer, "attn.out") for layer in range(n_layers)]
        z_names = [hook_name(layer, "attn.z") for layer in range(n_layers)]
        with captured(model, z_names + names) as acts:
            model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
        z = torch.stack([acts[name][rows, last].flatten(-2) for name in z_names], 1)  # (b, L, H*d)
        top = head_top_tokens(model, z, cfg.final_norm)                        # (b, L, H)
        for layer in range(arch.n_layers):
            whole = project(model, acts[names[layer]][rows, last], cfg.final_norm).argmax(-1)
            for j, i in enumerate(idx):
                pred = preds[i].token_id
                records.append({
                    "example": examples[i].id or str(i), "layer": layer,
                    "prediction": preds[i].text, "known": preds[i].known,
                    "head_extracts": [int(t) == pred for t in top[j, layer].tolist()],
                    "attn_extracts": int(whole[j]) == pred})
        if progress:
            progress(min(start + cfg.batch_size, len(chosen)), len(chosen))
    return records


def summarize_head_projection(records: Sequence[dict], cfg: HeadProjectionConfig =
                              HeadProjectionConfig()) -> dict:
    """Per head, the extraction rate (layers x heads); the best heads; per layer, the whole
    attention sublayer's rate, with its peak."""
    if not records:
        return {"n_examples": 0, "head_rate": [], "best_heads": [], "attn_rate": []}
    n_layers = max(r["layer"] for r in records) + 1
    rate = torch.zeros(n_layers, len(records[0]["head_extracts"]))
    whole = torch.zeros(n_layers)
    count = torch.zeros(n_layers)
    for r in records:
        rate[r["layer"]] += torch.tensor(r["head_extracts"], dtype=torch.float)
        whole[r["layer"]] += float(r["attn_extracts"])
        count[r["layer"]] += 1
    rate = rate / count[:, None].clamp(min=1)
    whole = whole / count.clamp(min=1)
    cells = sorted(((float(rate[layer, head]), layer, head) for layer in range(n_layers)
                    for head in range(rate.shape[1])), key=lambda c: (-c[0], c[1], c[2]))
    best_layer = int(whole.argmax())
    return {"n_examples": len({r["example"] for r in records}), "head_rate": rate.tolist(),
            "best_heads": [{"layer": layer, "head": head, "rate": v}
                           for v, layer, head in cells[: cfg.top]],
            "attn_rate": whole.tolist(),
            "peak_attn_extraction": {"layer": best_layer, "rate": float(whole[best_layer])}}
