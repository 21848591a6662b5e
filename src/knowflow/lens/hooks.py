"""Named hook points: one name for each activation a probe reads or edits.

The names follow TransformerLens, over any supported HF model (see lens.arch):

* `blocks.{l}.attn.out`   — block l's attention output (the attention module's output);
* `blocks.{l}.mlp.out`    — block l's MLP output (the MLP module's output);
* `blocks.{l}.resid_post` — the residual stream after block l (the block's output);

each a (batch, seq, d_model) tensor, and the per-head points

* `blocks.{l}.attn.q`, `.k`, `.v` — the query, key and value projections before rotary
  embeddings, (batch, seq, heads, head_dim) (keys and values: kv heads), cut out of a fused
  qkv projection where the family has one;
* `blocks.{l}.attn.z` — each head's attention-weighted values, the input of the output
  projection, (batch, seq, heads, head_dim). The attention output is
  `o_proj(concat_h z_h) = sum_h W_O[:, h] z_h (+ bias)`, so editing z_h edits head h's
  contribution and nothing else in the layer, with any attention implementation and cache.

`hooked(model, {name: fn})` runs `fn(tensor)` on that activation during forward passes inside
the block (a returned tensor replaces it; None keeps it); `captured(model, names)` records
activations by name. Attention *edges* (who attends to whom) are not activations;
probes.intercept cuts and reads them per layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn

from knowflow.errors import KnowflowError
from knowflow.lens.arch import Arch, arch_of

POINTS = ("attn.out", "mlp.out", "resid_post")      # (batch, seq, d_model)
HEAD_POINTS = ("attn.q", "attn.k", "attn.v", "attn.z")  # (batch, seq, heads, head_dim)
HookFn = Callable[[torch.Tensor], "torch.Tensor | None"]
_QKV = {"attn.q": 0, "attn.k": 1, "attn.v": 2}


def hook_name(layer: int, point: str) -> str:
    """`blocks.{layer}.{point}` for a point in POINTS or HEAD_POINTS."""
    if point not in POINTS + HEAD_POINTS:
        raise KnowflowError(f"unknown hook point {point!r} "
                            f"(known: {', '.join(POINTS + HEAD_POINTS)})")
    return f"blocks.{layer}.{point}"


def _module(arch: Arch, layer: int, point: str) -> nn.Module | None:
    """The module whose output (input, for `attn.z`) is the point."""
    if point in _QKV:
        separate = getattr(arch, point[-1])
        if separate is not None:
            return separate[layer]
        return arch.qkv[layer] if arch.qkv is not None else None
    return {"attn.z": arch.o, "attn.out": arch.attn, "mlp.out": arch.mlp,
            "resid_post": arch.blocks}[point][layer]


def hook_points(model) -> dict[str, nn.Module]:
    """Every hook point of `model`, in forward order, with the module it hooks."""
    arch = arch_of(model)
    points: dict[str, nn.Module] = {}
    for layer in range(arch.n_layers):
        for point in (*HEAD_POINTS, *POINTS):
            module = _module(arch, layer, point)
            if module is not None:
                points[hook_name(layer, point)] = module
    return points


def _qkv_part(arch: Arch, fused: torch.Tensor, which: int) -> torch.Tensor:
    """A view of q, k or v (0, 1, 2) in a fused projection's output (..., width):
    (..., heads, head_dim)."""
    n, d = (arch.n_heads, arch.n_kv_heads, arch.n_kv_heads)[which], arch.head_dim
    if arch.paths.qkv_layout == "heads":                   # (..., heads, 3 * head_dim)
        return fused.view(*fused.shape[:-1], arch.n_heads, 3 * d)[..., which * d:(which + 1) * d]
    start = (0, arch.n_heads * d, (arch.n_heads + arch.n_kv_heads) * d)[which]
    return fused[..., start:start + n * d].view(*fused.shape[:-1], n, d)


def _point_hook(arch: Arch, layer: int, point: str, fn: HookFn):
    """(module, hook kind, hook) that passes the point's activation through `fn`."""
    module = _module(arch, layer, point)
    if point == "attn.z":
        def pre_hook(mod, args):
            x = args[0]                                     # (batch, seq, heads * head_dim)
            new = fn(x.view(*x.shape[:-1], arch.n_heads, arch.head_dim))
            return None if new is None else (new.reshape(x.shape), *args[1:])
        return module, "pre", pre_hook
    if point in _QKV and getattr(arch, point[-1]) is None:  # cut out of the fused output
        def fused_hook(mod, args, out):
            new = fn(_qkv_part(arch, out, _QKV[point]))    # (batch, seq, heads, head_dim)
            if new is None:
                return None
            out = out.clone()
            _qkv_part(arch, out, _QKV[point]).copy_(new)
            return out
        return module, "post", fused_hook
    if point in _QKV:
        def proj_hook(mod, args, out):
            new = fn(out.view(*out.shape[:-1], -1, arch.head_dim))  # (batch, seq, heads, d)
            return None if new is None else new.reshape(out.shape)
        return module, "post", proj_hook

    def hook(mod, args, output):
        # attention (and older decoder blocks) return (output, extras...): edit the first
        tensor = output[0] if isinstance(output, tuple) else output  # (batch, seq, d_model)
        new = fn(tensor)
        if new is None:
            return None
        return (new, *output[1:]) if isinstance(output, tuple) else new
    return module, "post", hook


