"""The one-layer, single-head, attention-only model of the OCR theory (Huang et al. 2025).

    factorized:  f(X) = W_O W_V^T X^T attn(X W_KQ x_T)       W_O, W_V: (d, r)
    merged:      f(X) = W_OV      X^T attn(X W_KQ x_T)       W_OV:     (d, d)

X (L, d) holds the one-hot embeddings of the sequence, x_T = <EOS> is the query, and the
unembedding is tied to the (identity) embedding, so f(X) is the logit vector over the whole
vocabulary. attn is the identity (linear attention, as the theory writes it) or a softmax.
With one-hot X, X W_KQ x_T is column x_T of W_KQ gathered at the sequence's tokens, and
X^T a is a scatter-add of the attention weights into a d-vector; neither needs X itself.

Both models express the same functions (for r = d); they differ in how gradient descent moves
through them. From a small initialization, GD on the factorized model is implicitly biased
towards a small nuclear norm of W_O W_V^T, on the merged model towards a small Frobenius norm
of W_OV. Every parameter carries a leading seed dimension S, so several seeds train at once
through batched matrix products; each seed's slice is initialized from its own generator, so
a seed gives the same numbers whatever it is batched with.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

Attention = Literal["linear", "softmax"]


def _randn(shape: tuple[int, ...], seeds: list[int], scale: float, dtype: torch.dtype,
           salt: int) -> torch.Tensor:
    """One (S, *shape) tensor; slice i drawn from a generator seeded by seeds[i] and `salt`."""
    slices = [torch.randn(shape, generator=torch.Generator().manual_seed(1000 * s + salt),
                          dtype=dtype) for s in seeds]
    return torch.stack(slices) * scale


class ToyOCR(nn.Module):
    """Seed-batched one-layer attention-only model, factorized or merged output-value."""

    def __init__(self, dim: int, seeds: list[int], factorized: bool = True,
                 rank: int | None = None, attention: Attention = "linear",
                 train_kq: bool = False, init_scale: float = 1e-3, kq_init: float = 1.0,
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        self.dim, self.n_seeds, self.factorized = dim, len(seeds), factorized
        self.rank = (rank or dim) if factorized else dim
        self.attention_kind = attention
        if factorized:
            self.w_o = nn.Parameter(_randn((dim, self.rank), seeds, init_scale, dtype, 1))
            self.w_v = nn.Parameter(_randn((dim, self.rank), seeds, init_scale, dtype, 2))
        else:
            self.w_ov = nn.Parameter(_randn((dim, dim), seeds, init_scale, dtype, 3))
        # every score starts at kq_init: linear attention sums the tokens (times kq_init),
        # softmax attention averages them
        w_kq = torch.full((self.n_seeds, dim, dim), float(kq_init), dtype=dtype)
        if train_kq:
            self.w_kq = nn.Parameter(w_kq)
        else:
            self.register_buffer("w_kq", w_kq)

    def _batched(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, L) shared by all seeds, or (S, N, L) -> (S, N, L)."""
        return tokens.expand(self.n_seeds, *tokens.shape) if tokens.dim() == 2 else tokens

    def attention(self, tokens: torch.Tensor) -> torch.Tensor:
        """Attention weights of the query <EOS> over the sequence. -> (S, N, L)"""
        tokens = self._batched(tokens)  # (S, N, L)
        seed = torch.arange(self.n_seeds).view(-1, 1, 1)
        scores = self.w_kq[seed, tokens, tokens[..., -1:]]  # (S, N, L): x_t^T W_KQ x_T
        return torch.softmax(scores, dim=-1) if self.attention_kind == "softmax" else scores

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """X^T attn(X W_KQ x_T): the attention-weighted sum of embeddings. -> (S, N, d)"""
        tokens = self._batched(tokens)  # (S, N, L)
        attn = self.attention(tokens)  # (S, N, L)
        out = torch.zeros(*tokens.shape[:2], self.dim, dtype=attn.dtype)
        return out.scatter_add(-1, tokens, attn)

    def effective_ov(self) -> torch.Tensor:
        """W_O W_V^T (factorized) or W_OV (merged). (S, d, d)"""
        if self.factorized:
            return self.w_o @ self.w_v.transpose(-1, -2)
        return self.w_ov

    def forward(self, tokens: torch.Tensor, attn: torch.Tensor | None = None) -> torch.Tensor:
        """Logits over the vocabulary at <EOS>. (S, N, L) or (N, L) -> (S, N, d)

        Computed as sum_t attn_t W[:, x_t]: with one-hot X, X^T a times a matrix is a weighted
        sum of the matrix's rows gathered at the tokens, which costs L rows per example
        instead of a (d, d) product. Pass `attn` (from `attention()`) to reuse the attention
        when W_KQ is frozen.
        """
        tokens = self._batched(tokens)  # (S, N, L)
        attn = self.attention(tokens) if attn is None else attn  # (S, N, L)
        seed = torch.arange(self.n_seeds).view(-1, 1, 1)
        if self.factorized:
            rows = self.w_v[seed, tokens]  # (S, N, L, r): W_V^T x_t
            z = (attn.unsqueeze(-1) * rows).sum(-2)  # (S, N, r): W_V^T X^T a
            return z @ self.w_o.transpose(-1, -2)  # (S, N, d)
        cols = self.w_ov.transpose(-1, -2)[seed, tokens]  # (S, N, L, d): W_OV x_t
        return (attn.unsqueeze(-1) * cols).sum(-2)  # (S, N, d)

    @property
    def kq_trainable(self) -> bool:
        return isinstance(self.w_kq, nn.Parameter)
