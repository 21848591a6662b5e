"""Dynamic curation (`train.curation`): re-scoring under the current weights, the sampler that
never draws a dropped row, resume restoring the drop set, and a LoRA (peft) model."""

import pytest
import torch
from transformers import TrainerCallback

from knowflow.data.instruction_rows import encode_all
from knowflow.store.readers import read_jsonl
from knowflow.train.criticality import lowest_share, no_context_loss
from knowflow.train.curation import (
    CURATION,
    ActiveSampler,
    DynamicCuration,
    DynamicCurationConfig,
    next_drop,
    no_context_scorer,
)
from knowflow.train.sft import SFTConfig, last_checkpoint, train_model

CFG = SFTConfig(steps=6, batch_size=4, lr=5e-3, save_every=3, log_every=1, max_length=512)
DYN = DynamicCurationConfig(mode="dynamic", every=3, fraction=0.25, batch_size=8)


@pytest.fixture(scope="module")
def data(tok, rows):
    encoded, dropped = encode_all(tok, rows, "chat", 512)
    assert not dropped
    return encoded


def _curation(tok, rows, out_dir=None, cfg=DYN):
    return DynamicCuration(no_context_scorer(tok, rows, "chat", 8), len(rows), cfg, out_dir,
                           kinds=[r.extra["kind"] for r in rows])


def test_rescoring_uses_the_current_weights(make_tiny_llama, tok, rows):
    """The drop set is the lowest no-context losses of the model passed in: two different
    models give the (hand-computed) drop sets of their own losses, and they differ."""
    cur = _curation(tok, rows)
    state = type("S", (), {"global_step": 0, "is_world_process_zero": True})()
    drops = []
    for seed in (0, 1):
        model = make_tiny_llama(tok, seed=seed)
        rec = cur.rescore(model, state)
        losses = no_context_loss(model, rows, tok, "chat")
        expected = sorted(torch.argsort(losses, stable=True)[:round(0.25 * len(rows))].tolist())
        assert rec["dropped"] == expected
        drops.append(set(rec["dropped"]))
    assert drops[0] != drops[1]
    assert cur.history[1]["n_readmitted"] == len(drops[0] - drops[1]) > 0


def test_without_readmission_dropped_rows_stay_out(make_tiny_llama, tok, rows):
    """readmit=False: the second model's re-scoring keeps the first drop set and adds the
    lowest quarter of the rows still in, by the second model's own losses."""
    cfg = DynamicCurationConfig(mode="dynamic", every=3, fraction=0.25, batch_size=8,
                                readmit=False)
    cur = _curation(tok, rows, cfg=cfg)
    state = type("S", (), {"global_step": 0, "is_world_process_zero": True})()
    first = set(cur.rescore(make_tiny_llama(tok, seed=0), state)["dropped"])
    model = make_tiny_llama(tok, seed=1)
    rec = cur.rescore(model, state)
    live = [i for i in range(len(rows)) if i not in first]
    losses = no_context_loss(model, rows, tok, "chat")[live]
    added = {live[j] for j in torch.argsort(losses, stable=True)[:round(0.25 * len(live))]}
    assert set(rec["dropped"]) == first | added and rec["n_readmitted"] == 0
    assert len(rec["dropped"]) > len(first)
    assert set(cur.sampler.active.logical_not().nonzero().flatten().tolist()) == first | added


def test_next_drop_keeps_one_row_and_honours_the_threshold():
    losses = torch.tensor([0.1, 0.2, 3.0, 0.3, 5.0])
    assert next_drop(losses, frozenset({4}), 0.5, None, readmit=True) == [0, 1]
    assert next_drop(losses, frozenset({4}), 0.5, None, readmit=False) == [0, 1, 4]
    assert next_drop(losses, frozenset({4}), 0.75, 0.25, readmit=False) == [0, 1, 4]
    everything = frozenset({0, 1, 2, 3})
    assert next_drop(losses, everything, 0.9, None, readmit=False) == [0, 1, 2, 3]


def test_sampler_never_draws_a_dropped_row():
    sampler = ActiveSampler(20, seed=3)
    assert sorted(sampler) == list(range(20))  # nothing dropped: a permutation
    it = iter(sampler)
    first = [next(it) for _ in range(5)]
    sampler.set_dropped([1, 2, 3, 7, 11])
    rest = list(it)
    assert len(first) + len(rest) == 20  # the epoch still has n draws
    assert not {1, 2, 3, 7, 11} & set(rest)
    sampler.set_dropped([])  # re-admitted: drawn again
    assert {1, 2, 3, 7, 11} <= set(sampler)
    with pytest.raises(ValueError):
        sampler.set_dropped(range(20))


class _Trained(TrainerCallback):
    """The rows each optimizer step trains on, with the drop set in force at that step."""

    def __init__(self, curation):
        self.curation, self.steps = curation, []

    def on_step_begin(self, args, state, control, **kwargs):
        self.steps.append({"dropped": set(self.curation.dropped), "rows": []})


