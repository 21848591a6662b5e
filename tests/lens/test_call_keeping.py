"""lens.prefix.call_keeping: the logits at the kept positions, whether or not the model's
forward takes `logits_to_keep` (the probes keep a tensor of positions, the scorers a count)."""

from types import SimpleNamespace

import pytest
import torch

from knowflow.lens.prefix import call_keeping

LOGITS = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(0))  # (batch, seq, vocab)


class Keeps(torch.nn.Module):
    def forward(self, logits_to_keep, **kwargs):
        k = logits_to_keep
        return SimpleNamespace(logits=LOGITS[:, -k:] if isinstance(k, int) else LOGITS[:, k])


class NoKeep(torch.nn.Module):
    def forward(self, **kwargs):
        if "logits_to_keep" in kwargs:
            raise TypeError("unexpected keyword logits_to_keep")
        return SimpleNamespace(logits=LOGITS)


@pytest.mark.parametrize("keep", [2, torch.tensor([1, 3])])
def test_a_model_without_logits_to_keep_gets_the_same_positions(keep):
    full = NoKeep()
    _, kept = call_keeping(Keeps(), keep, input_ids=None)
    _, sliced = call_keeping(full, keep, input_ids=None)
    assert full._knowflow_keep_ok is False
    assert torch.equal(kept, sliced)
    expected = LOGITS[:, 3:] if isinstance(keep, int) else LOGITS[:, [1, 3]]
    assert torch.equal(sliced, expected)
