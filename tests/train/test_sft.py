"""`knowflow sft` on a tiny random Llama (a few steps each): the tracker's records, QK-only
training, resume, curation against a direct loss, augmentation, the built-in mixture, and bad
input."""

import json

import pytest
import torch
from transformers import TrainerCallback

from knowflow.data.instruction_rows import Instruction, encode, encode_all, load_instructions
from knowflow.data.instructions import (
    MixtureConfig,
    builtin_mixture,
    heldout_items,
    heldout_subjects,
)
from knowflow.data.suites import get_suite
from knowflow.errors import ConfigError, DataError, KnowflowError
from knowflow.lens.adapt import TrainableConfig, prepare_trainable, query_key_parameters
from knowflow.lens.batching import shard
from knowflow.store.readers import read_jsonl
from knowflow.train.augment import augment, sources
from knowflow.train.criticality import CurateConfig, dropped_indices, score_examples
from knowflow.train.sft import SFTConfig, last_checkpoint, train_model
from knowflow.train.tracker import RelianceTracker, TrackerConfig


@pytest.fixture(scope="module")
def data(tok, rows):
    encoded, dropped = encode_all(tok, rows, "chat", 512)
    assert not dropped
    return encoded


def _items():
    return {"cf-capitals": get_suite("cf-capitals", limit=3)}


def test_tracker_writes_one_record_per_evaluation(make_tiny_llama, tmp_path, tok, data):
    tracker = RelianceTracker(tok, TrackerConfig(every=2, batch_size=4), tmp_path,
                              items=_items())
    res = train_model(make_tiny_llama(tok), tok, data, SFTConfig(steps=5, batch_size=4, lr=1e-2,
                                                         save_every=10), tmp_path, [tracker])
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 2, 4, 5]  # start, every 2, and the end
    for r in records:
        assert 0 <= r["cf_acc"] <= 1 and 0 <= r["param_acc"] <= 1
        assert r["cf_acc"] + r["param_acc"] <= 1  # one choice per item
        assert r["cf-capitals/n"] == 3 and 0 < r["attn_context"] < 1
        assert len(r["attn_context_layers"]) == 2
    assert sum(r["is_peak"] for r in records) >= 1 and records[0]["is_peak"]
    # the trainer's loggers got the same numbers
    logged = [h for h in res.log_history if "reliance/cf_acc" in h]
    assert [h["reliance/cf_acc"] for h in logged] == [r["cf_acc"] for r in records]
    s = tracker.summary()
    assert s["cf_acc_start"] == records[0]["cf_acc"] and s["final_step"] == 5


def test_tracker_stops_after_drop_and_keeps_peak(make_tiny_llama, tmp_path, tok, data):
    class Falling(RelianceTracker):  # a scripted reliance curve: 0.9, 0.5, ...
        def measure(self, model):
            value = 0.9 if not self.records else 0.5
            return {"cf_acc": value, "param_acc": 1 - value}

    tracker = Falling(tok, TrackerConfig(every=1, keep_peak=True, stop_drop=0.3), tmp_path,
                      items=_items())
    res = train_model(make_tiny_llama(tok), tok, data,
                      SFTConfig(steps=5, batch_size=4, save_every=10), tmp_path, [tracker])
    assert res.steps == 1  # stopped at the first evaluation 0.4 below the peak
    assert (tmp_path / "peak" / "adapter_config.json").exists()
    assert tracker.summary()["cf_acc_peak_step"] == 0


def test_qk_only_changes_nothing_else(make_tiny_llama, tmp_path, tok, data):
    model = make_tiny_llama(tok)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = train_model(model, tok, data, SFTConfig(train="qk_only", steps=1, batch_size=4, lr=1e-2,
                                               save_every=10), tmp_path)
    qk = set(query_key_parameters(model))
    assert qk and res.trainable_params == sum(before[k].numel() for k in qk)
    after = model.state_dict()
    for name, value in before.items():
        if name in qk:
            assert not torch.equal(after[name], value), name
        else:
            assert torch.equal(after[name], value), name


def test_lora_targets_are_checked(make_tiny_llama, tok):
    with pytest.raises(ConfigError, match="unknown target module 'nope'.*lora_targets|"
                                          "lora_targets.*unknown target module 'nope'"):
        prepare_trainable(make_tiny_llama(tok), TrainableConfig(lora_targets=("q_proj", "nope")))
    with pytest.raises(ConfigError, match="train"):
        TrainableConfig(mode="half").validate()


