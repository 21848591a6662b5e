"""Named hook points: one name for each activation a probe reads or edits.

The names follow TransformerLens, over any supported HF model (see lens.arch):

* `blocks.{l}.attn.out`   — block l's attention output, before it is added to the residual;
* `blocks.{l}.mlp.out`    — block l's MLP output, before it is added to the residual;
* `blocks.{l}.resid_post` — the residual stream after block l (the block's output).

Each is a (batch, seq, d_model) tensor. `hooked(model, {name: fn})` runs `fn(tensor)` on that
output during forward passes inside the block (a returned tensor replaces it; None keeps it);
`captured(model, names)` records outputs by name. Attention *edges* (who attends to whom) are
not activations; probes.intercept cuts and reads them per layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn

from knowflow.errors import KnowflowError
from knowflow.lens.arch import arch_of

POINTS = ("attn.out", "mlp.out", "resid_post")
HookFn = Callable[[torch.Tensor], "torch.Tensor | None"]


def hook_name(layer: int, point: str) -> str:
    """`blocks.{layer}.{point}` for a point in POINTS."""
    if point not in POINTS:
        raise KnowflowError(f"unknown hook point {point!r} (known: {', '.join(POINTS)})")
    return f"blocks.{layer}.{point}"


def hook_points(model) -> dict[str, nn.Module]:
    """Every hook point of `model`, in forward order, with the module whose output it is."""
    arch = arch_of(model)
    points: dict[str, nn.Module] = {}
    for layer in range(arch.n_layers):
        for point, module in zip(POINTS, (arch.attn[layer], arch.mlp[layer],
                                          arch.blocks[layer]), strict=True):
            points[hook_name(layer, point)] = module
    return points


def _modules(model, names: Iterable[str]) -> dict[str, nn.Module]:
    points = hook_points(model)
    unknown = [n for n in names if n not in points]
    if unknown:
        raise KnowflowError(f"no hook point {unknown[0]!r} in {type(model).__name__} "
                            f"(blocks.0..{len(points) // len(POINTS) - 1}.{{{','.join(POINTS)}}})")
    return {n: points[n] for n in names}


def _forward_hook(fn: HookFn):
    def hook(module, args, output):
        # attention (and older decoder blocks) return (output, extras...): edit the first
        tensor = output[0] if isinstance(output, tuple) else output  # (batch, seq, d_model)
        new = fn(tensor)
        if new is None:
            return None
        return (new, *output[1:]) if isinstance(output, tuple) else new
    return hook


@contextmanager
def hooked(model, fns: Mapping[str, HookFn]) -> Iterator[None]:
    """Inside the block, the output at each named point goes through its function."""
    handles = [module.register_forward_hook(_forward_hook(fns[name]))
               for name, module in _modules(model, fns).items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def captured(model, names: Iterable[str] | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Inside the block, forward passes store the output at each named point (every point
    when `names` is None) in the yielded dict, by name: (batch, seq, d_model)."""
    store: dict[str, torch.Tensor] = {}
    names = list(hook_points(model)) if names is None else list(names)

    def keep(name: str) -> HookFn:
        def fn(tensor):
            store[name] = tensor
        return fn

    with hooked(model, {name: keep(name) for name in names}):
        yield store