def _flat_mlp_hook(block: nn.Module, fn: HookFn):
    """Hooks for an MLP that runs on (batch * seq, d_model) rows (OPT): the block's input
    gives the (batch, seq) to view them as."""
    shape: list[torch.Size] = []

    def remember(mod, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]    # (batch, seq, d_model)
        shape[:] = [x.shape]

    def unflatten(tensor: torch.Tensor):                    # (batch * seq, d_model)
        new = fn(tensor.view(shape[0][:-1] + tensor.shape[-1:]))  # (batch, seq, d_model)
        return None if new is None else new.reshape(tensor.shape)
    return block.register_forward_pre_hook(remember, with_kwargs=True), unflatten


@contextmanager
def hooked(model, fns: Mapping[str, HookFn]) -> Iterator[None]:
    """Inside the block, the activation at each named point goes through its function."""
    arch = arch_of(model)
    handles = []
    try:
        for name, fn in fns.items():
            layer, point = _parse(arch, model, name)
            if point == "mlp.out" and arch.paths.flat_mlp:
                handle, fn = _flat_mlp_hook(arch.blocks[layer], fn)
                handles.append(handle)
            module, kind, hook = _point_hook(arch, layer, point, fn)
            handles.append(module.register_forward_pre_hook(hook) if kind == "pre"
                           else module.register_forward_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()


def _parse(arch: Arch, model, name: str) -> tuple[int, str]:
    """(layer, point) of a hook name, or a KnowflowError naming the known points."""
    parts = name.split(".", 2)
    ok = (len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit()
          and int(parts[1]) < arch.n_layers and parts[2] in POINTS + HEAD_POINTS
          and _module(arch, int(parts[1]), parts[2]) is not None)
    if not ok:
        raise KnowflowError(f"no hook point {name!r} in {type(model).__name__} "
                            f"(blocks.0..{arch.n_layers - 1}."
                            f"{{{','.join(HEAD_POINTS + POINTS)}}})")
    return int(parts[1]), parts[2]


@contextmanager
def captured(model, names: Iterable[str] | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Inside the block, forward passes store the activation at each named point (every
    point when `names` is None) in the yielded dict, by name."""
    store: dict[str, torch.Tensor] = {}
    names = list(hook_points(model)) if names is None else list(names)

    def keep(name: str) -> HookFn:
        def fn(tensor):
            store[name] = tensor
        return fn

    with hooked(model, {name: keep(name) for name in names}):
        yield store
