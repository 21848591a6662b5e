"""The CPI theory model against hand computations (Eq. 4, Definitions 1-3, Prop. 1)."""

import math

import torch

from knowflow.experiments.cpi_toy.model import (
    OneLayerCPI,
    pretrained_value_matrix,
    target_logit,
    train_value_matrix,
)
from knowflow.experiments.cpi_toy.train import gradient_projections
from knowflow.experiments.cpi_toy.world import (
    CS,
    ToyVocab,
    counterfactual_test_set,
    finetune_set,
    make_world,
)
from knowflow.train.criticality import drop_lowest_no_context_loss, no_context_loss

SIZES = {"unmemorized": 6, "c_plus_s": 5, "s_seen": 3, "augment": 2, "test": 4}


def _world(seed=0, heldout=2):
    return make_world(SIZES, n_answers=7, seed=seed, n_heldout_answers=heldout)


def test_forward_matches_hand_computation_of_eq4():
    # vocabulary: one subject (id 0), two answers (ids 1, 2), relation (id 3); d = 4 + 2
    vocab = ToyVocab(n_subjects=1, n_answers=2)
    gen = torch.Generator().manual_seed(0)
    w_kq = torch.randn(vocab.dim, vocab.dim, generator=gen, dtype=torch.float64)
    w_v = torch.randn(vocab.dim, vocab.dim, generator=gen, dtype=torch.float64)
    model = OneLayerCPI(vocab, w_v, w_kq)

    e = torch.eye(vocab.dim, dtype=torch.float64)
    theta_s, theta_c = e[4], e[5]
    phi_s = (e[0] + theta_s) / math.sqrt(2)
    phi_a = [(e[1] + theta_c) / math.sqrt(2), (e[2] + theta_c) / math.sqrt(2)]
    phi_r = e[3]
    x = [phi_a[1], phi_s, phi_r]  # input [c, s, r] with context = answer 1
    scores = torch.stack([xt @ w_kq @ phi_r for xt in x])
    attn = torch.exp(scores) / torch.exp(scores).sum()
    h = sum(a * xt for a, xt in zip(attn, x, strict=True))
    w_h = torch.stack(phi_a, dim=1)  # (d, n_answers)
    expected = h @ w_v.T @ w_h

    tokens = torch.tensor([[2, 0, 3]])
    logits, got_attn = model(tokens, torch.ones(1, 3, dtype=torch.bool))
    torch.testing.assert_close(got_attn[0], attn, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(logits[0], expected, rtol=1e-12, atol=1e-12)


def test_masked_context_is_ignored():
    world = _world()
    model = OneLayerCPI(world.vocab, pretrained_value_matrix(world, 0.6, 0.9))
    model.w_kq.data.normal_(generator=torch.Generator().manual_seed(1))
    data = finetune_set(world, 0, 0, n_s_seen=3)
    _, attn = model(data.tokens, data.mask)
    assert torch.all(attn[:, 0] == 0)
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, dtype=attn.dtype))


def test_constructed_value_matrix_meets_definitions_exactly():
    world = _world()
    delta_c, delta_m = 0.6, 0.9
    model = OneLayerCPI(world.vocab, pretrained_value_matrix(world, delta_c, delta_m))
    vocab = world.vocab
    answers = torch.arange(vocab.n_answers)
    p = model.value_probs(answers + vocab.n_subjects)
    torch.testing.assert_close(p[answers, answers], torch.full((7,), delta_c, dtype=p.dtype))
    mem = torch.cat([world.groups[g] for g in ("c_plus_s", "s_seen", "augment", "test")])
    p = model.value_probs(mem)
    torch.testing.assert_close(p[torch.arange(len(mem)), world.facts[mem]],
                               torch.full((len(mem),), delta_m, dtype=p.dtype))
    p = model.value_probs(world.groups["unmemorized"])  # no knowledge: uniform
    torch.testing.assert_close(p, torch.full_like(p, 1 / 7))
    assert math.isclose(target_logit(0.5, 2), 0.0, abs_tol=1e-12)


def test_trained_value_matrix_approaches_the_targets():
    world = _world()
    model = OneLayerCPI(world.vocab, train_value_matrix(world, 0.6, 0.9, steps=1500, lr=0.05))
    vocab = world.vocab
    subj = world.groups["test"]
    tokens = torch.stack([subj, torch.full_like(subj, vocab.relation)], dim=1)
    logits, _ = model(tokens, torch.ones_like(tokens, dtype=torch.bool))
    p = torch.softmax(logits, -1)[torch.arange(len(subj)), world.facts[subj]]
    assert torch.allclose(p, torch.full_like(p, 0.9), atol=0.02)


def test_gradient_projections_match_finite_differences():
    world = _world()
    model = OneLayerCPI(world.vocab, pretrained_value_matrix(world, 0.6, 0.9))
    model.w_kq.data.normal_(std=0.3, generator=torch.Generator().manual_seed(2))
    data = finetune_set(world, 4, 5, n_s_seen=3)
    grad = torch.autograd.grad(model.loss(data), model.w_kq)[0]
    proj_s, proj_c = gradient_projections(model, grad)
    d = world.vocab.dim
    phi_r = model.phi[world.vocab.relation]
    eps = 1e-6
    for proj, index in ((proj_s, d - 2), (proj_c, d - 1)):
        theta = torch.zeros(d, dtype=torch.float64)
        theta[index] = 1.0
        direction = torch.outer(theta, phi_r)  # d/d eps of L(W_KQ + eps theta phi(r)^T)
        with torch.no_grad():
            base = model.w_kq.detach().clone()
            model.w_kq.copy_(base + eps * direction)
            up = float(model.loss(data))
            model.w_kq.copy_(base - eps * direction)
            down = float(model.loss(data))
            model.w_kq.copy_(base)
        assert math.isclose(proj, -(up - down) / (2 * eps), rel_tol=1e-5, abs_tol=1e-9)
    assert abs(proj_c) > 1e-4  # a real signal, not a trivially zero comparison


def test_world_split_keeps_test_subjects_out_of_finetuning():
    world = _world()
    data = finetune_set(world, 6, 5, n_s_seen=3, n_aug=2)
    test = counterfactual_test_set(world)
    assert not set(data.subject.tolist()) & set(test.subject.tolist())
    assert torch.all(test.answer != test.fact)  # every test context conflicts with memory
    # held-out answers appear only as test contexts
    assert torch.all(test.answer >= world.n_finetune_answers)
    assert torch.all(data.answer < world.n_finetune_answers)


def test_filter_drops_examples_the_model_answers_without_context():
    world = _world()
    model = OneLayerCPI(world.vocab, pretrained_value_matrix(world, 0.6, 0.95))
    data = finetune_set(world, 6, 5)
    losses = no_context_loss(model, data)
    assert losses[data.kind == CS].max() < losses[data.kind != CS].min()
    kept = drop_lowest_no_context_loss(model, data, fraction=5 / 11)
    assert len(kept) == 6 and not torch.any(kept.kind == CS)
