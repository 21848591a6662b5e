"""The one-layer, single-head attention model of the context-parametric inversion theory.

    f_W(x) = softmax(phi(x)^T W_KQ phi(x_T)) phi(x)^T W_V^T W_H            (Goyal et al., Eq. 4)

read out at the last token x_T = r. W_H is frozen to the answer tokens' embeddings, so the
logit of answer a is phi(a)^T W_V h, where h is the attention-weighted mean of the input
embeddings. Because the query is always r, only W_KQ phi(r) ever matters for the output.

`pretrained_value_matrix` builds the "pretrained" W_V of Definitions 1-3: on its own, a context
token's value predicts that token with probability delta_C, and a memorized subject's value
predicts its fact with probability delta_M (unmemorized subjects and r predict uniformly).
`train_value_matrix` instead learns W_V by gradient descent on a D_pre set with those targets.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from knowflow.experiments.cpi_toy.world import ToyData, ToyVocab, ToyWorld, embeddings


def target_logit(delta: float, n_answers: int) -> float:
    """beta such that softmax([beta, 0, ..., 0])[0] == delta over n_answers classes."""
    return math.log(delta * (n_answers - 1) / (1.0 - delta))


class OneLayerCPI(nn.Module):
    """Parameters W_KQ (d, d) and W_V (d, d); buffers phi (tokens, d) and W_H (d, n_answers)."""

    def __init__(self, vocab: ToyVocab, w_v: torch.Tensor, w_kq: torch.Tensor | None = None):
        super().__init__()
        self.vocab = vocab
        phi = embeddings(vocab, dtype=w_v.dtype)
        self.register_buffer("phi", phi)  # (n_tokens + 1, d), last row = pad
        answers = slice(vocab.n_subjects, vocab.relation)
        self.register_buffer("w_h", phi[answers].T.clone())  # (d, n_answers)
        self.w_v = nn.Parameter(w_v.clone())
        self.w_kq = nn.Parameter(torch.zeros_like(w_v) if w_kq is None else w_kq.clone())

    def attention(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attention of the last token over the input. (batch, seq) -> (batch, seq).

        score_t = phi(x_t)^T W_KQ phi(x_T). Computed per vocabulary token and gathered, which is
        the same arithmetic as embedding each position but far cheaper for a small vocabulary.
        """
        queries, inverse = tokens[:, -1].unique(return_inverse=True)  # distinct x_T (always r)
        keys = self.w_kq @ self.phi[queries].T  # (d, n_queries): W_KQ phi(x_T)
        table = self.phi @ keys  # (n_tokens + 1, n_queries): score of each token per query
        scores = table[tokens, inverse.unsqueeze(1)]  # (batch, seq)
        scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor,
                value_table: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (logits over A (batch, n_answers), attention (batch, seq)).

        logits = sum_t attn_t phi(x_t)^T W_V^T W_H, with each token's value logits looked up in
        `value_table` (see `value_table()`; pass it when scoring several batches with the same
        weights, or when W_V is frozen).
        """
        attn = self.attention(tokens, mask)  # (batch, seq)
        table = self.value_table() if value_table is None else value_table
        logits = (attn.unsqueeze(-1) * table[tokens]).sum(1)  # (batch, n_answers)
        return logits, attn

    def value_table(self) -> torch.Tensor:
        """phi(x)^T W_V^T W_H for every token x: its value's answer logits. (n_tokens + 1, A)"""
        return self.phi @ (self.w_v.T @ self.w_h)

    def value_probs(self, token_ids: torch.Tensor, value_table: torch.Tensor | None = None
                    ) -> torch.Tensor:
        """What each token's value alone predicts: softmax(W_H^T W_V phi(x)). (n,) -> (n, A)."""
        table = self.value_table() if value_table is None else value_table
        return torch.softmax(table[token_ids], dim=-1)

    def loss(self, data: ToyData, value_table: torch.Tensor | None = None) -> torch.Tensor:
        logits, _ = self(data.tokens, data.mask, value_table)
        return nn.functional.cross_entropy(logits, data.answer)


def pretrained_value_matrix(world: ToyWorld, delta_c: float, delta_m: float,
                            dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Construct W_V exactly: phi(c) -> delta_C on c; phi(s) -> delta_M on fact(s); else uniform.

    Solves W_V Phi = V for the target value vectors V (minimum norm, via the pseudo-inverse);
    the columns of Phi are linearly independent, so the targets are met exactly.
    """
    vocab = world.vocab
    n_tok = vocab.relation + 1
    phi = embeddings(vocab, dtype)[:n_tok].T  # (d, n_tokens)
    targets = torch.zeros(vocab.dim, n_tok, dtype=dtype)  # value vectors, column per token
    beta_c = target_logit(delta_c, vocab.n_answers)
    beta_m = target_logit(delta_m, vocab.n_answers)
    # phi(a)^T (sqrt2 * beta * e_a) = beta: a one-hot value direction gives logit beta to a only.
    for a in range(vocab.n_answers):
        tok = vocab.answer_token(a)
        targets[tok, tok] = math.sqrt(2) * beta_c
    for s in world.memorized.tolist():
        if s in set(world.groups["s_unseen"].tolist()):
            continue
        targets[vocab.answer_token(int(world.facts[s])), s] = math.sqrt(2) * beta_m
    return targets @ torch.linalg.pinv(phi)  # (d, d)


def pretraining_set(world: ToyWorld) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """D_pre: `[c, r]` for every context token and `[s, r]` for every memorized subject.

    Returns tokens (n, 2), the target token (n,) as an index in A, and the target's delta kind
    (0 = context, 1 = memorized subject) for the soft labels.
    """
    vocab = world.vocab
    unseen = set(world.groups["s_unseen"].tolist())
    subjects = [s for s in world.memorized.tolist() if s not in unseen]
    first = [vocab.answer_token(a) for a in range(vocab.n_answers)] + subjects
    target = list(range(vocab.n_answers)) + [int(world.facts[s]) for s in subjects]
    kind = [0] * vocab.n_answers + [1] * len(subjects)
    tokens = torch.tensor([[t, vocab.relation] for t in first])
    return tokens, torch.tensor(target), torch.tensor(kind)


def train_value_matrix(world: ToyWorld, delta_c: float, delta_m: float, steps: int, lr: float,
                       dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Learn W_V on D_pre (W_KQ = 0, uniform attention) with soft labels delta_C / delta_M.

    Full-batch Adam from W_V = 0 on cross-entropy against the target distribution (delta on the
    target, the rest spread uniformly), whose minimizers output exactly those probabilities.
    """
    vocab = world.vocab
    tokens, target, kind = pretraining_set(world)
    n_a = vocab.n_answers
    delta = torch.where(kind == 0, delta_c, delta_m).to(dtype)  # (n,)
    soft = ((1 - delta) / (n_a - 1)).unsqueeze(1).repeat(1, n_a)  # (n, A)
    soft[torch.arange(len(target)), target] = delta
    model = OneLayerCPI(vocab, torch.zeros(vocab.dim, vocab.dim, dtype=dtype))
    model.w_kq.requires_grad_(False)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    opt = torch.optim.Adam([model.w_v], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        logits, _ = model(tokens, mask)
        loss = -(soft * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
        loss.backward()
        opt.step()
    return model.w_v.detach().clone()
