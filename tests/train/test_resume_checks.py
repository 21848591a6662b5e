"""`train.resume.check_checkpoints`: a checkpoint the run's config cannot continue is
refused by file and field before a resumed run writes anything; a sound one passes."""

from __future__ import annotations

import dataclasses
import json

import pytest
from safetensors.torch import save_file

from helpers import tiny_llama
from knowflow.errors import DataError
from knowflow.train.resume import check_checkpoints
from knowflow.train.sft import SFTConfig

FULL = SFTConfig(train="full", steps=40, batch_size=4)


def _checkpoint(run, step: int, state: dict, tensors: dict | None = None,
                adapter: dict | None = None):
    ckpt = run / "checkpoints" / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    if tensors is not None:
        save_file(tensors, str(ckpt / "model.safetensors"))
    if adapter is not None:
        (ckpt / "adapter_config.json").write_text(json.dumps(adapter))
    return ckpt


def test_a_sound_full_checkpoint_passes(tmp_path, tok):
    model = tiny_llama(tok)
    state = {k: v.clone() for k, v in model.state_dict().items() if "rotary" not in k}
    _checkpoint(tmp_path, 10, {"global_step": 10, "max_steps": 40, "train_batch_size": 4},
                {k: state[k] for k in list(state)[:4]})
    check_checkpoints(tmp_path, FULL, model)


@pytest.mark.parametrize(("change", "fragment"), [
    ({"state": {"global_step": 20}}, "field 'global_step': step 20, but the checkpoint's name "
     "says step 10"),
    ({"state": {"global_step": 10, "max_steps": 41}}, "field 'max_steps': 41, but the run's "
     "config says sft.steps=40"),
    ({"state": {"global_step": 10, "train_batch_size": 8}}, "sft.batch_size=4"),
    ({"shape": True}, "has shape [3, 64], but the run's model builds"),
    ({"adapter": {"r": 8}}, "a LoRA checkpoint, but the run's config says sft.train=full"),
    ({"lora": True, "adapter": {"r": 4, "target_modules": ["q_proj"]}},
     "LoRA rank 4, but the run's config says sft.lora_r=8"),
    ({"lora": True, "adapter": {"r": 8, "target_modules": ["q_proj"]}},
     "LoRA targets ['q_proj'], but the run trains ['k_proj', 'q_proj']"),
])
def test_a_checkpoint_the_config_cannot_continue_is_refused(change, fragment, tmp_path, tok):
    model = tiny_llama(tok)
    key, weight = next(iter(model.state_dict().items()))
    tensors = {key: weight[:3].clone()} if change.get("shape") else {key: weight.clone()}
    _checkpoint(tmp_path, 10, change.get("state", {"global_step": 10}),
                None if change.get("adapter") else tensors, change.get("adapter"))
    sft = dataclasses.replace(FULL, train="lora", lora_r=8,
                              lora_targets=("q_proj", "k_proj")) if change.get("lora") else FULL
    with pytest.raises(DataError) as err:
        check_checkpoints(tmp_path, sft, model)
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)
