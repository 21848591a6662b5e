"""Checks of an sft run's checkpoints before a resumed run touches anything.

`knowflow sft --resume` continues from the newest complete checkpoint. Before any file of the
run is written (data.jsonl, metrics.jsonl, a new checkpoint), every complete checkpoint must
agree with itself and with the run's config: its trainer_state.json's `global_step` is the
step in its name, its `max_steps` and `train_batch_size` are the config's (a run resumed into
another length or batch would not be the run that was started), and its weights have the
shapes the config builds (LoRA rank and targets; for full and QK-only training, the model's
tensor shapes). A mismatch is one `DataError` naming the file, instead of a silent resume or
the Trainer's size-mismatch error after the run's files were rewritten.
"""

from __future__ import annotations

from pathlib import Path

from knowflow.errors import DataError
from knowflow.store.readers import read_json

STATE = "trainer_state.json"


def _checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    folder = Path(out_dir) / "checkpoints"
    found = [(int(p.name.rsplit("-", 1)[-1]), p) for p in folder.glob("checkpoint-*")
             if p.name.rsplit("-", 1)[-1].isdigit() and (p / STATE).is_file()] \
        if folder.is_dir() else []
    return sorted(found)


def _json(path: Path, hint: str) -> dict:
    try:
        data = read_json(path, hint=hint)
    except OSError:
        raise DataError(path, "damaged JSON", hint=hint) from None
    if not isinstance(data, dict):
        raise DataError(path, "expected a JSON object", hint=hint)
    return data


def check_checkpoints(out_dir: str | Path, sft, model=None) -> None:
    """Raise a `DataError` for the first checkpoint under `out_dir` that the run's `sft`
    config (an `SFTConfig`, its LoRA targets resolved) cannot continue; `model` (the base
    model, before LoRA) checks the tensor shapes of full and QK-only checkpoints."""
    changed = "the run's config.json differs from the one this checkpoint was trained with; " \
              "put the original back, or start a fresh run"
    for step, ckpt in _checkpoints(Path(out_dir)):
        hint = f"delete {ckpt} to resume from the checkpoint before it, or start a fresh run"
        state = _json(ckpt / STATE, hint)
        if state.get("global_step") not in (None, step):
            raise DataError(ckpt / STATE, f"step {state['global_step']!r}, but the "
                            f"checkpoint's name says step {step}", field="global_step",
                            hint=hint)
        for key, name, want in (("max_steps", "steps", sft.steps),
                                ("train_batch_size", "batch_size", sft.batch_size)):
            if state.get(key) not in (None, want):
                raise DataError(ckpt / STATE, f"{state[key]!r}, but the run's config says "
                                f"sft.{name}={want}", field=key, hint=changed)
        hint = changed
        adapter = ckpt / "adapter_config.json"
        if sft.train == "lora":
            _check_lora(adapter, sft, hint)
        elif adapter.is_file():
            raise DataError(adapter, f"a LoRA checkpoint, but the run's config says "
                            f"sft.train={sft.train}", hint=hint)
        elif model is not None:
            _check_shapes(ckpt, model, hint)


def _check_lora(adapter: Path, sft, hint: str) -> None:
    if not adapter.is_file():
        raise DataError(adapter.parent, "not a LoRA checkpoint (no adapter_config.json), but "
                        "the run's config says sft.train=lora", hint=hint)
    config = _json(adapter, hint)
    if config.get("r") not in (None, sft.lora_r):
        raise DataError(adapter, f"LoRA rank {config.get('r')!r}, but the run's config says "
                        f"sft.lora_r={sft.lora_r}", field="r", hint=hint)
    targets = config.get("target_modules")
    if isinstance(targets, list) and sft.lora_targets and \
            set(targets) != set(sft.lora_targets):
        raise DataError(adapter, f"LoRA targets {sorted(targets)}, but the run trains "
                        f"{sorted(sft.lora_targets)}", field="target_modules", hint=hint)


def _check_shapes(ckpt: Path, model, hint: str) -> None:
    """Each tensor of a full-model checkpoint has the shape of the model's tensor of that
    name (headers only: no tensor is read)."""
    from safetensors import safe_open

    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    for path in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            for key in weights.keys():  # noqa: SIM118 - a safe_open handle is not iterable
                want = shapes.get(key)
                got = tuple(weights.get_slice(key).get_shape())
                if want is not None and got != want:
                    raise DataError(path, f"tensor {key} has shape {list(got)}, but the run's "
                                    f"model builds {list(want)}", hint=hint)
