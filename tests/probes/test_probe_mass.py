"""`probes.mass.span_mass`, the one attention-mass computation: positions and masks give the
same mass, it broadcasts over layers/heads/rows, and gradients flow through it."""

import torch

from knowflow.probes.mass import span_mass


def test_positions_and_masks_agree_and_broadcast():
    torch.manual_seed(0)
    rows = torch.softmax(torch.randn(3, 2, 4, 7), dim=-1)  # (n, layers, heads, keys)
    pos = torch.tensor([1, 2, 5])
    mask = torch.zeros(7, dtype=torch.bool)
    mask[pos] = True
    by_pos, by_mask = span_mass(rows, pos), span_mass(rows, mask)
    assert by_pos.shape == (3, 2, 4)
    assert torch.allclose(by_pos, by_mask)
    assert torch.allclose(by_pos, rows[..., 1] + rows[..., 2] + rows[..., 5])
    assert torch.allclose(span_mass(rows, mask.float()), by_pos)
    assert torch.allclose(span_mass(rows, torch.ones(7, dtype=torch.bool)), torch.ones(3, 2, 4))


def test_per_row_masks_and_gradient():
    logits = torch.randn(2, 3, 5, requires_grad=True)  # (rows, heads, keys)
    rows = torch.softmax(logits, dim=-1)
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 0, 1, 1]], dtype=torch.bool)
    mass = span_mass(rows, mask[:, None])  # one span per row, shared by its heads
    assert torch.allclose(mass[0], rows[0, :, :2].sum(-1))
    assert torch.allclose(mass[1], rows[1, :, 3:].sum(-1))
    mass.sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