def test_dropped_rows_get_no_loss_until_readmitted(make_tiny_llama, tmp_path, tok, rows, data):
    """In a real run, every row that carries loss at a step is active at that step (the batch
    prefetched before a re-scoring has its newly dropped rows masked)."""
    cur = _curation(tok, rows, tmp_path, DynamicCurationConfig("dynamic", every=2,
                                                                fraction=0.5))
    trained = _Trained(cur)
    model = make_tiny_llama(tok)
    seen = []

    def hook(module, args, kwargs):
        labels = kwargs.get("labels")
        if labels is not None and module.training:
            seen.append(((labels != -100).any(1)).tolist())

    model.register_forward_pre_hook(hook, with_kwargs=True)
    from knowflow.train import curation as mod

    rows_of_step = []
    original = mod.CuratedTrainer.compute_loss

    def spy(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        rows_of_step.append(inputs[mod.ROW].tolist())
        return original(self, model, inputs, return_outputs, num_items_in_batch)

    mod.CuratedTrainer.compute_loss = spy
    try:
        train_model(model, tok, data, SFTConfig(steps=6, batch_size=4, lr=5e-3, save_every=50),
                 tmp_path, [cur, trained])
    finally:
        mod.CuratedTrainer.compute_loss = original
    assert len(rows_of_step) == len(seen) == len(trained.steps) == 6
    history = read_jsonl(tmp_path / CURATION)
    assert [h["step"] for h in history] == [0, 2, 4]
    for step, (batch, carries) in enumerate(zip(rows_of_step, seen, strict=True)):
        dropped = trained.steps[step]["dropped"]
        assert dropped == set(next(h for h in reversed(history) if h["step"] <= step)["dropped"])
        for row, loss in zip(batch, carries, strict=True):
            assert not (loss and row in dropped)
        # the sampler drew this batch under the drop set of the step before at the latest
        before = set(next(h for h in reversed(history) if h["step"] <= max(step - 1, 0))
                     ["dropped"])
        assert not set(batch) & before


class _Crash(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 4:
            raise KeyboardInterrupt


def test_resume_restores_the_drop_set(make_tiny_llama, tmp_path, tok, rows, data):
    full = _curation(tok, rows, tmp_path / "a")
    train_model(make_tiny_llama(tok), tok, data, CFG, tmp_path / "a", [full])
    with pytest.raises(KeyboardInterrupt):
        train_model(make_tiny_llama(tok), tok, data, CFG, tmp_path / "b",
                 [_curation(tok, rows, tmp_path / "b"), _Crash()])
    assert last_checkpoint(tmp_path / "b").name == "checkpoint-3"
    resumed = _curation(tok, rows, tmp_path / "b")
    restored = []

    class _Peek(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            restored.append(set(resumed.dropped))

    # the peek runs after the curation callback's on_train_begin
    train_model(make_tiny_llama(tok), tok, data, CFG, tmp_path / "b", [resumed, _Peek()],
                resume=True)
    a = read_jsonl(tmp_path / "a" / CURATION)
    b = read_jsonl(tmp_path / "b" / CURATION)
    assert restored == [set(a[1]["dropped"])] and a[1]["step"] == 3
    assert [r["step"] for r in b] == [r["step"] for r in a] == [0, 3]
    assert [r["dropped"] for r in b] == [r["dropped"] for r in a]


def test_callback_works_on_a_peft_model(make_tiny_llama, tmp_path, tok, rows, data):
    scorer = no_context_scorer(tok, rows, "chat", 8)
    scored = []

    def spy(model):
        scored.append(type(model).__name__)
        return scorer(model)

    cur = DynamicCuration(spy, len(rows), DYN, tmp_path)
    base = no_context_loss(make_tiny_llama(tok), rows, tok, "chat", batch_size=8)
    result = train_model(make_tiny_llama(tok), tok, data,
                      SFTConfig(train="lora", steps=4, batch_size=4, lr=5e-2, save_every=50,
                                lora_targets=("q_proj", "v_proj")), tmp_path, [cur])
    assert type(result.model).__name__.startswith("Peft")
    assert scored and all(name.startswith("Peft") for name in scored)
    history = read_jsonl(tmp_path / CURATION)
    assert [h["step"] for h in history] == [0, 3]
    # LoRA starts as the identity, so step 0 drops the base model's lowest no-context losses
    assert history[0]["dropped"] == sorted(lowest_share(base, 0.25))


def test_tiny_world_rows_plug_in(make_tiny_llama, tmp_path):
    """The inversion-tiny wiring: tiny-world examples scored by `no_context_loss` (their
    `<bos> question s r` version), trained through `train.sft.train_model`."""
    from helpers import TINY_WORLD
    from knowflow.experiments.inversion_tiny.model import build_tokenizer, encode, per_example_loss
    from knowflow.experiments.inversion_tiny.track import training_rows
    from knowflow.experiments.inversion_tiny.world import (
        Mixture,
        TinyWorldConfig,
        finetuning_set,
        make_world,
        no_context,
    )

    world = make_world(TinyWorldConfig(**TINY_WORLD), 0)
    tok = build_tokenizer(world.vocab)
    train = finetuning_set(world, Mixture(size=16, c=0.25, cs=0.5, s=0.25), 0)
    model = make_tiny_llama(tok)
    ref = per_example_loss(model.eval(), encode(tok, [no_context(ex) for ex in train]))
    assert torch.allclose(no_context_loss(model, train, tok), ref)
    cur = DynamicCuration(lambda m: no_context_loss(m, train, tok), len(train),
                          DynamicCurationConfig("dynamic", every=2, fraction=0.25), tmp_path,
                          kinds=[ex.kind for ex in train])
    train_model(model, tok, training_rows(tok, train),
             SFTConfig(train="full", steps=3, batch_size=4, lr=1e-3, save_every=50),
             tmp_path, [cur])
    history = read_jsonl(tmp_path / CURATION)
    assert [h["step"] for h in history] == [0, 2]
    assert history[0]["dropped"] == sorted(lowest_share(ref, 0.25))
