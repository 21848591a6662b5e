"""`EvalCallback`: evaluate the model being trained, during any HF Trainer run.

One callback serves every tracker in knowflow: it calls an *evaluator* (`model -> record`) at
step 0, every `every` optimizer steps and at the last step, appends the record (with `step`,
`epoch`, the `train_loss` logged at that step, if any, and `eval_seconds`) to `records`, rewrites
`<out_dir>/metrics.jsonl` atomically (main process only), and forwards the record's numbers to
the Trainer's loggers (whatever `report_to` names: TensorBoard, W&B, ...) as `Trainer.log`
does: appended to `state.log_history` and passed to every callback's `on_log`. Attached with
`attach(trainer)` it calls `trainer.log`; passed as `Trainer(callbacks=[tracker])` it has no
trainer, so it keeps the Trainer's callback handler, the object that calls its events (found
once, at `on_train_begin`, as the caller of that event), and calls the handler's `on_log`
itself. On `--resume` it keeps the saved records up to
the resumed step and continues from there, so an interrupted run ends with the same records
as an uninterrupted one. Subclasses add behaviour after each record (`on_record`).

    tracker = EvalCallback(lambda model: {"acc": accuracy(model)}, every=50, out_dir=run_dir)
    tracker.attach(trainer)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler

from knowflow.store.files import atomic_write_jsonl
from knowflow.store.identity import METRICS
from knowflow.store.readers import read_jsonl

Evaluator = Callable[[object], dict]


class EvalCallback(TrainerCallback):
    """Records `evaluator(model)` every `every` steps; see the module docstring."""

    log_prefix = "eval"
    unlogged = ("step", "epoch", "train_loss", "eval_seconds")  # record keys not forwarded

    def __init__(self, evaluator: Evaluator, every: int, out_dir: str | Path | None = None):
        if every < 1:
            raise ValueError("every must be at least 1")
        self.evaluator, self.every = evaluator, every
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.records: list[dict] = []
        self.trainer = None
        self._handler: CallbackHandler | None = None  # without a trainer: who calls on_log
        self._args = None

    def attach(self, trainer) -> EvalCallback:
        """Add this callback to `trainer` and log through it."""
        trainer.add_callback(self)
        self.trainer = trainer
        return self

    @property
    def eval_seconds(self) -> float:
        return sum(r["eval_seconds"] for r in self.records)

    # -- callback events ------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.trainer is None:
            self._args, self._handler = args, _calling_handler()
        self._reload(state.global_step)
        self._due(model, state, control)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            last = self.records[-1] if self.records else None
            if last is not None and last["step"] == state.global_step:
                # the Trainer logs a step's loss after on_step_end evaluated it
                last["train_loss"] = float(logs["loss"])
                self._write(state)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0 or state.global_step >= state.max_steps:
            self._due(model, state, control)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._due(model, state, control)  # e.g. stopped early between evaluations

    # -- work -----------------------------------------------------------------------------
    def _reload(self, step: int) -> None:
        """On resume: keep the saved records up to the resumed step (later ones were lost)."""
        path = self.out_dir / METRICS if self.out_dir is not None else None
        if step > 0 and path is not None and path.exists():
            self.records = [r for r in read_jsonl(path) if r["step"] <= step]
        elif step == 0:
            self.records = []

    def _due(self, model, state, control) -> None:
        if not self.records or self.records[-1]["step"] < state.global_step:
            self.evaluate(model, state, control)

    def evaluate(self, model, state, control) -> dict:
        """Score `model` now and record it."""
        start = time.perf_counter()
        was_training = model.training
        model.eval()
        try:
            measured = self.evaluator(model)
        finally:
            model.train(was_training)
        # the loss the Trainer logs at this step (it logs after on_step_end: `on_log` fills
        # it in); None at a step with no logged loss, so a curve never repeats a stale one
        record = {"step": state.global_step, "epoch": state.epoch, **measured,
                  "train_loss": None,
                  "eval_seconds": round(time.perf_counter() - start, 3)}
        self.records.append(record)
        self.on_record(record, model, state, control)
        self._write(state)
        self._log(record, state, control)
        return record

    def _write(self, state) -> None:
        if self.out_dir is not None and state.is_world_process_zero:
            atomic_write_jsonl(self.out_dir / METRICS, self.records)

    def on_record(self, record: dict, model, state, control) -> None:
        """Hook for subclasses: runs after each new record, before it is written."""

    def _log(self, record: dict, state, control=None) -> None:
        flat = {f"{self.log_prefix}/{k}": v for k, v in scalars(
            {k: v for k, v in record.items() if k not in self.unlogged}).items()}
        if self.trainer is not None:
            control = self.trainer.control
            should_log = control.should_log  # Trainer.log clears it: keep the loss log due now
            self.trainer.log(flat)
            control.should_log = should_log
            return
        if self._handler is not None and state.epoch is not None:
            flat["epoch"] = state.epoch  # as Trainer.log adds it
        state.log_history.append({**flat, "step": state.global_step})
        if self._handler is not None and control is not None:  # what Trainer.log does next
            should_log = control.should_log
            self._handler.on_log(self._args, state, control, flat)
            control.should_log = should_log


def _calling_handler(depth: int = 6) -> CallbackHandler | None:
    """The Trainer's `CallbackHandler` calling the current event: the nearest caller, within
    `depth` frames (its `call_event` calls the event method, perhaps through a subclass's
    `super()`), whose `self` is one; None when something else drives the callback (a test
    calling the events by hand)."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            break
        caller = frame.f_locals.get("self")
        if isinstance(caller, CallbackHandler):
            return caller
        frame = frame.f_back
    return None


def scalars(record: dict, prefix: str = "") -> dict[str, float]:
    """The record's numbers, nested dicts flattened with '/' (lists and strings left out)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(scalars(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = value
    return out
