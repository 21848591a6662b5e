"""Ablations, the one-pass estimate and the knockout on a tiny random Llama, against the
unmodified model run one prompt at a time."""

import dataclasses

import pytest
import torch

from knowflow.data.facts import ConflictItem
from knowflow.evaluation.loglik import score_naive
from knowflow.explanation.attribution import (
    ablation_masks,
    attention_to_sentences,
    gradient_x_input,
    score_masks,
)
from knowflow.explanation.mechanism import Cut, answer_logprobs
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import ablated_prompts, encode, rendered, sentence_tokens
from knowflow.explanation.splitter import split_sentences
from knowflow.lens.attention import AttentionPlan, intercepted

ITEM = ConflictItem(id="i", suite="s", context="Paris is in France. The sky is blue today. "
                    "Rome is in Italy. Cats like milk.", question="Where is Rome?",
                    counterfactual_answer="Italy", parametric_answer="Italy")


def test_batched_ablations_equal_one_at_a_time(lm):
    model, tok = lm
    sents = split_sentences(ITEM.context)
    cfg = ExplainConfig(ablations=12, holdout=0, batch_size=5)
    masks, _ = ablation_masks(len(sents), cfg, "k")
    masks = torch.cat([masks, torch.zeros(1, len(sents), dtype=torch.int64),
                       torch.ones(1, len(sents), dtype=torch.int64)])
    batched = score_masks(model, tok, ITEM, sents, masks, " Italy", cfg)
    seqs = ablated_prompts(ITEM, sents, masks, tok, "chat")
    alone = [score_naive(model, tok, s, " Italy")[0] for s in seqs]
    assert batched.tolist() == pytest.approx(alone, abs=1e-4)
    # keeping nothing is the prompt without a context; keeping all is the item's own prompt
    assert seqs[-2] == encode(tok, [rendered(ITEM, tok, "chat", "")])[0]
    assert seqs[-1] == encode(tok, [rendered(ITEM, tok, "chat")])[0]


def test_sentence_tokens_cover_each_sentence(lm):
    _, tok = lm
    sents = split_sentences(ITEM.context)
    prompt = rendered(ITEM, tok, "chat")
    spans = sentence_tokens(ITEM, sents, tok, "chat")
    ids = encode(tok, [prompt])[0]
    for sent, span in zip(sents, spans, strict=True):
        assert span == list(range(span[0], span[-1] + 1))
        assert sent.text in tok.decode(ids[span[0]:span[-1] + 1])


def _reference_logprob(model, prompt, answer, block_rows, keys, layers, heads=None):
    """Full forward of prompt + answer with the edges cut in one (1, heads, seq, seq) mask."""
    ids = torch.tensor([prompt + answer])
    n_heads = model.config.num_attention_heads
    seq = ids.shape[1]
    block = torch.zeros(1, n_heads, seq, seq, dtype=torch.bool)
    for h in (heads if heads is not None else range(n_heads)):
        for q in block_rows:
            block[0, h, q, keys] = True
    with intercepted(model) as layer_of, torch.no_grad():
        plan = AttentionPlan(block={layer: block for layer in layers}, layer_of=layer_of)
        logits = model(input_ids=ids, knowflow_plan=plan).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    start = len(prompt) - 1
    return float(sum(logp[start + i, t] for i, t in enumerate(answer)))


def test_knockout_variants_equal_full_forward_references(lm):
    model, tok = lm
    prompt = encode(tok, [rendered(ITEM, tok, "chat")])[0]
    answer = tok(" Italy", add_special_tokens=False)["input_ids"]
    keys = list(range(10, 30))
    rows = list(range(len(prompt) - 1, len(prompt) - 1 + len(answer)))
    cuts = [Cut((), ()), Cut((0,), tuple(keys)), Cut((0, 1), tuple(keys)),
            Cut((1,), tuple(keys), (2,))]
    got = answer_logprobs(model, prompt, answer, cuts, batch_size=3)
    assert float(got[0]) == pytest.approx(score_naive(model, tok, prompt, " Italy")[0],
                                          abs=1e-4)
    refs = [_reference_logprob(model, prompt, answer, rows, keys, [0]),
            _reference_logprob(model, prompt, answer, rows, keys, [0, 1]),
            _reference_logprob(model, prompt, answer, rows, keys, [1], heads=[2])]
    assert got[1:].tolist() == pytest.approx(refs, abs=1e-4)
    assert abs(float(got[1]) - float(got[0])) > 1e-3     # the cut changes something


