"""experiments.inversion_tiny.track on a tiny random Llama over a tiny world (no pretraining): the
per-example
answer loss, accuracies and attention mass equal the same quantities computed by hand, one
unpadded example at a time."""

import pytest
import torch
from torch.nn import functional as F

from helpers import TINY_MODEL, TINY_WORLD
from knowflow.experiments.inversion_tiny.model import (
    TinyModelConfig,
    build_tokenizer,
    encode,
    make_model,
)
from knowflow.experiments.inversion_tiny.track import (
    TinyEvaluator,
    evaluate_set,
    per_example_loss,
    span_masks,
    tracking_record,
)
from knowflow.experiments.inversion_tiny.world import (
    Mixture,
    TinyWorldConfig,
    evaluation_sets,
    finetuning_set,
    make_world,
)


@pytest.fixture(scope="module")
def tiny():
    world = make_world(TinyWorldConfig(**TINY_WORLD), 0)
    tok = build_tokenizer(world.vocab)
    cfg = TinyModelConfig(**TINY_MODEL)
    model = make_model(cfg, len(world.vocab), 64, seed=0).eval()
    eager = make_model(cfg, len(world.vocab), 64, seed=0, attn_implementation="eager").eval()
    train = finetuning_set(world, Mixture(12, 0.25, 0.5, 0.25, 0), 0)
    return tok, model, eager, train, evaluation_sets(world, 0)


def _by_hand(tok, model, examples):
    """Per example, unpadded: the logits at the last prompt token and the attentions."""
    out = []
    for ex in examples:
        ids = torch.tensor([tok.convert_tokens_to_ids(list(ex.tokens))])
        with torch.no_grad():
            res = model(input_ids=ids, output_attentions=True)
        out.append((res.logits[0, -1], [a[0, :, -1] for a in res.attentions]))  # (heads, seq)
    return out


def test_per_example_loss_is_the_answer_cross_entropy(tiny):
    tok, model, eager, train, _ = tiny
    assert len({len(ex.tokens) for ex in train}) > 1  # padding is exercised
    loss = per_example_loss(model, encode(tok, train), chunk=5)
    for value, ex, (logits, _) in zip(loss, train, _by_hand(tok, eager, train), strict=True):
        target = torch.tensor(tok.convert_tokens_to_ids(ex.answer))
        assert float(value) == pytest.approx(float(F.cross_entropy(logits, target)), abs=1e-5)


def test_accuracies_and_attention_mass_match_a_hand_count(tiny):
    tok, model, eager, _, evals = tiny
    examples = evals["cf"]
    got = evaluate_set(model, encode(tok, examples), examples, attention=True)
    hand = _by_hand(tok, eager, examples)
    preds = [int(logits.argmax()) for logits, _ in hand]
    answers = tok.convert_tokens_to_ids([ex.answer for ex in examples])
    memories = tok.convert_tokens_to_ids([ex.memory for ex in examples])
    assert got["acc"] == pytest.approx(sum(map(int.__eq__, preds, answers)) / len(examples))
    assert got["param"] == pytest.approx(sum(map(int.__eq__, preds, memories)) / len(examples))
    for layer in range(TINY_MODEL["layers"]):
        ctx = [float(attn[layer][:, ex.context[0]:ex.context[1]].sum(-1).mean())
               for ex, (_, attn) in zip(examples, hand, strict=True)]
        subj = [float(attn[layer][:, ex.subject].mean())
                for ex, (_, attn) in zip(examples, hand, strict=True)]
        assert got["attn_context_layers"][layer] == pytest.approx(sum(ctx) / len(ctx), abs=1e-5)
        assert got["attn_subject_layers"][layer] == pytest.approx(sum(subj) / len(subj),
                                                                  abs=1e-5)
        assert len(got["attn_context_heads"][layer]) == TINY_MODEL["heads"]
    assert 0 < got["attn_context_layers"][0] < 1
    for key in ("attn_context", "attn_subject"):  # the tracker's scalar: mean over layers
        layers = got[f"{key}_layers"]
        assert got[key] == pytest.approx(sum(layers) / len(layers), abs=1e-12)


def test_span_masks_mark_the_context_and_the_subject(tiny):
    _, _, _, _, evals = tiny
    examples = [evals["cf"][0], evals["recall"][0]]  # with and without a context
    width = max(len(ex.tokens) for ex in examples)
    ctx, subj = span_masks(examples, width)
    start, end = examples[0].context
    assert ctx[0].tolist() == [start <= i < end for i in range(width)]
    assert not ctx[1].any()
    assert [row.nonzero().flatten().tolist() for row in subj] == [[ex.subject]
                                                                  for ex in examples]


def test_tracking_record_losses_per_kind_are_means_of_the_hand_losses(tiny):
    tok, model, eager, train, evals = tiny
    batches = {name: (encode(tok, exs), exs) for name, exs in evals.items()}
    rec = tracking_record(model, batches, encode(tok, train), [ex.kind for ex in train])
    hand = {}
    for ex, (logits, _) in zip(train, _by_hand(tok, eager, train), strict=True):
        target = torch.tensor(tok.convert_tokens_to_ids(ex.answer))
        hand.setdefault(ex.kind, []).append(float(F.cross_entropy(logits, target)))
    assert set(hand) == {"C", "C+S", "S"}
    for kind, losses in hand.items():
        assert rec[f"loss_{kind}"] == pytest.approx(sum(losses) / len(losses), abs=1e-5)
    everything = [x for losses in hand.values() for x in losses]
    assert rec["loss"] == pytest.approx(sum(everything) / len(everything), abs=1e-5)
    cs = evaluate_set(model, *batches["cs"], attention=False)["acc"]
    assert rec["cs_acc"] == cs and rec["cf_acc"] == evaluate_set(model, *batches["cf"],
                                                                 attention=False)["acc"]


def test_evaluator_tracks_an_evenly_spaced_subset_of_the_training_set(tiny):
    tok, model, _, train, evals = tiny
    evaluator = TinyEvaluator(tok, train, evals, track_train=3, mechanism=False)
    picked = [train[i] for i in (0, 5, 11)]  # linspace(0, 11, 3)
    assert torch.equal(evaluator.train_batch["ids"], encode(tok, picked)["ids"])
    assert evaluator.kinds == [ex.kind for ex in picked]
    rec = evaluator(model)
    assert "grad_ctx_C" not in rec and {"cf_acc", "loss", "attn_context"} <= set(rec)
    with_grad = TinyEvaluator(tok, train, evals, track_train=3)(model)
    assert with_grad["cf_acc"] == rec["cf_acc"] and any(k.startswith("grad_ctx_")
                                                        for k in with_grad)
