"""The learned one-pass attribution: the fit recovers planted head weights, scores equal a
hand computation from the model's own attention, the estimator's file and provenance."""

import pytest
import torch

from knowflow.errors import ConfigError
from knowflow.explanation.estimator import Estimator, load_estimator, save_estimator
from knowflow.explanation.fit import FitConfig, fit_estimator
from knowflow.explanation.learned import (
    FitExample,
    attention_features,
    corrected_scores,
    fit_head_weights,
    learned_scores,
)


def _synthetic(theta, n_contexts, gen, noise=0.0):
    out = []
    for _ in range(n_contexts):
        n = int(torch.randint(5, 12, (1,), generator=gen))
        feats = torch.rand(n, len(theta), generator=gen, dtype=torch.float64)   # (n, F)
        masks = (torch.rand(40, n, generator=gen) < 0.5).long()                 # (40, n)
        y = 3.0 + masks.double() @ (feats @ theta)
        y = y + noise * torch.randn(40, generator=gen, dtype=torch.float64)
        out.append(FitExample(feats, masks, y))
    return out


def test_the_fit_recovers_planted_head_weights():
    gen = torch.Generator().manual_seed(0)
    theta = torch.zeros(12, dtype=torch.float64)
    theta[[2, 7]] = torch.tensor([2.0, -1.0], dtype=torch.float64)      # two planted heads
    theta[5] = 0.5
    fit = fit_head_weights(_synthetic(theta, 30, gen), _synthetic(theta, 8, gen))
    assert torch.allclose(fit.weights, theta, atol=0.02)
    assert fit.heldout_lds > 0.99
    noisy = fit_head_weights(_synthetic(theta, 60, gen, noise=0.3),
                             _synthetic(theta, 8, gen, noise=0.3))
    assert int(noisy.weights.abs().argmax()) == 2
    assert torch.nn.functional.cosine_similarity(noisy.weights, theta, dim=0) > 0.95


def test_learned_scores_equal_a_hand_computation_from_captured_attentions(lm):
    model, _ = lm
    prompt = list(range(40, 70))                                   # 30 prompt tokens
    answer = [80, 81, 82]
    spans = [list(range(2, 9)), list(range(9, 20)), list(range(20, 28))]
    feats = attention_features(model, prompt, answer, spans)      # (3, layers * heads)
    original = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([prompt + answer[:-1]]), output_attentions=True)
    finally:
        model.set_attn_implementation(original)
    rows = range(len(prompt) - 1, len(prompt) + len(answer) - 1)   # predict answer tokens
    weights = torch.randn(feats.shape[1], dtype=torch.float64)
    hand = []
    for span in spans:
        per_head = [float(sum(layer[0, h, r, t] for r in rows for t in span)) / len(rows)
                    for layer in out.attentions for h in range(layer.shape[1])]
        hand.append(sum(w * v for w, v in zip(weights.tolist(), per_head, strict=True)))
    assert torch.allclose(learned_scores(feats, weights), torch.tensor(hand,
                                                                       dtype=torch.float64),
                          atol=1e-5)


def test_an_estimator_round_trips_and_is_refused_for_other_weights(lm, tmp_path,
                                                                   make_tiny_llama):
    model, tok = lm
    est = fit_estimator(model, tok, "tiny", FitConfig(n_contexts=4, n_ablations=8,
                                                      max_new_tokens=3))
    prov = est.provenance
    assert len(est.weights) == model.config.num_hidden_layers * \
        model.config.num_attention_heads
    for key in ("model", "model_fingerprint", "training_data", "fitted", "ablations_used",
                "heldout_lds", "fit_seconds"):
        assert key in prov
    assert prov["ablations_used"] == 8 * prov["n_contexts"]
    path = save_estimator(est, "tiny", tmp_path / "tiny.json")
    again = load_estimator(model, "tiny", path)
    assert again == Estimator(est.weights, est.n_layers, est.n_heads, again.provenance)
    assert load_estimator(model, "tiny", tmp_path / "none.json") is None
    with pytest.raises(ConfigError, match="other weights"):
        load_estimator(make_tiny_llama(tok, seed=1), "tiny", path)


def test_corrected_scores_keep_an_exact_prior_and_approach_the_surrogate_with_many_masks():
    gen = torch.Generator().manual_seed(3)
    w = torch.tensor([2.0, 0.0, -0.5, 0.3, 0.0, 1.0], dtype=torch.float64)   # (sentences,)
    few = (torch.rand(6, 6, generator=gen) < 0.5).long()                        # (6, 6)
    # a prior proportional to the true weights needs no correction: exactly recovered
    assert torch.allclose(corrected_scores(3.0 * w, few, 1.5 + few.double() @ w), w,
                          atol=1e-6)
    # a wrong prior: a few masks move it towards the truth, many masks give the truth
    prior = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.5], dtype=torch.float64)
    many = (torch.rand(2000, 6, generator=gen) < 0.5).long()
    got = corrected_scores(prior, many, 1.5 + many.double() @ w, strength=1.0)
    assert torch.allclose(got, w, atol=0.01)
    moved = corrected_scores(prior, few, 1.5 + few.double() @ w, strength=1.0)
    assert (moved - w).norm() < (prior - w).norm()