def test_one_pass_estimates_have_one_value_per_sentence(lm):
    model, tok = lm
    sents = split_sentences(ITEM.context)
    prompt = encode(tok, [rendered(ITEM, tok, "chat")])[0]
    spans = sentence_tokens(ITEM, sents, tok, "chat")
    answer = tok(" Italy", add_special_tokens=False)["input_ids"]
    scores = gradient_x_input(model, prompt, answer, spans)
    assert len(scores) == len(sents) and all(s >= 0 for s in scores)
    # against finite differences: scaling one sentence's embeddings by (1 + eps)
    emb = model.get_input_embeddings()
    ids = torch.tensor([prompt + answer])

    def logp(scale_span, eps):
        e = emb(ids).detach().clone()
        e[0, scale_span] *= 1 + eps
        logits = model(inputs_embeds=e).logits[0, len(prompt) - 1:-1].float()
        return float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(answer)[:, None])
                     .sum())

    span = spans[2]
    eps = 1e-3
    fd = (logp(span, eps) - logp(span, -eps)) / (2 * eps)   # = sum over span of g . x
    assert abs(fd) <= scores[2] + 1e-3                      # |sum| <= sum of |.|
    assert max(scores) > 0
    mass = attention_to_sentences(model, prompt, spans)
    n_layers, n_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert mass.shape == (n_layers, n_heads, len(sents))
    assert float(mass.sum(-1).max()) <= 1.0 + 1e-5


def test_config_rejects_impossible_values():
    from knowflow.config import validate_config
    from knowflow.errors import ConfigError

    for field, value in (("ablations", 4), ("keep_prob", 1.0), ("target", "x"),
                         ("levels", ("sentences",)), ("levels", ("source", "mechanism")),
                         ("levels", ("source", "one_pass"))):
        with pytest.raises(ConfigError, match=field):
            validate_config(dataclasses.replace(ExplainConfig(), **{field: value}))


def test_the_rounds_record_their_stopping_and_fit(lm):
    from knowflow.explanation.attribution import attribute, converged

    model, tok = lm
    sents = split_sentences(ITEM.context)
    full = float(score_masks(model, tok, ITEM, sents, torch.ones(1, len(sents),
                                                                 dtype=torch.int64),
                             " Italy", ExplainConfig())[0])
    prior = torch.tensor([0.1, 0.0, 0.5, -0.1], dtype=torch.float64)
    # any rise counts as flat and any level passes: the second round stops it
    quick = attribute(model, tok, ITEM, sents, " Italy", full,
                      ExplainConfig(converge=1.0, lds_floor=-1.0, top_k=(1,)), prior=prior)
    got = quick.to_dict()
    assert [r["ablations"] for r in got["ablation_rounds"]] == [16, 24]
    assert got["ablations_stopped"] == "converged" and got["ablations_used"] == 24
    assert got["surrogate_fit"] == "lasso" or got["surrogate_fit"].startswith("prior+ridge")
    # a floor: the rounds stop at the first one the rule accepts, else at the limit
    slow = attribute(model, tok, ITEM, sents, " Italy", full,
                     ExplainConfig(ablations=40, converge=1.0, lds_floor=0.9, top_k=(1,)),
                     prior=prior).to_dict()
    rounds = slow["ablation_rounds"]
    first = next((i for i in range(1, len(rounds)) if converged(rounds[:i + 1], 1.0, 0.9)),
                 None)
    assert len(rounds) == (first + 1 if first is not None else 4)
    assert slow["ablations_stopped"] == ("converged" if first is not None else "limit")
