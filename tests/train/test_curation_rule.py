"""The one curation rule (`train.criticality`): the drop rule against hand-worked cases, the
same numbers as the per-model filters it replaced, and dynamic curation in the theory model."""

import torch

from knowflow.experiments.cpi_toy.model import OneLayerCPI, pretrained_value_matrix
from knowflow.experiments.cpi_toy.train import ToyFinetuneConfig, finetune
from knowflow.experiments.cpi_toy.world import CS, counterfactual_test_set, finetune_set, make_world
from knowflow.train import criticality
from knowflow.train.criticality import (
    CurateConfig,
    drop_lowest_no_context_loss,
    dropped_indices,
    lowest_share,
    no_context_loss,
    score_examples,
)
from knowflow.train.curation import drop_set


def test_lowest_share_by_hand():
    scores = [0.5, 0.1, 0.3, 0.1, 0.9, 0.3]
    assert lowest_share(scores, 0.5) == [1, 3, 2]           # round(3); ties: earlier first
    assert lowest_share([0.3, 0.3, 0.3], 0.34) == [0]       # all tied: the first goes
    assert lowest_share(scores, 0.0) == []
    assert lowest_share(scores, 0.2) == [1]                 # round(1.2) = 1


def test_drop_set_threshold_and_cap():
    losses = [0.5, 0.1, 0.3, 0.1, 0.9, 0.3]
    assert drop_set(losses, 0.5) == [1, 3, 2]
    assert drop_set(losses, 0.5, threshold=0.2) == [1, 3]   # only those answered from memory
    assert drop_set(losses, 0.5, threshold=0.05) == []
    assert drop_set(losses, 0.99, most=5) == [1, 3, 2, 5, 0]


def _toy():
    world = make_world({"unmemorized": 8, "c_plus_s": 6, "s_seen": 0, "s_unseen": 0,
                        "augment": 0, "test": 5}, 10, seed=0, n_heldout_answers=2)
    model = OneLayerCPI(world.vocab, pretrained_value_matrix(world, 0.6, 0.95))
    return world, model


def test_toy_filter_is_the_old_rule():
    """The merged rule gives the old toy filter's result: stable argsort of the no-context
    cross-entropy, the lowest `fraction` dropped (earlier first on ties)."""
    world, model = _toy()
    data = finetune_set(world, 8, 6)
    with torch.no_grad():
        bare_mask = data.mask.clone()
        bare_mask[:, 0] = False
        logits, _ = model(data.tokens, bare_mask)
        ref = torch.nn.functional.cross_entropy(logits, data.answer, reduction="none")
    assert torch.equal(criticality.no_context_loss(model, data), ref)
    keep = torch.ones(len(data), dtype=torch.bool)
    keep[torch.argsort(ref, stable=True)[:round(0.4 * len(data))]] = False
    kept = criticality.drop_lowest_no_context_loss(model, data, 0.4)
    assert torch.equal(kept.subject, data.subject[keep])
    assert torch.equal(drop_lowest_no_context_loss(model, data, 0.4).subject, kept.subject)


def test_instruction_rule_matches_criticality_scores(make_tiny_llama, tok, rows):
    """`no_context_loss` on instruction rows is the `loss_without_context` of the scores
    `knowflow curate` writes, and its drop set is the curate command's."""
    model = make_tiny_llama(tok)
    cfg = CurateConfig(drop=0.25, batch_size=4)
    scores = score_examples(model, tok, rows, cfg)
    losses = no_context_loss(model, rows, tok, "chat", batch_size=4)
    assert torch.allclose(losses, torch.tensor([s["loss_without_context"] for s in scores]),
                          atol=1e-6)
    expected = set(lowest_share(losses, 0.25))
    assert dropped_indices(scores, cfg) == expected
    tied = [{"index": i, "loss_without_context": 1.0, "criticality": 0.0} for i in range(4)]
    assert dropped_indices(tied, cfg) == {0}  # the static rule's tie-break: earlier first


def test_toy_dynamic_curation():
    """Dropping nothing gives the plain trajectory; a real drop set leaves the lowest
    no-context losses (the C+S points, which the model knows) out of every step's loss."""
    world, model0 = _toy()
    train = finetune_set(world, 8, 6)
    test = counterfactual_test_set(world)
    cfg = ToyFinetuneConfig(steps=20, lr=2.0, eval_every=5)

    def run(curation):
        model = OneLayerCPI(world.vocab, model0.w_v.detach().clone())
        return finetune(model, train, test, cfg, False, curation)

    plain = run(None)
    none_dropped = run((5, 0.25, 1e-9, True))  # nothing is below a loss of 1e-9
    assert [r["mc"] for r in plain] == [r["mc"] for r in none_dropped]
    assert all(r["n_dropped"] == 0 for r in none_dropped)
    dyn = run((5, 0.25, None, True))
    assert all(r["n_dropped"] == round(0.25 * 14) == r["n_dropped_C+S"] for r in dyn)
    assert [r["mc"] for r in dyn] != [r["mc"] for r in plain]
    assert (train.kind == CS).sum() == 6
    # without readmission each re-scoring (steps 0, 5, 10, 15, 20) adds a quarter of the rest
    kept = run((5, 0.25, None, False))
    counts = [r["n_dropped"] for r in kept]                    # records at steps 0, 5, ..., 20
    # round(0.25 x rows still in), Python rounding: 14 -> 4, 10 -> 2, 8 -> 2, 6 -> 2, 4 -> 1
    assert counts == [4, 6, 8, 10, 11]
    first = {i for i, r in enumerate(train.kind.tolist()) if r == CS}
    assert kept[0]["n_dropped_C+S"] == 4 and kept[-1]["n_dropped_C+S"] == len(first)
