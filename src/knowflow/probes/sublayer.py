"""Sublayer knockout: zero the MLP or attention output of a window of layers at chosen
positions, and measure the relative change in the probability of the model's prediction.

Geva et al. (2023) cancel MLP and attention updates to find which sublayers carry the fact:
early MLPs at the subject positions enrich the subject representation; attention at the
last position extracts the attribute. Hooks at the named points `blocks.{l}.mlp.out` and
`blocks.{l}.attn.out` (lens.hooks) replace a sublayer's output by zero at the chosen
positions of the chosen batch rows, so all (sublayer, positions, window) variants of a prompt
run in one batch; the sweep over examples and windows is the one knockout uses (probes.sweep).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from knowflow.config import option
from knowflow.errors import ConfigError
from knowflow.lens.arch import arch_of
from knowflow.lens.batching import model_device
from knowflow.lens.hooks import hook_name, hooked
from knowflow.probes.common import check_layers, window
from knowflow.probes.examples import ProbeExample
from knowflow.probes.spans import Located, check_source
from knowflow.probes.sweep import Keyed, layer_curves, sweep
from knowflow.store.run_folder import Progress

SUBLAYERS = ("mlp", "attn")


@dataclass(frozen=True)
class SublayerConfig:
    RENAMED = {"sublayers": "sublayer"}  # keys of earlier versions

    window: int = option(9, "Layers per knockout window.")  # k consecutive layers
    sublayer: tuple[str, ...] = option(SUBLAYERS, "mlp and/or attn (repeatable).")
    positions: tuple[str, ...] = option(("subject", "last"), "Where to zero (repeatable): "
                                        "subject, last, ... (the source sets of knockout's "
                                        "--source).")
    layers: tuple[int, ...] = ()                     # window centres; empty = every layer
    batch_size: int = option(64, ge=1)               # variant rows per forward pass
    known_only: bool = option(True, "Also probe facts the model gets wrong.", flag="all")


@contextmanager
def zeroed_sublayers(model, zero: dict[str, torch.Tensor]) -> Iterator[None]:
    """Inside the block, the output at hook point `name` (`blocks.{l}.mlp.out`,
    `blocks.{l}.attn.out`) is zero where `zero[name]` (batch, seq) is True."""
    def zero_where(mask: torch.Tensor):
        return lambda out: out.masked_fill(mask[..., None], 0.0)  # (batch, seq, d_model)

    with hooked(model, {name: zero_where(mask) for name, mask in zero.items()}):
        yield


# A variant: zero sublayer `kind` at `positions` in layers [lo, hi] (None: nowhere).
SublayerVariant = tuple[str, tuple[int, ...], tuple[int, int] | None]


@torch.no_grad()
def sublayer_probs(model, loc: Located, target: int, variants: Sequence[SublayerVariant],
                   batch_size: int = 64) -> torch.Tensor:
    """Probability of `target` at the last position under each variant: (variants,)."""
    dev = model_device(model)
    ids = torch.tensor([loc.input_ids], dtype=torch.long, device=dev)  # (1, seq)
    probs = []
    for start in range(0, len(variants), batch_size):
        chunk = variants[start: start + batch_size]
        zero: dict[str, torch.Tensor] = {}
        for r, (kind, pos, win) in enumerate(chunk):
            if win is None or not pos:
                continue
            for layer in range(win[0], win[1] + 1):
                mask = zero.setdefault(hook_name(layer, f"{kind}.out"), torch.zeros(
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
    for kind in cfg.sublayer:
        if kind not in SUBLAYERS:
            raise ConfigError(f"unknown sublayer {kind!r} (known: mlp, attn)", "sublayer")
    for source in cfg.positions:
        check_source(source)

    def variants(loc: Located) -> list[Keyed]:
        out = []
        for kind in cfg.sublayer:
            for source in cfg.positions:
                pos = loc.positions(source)
                for centre in centres:
                    win = window(centre, cfg.window, arch.n_layers)
                    out.append(({"sublayer": kind, "positions": source, "layer": centre,
                                 "window": list(win), "n_zeroed": len(pos)}, (kind, pos, win)))
        return out

    def probs(loc: Located, target: int, chosen: list[SublayerVariant]) -> torch.Tensor:
        return sublayer_probs(model, loc, target, chosen, cfg.batch_size)

    return sweep(model, tokenizer, examples, cfg.known_only, "sublayer", ("mlp", (), None),
                 variants, probs, progress)


def summarize_sublayer(records: Sequence[dict], n_layers: int | None = None) -> dict:
    """Per "sublayer@positions": mean relative change per layer and the most negative layer."""
    return layer_curves(records, lambda r: f"{r['sublayer']}@{r['positions']}", n_layers)