class _Crash(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 4:
            raise KeyboardInterrupt


def test_resume_continues_with_the_same_loss(make_tiny_llama, tmp_path, tok, data):
    cfg = SFTConfig(steps=6, batch_size=4, lr=5e-3, save_every=3, log_every=1)
    full = train_model(make_tiny_llama(tok), tok, data, cfg, tmp_path / "a",
                    [RelianceTracker(tok, TrackerConfig(every=3), tmp_path / "a",
                                     items=_items())])
    with pytest.raises(KeyboardInterrupt):
        train_model(make_tiny_llama(tok), tok, data, cfg, tmp_path / "b",
                 [_Crash(), RelianceTracker(tok, TrackerConfig(every=3), tmp_path / "b",
                                            items=_items())])
    assert last_checkpoint(tmp_path / "b").name == "checkpoint-3"
    resumed = train_model(make_tiny_llama(tok), tok, data, cfg, tmp_path / "b",
                       [RelianceTracker(tok, TrackerConfig(every=3), tmp_path / "b",
                                        items=_items())], resume=True)

    def losses(history):
        return {h["step"]: h["loss"] for h in history if "loss" in h}

    a, b = losses(full.log_history), losses(resumed.log_history)
    assert set(b) >= {4, 5, 6}
    for step in (4, 5, 6):
        assert b[step] == pytest.approx(a[step], rel=1e-4)
    rec_a = read_jsonl(tmp_path / "a" / "metrics.jsonl")
    rec_b = read_jsonl(tmp_path / "b" / "metrics.jsonl")
    assert [r["step"] for r in rec_b] == [r["step"] for r in rec_a] == [0, 3, 6]
    assert rec_b[-1]["cf_acc"] == rec_a[-1]["cf_acc"]


def test_curation_scores_match_direct_losses(make_tiny_llama, tok, rows):
    model = make_tiny_llama(tok)
    cfg = CurateConfig(drop=0.25, batch_size=3)
    scores = score_examples(model, tok, rows[:7], cfg)
    for ex, s in zip(rows[:7], scores, strict=True):
        for context, key in ((True, "loss_with_context"), (False, "loss_without_context")):
            enc = encode(tok, ex, "chat", context=context)
            with torch.no_grad():
                direct = model(input_ids=torch.tensor([enc["input_ids"]]),
                               labels=torch.tensor([enc["labels"]])).loss.item()
            assert s[key] == pytest.approx(direct, rel=1e-4, abs=1e-5)
        assert s["criticality"] == pytest.approx(s["loss_without_context"] -
                                                 s["loss_with_context"])
        if not ex.input:  # S rows: nothing to remove
            assert s["criticality"] == pytest.approx(0, abs=1e-5)
    drop = dropped_indices(scores, cfg)
    assert len(drop) == 2  # round(7 * 0.25)
    kept = [s["loss_without_context"] for i, s in enumerate(scores) if i not in drop]
    assert max(scores[i]["loss_without_context"] for i in drop) <= min(kept)


def test_augment_substitutes_context_and_answer():
    rows = builtin_mixture(MixtureConfig(size=200, seed=1))
    out = augment(rows, ratio=0.5, seed=0)
    added = [r for r in out if r.extra.get("augmented")]
    assert len(out) == len(rows) + len(added) and len(added) == 100
    for r in added:
        assert r.output in r.input and r.extra["original_answer"] not in r.input
        assert r.output != r.extra["original_answer"] and r.extra["kind"] == "CF"
    assert all(rows[i].extra["kind"] == "C+S" for i in sources(rows))
    with pytest.raises(KnowflowError, match="no example"):
        augment([Instruction("q", "", "a")], 0.5)


def test_mixture_never_shows_evaluation_subjects():
    cfg = MixtureConfig(size=600, seed=3)
    rows = builtin_mixture(cfg)
    held = heldout_subjects(cfg)
    tracked = heldout_items(cfg)
    assert all(it.subject in held for items in tracked.values() for it in items)
    assert not {r.extra["subject"] for r in rows} & held
    contexts = {r.input for r in rows}
    assert not any(it.context in contexts for items in tracked.values() for it in items)
    kinds = [r.extra["kind"] for r in rows]
    assert (kinds.count("C"), kinds.count("C+S"), kinds.count("S")) == (150, 300, 150)
    assert all(r.output in r.input for r in rows if r.extra["kind"] != "S")
    assert builtin_mixture(cfg) == rows  # deterministic per seed


def test_shards_cover_items_with_equal_lengths():
    items = list(range(7))
    shards = [shard(items, rank, 3) for rank in range(3)]
    assert {len(s) for s, _ in shards} == {3}
    assert [x for s, real in shards for x in s[:real]] == items


@pytest.mark.parametrize("text,line,field", [
    ('{"instruction": "a", "output": "b"}\n{"instruction": "a"}\n', 2, "output"),
    ('{"instruction": "a", "output": "b"}\nnot json\n', 2, None),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n', 1, "messages"),
    ('{"messages": [{"role": "bot", "content": "x"}]}\n', 1, "messages[0]"),
    ('{"instruction": "a", "output": "b"}\n{"messages": [{"role": "assistant", '
     '"content": "x"}]}\n', 2, "messages"),
    ('{"prompt": "a"}\n', 1, "instruction"),
    ('{"instruction": "a", "input": 3, "output": "b"}\n', 1, "input"),
])
def test_malformed_instruction_files(tmp_path, text, line, field):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        load_instructions(path)
    assert err.value.line == line and err.value.field == field
    assert str(path) in str(err.value)


def test_chat_messages_rows_train_on_the_last_reply(tmp_path, tok):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "Capital of France?"},
                                             {"role": "assistant", "content": "Paris"}]}) + "\n")
    (ex,) = load_instructions(path)
    enc = encode(tok, ex, "chat")
    answer = [t for t, lab in zip(enc["input_ids"], enc["labels"], strict=True) if lab != -100]
    assert tok.decode(answer) == "Paris<|end|>"
    with pytest.raises(ConfigError, match="prompt_format"):
        encode(tok, ex, "alpaca")


def test_tracker_attaches_to_a_users_trainer(make_tiny_llama, tmp_path, tok, data):
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "ckpt"), max_steps=4,
                             per_device_train_batch_size=4, report_to=[], use_cpu=True,
                             logging_steps=2, save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=make_tiny_llama(tok), args=args, train_dataset=data,
                      data_collator=DataCollatorForSeq2Seq(tok, padding=True))
    tracker = RelianceTracker(tok, TrackerConfig(every=2), tmp_path, items=_items())
    tracker.attach(trainer)
    trainer.train()
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 2, 4]
    history = trainer.state.log_history
    assert [h["step"] for h in history if "reliance/cf_acc" in h] == [0, 2, 4]
    assert [h["step"] for h in history if "loss" in h] == [2, 4]  # its own logs are kept
