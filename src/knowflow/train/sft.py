"""Supervised finetuning of HF causal LMs with the HF Trainer: full, LoRA or QK-only.

`train_model` takes encoded examples (`input_ids`, `labels` with -100 on tokens without loss),
pads them with transformers' `DataCollatorForSeq2Seq`, and trains for `cfg.steps` optimizer
steps. Trainer checkpoints go to `<out_dir>/checkpoints/checkpoint-<step>`; a checkpoint
is written staged (`stage_checkpoints`: under a hidden name, renamed into place once complete),
so `resume=True` continues from the newest one with the optimizer, scheduler, RNG and data
order restored.
Multi-GPU runs go through `accelerate launch`/torchrun unchanged: the Trainer does the work.
`cfg.trainer="trl"` trains the same rows with TRL's `SFTTrainer` and its collator instead (the
rows are already tokenized with their `labels`, so TRL neither re-tokenizes nor re-masks them).
"""

from __future__ import annotations

import logging
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import TrainerCallback

from knowflow.config import option
from knowflow.data.instruction_rows import IGNORE
from knowflow.data.prompts import FORMAT_HELP, FORMATS
from knowflow.errors import ConfigError
from knowflow.lens.adapt import (
    TrainableConfig,
    TrainMode,
    check_qk_weight_decay,
    count_trainable,
    prepare_trainable,
)
from knowflow.lens.checks import check_pad_token
from knowflow.store.run_folder import checkpoint_saved
from knowflow.store.staging import publish, remove, stage_dir
from knowflow.train.callback import EvalCallback
from knowflow.train.curation import DynamicCuration

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
_STATE = "trainer_state.json"


# The transformers schedulers and optimizers that train here as configured (no evaluation
# loop, no scheduler kwargs, no optional packages): each ran two steps on a tiny model
# (tests/train/test_sft_choices.py). Others (reduce_lr_on_plateau, cosine_with_min_lr,
# warmup_stable_decay, adamw_bnb_8bit, galore_adamw, ...) failed there.
SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts",
              "polynomial", "inverse_sqrt")
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop")


