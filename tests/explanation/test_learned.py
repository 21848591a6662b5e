"""The learned one-pass attribution: the fit recovers planted head weights, scores equal a
hand computation from the model's own attention, the estimator's file and provenance."""

import pytest
import torch

from knowflow.data.facts import ConflictItem
from knowflow.errors import ConfigError, DataError
from knowflow.evaluation.loglik import score_naive
from knowflow.explanation.estimator import Estimator, load_estimator, save_estimator
from knowflow.explanation.features import reader_start, soft_effects
from knowflow.explanation.fit import FitConfig, fit_estimator
from knowflow.explanation.learned import (
    FitExample,
    corrected_scores,
    fit_head_weights,
    learned_scores,
    prior_weights,
    sentence_features,
    top_leave_one_out,
)
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import ablated_prompts
from knowflow.explanation.splitter import split_sentences


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


def test_the_fit_shrinks_towards_its_prior():
    gen = torch.Generator().manual_seed(1)
    theta = torch.zeros(12, dtype=torch.float64)
    theta[3] = 1.0
    prior = prior_weights(("attention", "direct"), 6)       # 0 for attention, 1 for direct
    assert prior.tolist() == [0.0] * 6 + [1.0] * 6
    assert prior_weights(("attention", "total"), 2).tolist() == [0.0, 0.0, 1.0, 1.0]
    data = _synthetic(theta, 10, gen, noise=0.1)
    assert torch.allclose(fit_head_weights(data, grid=(1e8,), prior=prior).weights, prior,
                          atol=1e-4)
    assert torch.allclose(fit_head_weights(data, grid=(1e-6,), prior=prior).weights, theta,
                          atol=0.1)


