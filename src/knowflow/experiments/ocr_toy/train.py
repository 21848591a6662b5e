"""Full-batch training of the seed-batched OCR toy model, with its measurements every few steps.

The objective is the sum over seeds of each seed's mean cross-entropy over the whole vocabulary,
so every seed follows its own full-batch trajectory. Per evaluation step and seed the record
holds: the train loss and its fact / implication parts, the test implication loss (over the
whole vocabulary, and restricted to the family's K candidate implications), accuracy (argmax
over the vocabulary), the mean rank of the correct implication among its family's candidates
(1 = top, (K + 1) / 2 = chance), the margin (correct logit minus the best wrong logit), the
nuclear and Frobenius norms of the effective W_OV, and the test accuracy and loss per family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from knowflow.errors import ConfigError
from knowflow.experiments.ocr_toy.model import ToyOCR
from knowflow.experiments.ocr_toy.world import FACT, IMPL, OcrData


@dataclass(frozen=True)
class OcrTrainConfig:
    steps: int = 2000
    lr: float = 2.0  # stable for every rank of the rank sweep at the default size
    optimizer: Literal["gd", "adamw"] = "gd"
    weight_decay: float = 0.0  # AdamW's decoupled weight decay
    eval_every: int = 20


def _ce(logits: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy. logits (S, N, d), answer (S, N) -> (S, N)"""
    return -torch.log_softmax(logits, -1).gather(-1, answer.unsqueeze(-1)).squeeze(-1)


