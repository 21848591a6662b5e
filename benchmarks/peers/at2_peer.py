"""AT2 (Cohen-Wang, Chuang, Madry 2025; `at2` 0.0.1, `pip install -e '.[at2]'`) as a peer
of knowflow's learned attribution in benchmarks/peers/bench_explain.py.

AT2 ships no estimator for SmolLM2 and cannot download one offline, so its estimator is trained
here with AT2's own pieces on the same generated training contexts as knowflow's: its
`AttentionFeatureExtractor` (attention recomputed from the hidden states, from the positions
that predict the explained tokens, averaged over them and summed over each sentence's
tokens), its `LinearScoreEstimator` (one weight per head, L1-normalised after training) and
its `PearsonCorrelationLoss`, optimised as its trainer's defaults do (Adam, learning rate
1e-3, cosine schedule, gradient norm clipped at 1, 1,000 steps, each step over a batch of
up to 512 training contexts; fewer contexts than that: all of them every step). Its inputs
per context are, as in its trainer, the ablation masks in {-1, 1} times the sentence features
and the explained span's logit-probability log p - log(1 - p) under each mask. One
difference, stated: the log-probabilities are knowflow's (sentences removed from the text,
scored once for both estimators) where AT2's own pipeline masks the sentences' tokens out of
attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import torch


def _at2():
    """AT2's classes, imported without nltk's network call."""
    import nltk

    nltk.download = lambda *args, **kwargs: True
    from at2.attribution.features import AttentionFeatureExtractor
    from at2.attribution.score_estimators import LinearScoreEstimator
    from at2.attribution.trainer import PearsonCorrelationLoss

    return AttentionFeatureExtractor, LinearScoreEstimator, PearsonCorrelationLoss


def load_at2(path):
    """An AT2 estimator saved by `train_at2(...).save(path)`."""
    _at2()
    from at2.attribution.score_estimators import ScoreEstimator

    return ScoreEstimator.load(path)


def extractor(model):
    features, _, _ = _at2()
    return features(model.config.num_hidden_layers, model.config.num_attention_heads,
                    model_type=model.config.model_type)


@torch.no_grad()
def at2_features(model, prompt_ids: Sequence[int], answer_ids: Sequence[int],
                 spans: Sequence[Sequence[int]]) -> torch.Tensor:
    """(sentences, layers * heads): AT2's features of each sentence (one forward pass)."""
    ids = torch.tensor([list(prompt_ids) + list(answer_ids)])                  # (1, seq)
    hidden = model(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states
    task = SimpleNamespace(model=model, hidden_states=hidden)
    start = len(prompt_ids)
    per_token = extractor(model)(task, start, start + len(answer_ids))  # (answer, seq, F)
    mean = per_token.mean(0).float()                                         # (seq, F)
    return torch.stack([mean[list(s)].sum(0) for s in spans]).double()      # (sentences, F)


def logit_prob(logprobs: torch.Tensor) -> torch.Tensor:
    """log p - log(1 - p), AT2's and ContextCite's target, from log p."""
    lp = logprobs.double().clamp(max=-1e-6)
    return lp - torch.log(-torch.expm1(lp))


def train_at2(model, examples: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
              steps: int = 1000, lr: float = 1e-3, batch: int = 512, seed: int = 0):
    """AT2's linear estimator trained on (features (n, F), masks (m, n), log-probs (m,)) per
    context (see the module docstring); every context needs the same mask count m."""
    _, linear, pearson = _at2()
    torch.manual_seed(seed)
    x = torch.stack([(2 * m.float() - 1) @ f.float() for f, m, _ in examples])  # (ctx, m, F)
    y = torch.stack([logit_prob(lp).float() for _, _, lp in examples])          # (ctx, m)
    est = linear(extractor(model))
    opt = torch.optim.Adam(est.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    loss_fn = pearson()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        pick = torch.randperm(len(x), generator=gen)[:batch]
        opt.zero_grad()
        loss = loss_fn(est(x[pick])[:, :, 0], y[pick])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(est.parameters(), max_norm=1.0)
        opt.step()
        sched.step()
        est.project_parameters()
    est.finalize_parameters()
    return est


@torch.no_grad()
def at2_scores(est, features: torch.Tensor) -> torch.Tensor:
    """(sentences,) AT2's attributions from `at2_features`."""
    return est(features.float())[:, 0].double()