@dataclass(frozen=True)
class SFTConfig:
    train: TrainMode = option("lora", "full, lora or qk_only.")
    lora_r: int = option(8, "LoRA rank.")
    lora_alpha: int = option(16, "LoRA alpha.")
    lora_targets: tuple[str, ...] = option((), "LoRA target modules, comma-separated (default: "
                                           "the model family's).")  # lens.adapt.lora_targets
    lr: float = option(2e-4, "Learning rate.")
    steps: int = option(100, "Optimizer steps.")
    batch_size: int = option(8, "Examples per step.")
    grad_accum: int = 1
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0       # gradient clipping (0: none)
    scheduler: str = "constant"      # any transformers lr_scheduler_type
    optim: str | None = None         # a transformers optimizer name (sgd: the theory's GD);
                                     # None: transformers' default AdamW
    max_length: int = option(256, "Longest example in tokens.")  # longer: dropped, counted
    prompt_format: str = option("auto", FORMAT_HELP)
    save_every: int = 50             # Trainer checkpoint interval (steps)
    save_limit: int | None = 2       # checkpoints kept
    log_every: int = 5
    seed: int = option(0, "Seed (data order, init, mixture).")
    trainer: str = option("hf", "hf (transformers.Trainer) or trl (trl.SFTTrainer, pip install "
                                "'.[trl]').")

    def trainable(self) -> TrainableConfig:
        return TrainableConfig(self.train, self.lora_r, self.lora_alpha, 0.0,
                               tuple(self.lora_targets))

    def validate(self) -> None:
        self.trainable().validate()
        for name in ("steps", "batch_size", "grad_accum", "max_length", "save_every",
                     "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError("must be at least 1", name)
        if self.lr <= 0:
            raise ConfigError("must be positive", "lr")
        if self.warmup_steps < 0:
            raise ConfigError("must be at least 0", "warmup_steps")
        if self.prompt_format not in FORMATS:
            raise ConfigError(f"{self.prompt_format!r} is not one of {', '.join(FORMATS)}",
                              "prompt_format")
        if self.weight_decay < 0:
            raise ConfigError(f"must not be negative, got {self.weight_decay}", "weight_decay")
        if self.scheduler not in SCHEDULERS:
            raise ConfigError(f"unknown scheduler {self.scheduler!r} (known: "
                              f"{', '.join(SCHEDULERS)})", "scheduler")
        if self.optim is not None and self.optim not in OPTIMIZERS:
            raise ConfigError(f"{self.optim!r} is not an optimizer knowflow can train with "
                              f"(known: {', '.join(OPTIMIZERS)})", "optim",
                              "the others need packages or hardware knowflow does not install "
                              "(bitsandbytes, torchao, galore-torch, ...) or an eval loop")
        if self.trainer not in ("hf", "trl"):
            raise ConfigError(f"{self.trainer!r} is not one of hf, trl", "trainer")
        if self.trainer == "trl":
            import importlib.util

            if importlib.util.find_spec("trl") is None:
                raise ConfigError("trl is not installed", "trainer",
                                  "pip install 'knowflow[trl]', or use trainer=hf")


@dataclass
class TrainedModel:
    """What `train_model` returns: the trained model and how the training went (the public
    `knowflow.finetune` returns a `knowflow.store.result.Result` of the whole job instead)."""

    model: object                    # the trained model (a peft model for LoRA)
    steps: int
    train_loss: float | None         # mean loss over the run's logged steps
    seconds: float
    trainable_params: int
    total_params: int
    log_history: list[dict] = field(default_factory=list)


def last_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete Trainer checkpoint under `<out_dir>/checkpoints`; incomplete ones
    (interrupted while saving: no trainer_state.json) are removed."""
    folder = Path(out_dir) / CHECKPOINTS
    if not folder.is_dir():
        return None
    complete = []
    for path in folder.glob("checkpoint-*"):
        if (path / _STATE).exists():
            complete.append(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    return max(complete, key=lambda p: int(p.name.rsplit("-", 1)[-1]), default=None)


def stage_checkpoints(trainer) -> None:
    """Make `trainer` write each checkpoint staged (`knowflow.store.staging`): the Trainer writes
    checkpoint-N in place, file by file, so a kill or a full disk mid-save would leave a
    half-written one. Its `_save_checkpoint` is wrapped to point the Trainer's output folder
    at a hidden staging folder beside `checkpoints/checkpoint-N` for the save, then rename the
    complete checkpoint into place and rotate the old ones (`save_total_limit`) in the real
    folder. Wrapping the one save method (not a callback: callbacks run after the save) keeps
    every file the Trainer writes, in its own order, and needs no list of them. With several
    processes (each rank writes its own RNG file into the shared folder) the Trainer's own
    save is kept."""
    if trainer.args.world_size != 1:
        return
    save = trainer._save_checkpoint

    def staged(model, trial):
        run_dir = Path(trainer._get_output_dir(trial=trial))
        final = run_dir / f"checkpoint-{trainer.state.global_step}"
        stage = stage_dir(final)
        trainer._get_output_dir = lambda trial=None: str(stage)
        try:
            save(model, trial)
            publish(stage / final.name, final)
        finally:
            del trainer._get_output_dir  # the class's own again
            remove(stage)
        best = trainer.state.best_model_checkpoint
        if best and best.startswith(str(stage)):
            trainer.state.best_model_checkpoint = str(run_dir / Path(best).name)
        if trainer.args.should_save:
            _rotate(trainer, run_dir)
        checkpoint_saved(run_dir.parent)  # a staged run is resumable from now on

    trainer._save_checkpoint = staged


def _rotate(trainer, run_dir: Path) -> None:
    """Delete the checkpoints past `save_total_limit`, as the Trainer does after a save."""
    try:
        from transformers.trainer_utils import rotate_checkpoints
    except ImportError:  # transformers 4.x: a Trainer method
        trainer._rotate_checkpoints(use_mtime=False, output_dir=str(run_dir))
        return
    rotate_checkpoints(output_dir=str(run_dir), save_total_limit=trainer.args.save_total_limit,
                       best_model_checkpoint=trainer.state.best_model_checkpoint,
                       use_mtime=False)


class StepProgress(TrainerCallback):
    """Reports (step, max_steps) to `progress` after every step (the CLI draws a bar)."""

    def __init__(self, progress):
        self.progress = progress

    def on_step_end(self, args, state, control, **kwargs):
        self.progress(state.global_step, state.max_steps)


class StepTimer(TrainerCallback):
    """Wall time of every optimizer step, in `times` (benchmarks read it)."""

    def __init__(self):
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def placement(model=None) -> dict:
    """TrainingArguments that keep training where `model` is. The Trainer moves a model to
    its own device (CUDA wherever CUDA exists, unless `use_cpu`), so a model put on the CPU
    on a GPU machine must say so; bf16 mixed precision only for float32 weights on a CUDA
    device that multiplies bf16 (weights already in bf16 or fp16 train as they are).
    Without a model: CUDA if present, as the Trainer would choose."""
    if model is None:
        where, fp32 = ("cuda" if torch.cuda.is_available() else "cpu"), True
    else:
        param = next(model.parameters())
        where, fp32 = param.device.type, param.dtype == torch.float32
    cuda = where == "cuda"
    return {"use_cpu": where == "cpu", "dataloader_pin_memory": cuda,
            "bf16": cuda and fp32 and torch.cuda.is_bf16_supported()}


def training_args(cfg: SFTConfig, out_dir: Path, args_class=None, model=None, **overrides):
    """TrainingArguments (or a subclass, e.g. TRL's SFTConfig) for `cfg`, training `model`
    where it is (see `placement`); no loggers unless `report_to` is among `overrides`."""
    from transformers import TrainingArguments

    overrides = {"report_to": [], **overrides}
    return (args_class or TrainingArguments)(
        output_dir=str(out_dir / CHECKPOINTS), max_steps=cfg.steps,
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.lr, lr_scheduler_type=cfg.scheduler, warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
        logging_steps=cfg.log_every, logging_first_step=True,
        save_strategy="steps", save_steps=cfg.save_every, save_total_limit=cfg.save_limit,
        seed=cfg.seed, data_seed=cfg.seed, disable_tqdm=True,
        remove_unused_columns=False, **placement(model),
        **({"optim": cfg.optim} if cfg.optim else {}), **overrides)


def train_model(model, tokenizer, dataset: Sequence[dict], cfg: SFTConfig, out_dir: str | Path,
                callbacks: Sequence = (), resume: bool = False, **args_overrides) -> TrainedModel:
    """Train `model` on encoded `dataset` for `cfg.steps` steps; see the module docstring.

    `callbacks` are TrainerCallbacks; every `EvalCallback` among them (the reliance tracker,
    the tiny-world and rank trackers) is attached so that its metrics reach the Trainer's
    loggers; a `DynamicCuration` among them samples the rows (see `train.curation`).
    `args_overrides` set other TrainingArguments.
    """
    from transformers import DataCollatorForSeq2Seq, Trainer, set_seed
    from transformers.trainer_callback import PrinterCallback

    cfg.validate()
    if not dataset:
        raise ConfigError("no training examples (all longer than max_length?)", "max_length")
    out_dir = Path(out_dir)
    set_seed(cfg.seed)
    model = prepare_trainable(model, cfg.trainable())
    check_qk_weight_decay(model, cfg.weight_decay)
    trainable, total = count_trainable(model)
    log.info("training %s of %s parameters (%s)", f"{trainable:,}", f"{total:,}", cfg.train)
    check_pad_token(tokenizer, type(model).__name__)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    collator = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=IGNORE,
                                      return_tensors="pt")
    trackers = [c for c in callbacks if isinstance(c, EvalCallback)]
    curation = next((c for c in callbacks if isinstance(c, DynamicCuration)), None)
    if curation is not None and cfg.trainer != "hf":
        raise ConfigError("dynamic curation needs the HF Trainer", "trainer", "use trainer=hf")
    others = [c for c in callbacks if not isinstance(c, EvalCallback)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        if cfg.trainer == "trl":
            trainer = trl_trainer(model, tokenizer, dataset, cfg, out_dir, others,
                                  **args_overrides)
        else:
            args = training_args(cfg, out_dir, model=model, **args_overrides)
            kwargs = dict(model=model, args=args, processing_class=tokenizer, callbacks=others)
            trainer = curation.trainer(list(dataset), collator, **kwargs) if curation else \
                Trainer(train_dataset=list(dataset), data_collator=collator, **kwargs)
    trainer.remove_callback(PrinterCallback)  # library code never prints
    stage_checkpoints(trainer)  # none is ever half-written
    for tracker in trackers:
        tracker.attach(trainer)
    checkpoint = last_checkpoint(out_dir) if resume else None
    if checkpoint is not None:
        log.info("resuming from %s", checkpoint)
    start = time.time()
    model.train()
    output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    model.eval()
    return TrainedModel(model=model, steps=trainer.state.global_step,
                        train_loss=output.training_loss, seconds=time.time() - start,
                        trainable_params=trainable, total_params=total,
                        log_history=list(trainer.state.log_history))


def trl_trainer(model, tokenizer, dataset: Sequence[dict], cfg: SFTConfig, out_dir: Path,
                callbacks: Sequence = (), **args_overrides):
    """A `trl.SFTTrainer` over knowflow's tokenized rows (`input_ids`, `labels`).

    TRL keeps a dataset's own `labels` and pads with its `DataCollatorForLanguageModeling`
    (right padding, -100 labels), so it trains on exactly the tokens the HF Trainer path does.
    `max_length=None`: knowflow already dropped the rows over `cfg.max_length`; TRL's default
    gradient checkpointing is off, as on the HF path (pass `gradient_checkpointing=True` to
    save memory).
    """
    from datasets import Dataset
    from trl import SFTConfig as TRLConfig
    from trl import SFTTrainer

    rows = [{"input_ids": list(r["input_ids"]), "labels": list(r["labels"])} for r in dataset]
    overrides = {"max_length": None, "packing": False, "padding_free": False,
                 "gradient_checkpointing": False, **args_overrides}
    args = training_args(cfg, out_dir, args_class=TRLConfig, model=model, **overrides)
    return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                      processing_class=tokenizer, callbacks=list(callbacks))
