"""Finetuning the one-layer CPI model, with the trajectory quantities of the theory each step.

Per evaluation step the record holds: loss per data type; attention of r on the context, the
subject and itself, for each training type and for the counterfactual test set; M_C (the mean
probability the model gives the context's answer on the counterfactual test set); counterfactual
accuracy (argmax = context) and parametric accuracy (argmax = memorized fact); the projections
theta_S^T (-grad_WKQ L) phi(r) and theta_C^T (-grad_WKQ L) phi(r) of Proposition 1; and the
value-embedding confidence of Proposition 3: the probability a finetuning subject's value alone
gives its finetuning answer (C+S subjects) and a held-out subject's value gives its fact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch.nn import functional as F

from knowflow.config import option
from knowflow.experiments.cpi_toy.model import OneLayerCPI
from knowflow.experiments.cpi_toy.world import CS, KIND_NAMES, ToyData, theta_directions
from knowflow.experiments.cpi_toy.world import C as KIND_C
from knowflow.train.criticality import no_context_loss
from knowflow.train.curation import next_drop

POSITIONS = {"context": 0, "subject": 1, "relation": 2}  # input layout [c, s, r]


@dataclass(frozen=True)
class ToyFinetuneConfig:
    steps: int = option(1000, ge=1)
    lr: float = 4.0
    optimizer: Literal["gd", "adam"] = "gd"
    eval_every: int = option(1, ge=1)
    # W_V's learning rate relative to W_KQ's (when W_V trains)
    value_lr_scale: float = option(1.0, gt=0)


def gradient_projections(model: OneLayerCPI, grad_wkq: torch.Tensor) -> tuple[float, float]:
    """(theta_S^T (-G) phi(r), theta_C^T (-G) phi(r)) for G = dL/dW_KQ (Proposition 1)."""
    theta_s, theta_c = theta_directions(model.vocab, grad_wkq.dtype)
    phi_r = model.phi[model.vocab.relation]
    return float(-theta_s @ grad_wkq @ phi_r), float(-theta_c @ grad_wkq @ phi_r)


@torch.no_grad()
def trajectory_record(model: OneLayerCPI, train: ToyData, test: ToyData,
                      train_logits: torch.Tensor, train_attn: torch.Tensor,
                      value_table: torch.Tensor) -> dict[str, float]:
    """Everything but the gradient projections, from the training forward pass already made."""
    rec: dict[str, float] = {}
    losses = F.cross_entropy(train_logits, train.answer, reduction="none")  # (N,)
    rec["loss"] = float(losses.mean())
    for kind, name in KIND_NAMES.items():
        sel = train.kind == kind
        if sel.any():
            rec[f"loss_{name}"] = float(losses[sel].mean())
            for part, pos in POSITIONS.items():
                rec[f"attn_{part}_{name}"] = float(train_attn[sel, pos].mean())
    logits, attn = model(test.tokens, test.mask, value_table)
    probs = torch.softmax(logits, dim=-1)  # (n_test, A)
    idx = torch.arange(len(test))
    rec["mc"] = float(probs[idx, test.answer].mean())
    rec["param_prob"] = float(probs[idx, test.fact].mean())
    pred = logits.argmax(-1)
    rec["cf_acc"] = float((pred == test.answer).double().mean())
    rec["param_acc"] = float((pred == test.fact).double().mean())
    for part, pos in POSITIONS.items():
        rec[f"attn_{part}_test"] = float(attn[:, pos].mean())
    cs = train.kind == CS
    if cs.any():
        vp = model.value_probs(train.subject[cs], value_table)
        rec["value_conf_C+S"] = float(vp[torch.arange(int(cs.sum())), train.answer[cs]].mean())
    vp = model.value_probs(test.subject, value_table)
    rec["value_conf_test"] = float(vp[idx, test.fact].mean())
    return rec


def finetune(model: OneLayerCPI, train: ToyData, test: ToyData, cfg: ToyFinetuneConfig,
             train_v: bool, curation: tuple[int, float, float | None, bool] | None = None
             ) -> list[dict]:
    """Full-batch training of W_KQ (and W_V if `train_v`) on `train`; returns the trajectory.

    Step t's record describes the model *before* update t (step 0 is the pretrained model; the
    projections use the gradient that update t applies); the last record is the final model.
    `curation=(every, fraction, threshold, readmit)`: dynamic curation
    (`train.curation.next_drop`) — every `every` steps (from step 0) the no-context loss of
    every training example is re-scored under the current weights and the `fraction` with the
    lowest (those below `threshold` only, if not None) is left out of the loss until the next
    re-scoring (for good if not `readmit`: then each re-scoring drops `fraction` of the rows
    still in); records then carry `n_dropped` and `n_dropped_C+S`.
    """
    model.w_v.requires_grad_(train_v)
    groups = [{"params": [model.w_kq], "lr": cfg.lr}]
    if train_v:
        groups.append({"params": [model.w_v], "lr": cfg.lr * cfg.value_lr_scale})
    opt = torch.optim.SGD(groups) if cfg.optimizer == "gd" else torch.optim.Adam(groups)
    frozen_table = None if train_v else model.value_table().detach()
    records = []
    active = torch.ones(len(train), dtype=torch.bool)  # (N,) rows in the loss
    for step in range(cfg.steps + 1):
        if curation is not None and step % curation[0] == 0:
            before = frozenset((~active).nonzero().flatten().tolist())
            active = torch.ones(len(train), dtype=torch.bool)
            active[next_drop(no_context_loss(model, train), before, *curation[1:])] = False
        opt.zero_grad()
        table = model.value_table() if train_v else frozen_table  # (n_tokens + 1, A)
        logits, attn = model(train.tokens, train.mask, table)
        F.cross_entropy(logits[active], train.answer[active]).backward()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            proj_s, proj_c = gradient_projections(model, model.w_kq.grad)
            records.append({"step": step, **trajectory_record(
                model, train, test, logits.detach(), attn.detach(), table.detach()),
                "proj_theta_S": proj_s, "proj_theta_C": proj_c})
            if curation is not None:
                records[-1].update({"n_dropped": int((~active).sum()),
                                    "n_dropped_C+S": int((~active & (train.kind == CS)).sum())})
        if step < cfg.steps:
            opt.step()
    return records


def indist_accuracy(model, data, when: str) -> dict:
    """Accuracy (argmax = answer) on the mixture's own C and C+S points: what finetuning is
    for, and what a mitigation must keep."""
    with torch.no_grad():
        logits, _ = model(data.tokens, data.mask)  # (N, A)
    hit = (logits.argmax(-1) == data.answer).double()  # (N,)
    out = {}
    for kind in (KIND_C, CS):
        name = KIND_NAMES[kind]
        if (data.kind == kind).any():
            out[f"indist_{name}_{when}"] = float(hit[data.kind == kind].mean())
    sel = (data.kind == KIND_C) | (data.kind == CS)
    if sel.any():
        out[f"indist_{when}"] = float(hit[sel].mean())
    return out
