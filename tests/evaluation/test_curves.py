"""`knowflow.evaluation.curves`: the one curve summary (start/peak/peak step/final/rise/fall,
earliest step on a tied peak) and its metric-prefixed form."""

import pytest
import torch
import torch.nn.functional as F

from helpers import TINY_WORLD
from knowflow.data.instructions import KINDS
from knowflow.evaluation.curves import curve_summary, named_curve


def test_curve_summary_parts():
    s = curve_summary([0, 10, 20, 30], [0.2, 0.7, 0.5, 0.4])
    assert s == {"start": 0.2, "peak": 0.7, "peak_step": 10, "final": 0.4,
                 "rise": 0.7 - 0.2, "fall": 0.7 - 0.4}


def test_tied_peak_is_the_earliest_step():
    assert curve_summary([0, 5, 9, 12], [0.1, 0.6, 0.3, 0.6])["peak_step"] == 5
    flat = curve_summary([3, 4], [0.5, 0.5])
    assert flat["peak_step"] == 3 and flat["rise"] == flat["fall"] == 0


@pytest.mark.parametrize("steps, values", [([], []), ([0, 1], [0.5])])
def test_curve_needs_one_value_per_step(steps, values):
    with pytest.raises(ValueError, match="one value per step"):
        curve_summary(steps, values)


def test_named_curve_prefixes_every_part():
    steps, values = [0, 1, 2], [0.3, 0.9, 0.1]
    named = named_curve("cf_acc", steps, values)
    assert list(named) == ["cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                           "cf_acc_rise", "cf_acc_fall"]
    assert named == {f"cf_acc_{k}": v for k, v in curve_summary(steps, values).items()}


def _role(has_context: bool, memorized: bool, answer_is_memory: bool) -> str:
    """The kind an example is by the schema's definitions, from what it holds."""
    if not has_context:
        return "S"
    if not memorized:
        return "C"
    return "C+S" if answer_is_memory else "CF"


def test_cpi_toy_per_kind_metrics_cover_kinds_each_over_its_own_examples():
    """cpi-toy codes its kinds as integers and names them with KINDS (`KIND_NAMES`): its
    `loss_<kind>` records name exactly the schema's kinds, each over the examples that play
    that kind's role."""
    from knowflow.experiments.cpi_toy.model import OneLayerCPI, pretrained_value_matrix
    from knowflow.experiments.cpi_toy.train import trajectory_record
    from knowflow.experiments.cpi_toy.world import (
        counterfactual_test_set,
        finetune_set,
        make_world,
    )

    world = make_world({"unmemorized": 4, "c_plus_s": 4, "s_seen": 3, "augment": 3, "test": 2},
                       n_answers=6, seed=0)
    train = finetune_set(world, 4, 4, n_s_seen=3, n_aug=3)
    model = OneLayerCPI(world.vocab, pretrained_value_matrix(world, 0.6, 0.9))
    model.w_kq.data.normal_(generator=torch.Generator().manual_seed(1))
    table = model.value_table().detach()
    with torch.no_grad():
        logits, attn = model(train.tokens, train.mask, table)
    rec = trajectory_record(model, train, counterfactual_test_set(world), logits, attn, table)
    assert {k.removeprefix("loss_") for k in rec if k.startswith("loss_")} == set(KINDS)
    losses = F.cross_entropy(logits, train.answer, reduction="none")  # (N,)
    roles = [_role(bool(m), int(f) >= 0, int(a) == int(f))
             for m, f, a in zip(train.mask[:, 0], train.fact, train.answer, strict=True)]
    for kind in KINDS:
        sel = torch.tensor([r == kind for r in roles])
        assert rec[f"loss_{kind}"] == pytest.approx(float(losses[sel].mean()), rel=1e-9)


def test_every_example_kind_is_one_of_kinds_and_means_its_definition():
    """inversion-tiny's examples and the built-in instruction mixture label rows with KINDS
    strings: every label is a kind, the finetuning set with augmentation uses all four, each
    evaluation set is one kind, and each label matches what the example holds."""
    from knowflow.data.instructions import MixtureConfig, builtin_mixture
    from knowflow.experiments.inversion_tiny.world import (
        Mixture,
        TinyWorldConfig,
        evaluation_sets,
        finetuning_set,
        make_world,
    )

    world = make_world(TinyWorldConfig(**TINY_WORLD), 0)
    train = finetuning_set(world, Mixture(20, 0.3, 0.5, 0.2, 4), 0)
    evals = evaluation_sets(world, 0)
    assert {ex.kind for ex in train} == set(KINDS)
    assert {name: {ex.kind for ex in exs} for name, exs in evals.items()} == \
        {"cf": {"CF"}, "cs": {"C+S"}, "c": {"C"}, "recall": {"S"}}
    memorized = {s for g in ("mem_train", "mem_eval") for s in world.groups[g]}
    for ex in [*train, *(ex for exs in evals.values() for ex in exs)]:
        subject = ex.tokens[ex.subject]
        assert ex.kind == _role(ex.context is not None, subject in memorized,
                                ex.answer == ex.memory), ex
    rows = builtin_mixture(MixtureConfig(size=24, seed=1))
    assert {row.extra["kind"] for row in rows} == set(KINDS) - {"CF"}
    assert all((row.input == "") == (row.extra["kind"] == "S") for row in rows)
