"""Sublayer knockout: zero the MLP or attention output of a window of layers at chosen
positions, and measure the relative change in the probability of the model's prediction.

Geva et al. (2023) cancel MLP and attention updates to find which sublayers carry the fact:
early MLPs at the subject positions enrich the subject representation; attention at the
last position extracts the attribute. Forward hooks replace a sublayer's output by zero at
the chosen positions of the chosen batch rows, so all (sublayer, positions, window) variants
of a prompt run in one batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from knowflow.errors import ConfigError
from knowflow.probes.arch import arch_of
from knowflow.probes.common import (
    Progress,
    check_layers,
    device_of,
    recall_examples,
    window,
)
from knowflow.probes.examples import ProbeExample
from knowflow.probes.spans import Located, check_source

log = logging.getLogger(__name__)
SUBLAYERS = ("mlp", "attn")


@dataclass(frozen=True)
class SublayerConfig:
    window: int = 9                                  # k consecutive layers per knockout
    sublayers: tuple[str, ...] = SUBLAYERS           # which outputs to zero
    positions: tuple[str, ...] = ("subject", "last")  # source sets where they are zeroed
    layers: tuple[int, ...] = ()                     # window centres; empty = every layer
    batch_size: int = 64                             # variant rows per forward pass
    known_only: bool = True


@contextmanager
def zeroed_sublayers(model, zero: dict[tuple[str, int], torch.Tensor]) -> Iterator[None]:
    """Inside the block, the output of sublayer (kind, layer) is zero where
    `zero[(kind, layer)]` (batch, seq) is True; sublayers without an entry are untouched."""
    arch = arch_of(model)
    handles = []

    def make_hook(key):
        def hook(module, args, output):
            mask = zero.get(key)
            if mask is None:
                return None
            if isinstance(output, tuple):  # attention returns (output, weights)
                return (output[0].masked_fill(mask[..., None], 0.0), *output[1:])
            return output.masked_fill(mask[..., None], 0.0)  # (batch, seq, d_model)
        return hook

    for kind, modules in (("mlp", arch.mlp), ("attn", arch.attn)):
        for layer, module in enumerate(modules):
            if any(key == (kind, layer) for key in zero):
                handles.append(module.register_forward_hook(make_hook((kind, layer))))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# A variant: zero sublayer `kind` at `positions` in layers [lo, hi] (None: nowhere).
SublayerVariant = tuple[str, tuple[int, ...], tuple[int, int] | None]


@torch.no_grad()
def sublayer_probs(model, loc: Located, target: int, variants: Sequence[SublayerVariant],
                   batch_size: int = 64) -> torch.Tensor:
    """Probability of `target` at the last position under each variant: (variants,)."""
    dev = device_of(model)
    ids = torch.tensor([loc.input_ids], dtype=torch.long, device=dev)  # (1, seq)
    probs = []
    for start in range(0, len(variants), batch_size):
        chunk = variants[start: start + batch_size]
        zero: dict[tuple[str, int], torch.Tensor] = {}
        for r, (kind, pos, win) in enumerate(chunk):
            if win is None or not pos:
                continue
            for layer in range(win[0], win[1] + 1):
                mask = zero.setdefault((kind, layer), torch.zeros(
                    len(chunk), ids.shape[1], dtype=torch.bool, device=dev))
                mask[r, list(pos)] = True
        with zeroed_sublayers(model, zero):
            logits = model(input_ids=ids.expand(len(chunk), -1), logits_to_keep=1).logits
        probs.append(logits[:, -1].float().softmax(-1)[:, target].cpu())  # (chunk,)
    return torch.cat(probs)


def sublayer_knockout(model, tokenizer, examples: Sequence[ProbeExample],
                      cfg: SublayerConfig = SublayerConfig(), progress: Progress | None = None
                      ) -> list[dict]:
    """One record per (example, sublayer, position set, window centre)."""
    arch = arch_of(model)
    centres = check_layers("window", cfg.window, cfg.layers, arch.n_layers)
    for kind in cfg.sublayers:
        if kind not in SUBLAYERS:
            raise ConfigError(f"unknown sublayer {kind!r} (known: mlp, attn)", "sublayers")
    for source in cfg.positions:
        check_source(source)
    located, preds, chosen = recall_examples(model, tokenizer, examples, cfg.known_only,
                                             "sublayer")
    records: list[dict] = []
    for done, i in enumerate(chosen):
        ex, loc, pred = examples[i], located[i], preds[i]
        keys = [(k, s, c) for k in cfg.sublayers for s in cfg.positions for c in centres]
        variants: list[SublayerVariant] = [("mlp", (), None)] + [
            (k, loc.positions(s), window(c, cfg.window, arch.n_layers)) for k, s, c in keys]
        probs = sublayer_probs(model, loc, pred.token_id, variants, cfg.batch_size).tolist()
        base = probs[0]
        for (kind, source, centre), (_, pos, win), p in zip(keys, variants[1:], probs[1:],
                                                             strict=True):
            records.append({
                "example": ex.id or str(i), "prompt": ex.prompt, "subject": ex.subject,
                "prediction": pred.text, "known": pred.known, "sublayer": kind,
                "positions": source, "layer": centre, "window": list(win),
                "n_zeroed": len(pos), "p_base": base, "p": p,
                "rel_change": (p - base) / base if base > 0 else 0.0})
        if progress:
            progress(done + 1, len(chosen))
    return records


def summarize_sublayer(records: Sequence[dict], n_layers: int | None = None) -> dict:
    """Per "sublayer@positions": mean relative change per layer and the most negative layer."""
    from knowflow.probes.knockout import summarize_knockout

    return summarize_knockout([{**r, "source": f"{r['sublayer']}@{r['positions']}"}
                               for r in records], n_layers)