def _hand_features(model, prompt, answer, spans):
    """Per sentence, per (layer, head): the mean attention from the positions that predict
    the answer, and the direct effect on the answer's log-probability, by hand: attention and
    values read from an eager forward, the gradient at the final norm's input by autograd."""
    from knowflow.lens.arch import arch_of

    arch = arch_of(model)
    values = {}
    hooks = [arch.v[layer].register_forward_hook(
        lambda mod, args, out, layer=layer: values.__setitem__(layer, out.detach()))
        for layer in range(arch.n_layers)]
    final = {}
    hooks.append(arch.final_norm.register_forward_pre_hook(
        lambda mod, args: final.__setitem__("x", args[0].detach())))
    original = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([prompt + answer[:-1]]), output_attentions=True)
    finally:
        model.set_attn_implementation(original)
        for hook in hooks:
            hook.remove()
    rows = list(range(len(prompt) - 1, len(prompt) + len(answer) - 1))  # predict the answer
    x = final["x"][0, rows].clone().requires_grad_(True)                  # (T, d_model)
    logp = torch.log_softmax(model.lm_head(arch.final_norm(x)), -1)
    logp[torch.arange(len(answer)), torch.tensor(answer)].sum().backward()
    heads, group = arch.n_heads, arch.n_heads // arch.n_kv_heads
    w_o = arch.o[0].weight.shape[1] // heads
    attention, direct = [], []
    for span in spans:
        att_row, dir_row = [], []
        for layer, att in enumerate(out.attentions):
            o = arch.o[layer].weight.detach()                             # (d, heads * dh)
            v = values[layer][0].view(-1, arch.n_kv_heads, w_o)           # (seq, kv, dh)
            for h in range(heads):
                att_row.append(float(sum(att[0, h, r, s] for r in rows for s in span))
                               / len(rows))
                total = 0.0
                for i, r in enumerate(rows):
                    for s in span:
                        written = o[:, h * w_o:(h + 1) * w_o] @ v[s, h // group]   # (d,)
                        total += float(att[0, h, r, s] * (written @ x.grad[i]))
                dir_row.append(total)
        attention.append(att_row)
        direct.append(dir_row)
    return (torch.tensor(attention, dtype=torch.float64),
            torch.tensor(direct, dtype=torch.float64))


def test_learned_scores_equal_a_hand_computation_from_captured_activations(lm):
    model, _ = lm
    prompt = list(range(40, 70))                                   # 30 prompt tokens
    answer = [80, 81, 82]
    spans = [list(range(2, 9)), list(range(9, 20)), list(range(20, 28))]
    feats = sentence_features(model, prompt, answer, spans, ("attention", "direct"))
    attention, direct = _hand_features(model, prompt, answer, spans)   # each (3, L * H)
    assert torch.allclose(feats, torch.cat([attention, direct], 1), atol=1e-5)
    assert direct.abs().max() > 1e-3 and (direct < 0).any()        # signed and not all zero
    weights = torch.randn(feats.shape[1], dtype=torch.float64)
    hand = torch.cat([attention, direct], 1) @ weights
    assert torch.allclose(learned_scores(feats, weights), hand, atol=1e-4)


def test_an_estimator_round_trips_and_is_refused_for_other_weights(lm, tmp_path,
                                                                   make_tiny_llama):
    model, tok = lm
    est = fit_estimator(model, tok, "tiny", FitConfig(contexts=4, ablations=8,
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
    assert again == Estimator(est.weights, est.n_layers, est.n_heads, again.provenance,
                              est.features)
    assert load_estimator(model, "tiny", tmp_path / "none.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text(path.read_text().replace('"soft"', '"gradient"'))
    with pytest.raises(DataError, match="field 'features'.*gradient"):
        load_estimator(model, "tiny", bad)
    old = tmp_path / "old.json"        # format 1: soft weighed every row, refit
    old.write_text(path.read_text().replace('"format": 2', '"format": 1'))
    with pytest.raises(DataError, match="field 'format'.*rows after the context"):
        load_estimator(model, "tiny", old)
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


def _logp_with_scaled_keys(model, ids, n_answer, layer, head, keys, eps, readers):
    """log p(answer) when head (layer, head) takes the share eps of its attention off `keys`
    and renormalises the rest (query rows from `readers` on), by a test-local eager
    attention."""
    scale = torch.ones(model.config.num_attention_heads, len(ids), dtype=torch.float64)
    scale[head, keys] = 1 - eps
    return _logp_with_key_scales(model, ids, n_answer, {layer: scale}, readers)


def _logp_with_key_scales(model, ids, n_answer, scales, readers):
    """log p(answer) when, in each layer of `scales`, the attention of every query row from
    `readers` on to key k in head h is multiplied by scales[layer][h, k] and renormalised (the
    rows before are left as they are), by a test-local eager attention."""
    import transformers.models.llama.modeling_llama as llama
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        key = llama.repeat_kv(key, module.num_key_value_groups)
        value = llama.repeat_kv(value, module.num_key_value_groups)
        scores = query @ key.transpose(2, 3) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask[..., : key.shape[-2]]
        probs = torch.softmax(scores.double(), -1)                        # (1, heads, q, k)
        if module.layer_idx in scales:
            scaled = probs * scales[module.layer_idx][None, :, None, : probs.shape[-1]]
            scaled = scaled / scaled.sum(-1, keepdim=True)
            rows = torch.arange(probs.shape[-2])[None, None, :, None] >= readers
            probs = torch.where(rows, scaled, probs)
        out = probs.to(query.dtype) @ value
        return out.transpose(1, 2).contiguous(), probs

    AttentionInterface.register("test_scaled", attention)
    AttentionMaskInterface.register("test_scaled", ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    original = model.config._attn_implementation
    model.set_attn_implementation("test_scaled")
    try:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    finally:
        model.set_attn_implementation(original)
    logp = torch.log_softmax(logits[-n_answer - 1:-1], -1)              # (answer, vocab)
    answer = ids[-n_answer:]
    return float(logp[torch.arange(n_answer), torch.tensor(answer)].sum())


def test_total_effects_equal_finite_differences_of_taking_attention_off_a_sentence(lm):
    """The `total` feature of (layer, head, sentence) is minus the derivative of the span's
    log-probability as that head's attention to the sentence is scaled down (renormalised):
    checked by central differences through a separately written eager attention."""
    model, _ = lm
    prompt, answer = list(range(40, 70)), [80, 81, 82]
    spans = [list(range(2, 9)), list(range(9, 20)), list(range(20, 28))]
    feats = sentence_features(model, prompt, answer, spans, ("total",))    # (3, L * H)
    heads = model.config.num_attention_heads
    ids = prompt + answer
    eps = 1e-3
    checked = []
    readers = reader_start(prompt, spans)                  # 28: the rows after the context
    for layer, head, j in ((0, 0, 0), (0, 1, 2), (1, 0, 1), (1, heads - 1, 2)):
        up = _logp_with_scaled_keys(model, ids, len(answer), layer, head, spans[j], eps,
                                    readers)
        down = _logp_with_scaled_keys(model, ids, len(answer), layer, head, spans[j], -eps,
                                      readers)
        slope = (up - down) / (2 * eps)
        checked.append((-slope, float(feats[j, layer * heads + head])))
    for want, got in checked:
        assert abs(want - got) < 1e-3 + 1e-2 * abs(want)
    assert max(abs(w) for w, _ in checked) > 1e-3                    # not all zero


def test_soft_effects_equal_finite_differences_at_half_kept_sentences(lm):
    """The `soft` feature of (layer, head, sentence) is the derivative of the span's
    log-probability in that head's keep weight of the sentence, with every sentence's keep
    weight at 1/2 in every head: checked by central differences through a separately written
    eager attention; at keep weight 1 it is the `total` feature."""
    model, _ = lm
    prompt, answer = list(range(40, 70)), [80, 81, 82]
    spans = [list(range(2, 9)), list(range(9, 20)), list(range(20, 28))]
    feats = sentence_features(model, prompt, answer, spans, ("soft",))     # (3, L * H)
    heads, layers = model.config.num_attention_heads, model.config.num_hidden_layers
    ids = prompt + answer
    half = torch.ones(heads, len(ids), dtype=torch.float64)
    half[:, [t for span in spans for t in span]] = 0.5

    def logp(layer, head, j, eps):
        scales = {lay: half.clone() for lay in range(layers)}
        scales[layer][head, spans[j]] += eps
        return _logp_with_key_scales(model, ids, len(answer), scales,
                                     reader_start(prompt, spans))

    eps, checked = 1e-3, []
    for layer, head, j in ((0, 0, 0), (0, 1, 2), (1, 0, 1), (1, heads - 1, 2)):
        slope = (logp(layer, head, j, eps) - logp(layer, head, j, -eps)) / (2 * eps)
        checked.append((slope, float(feats[j, layer * heads + head])))
    for want, got in checked:
        assert abs(want - got) < 1e-3 + 1e-2 * abs(want)
    assert max(abs(w) for w, _ in checked) > 1e-3                    # not all zero
    total = sentence_features(model, prompt, answer, spans, ("total",))
    assert not torch.allclose(feats, total, atol=1e-3)               # 1/2 is not 1


def test_soft_effects_at_masks_average_finite_differences_at_each_mask_point(lm,
                                                                          monkeypatch):
    """With masks, `soft` is the mean over the mask points (kept sentences at keep weight 1,
    dropped ones at MASK_FLOOR) of the derivative of the span's log-probability in the head's
    keep weight: central differences through the test-local attention at each point. The
    points' batching does not change it."""
    import knowflow.explanation.features as features

    model, _ = lm
    prompt, answer = list(range(40, 70)), [80, 81, 82]
    spans = [list(range(2, 9)), list(range(9, 20)), list(range(20, 28))]
    masks = torch.tensor([[1, 0, 1], [0, 1, 0], [0, 0, 1], [1, 1, 0]])
    feats = soft_effects(model, prompt, answer, spans, masks=masks)            # (3, L * H)
    heads, layers = model.config.num_attention_heads, model.config.num_hidden_layers
    ids = prompt + answer

    def logp(mask, layer, head, j, eps):
        point = torch.ones(heads, len(ids), dtype=torch.float64)
        for k, span in enumerate(spans):
            point[:, span] = 1.0 if mask[k] else features.MASK_FLOOR
        scales = {lay: point.clone() for lay in range(layers)}
        scales[layer][head, spans[j]] += eps
        return _logp_with_key_scales(model, ids, len(answer), scales,
                                     reader_start(prompt, spans))

    eps, checked = 1e-4, []
    for layer, head, j in ((0, 0, 0), (1, heads - 1, 2)):
        slopes = [(logp(m, layer, head, j, eps) - logp(m, layer, head, j, -eps)) / (2 * eps)
                  for m in masks.tolist()]
        checked.append((sum(slopes) / len(slopes), float(feats[j, layer * heads + head])))
    for want, got in checked:
        assert abs(want - got) < 1e-3 + 1e-2 * abs(want)
    assert max(abs(w) for w, _ in checked) > 1e-3                    # not all zero
    half = soft_effects(model, prompt, answer, spans)
    assert not torch.allclose(feats, half, atol=1e-3)                # the masks matter
    assert features.points_per_pass(len(prompt)) > 1                 # batched above ...
    monkeypatch.setattr(features, "MASK_BATCH", 1)                   # ... one point a pass
    assert torch.allclose(soft_effects(model, prompt, answer, spans, masks=masks), feats,
                          atol=1e-6)


def test_points_per_pass_shrink_with_the_context():
    from knowflow.explanation.features import MASK_BATCH, MASK_BATCH_TOKENS, points_per_pass

    assert points_per_pass(100) == MASK_BATCH == 4
    assert points_per_pass(MASK_BATCH_TOKENS // 2) == 2
    assert points_per_pass(MASK_BATCH_TOKENS) == points_per_pass(10 * MASK_BATCH_TOKENS) == 1
    assert points_per_pass(0) == MASK_BATCH


def test_antithetic_masks_drop_every_sentence_in_half_of_them():
    from knowflow.explanation.features import antithetic_masks

    masks = antithetic_masks(6, 11, torch.Generator().manual_seed(3))
    assert masks.shape == (6, 11) and set(masks.unique().tolist()) <= {0, 1}
    assert (masks.sum(0) == 3).all()                       # each pair drops it once
    assert torch.equal(masks[:3], 1 - masks[3:])
    again = antithetic_masks(6, 11, torch.Generator().manual_seed(3))
    assert torch.equal(masks, again)


def test_soft_effects_recomputing_each_layers_attention_give_the_same_gradients(lm,
                                                                              monkeypatch):
    """Past `RECOMPUTE_ABOVE` bytes of scores the backward pass recomputes each layer's
    attention (checkpointing) instead of keeping it: the same features."""
    import knowflow.lens.attention as intercept

    model, _ = lm
    prompt, answer = list(range(40, 70)), [80, 81, 82]
    spans = [list(range(2, 9)), list(range(9, 20)), list(range(20, 28))]
    kept = soft_effects(model, prompt, answer, spans)
    calls = []
    monkeypatch.setattr(intercept, "RECOMPUTE_ABOVE", 0)
    monkeypatch.setattr(intercept, "checkpoint",
                        lambda *a, **k: calls.append(1) or intercept.torch.utils.checkpoint
                        .checkpoint(*a, **k))
    again = soft_effects(model, prompt, answer, spans)
    assert len(calls) == model.config.num_hidden_layers
    assert torch.allclose(again, kept, atol=1e-6) and kept.abs().max() > 1e-3


def test_top_leave_one_out_scores_the_top_sentences_alone_and_zeroes_the_rest(lm):
    item = ConflictItem(id="loo", suite="s", context="Oslo is in Norway. Grass is green. Rome "
                        "is in Italy. Dogs bark at night.", question="Where is Rome?",
                        counterfactual_answer="Italy", parametric_answer="Italy")
    model, tok = lm
    sents = split_sentences(item.context)
    cfg = ExplainConfig(prompt_format="chat")
    prior = torch.tensor([0.1, -0.5, 0.9, 0.3], dtype=torch.float64)   # top 2: sentences 2, 3
    got = top_leave_one_out(model, tok, item, sents, prior, 2, " Italy", cfg)
    masks = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]])
    full, *alone = [score_naive(model, tok, s, " Italy")[0]
                    for s in ablated_prompts(item, sents, masks, tok, "chat")]
    assert got[[0, 1]].tolist() == [0.0, 0.0]
    assert got[[2, 3]].tolist() == pytest.approx([full - a for a in alone], abs=1e-4)
    assert got[2] != 0 and got[3] != 0
    # a given full log-probability is used as it is (one ablation fewer)
    given = top_leave_one_out(model, tok, item, sents, prior, 1, " Italy", cfg, "", full + 1)
    assert float(given[2]) == pytest.approx(full + 1 - alone[0], abs=1e-4)


def test_reader_start_is_the_row_after_the_context_and_never_past_the_prompts_last():
    assert reader_start(list(range(30)), [[2, 3], [4, 5, 6], []]) == 7
    assert reader_start(list(range(30)), [[20, 29]]) == 29       # the context ends the prompt
    assert reader_start(list(range(30)), [[], []]) == 1
