"""The schedulers and optimizers `SFTConfig` accepts are the ones that train here: each runs
two Trainer steps on a tiny model; the ones it refuses failed in the same setting."""

import warnings

import pytest
from transformers import Trainer, TrainingArguments

from knowflow.errors import ConfigError
from knowflow.train.sft import OPTIMIZERS, SCHEDULERS, SFTConfig

ROWS = [{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}] * 4


def _two_steps(model, tmp_path, **args) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = TrainingArguments(output_dir=str(tmp_path), max_steps=2, report_to=[],
                                   per_device_train_batch_size=2, disable_tqdm=True,
                                   use_cpu=True, save_strategy="no", **args)
        Trainer(model=model, args=config, train_dataset=ROWS).train()


def test_every_accepted_choice_trains(tiny_lm, tmp_path):
    for scheduler in SCHEDULERS:
        SFTConfig(scheduler=scheduler).validate()
        _two_steps(tiny_lm, tmp_path, lr_scheduler_type=scheduler)
    for optim in OPTIMIZERS:
        SFTConfig(optim=optim).validate()
        _two_steps(tiny_lm, tmp_path, optim=optim)


@pytest.mark.parametrize("field,value", [("scheduler", "reduce_lr_on_plateau"),
                                         ("scheduler", "cosine_with_min_lr"),
                                         ("scheduler", "warmup_stable_decay"),
                                         ("optim", "galore_adamw")])
def test_a_refused_choice_fails_in_training_too(tiny_lm, tmp_path, field, value):
    with pytest.raises(ConfigError, match=field):
        SFTConfig(**{field: value}).validate()
    key = "lr_scheduler_type" if field == "scheduler" else "optim"
    with pytest.raises((ValueError, TypeError, ImportError)):
        _two_steps(tiny_lm, tmp_path, **{key: value})
