"""SFTConfig.optim: any transformers optimizer name reaches the Trainer (sgd: the plain
gradient descent that the theory analyses); a bad name is one ConfigError naming the field."""

from __future__ import annotations

import pytest
import torch
from transformers import TrainerCallback

from knowflow.data.instruction_rows import encode_all
from knowflow.errors import ConfigError
from knowflow.train.sft import SFTConfig, train_model, training_args


class _Optimizer(TrainerCallback):
    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        self.optimizer = optimizer


def test_bad_optimizer_name_names_the_field():
    with pytest.raises(ConfigError, match="optim"):
        SFTConfig(optim="adamw_but_not_really").validate()


def test_default_keeps_transformers_default(tmp_path):
    from transformers import TrainingArguments

    plain = TrainingArguments(output_dir=str(tmp_path / "a"), report_to=[], use_cpu=True)
    assert training_args(SFTConfig(), tmp_path).optim == plain.optim
    assert training_args(SFTConfig(optim="sgd"), tmp_path).optim == "sgd"


def test_sgd_step_is_minus_lr_times_gradient(make_tiny_llama, tmp_path, tok, rows):
    data, _ = encode_all(tok, rows[:4], "chat", 512)
    model = make_tiny_llama(tok)
    cfg = SFTConfig(train="full", optim="sgd", lr=0.5, steps=1, batch_size=4, save_every=1,
                    max_grad_norm=0.0, log_every=1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    batch = {k: torch.nn.utils.rnn.pad_sequence([torch.tensor(r[k]) for r in data],
                                                batch_first=True,
                                                padding_value=-100 if k == "labels" else 0)
             for k in ("input_ids", "labels")}
    batch["attention_mask"] = torch.nn.utils.rnn.pad_sequence(
        [torch.ones(len(r["input_ids"]), dtype=torch.long) for r in data], batch_first=True)
    ref = make_tiny_llama(tok)
    ref(**batch).loss.backward()
    seen = _Optimizer()
    train_model(model, tok, data, cfg, tmp_path, callbacks=[seen])
    assert isinstance(seen.optimizer.optimizer if hasattr(seen.optimizer, "optimizer")
                      else seen.optimizer, torch.optim.SGD)
    name, param = "model.layers.0.self_attn.q_proj.weight", dict(ref.named_parameters())
    step = dict(model.named_parameters())[name].detach() - before[name]
    assert torch.allclose(step, -0.5 * param[name].grad, atol=1e-5)
