"""train.callback.EvalCallback, the one evaluation callback: evaluates at step 0, every `every`
steps and at the end; writes metrics.jsonl (main process only); keeps the records up to the
resumed step; attaches the logged training loss; forwards the numbers to the Trainer's loggers."""

import pytest
import torch
from transformers import TrainerCallback, TrainerControl, TrainerState

from knowflow.store.files import atomic_write_jsonl
from knowflow.store.readers import read_jsonl
from knowflow.train.callback import EvalCallback, scalars
from knowflow.train.sft import SFTConfig, train_model


class _Evaluator:
    """Counts its calls; sees the model in eval mode."""

    def __init__(self):
        self.calls = 0

    def __call__(self, model) -> dict:
        assert not model.training
        self.calls += 1
        return {"acc": self.calls / 10, "per": {"C": 1, "name": "x"}, "ok": True}


def _drive(cb: EvalCallback, model, steps: int, start: int = 0, world_zero: bool = True,
           losses: dict | None = None) -> TrainerState:
    """What the Trainer calls, in its order, for a run from `start` to `steps`."""
    state = TrainerState(global_step=start, max_steps=steps, epoch=0.0,
                         is_world_process_zero=world_zero)
    control = TrainerControl()
    cb.on_train_begin(None, state, control, model=model)
    for step in range(start + 1, steps + 1):
        state.global_step, state.epoch = step, step / steps
        cb.on_step_end(None, state, control, model=model)
        if losses and step in losses:
            cb.on_log(None, state, control, logs={"loss": losses[step]})
    cb.on_train_end(None, state, control, model=model)
    return state


def test_evaluates_at_zero_every_n_steps_and_at_the_end(tmp_path):
    model = torch.nn.Linear(2, 2).train()
    evaluator = _Evaluator()
    cb = EvalCallback(evaluator, every=3, out_dir=tmp_path)
    _drive(cb, model, steps=7)
    assert [r["step"] for r in cb.records] == [0, 3, 6, 7]
    assert evaluator.calls == 4 and model.training  # train mode restored after each
    assert read_jsonl(tmp_path / "metrics.jsonl") == cb.records
    assert cb.records[1]["acc"] == 0.2 and cb.records[1]["epoch"] == pytest.approx(3 / 7)
    assert cb.eval_seconds == pytest.approx(sum(r["eval_seconds"] for r in cb.records))
    with pytest.raises(ValueError, match="every"):
        EvalCallback(evaluator, every=0)


def test_logged_loss_joins_its_own_step_only(tmp_path):
    """A record holds the loss logged at its step, never an earlier step's (a curve of a short
    run logged every few steps would repeat a stale loss and look flat)."""
    cb = EvalCallback(_Evaluator(), every=2, out_dir=tmp_path)
    _drive(cb, torch.nn.Linear(2, 2), steps=4, losses={1: 2.5, 2: 2.0})
    assert [(r["step"], r["train_loss"]) for r in cb.records] == [(0, None), (2, 2.0), (4, None)]
    assert read_jsonl(tmp_path / "metrics.jsonl")[1]["train_loss"] == 2.0  # rewritten


def test_only_the_main_process_writes(tmp_path):
    cb = EvalCallback(_Evaluator(), every=1, out_dir=tmp_path)
    _drive(cb, torch.nn.Linear(2, 2), steps=2, world_zero=False)
    assert len(cb.records) == 3 and not (tmp_path / "metrics.jsonl").exists()


def test_resume_keeps_the_records_up_to_the_resumed_step(tmp_path):
    saved = [{"step": s, "acc": s / 100, "train_loss": 3.0 - s / 10, "eval_seconds": 0.0}
             for s in range(7)]
    atomic_write_jsonl(tmp_path / "metrics.jsonl", saved)
    evaluator = _Evaluator()
    cb = EvalCallback(evaluator, every=2, out_dir=tmp_path)
    _drive(cb, torch.nn.Linear(2, 2), steps=6, start=4)  # resumed from checkpoint-4
    assert cb.records[:5] == saved[:5]  # kept, not re-evaluated
    assert [r["step"] for r in cb.records] == [0, 1, 2, 3, 4, 6] and evaluator.calls == 1
    assert cb.records[-1]["train_loss"] is None  # no loss was logged at step 6
    assert read_jsonl(tmp_path / "metrics.jsonl") == cb.records
    fresh = EvalCallback(_Evaluator(), every=2, out_dir=tmp_path)
    _drive(fresh, torch.nn.Linear(2, 2), steps=2)  # a new run in the folder starts over
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 2]


def test_records_go_to_the_log_history_with_a_prefix_and_numbers_only(tmp_path):
    cb = EvalCallback(_Evaluator(), every=1)
    state = _drive(cb, torch.nn.Linear(2, 2), steps=1)
    assert state.log_history == [{"eval/acc": 0.1, "eval/per/C": 1, "step": 0},
                                 {"eval/acc": 0.2, "eval/per/C": 1, "step": 1}]
    assert scalars({"a": 1, "b": {"c": 2.5, "d": [1]}, "e": False, "f": "s"}, "p/") == {
        "p/a": 1, "p/b/c": 2.5}


class _Logs(TrainerCallback):
    """What the Trainer's loggers (W&B, TensorBoard, ...) receive."""

    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


def _norm(model) -> float:
    return float(model.lm_head.weight.detach().norm())


def _rows(tok) -> list[dict]:
    ids = [tok(f"fact {i} is {i * 7}")["input_ids"] for i in range(8)]
    return [{"input_ids": x, "labels": x} for x in ids]


def test_attached_to_a_real_trainer_it_logs_through_the_trainer(make_tiny_llama, tmp_path, tok):
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

    model = make_tiny_llama(tok)
    logs = _Logs()
    args = TrainingArguments(output_dir=str(tmp_path / "ckpt"), max_steps=3, logging_steps=1,
                             per_device_train_batch_size=4, report_to=[], use_cpu=True,
                             save_strategy="no", disable_tqdm=True, remove_unused_columns=False)
    trainer = Trainer(model=model, args=args, train_dataset=_rows(tok), callbacks=[logs],
                      data_collator=DataCollatorForSeq2Seq(tok, padding=True))
    cb = EvalCallback(lambda m: {"norm": _norm(m)}, every=2,
                      out_dir=tmp_path).attach(trainer)
    trainer.train()
    assert [r["step"] for r in cb.records] == [0, 2, 3]
    assert [h["eval/norm"] for h in logs.logs if "eval/norm" in h] == [r["norm"]
                                                                     for r in cb.records]
    losses = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    assert [r["train_loss"] for r in cb.records[1:]] == [losses[2], losses[3]]
    assert len(losses) == 3  # logging the records kept the loss logs due at each step


def test_finetune_forwards_any_eval_callback_to_the_loggers(make_tiny_llama, tmp_path, tok):
    logs = _Logs()
    cb = EvalCallback(lambda m: {"norm": _norm(m)}, every=1,
                      out_dir=tmp_path)
    train_model(make_tiny_llama(tok), tok, _rows(tok),
                SFTConfig(train="full", steps=2, batch_size=4, save_every=10), tmp_path,
                [cb, logs])
    assert len(cb.records) == 3
    assert len([h for h in logs.logs if "eval/norm" in h]) == 3
