"""knowflow's `SFTConfig` -> `TrainingArguments` mapping (`sft.training_args`): every field
lands in its own argument, the fixed choices are the ones the module docstring promises, and
the schedulers and optimizers `SFTConfig` accepts train two steps through that mapping while
the ones it refuses fail there."""

import dataclasses
import warnings

import pytest
from transformers import Trainer, TrainingArguments

from knowflow.errors import ConfigError
from knowflow.train.sft import CHECKPOINTS, OPTIMIZERS, SCHEDULERS, SFTConfig, training_args

ROWS = [{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}] * 4

# every mapped field set away from its default, no two numbers alike: a field sent to the
# wrong argument cannot match by chance
CFG = SFTConfig(lr=3e-3, steps=7, batch_size=3, grad_accum=2, warmup_steps=1, weight_decay=0.1,
                max_grad_norm=0.5, scheduler="cosine", optim="sgd", save_every=4, save_limit=6,
                log_every=5, seed=11)
MAPPING = {"lr": "learning_rate", "steps": "max_steps", "batch_size": "per_device_train_batch_size",
           "grad_accum": "gradient_accumulation_steps", "warmup_steps": "warmup_steps",
           "weight_decay": "weight_decay", "max_grad_norm": "max_grad_norm",
           "scheduler": "lr_scheduler_type", "optim": "optim", "save_every": "save_steps",
           "save_limit": "save_total_limit", "log_every": "logging_steps", "seed": "seed"}


def _args(cfg, tmp_path, model, **overrides) -> TrainingArguments:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return training_args(cfg, tmp_path, model=model, **overrides)


def test_each_field_lands_in_its_training_argument(tiny_lm, tmp_path):
    args = _args(CFG, tmp_path, tiny_lm)
    for field, arg in MAPPING.items():
        assert getattr(args, arg) == getattr(CFG, field), (field, arg)
    assert args.data_seed == CFG.seed  # the data order follows the seed too
    assert args.output_dir == str(tmp_path / CHECKPOINTS)
    assert args.save_strategy == "steps" and args.logging_first_step
    assert args.report_to == [] and args.disable_tqdm and not args.remove_unused_columns
    assert args.use_cpu and not args.bf16  # a CPU model trains where it is


def test_fields_the_trainer_does_not_see_change_nothing(tiny_lm, tmp_path):
    """LoRA, prompt and length settings act before the Trainer: the arguments are the same."""
    other = dataclasses.replace(CFG, train="full", lora_r=4, lora_alpha=8, max_length=64,
                                prompt_format="plain")
    assert _args(other, tmp_path, tiny_lm).to_dict() == _args(CFG, tmp_path, tiny_lm).to_dict()


def test_no_optimizer_keeps_the_trainers_default_and_overrides_pass_through(tiny_lm, tmp_path):
    default = TrainingArguments(output_dir=str(tmp_path), report_to=[]).optim
    args = _args(dataclasses.replace(CFG, optim=None), tmp_path, tiny_lm, eval_steps=3,
                 gradient_checkpointing=True)
    assert args.optim == default
    assert args.eval_steps == 3 and args.gradient_checkpointing


def test_args_class_builds_a_subclass(tiny_lm, tmp_path):
    """TRL's SFTConfig subclasses TrainingArguments: `args_class` builds that class instead."""

    @dataclasses.dataclass
    class Subclass(TrainingArguments):
        extra: int = 0

    args = training_args(CFG, tmp_path, args_class=Subclass, model=tiny_lm)
    assert type(args) is Subclass and args.max_steps == CFG.steps


def _two_steps(model, tmp_path, cfg: SFTConfig) -> None:
    """Two Trainer steps with the arguments knowflow builds for `cfg`."""
    cfg = dataclasses.replace(cfg, steps=2, batch_size=2, save_every=10, save_limit=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Trainer(model=model, args=training_args(cfg, tmp_path, model=model),
                train_dataset=ROWS).train()


def test_every_accepted_choice_trains(tiny_lm, tmp_path):
    for scheduler in SCHEDULERS:
        cfg = SFTConfig(scheduler=scheduler)
        cfg.validate()
        _two_steps(tiny_lm, tmp_path / scheduler, cfg)
    for optim in OPTIMIZERS:
        cfg = SFTConfig(optim=optim)
        cfg.validate()
        _two_steps(tiny_lm, tmp_path / optim, cfg)


@pytest.mark.parametrize("field,value", [("scheduler", "reduce_lr_on_plateau"),
                                         ("scheduler", "cosine_with_min_lr"),
                                         ("scheduler", "warmup_stable_decay"),
                                         ("optim", "galore_adamw")])
def test_a_refused_choice_fails_in_training_too(tiny_lm, tmp_path, field, value):
    cfg = SFTConfig(**{field: value})
    with pytest.raises(ConfigError, match=field):
        cfg.validate()
    with pytest.raises((ValueError, TypeError, ImportError)):
        _two_steps(tiny_lm, tmp_path, cfg)