def _mean_where(values: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """Mean over N of `values` where `sel`, per seed. (S, N) -> (S,); NaN where none."""
    sel = sel.to(values.dtype)
    return (values * sel).sum(-1) / sel.sum(-1)


def _margins(logits: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """Correct logit minus the best wrong logit. logits (S, N, d), answer (S, N) -> (S, N)"""
    correct = logits.gather(-1, answer.unsqueeze(-1)).squeeze(-1)  # (S, N)
    wrong = logits.scatter(-1, answer.unsqueeze(-1), float("-inf")).amax(-1)  # (S, N)
    return correct - wrong


@torch.no_grad()
def test_metrics(logits: torch.Tensor, test: OcrData, candidates: torch.Tensor
                 ) -> dict[str, torch.Tensor]:
    """Implication metrics per seed from test logits (S, N, d); candidates (F, K) token ids."""
    answer = test.answer  # (S, N)
    cand = candidates[test.family]  # (S, N, K)
    correct = logits.gather(-1, answer.unsqueeze(-1)).squeeze(-1)  # (S, N)
    cand_logits = logits.gather(-1, cand)  # (S, N, K)
    is_answer = cand == answer.unsqueeze(-1)  # (S, N, K)
    loss = _ce(logits, answer)  # (S, N)
    cand_loss = -torch.log_softmax(cand_logits, -1).masked_select(is_answer).view_as(loss)
    rank = 1 + (cand_logits > correct.unsqueeze(-1)).sum(-1)  # (S, N)
    hit = (logits.argmax(-1) == answer).to(logits.dtype)  # (S, N)
    return {"test_impl_loss": loss.mean(-1), "test_impl_loss_cand": cand_loss.mean(-1),
            "test_impl_acc": hit.mean(-1), "test_mean_rank": rank.to(logits.dtype).mean(-1),
            "test_margin": _margins(logits, answer).mean(-1), "_loss": loss, "_hit": hit}


@torch.no_grad()
def measure(model: ToyOCR, train: OcrData, test: OcrData, candidates: torch.Tensor,
            train_logits: torch.Tensor, family_names: tuple[str, ...]) -> list[dict]:
    """One record per seed: every measurement of the module docstring."""
    train_loss = _ce(train_logits, train.answer)  # (S, N_train)
    out = {"train_loss": train_loss.mean(-1),
           "train_fact_loss": _mean_where(train_loss, train.kind == FACT),
           "train_impl_loss": _mean_where(train_loss, train.kind == IMPL),
           "train_margin_min": _margins(train_logits, train.answer).amin(-1)}
    test_logits = model(test.tokens)  # (S, N_test, d)
    metrics = test_metrics(test_logits, test, candidates)
    loss, hit = metrics.pop("_loss"), metrics.pop("_hit")
    out.update(metrics)
    for f, name in enumerate(family_names):
        sel = test.family == f
        out[f"test_acc_{name}"] = _mean_where(hit, sel)
        out[f"test_loss_{name}"] = _mean_where(loss, sel)
    ov = model.effective_ov()  # (S, d, d)
    out["nuclear_norm"] = torch.linalg.matrix_norm(ov, ord="nuc")
    out["frobenius_norm"] = torch.linalg.matrix_norm(ov, ord="fro")
    if model.kq_trainable:
        attn = model.attention(test.tokens)  # (S, N, L)
        on_sr = (test.tokens == test.subject.unsqueeze(-1)).to(attn.dtype)
        out["attn_subject_test"] = (attn * on_sr).sum(-1).mean(-1)
    return [{k: float(v[i]) for k, v in out.items()} for i in range(model.n_seeds)]


def _optimizer(params: list[torch.nn.Parameter], cfg: OcrTrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "gd":
        return torch.optim.SGD(params, lr=cfg.lr)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


@torch.no_grad()
def frozen_attention_grads(model: ToyOCR, h: torch.Tensor, answer: torch.Tensor
                           ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and closed-form gradients of the objective while W_KQ is frozen.

    Then the hidden states h = X^T attn (S, N, d) are constant and logits = h W_OV^T; with
    G = (softmax(logits) - onehot(answer)) / N, dL/dW_OV = G^T h, and for the factorized
    model dL/dW_O = G^T (h W_V), dL/dW_V = h^T (G W_O). Several times cheaper than autograd
    at these sizes; the tests check it against autograd.
    """
    if model.factorized:
        z = h @ model.w_v  # (S, N, r)
        logits = z @ model.w_o.transpose(-1, -2)  # (S, N, d)
    else:
        logits = h @ model.w_ov.transpose(-1, -2)  # (S, N, d)
    g = torch.softmax(logits, -1)  # (S, N, d)
    g.scatter_add_(-1, answer.unsqueeze(-1), torch.full_like(logits[..., :1], -1.0))
    g /= answer.shape[-1]
    if model.factorized:
        return logits, {"w_o": g.transpose(-1, -2) @ z,  # (S, d, r)
                        "w_v": h.transpose(-1, -2) @ (g @ model.w_o)}  # (S, d, r)
    return logits, {"w_ov": g.transpose(-1, -2) @ h}  # (S, d, d)


def train(model: ToyOCR, train_data: OcrData, test_data: OcrData, candidates: torch.Tensor,
          cfg: OcrTrainConfig, family_names: tuple[str, ...]) -> list[list[dict]]:
    """Train all seeds at once; returns each seed's records (step 0 = the initialization).

    `train_data` and `test_data` are seed-batched (fields with a leading seed dimension).
    Step t's record describes the model before update t; the last one is the final model.
    With W_KQ frozen the gradients are computed in closed form, otherwise by autograd.
    """
    frozen_h = None if model.kq_trainable else model.hidden(train_data.tokens)  # (S, N, d)
    plain_gd = frozen_h is not None and cfg.optimizer == "gd"  # update in place, no optimizer
    # (building a torch optimizer imports torch._dynamo: seconds, for nothing in plain GD)
    opt = None if plain_gd else _optimizer([p for p in model.parameters()
                                            if p.requires_grad], cfg)
    records: list[list[dict]] = [[] for _ in range(model.n_seeds)]
    for step in range(cfg.steps + 1):
        if opt is not None:
            opt.zero_grad()
        if frozen_h is not None:
            logits, grads = frozen_attention_grads(model, frozen_h, train_data.answer)
        else:
            logits = model(train_data.tokens)  # (S, N, d)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            if not torch.isfinite(logits).all():
                if step == 0:  # before any update: the initialization's fault
                    raise ConfigError("the initial weights give non-finite logits",
                                      "model.init_scale", "lower model.init_scale (or "
                                      "model.kq_init), or use dtype=float64")
                raise ConfigError(f"training diverged by step {step} (non-finite logits); "
                                  "lower the learning rate", "train.lr")
            recs = measure(model, train_data, test_data, candidates, logits.detach(),
                           family_names)
            for seed_records, rec in zip(records, recs, strict=True):
                seed_records.append({"step": step, **rec})
        if step == cfg.steps:
            break
        if frozen_h is None:
            _ce(logits, train_data.answer).mean(-1).sum().backward()  # sum of seed means
            opt.step()
        elif plain_gd:
            with torch.no_grad():
                for name, grad in grads.items():
                    getattr(model, name).sub_(cfg.lr * grad)
        else:
            for name, grad in grads.items():
                getattr(model, name).grad = grad
            opt.step()
    return records
