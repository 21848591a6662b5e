"""COIECD: contrastive decoding only where a knowledge conflict is detected (Yuan et al. 2024,
"Discerning and resolving knowledge conflicts through adaptive decoding with contextual
information-entropy constraint").

At each decoding step every candidate token y is tested against the contextual
information-entropy constraint. Its information content under the context, -log p(y | c, x),
is shifted by the entropy of the no-context distribution, H(Y | x) (the stable-entropy
baseline), and normalised over the vocabulary with a softmax:

    s(y) = log softmax_y( -log p(y | c, x) - H(Y | x) )

A token satisfies the constraint when `min s + log LAMBDA <= s(y) <= max s - log LAMBDA`;
it is then treated as non-conflicting and scored `log p(y | x) + ALPHA * g(y)`, where
`g(y) = log p(y | c, x) - log p(y | x)` is the contextual contrast. A token outside the bounds
is treated as conflicting and scored `log p(y | c, x) + ALPHA * g(y)` (CAD's contrast). When
exactly one token lies below the lower bound (the most likely one: the distribution is
confident), the lower bound is dropped, so nothing but the far tail counts as conflicting.

Constants (the authors' released implementation, `decoding.py` of github.com/Stacy027/COIECD):
LAMBDA = 4 (`threshold_ratio`) and ALPHA = 1. With ALPHA = 1 a non-conflicting token scores
exactly `log p(y | c, x)`, the plain with-context model, so the contrast is applied only to the
tokens (at the steps) where the test fires.

Because H(Y | x) is the same for every token, it cancels in the softmax: s(y) - min s =
log(p_max / p(y | c, x)). The test therefore reads: y conflicts when p(y | c, x) > p_max / LAMBDA
(a close rival of the top token, or the top token itself) or p(y | c, x) < LAMBDA * p_min; and a
step fires when more than one token is within a factor LAMBDA of the top token. The entropy is
kept in the computation as the paper writes it. Log-probabilities, not raw logits, are mixed
(the mixture of the two streams is not invariant to a per-row shift).
"""

from __future__ import annotations

import math

import torch

LAMBDA = 4.0    # threshold ratio of the constraint's bounds (released implementation)
ALPHA = 1.0     # weight of the contextual contrast g(y) (released implementation)
_FLOOR = -1e4   # log-probabilities below this are clipped (a zero probability has no info)


def entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each distribution given by log-probabilities: (..., vocab) -> (..., 1)."""
    return -(logp.exp() * logp).nansum(-1, keepdim=True)


def conflicting(lp_ctx: torch.Tensor, lp_base: torch.Tensor, lam: float = LAMBDA
                ) -> torch.Tensor:
    """(..., vocab) bool: the tokens that fail the contextual information-entropy constraint,
    from the with-context and no-context log-probabilities."""
    info = -lp_ctx.clamp(min=_FLOOR) - entropy(lp_base)            # (..., vocab)
    s = torch.log_softmax(info, dim=-1)
    lower = s.min(-1, keepdim=True).values + math.log(lam)          # (..., 1)
    upper = s.max(-1, keepdim=True).values - math.log(lam)
    below = s < lower                                               # (..., vocab)
    confident = below.sum(-1, keepdim=True) == 1                    # the top token alone
    inside = (~below | confident) & (s <= upper)
    return ~inside


def coiecd_logits(z_ctx: torch.Tensor, z_base: torch.Tensor, alpha: float = ALPHA,
                  lam: float = LAMBDA) -> torch.Tensor:
    """COIECD's combined scores from the with-context and no-context logits (..., vocab)."""
    lp_c = torch.log_softmax(z_ctx.float(), dim=-1)                 # (..., vocab)
    lp_b = torch.log_softmax(z_base.float(), dim=-1)
    own = torch.where(conflicting(lp_c, lp_b, lam), lp_c, lp_b)
    return own + alpha * (lp_c - lp_b)
