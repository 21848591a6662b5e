"""The reference log-likelihood scorer: one full forward pass over prompt + continuation, no
work shared. Tests and benchmarks hold `lens.scorer`'s strategies against it."""

from __future__ import annotations

import torch

from knowflow.lens.scorer import Score


@torch.no_grad()
def score_naive(model, tokenizer, prompt: list[int], continuation: str) -> Score:
    """(summed log-probability, token count) of `continuation` after `prompt`."""
    cont = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + cont], device=device)                   # (1, seq)
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()  # (cont, vocab)
    logp = torch.log_softmax(logits, dim=-1)
    return float(logp.gather(-1, torch.tensor(cont, device=device)[:, None]).sum()), len(cont)
