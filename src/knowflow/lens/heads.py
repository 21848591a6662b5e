"""Attention heads one at a time: edit, read and sweep each head's output.

A head's output is its attention-weighted values z_h, the hook point `blocks.{l}.attn.z`
(lens.hooks): scaling z_h by gamma scales the head's contribution to the layer's output (gamma
0 prunes it), replacing it by a mean is mean ablation (`scaled_heads`).

`last_position_sweep` is the batched causal sweep behind `knowflow probe heads` and the
`heads` decoding method's calibration: the prompt's prefix runs once, its KV cache is
repeated over the rows of a batch (lens.prefix), and each row recomputes only the last
position under its own per-(layer, head) scale and fill. An edit at the last position cannot
change an earlier position (attention is causal), so every row equals a full forward pass of
the edited model (the tests check it against one forward per head).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch

from knowflow.errors import KnowflowError
from knowflow.lens.arch import arch_of, out_weight
from knowflow.lens.hooks import HookFn, hook_name, hooked
from knowflow.lens.prefix import Prefix


def head_shape(model) -> tuple[int, int, int]:
    """(layers, heads, head_dim) of `model`."""
    arch = arch_of(model)
    return arch.n_layers, arch.n_heads, arch.head_dim


def head_contributions(model, layer: int, z: torch.Tensor) -> torch.Tensor:
    """Each head's share of layer `layer`'s attention output: z (..., heads * head_dim), the
    input of o_proj, -> (..., heads, d_model); summed over heads (plus o_proj's bias) it is
    the layer's attention output."""
    arch = arch_of(model)
    n_heads, head_dim = arch.n_heads, arch.head_dim
    w = out_weight(arch.o[layer])                              # (d_model, heads * head_dim)
    w = w.view(w.shape[0], n_heads, head_dim)                  # (d_model, heads, head_dim)
    z = z.view(*z.shape[:-1], n_heads, head_dim).to(w.dtype)   # (..., heads, head_dim)
    return torch.einsum("...hd,mhd->...hm", z, w)


@contextmanager
def scaled_heads(model, scales: Mapping[int, torch.Tensor]) -> Iterator[None]:
    """Inside the block, every position's output of head h in layer l is multiplied by
    `scales[l][h]` (scales[l]: (heads,); 0 prunes a head, 1 leaves it)."""
    n_layers = head_shape(model)[0]
    bad = [layer for layer in scales if not 0 <= layer < n_layers]
    if bad:
        raise KnowflowError(f"layer {bad[0]} is outside the model (0..{n_layers - 1})")

    def scale(s: torch.Tensor) -> HookFn:
        return lambda x: x * s.to(x.device, x.dtype)[:, None]  # (batch, seq, heads, head_dim)

    with hooked(model, {hook_name(layer, "attn.z"): scale(s) for layer, s in scales.items()}):
        yield


@torch.no_grad()
def last_position_sweep(model, ids: Sequence[int], scale: torch.Tensor,
                        fill: torch.Tensor | None = None, batch_size: int = 64,
                        extra: Callable[[slice], dict] | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Run prompt `ids` once per row of `scale` (rows, layers, heads), each row with the
    last position's head outputs z_h multiplied by its scale and `fill` (rows, layers, heads,
    head_dim; default zero) added. `extra(rows)` gives more forward keywords for a slice of
    rows (an attention plan). Returns the decoder's final hidden state at the last position,
    (rows, d_model), and every layer's o_proj input there, (rows, layers, heads * head_dim)."""
    n_layers, n_heads, head_dim = head_shape(model)
    dev = next(model.parameters()).device
    decoder = arch_of(model).decoder
    x = torch.tensor([list(ids)], dtype=torch.long, device=dev)  # (1, seq)
    last = x.shape[1] - 1
    prefix = Prefix.run(decoder, x[:, :last], lm_head=False)
    hidden, zs = [], []
    for start in range(0, scale.shape[0], batch_size):
        rows = slice(start, min(start + batch_size, scale.shape[0]))
        s = scale[rows].to(dev)                                    # (n, layers, heads)
        f = fill[rows].to(dev) if fill is not None else None       # (n, layers, heads, d)
        n = s.shape[0]
        z_last = torch.zeros(n, n_layers, n_heads * head_dim, device=dev)
        fns = {hook_name(layer, "attn.z"): _row_edit(s[:, layer], None if f is None
                                                     else f[:, layer], z_last, layer)
               for layer in range(n_layers)}
        kwargs = dict(input_ids=x[:, last:].expand(n, 1), **(extra(rows) if extra else {}),
                      **prefix.feed(decoder, n))
        with hooked(model, fns):
            out = decoder(**kwargs, use_cache=prefix.cache is not None)
        hidden.append(out.last_hidden_state[:, -1].float().cpu())  # (n, d_model)
        zs.append(z_last.cpu())
        del kwargs, out   # this batch's cache copy, before the next batch makes its own
    return torch.cat(hidden), torch.cat(zs)


def _row_edit(s: torch.Tensor, f: torch.Tensor | None, z_last: torch.Tensor, layer: int
              ) -> HookFn:
    """The edit of one layer for a batch of rows: s (n, heads), f (n, heads, head_dim); the
    result at the (only) position is recorded in z_last[:, layer]."""
    unchanged = bool((s == 1).all()) and (f is None or not bool(f.any()))

    def fn(x: torch.Tensor):                                      # (n, 1, heads, head_dim)
        new = x if unchanged else x * s[:, None, :, None].to(x.dtype)
        if f is not None:
            new = new + f[:, None].to(x.dtype)
        z_last[:, layer] = new[:, -1].reshape(new.shape[0], -1).float()
        return None if unchanged else new
    return fn


def target_logits(model, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Logits of chosen tokens from final hidden states: hidden (rows, d_model), targets
    (rows, k) token ids -> (rows, k). Only those rows of the unembedding are used."""
    unembed = arch_of(model).unembed
    w = unembed.weight[targets.to(unembed.weight.device)].float().cpu()  # (rows, k, d_model)
    out = torch.einsum("rkd,rd->rk", w, hidden.float())
    bias = getattr(unembed, "bias", None)
    if bias is not None:
        out = out + bias[targets.to(bias.device)].float().cpu()
    return out


def answer_split(tokenizer, cf_text: str, par_text: str
                 ) -> tuple[tuple[int, ...], int, int] | None:
    """The two answers' shared first tokens and their first differing tokens, (shared,
    cf_token, par_token), each answer tokenized alone (as log-likelihood scoring does); None
    when one answer's tokens begin the other's, so no token tells them apart."""
    cf, par = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in (cf_text, par_text))
    shared = 0
    while shared < min(len(cf), len(par)) and cf[shared] == par[shared]:
        shared += 1
    if shared == min(len(cf), len(par)):
        return None
    return tuple(cf[:shared]), cf[shared], par[shared]


HeadVariant = tuple[str, int, int]  # (edit, layer, head): edit "zero", "mean", or any other name


def ablation_rows(kinds, n_layers: int, n_heads: int, head_dim: int,
                  mean: torch.Tensor | None = None
                  ) -> tuple[list[HeadVariant], torch.Tensor, torch.Tensor]:
    """One row per (kind, layer, head) after an unchanged row 0: the variants, and their
    scale (rows, layers, heads) and fill (rows, layers, heads, head_dim) for
    `last_position_sweep`. `zero` zeroes the head, `mean` puts `mean[layer, head]` (layers,
    heads, head_dim) in its place, any other kind leaves it (an attention plan edits it)."""
    variants = [(k, layer, head) for k in kinds for layer in range(n_layers)
                for head in range(n_heads)]
    scale = torch.ones(len(variants) + 1, n_layers, n_heads)
    fill = torch.zeros(len(variants) + 1, n_layers, n_heads, head_dim)
    for r, (kind, layer, head) in enumerate(variants, start=1):
        if kind in ("zero", "mean"):
            scale[r, layer, head] = 0.0
        if kind == "mean":
            if mean is None:
                raise KnowflowError("mean ablation needs the heads' mean outputs")
            fill[r, layer, head] = mean[layer, head]
    return variants, scale, fill


def log_odds_rows(model, ids: Sequence[int], cf_token: int, par_token: int,
                  scale: torch.Tensor, fill: torch.Tensor | None = None, batch_size: int = 64,
                  extra: Callable[[slice], dict] | None = None) -> torch.Tensor:
    """log p(cf_token) - log p(par_token) after `ids` under each row's edit (see
    `last_position_sweep`): (rows,). The softmax's normaliser cancels, so two logits do."""
    hidden, _ = last_position_sweep(model, ids, scale, fill, batch_size, extra)
    z = target_logits(model, hidden, torch.tensor([[cf_token, par_token]]).expand(
        len(hidden), 2))                                              # (rows, 2)
    return z[:, 0] - z[:, 1]
