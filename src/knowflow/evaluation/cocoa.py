"""CoCoA: confidence- and context-aware adaptive decoding (Khandelwal, Gupta, Agrawal, EMNLP
2025, arXiv 2508.17670), as knowflow implements it.

AdaCAD sets the weight of the contrast per token to the Jensen-Shannon divergence of the two
next-token distributions. CoCoA keeps the per-token weight but builds it from three signals,
as the paper describes them:

- **tail-sensitive conflict**: the Renyi divergence of order 1/2 between the no-context
  distribution q = p(.|x) and the with-context one p = p(.|c,x),
  `D_1/2 = -2 log sum_y sqrt(p(y) q(y))`, which, unlike JSD, does not saturate when both are
  peaked and reacts to the context lifting a token from the tail; mapped to [0, 1] as
  `conflict = 1 - exp(-D_1/2 / 2)` (one minus the Bhattacharyya coefficient);
- **entropy gap**: `H(q) - H(p)` in nats, positive when the context makes the model surer;
  squashed with a logistic function;
- **contextual peakedness**: the margin between the with-context distribution's two most
  likely tokens.

The paper blends the two distributions in logit space, `log r = lambda log p + (1 - lambda)
log q` renormalised. The exact formula that turns the three signals into lambda_t could not be
retrieved here (the paper's text was not reachable; summaries give the signals and the blend),
so knowflow combines them in its own way, stated here: the context's confidence is the mean of
the squashed entropy gap and the peakedness, and

    alpha_t = conflict_t * (sigmoid(H(q) - H(p)) + margin_t) / 2,   lambda_t = 1 + alpha_t

so `log r = log p + alpha_t (log p - log q)`: CAD with a per-token weight in [0, 1] that is
large only where the distributions disagree **and** the context makes the model confident.
Where context and memory agree (conflict 0) or the context leaves the model unsure, CoCoA is
the with-context model itself.
"""

from __future__ import annotations

import torch


def cocoa_alpha(z_ctx: torch.Tensor, z_base: torch.Tensor) -> torch.Tensor:
    """The per-token contrast weight in [0, 1]: (..., vocab) logits -> (..., 1)."""
    lp = torch.log_softmax(z_ctx.float(), dim=-1)                   # (..., vocab)
    lq = torch.log_softmax(z_base.float(), dim=-1)
    bhattacharyya = torch.exp(0.5 * (lp + lq)).sum(-1, keepdim=True).clamp(max=1.0)
    conflict = 1.0 - bhattacharyya                                  # (..., 1); D_1/2 mapped
    h_p = -(lp.exp() * lp).nansum(-1, keepdim=True)                 # (..., 1) nats
    h_q = -(lq.exp() * lq).nansum(-1, keepdim=True)
    top2 = lp.exp().topk(2, dim=-1).values                          # (..., 2)
    margin = top2[..., :1] - top2[..., 1:]                          # (..., 1)
    return conflict * (torch.sigmoid(h_q - h_p) + margin) / 2


def cocoa_logits(z_ctx: torch.Tensor, z_base: torch.Tensor) -> torch.Tensor:
    """CoCoA's combined scores, `log p + alpha_t (log p - log q)`: (..., vocab)."""
    lp = torch.log_softmax(z_ctx.float(), dim=-1)                   # (..., vocab)
    lq = torch.log_softmax(z_base.float(), dim=-1)
    return lp + cocoa_alpha(z_ctx, z_base) * (lp - lq)
