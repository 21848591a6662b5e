"""The OCR toy: world, the two forward passes against a hand computation, closed-form gradients
against autograd, and the factorized-vs-merged gap on a 4-subject task."""

import math

import pytest
import torch

from knowflow.experiments.ocr_toy.model import ToyOCR
from knowflow.experiments.ocr_toy.train import OcrTrainConfig, _ce, frozen_attention_grads, train
from knowflow.experiments.ocr_toy.world import (
    FACT,
    IMPL,
    OcrData,
    datasets,
    family_names,
    make_world,
)

D = 7
TOKENS = torch.tensor([[2, 4, 6], [0, 3, 6], [5, 5, 6]])  # (N=3, L=3), <EOS> = 6 last


def _hand(w_ov: torch.Tensor, w_kq: torch.Tensor, tokens: torch.Tensor, softmax: bool
          ) -> torch.Tensor:
    """f(X) = W_OV X^T attn(X W_KQ x_T), with X built as one-hot rows, one sequence at a time."""
    eye = torch.eye(D, dtype=w_ov.dtype)
    out = []
    for seq in tokens:
        x = eye[seq]  # (L, d)
        scores = x @ w_kq @ x[-1]  # (L,)
        attn = torch.softmax(scores, 0) if softmax else scores
        out.append(w_ov @ x.T @ attn)  # (d,)
    return torch.stack(out)


@pytest.mark.parametrize("attention", ["linear", "softmax"])
@pytest.mark.parametrize("factorized", [True, False])
def test_forward_matches_hand_computation(attention, factorized):
    gen = torch.Generator().manual_seed(0)
    model = ToyOCR(D, [0], factorized, rank=3, attention=attention, train_kq=True,
                   dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))
    w_ov = (model.w_o[0] @ model.w_v[0].T) if factorized else model.w_ov[0]
    expected = _hand(w_ov.detach(), model.w_kq[0].detach(), TOKENS, attention == "softmax")
    assert torch.allclose(model(TOKENS)[0], expected, atol=1e-10)
    assert torch.allclose(model.effective_ov()[0], w_ov)


def test_fixed_kq_linear_attention_sums_the_sequence():
    model = ToyOCR(D, [0, 1], factorized=False, kq_init=1.0, dtype=torch.float64)
    h = model.hidden(TOKENS)  # (S, N, d)
    assert torch.equal(h[0, 2], torch.tensor([0, 0, 0, 0, 0, 2, 1.0], dtype=h.dtype))
    assert torch.allclose(model(TOKENS), h @ model.w_ov.transpose(-1, -2))


@pytest.mark.parametrize("factorized", [True, False])
def test_closed_form_gradients_match_autograd(factorized):
    model = ToyOCR(D, [0, 1], factorized, rank=4, init_scale=0.5, dtype=torch.float64)
    answer = torch.tensor([[1, 2, 3], [0, 5, 4]])  # (S, N)
    logits = model(TOKENS)
    _ce(logits, answer).mean(-1).sum().backward()
    closed_logits, grads = frozen_attention_grads(model, model.hidden(TOKENS), answer)
    assert torch.allclose(closed_logits, logits.detach())
    for name, grad in grads.items():
        assert torch.allclose(grad, getattr(model, name).grad, atol=1e-12), name


def test_seed_slice_does_not_depend_on_its_batch():
    alone = ToyOCR(D, [1], factorized=True, rank=3).effective_ov()
    batched = ToyOCR(D, [0, 1], factorized=True, rank=3).effective_ov()
    assert torch.equal(alone[0], batched[1])


def test_world_split_and_sequences():
    world = make_world(n_subjects=40, n_families=2, n_answers=4, families_per_subject=1,
                       train_fraction=0.25, seed=3, n_noise=5)
    v = world.vocab
    assert v.dim == 40 + 2 * 2 + 2 * 2 * 4 + 5 + 1
    for f in range(2):
        members = world.member[:, f]
        for b in range(4):
            group = members & (world.fact[:, f] == b)
            assert group.sum() == 5  # balanced facts
            shown = (group & world.impl_train[:, f]).sum()
            assert 1 <= shown < 5  # every fact has a shown and a hidden implication
    train_set, test_set = datasets(world, seq_len=6, seed=3)
    assert (train_set.kind == FACT).sum() == 40
    assert len(test_set) == 40 - (train_set.kind == IMPL).sum()
    impl = world.implication()
    for data in (train_set, test_set):
        assert (data.tokens[:, -1] == v.eos).all()
        for tokens, subj, fam, kind, ans in zip(data.tokens, data.subject, data.family,
                                                data.kind, data.answer, strict=True):
            rel = v.fact_relation(int(fam)) if kind == FACT else v.impl_relation(int(fam))
            assert (tokens == subj).sum() == 1 and (tokens == rel).sum() == 1
            noise = tokens[(tokens != subj) & (tokens != rel) & (tokens != v.eos)]
            assert ((noise >= v.first_noise) & (noise < v.eos)).all()
            if kind == IMPL:
                assert ans == v.impl_token(int(fam), impl[subj, fam])
    shown = world.impl_train[test_set.subject, test_set.family]
    assert not shown.any()  # no test implication was trained on


def test_factorized_generalizes_merged_does_not_on_four_subjects():
    """4 subjects, one family, 2 facts: each fact has one shown and one hidden implication."""
    seeds = [0, 1, 2]
    worlds = [make_world(4, 1, 2, 1, 0.5, s) for s in seeds]
    splits = [datasets(w, 3, s) for w, s in zip(worlds, seeds, strict=True)]
    train_set = OcrData.stack([tr for tr, _ in splits])
    test_set = OcrData.stack([te for _, te in splits])
    cfg = OcrTrainConfig(steps=300, lr=1.0, eval_every=100)
    final = {}
    for factorized in (True, False):
        model = ToyOCR(worlds[0].vocab.dim, seeds, factorized, init_scale=1e-2)
        records = train(model, train_set, test_set, worlds[0].vocab.impl_candidates(), cfg,
                        family_names(1))
        final[factorized] = [r[-1] for r in records]
    for f, m in zip(final[True], final[False], strict=True):
        assert f["train_loss"] < 0.05 and m["train_loss"] < 0.05
        assert f["test_impl_acc"] == 1.0 and f["test_impl_loss"] < 0.1
        assert f["test_margin"] > 1.0
        # merged: no preference among the 2 candidates, margin ~ 0
        assert m["test_impl_loss_cand"] == pytest.approx(math.log(2), abs=0.01)
        assert abs(m["test_margin"]) < 0.05


def test_trainable_softmax_attention_with_noise_and_adamw_learns():
    """The autograd path: W_KQ trained, softmax attention, noise tokens, AdamW with decay."""
    world = make_world(12, 2, 2, 1, 0.34, seed=0, n_noise=4)
    train_set, test_set = (OcrData.stack([d]) for d in datasets(world, seq_len=6, seed=0))
    model = ToyOCR(world.vocab.dim, [0], True, attention="softmax", train_kq=True)
    cfg = OcrTrainConfig(steps=60, lr=0.05, optimizer="adamw", weight_decay=0.01,
                         eval_every=30)
    (records,) = train(model, train_set, test_set, world.vocab.impl_candidates(), cfg,
                       family_names(2))
    assert records[-1]["train_loss"] < 0.5 * records[0]["train_loss"]
    # attention moves off the noise: more weight on the subject than uniform (1/6)
    assert records[-1]["attn_subject_test"] > records[0]["attn_subject_test"]
