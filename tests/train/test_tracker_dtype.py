"""The tracker's evaluation precision (`TrackerConfig.dtype`): bfloat16 runs the model's
matrix products in bfloat16 (autocast) and gives a record with the same keys; float32 leaves
them in float32; auto follows whether the device has fast bf16; a bad name is a ConfigError."""

import pytest
import torch

from knowflow.data.suites import get_suite
from knowflow.errors import ConfigError
from knowflow.train import tracker as tracker_mod
from knowflow.train.tracker import RelianceTracker, TrackerConfig

ITEMS = {"cf-capitals": get_suite("cf-capitals", limit=3)}


@pytest.fixture(scope="module")
def model(make_tiny_llama, tok):
    return make_tiny_llama(tok)


def _measure_dtypes(model, tok, dtype: str) -> tuple[dict, set]:
    seen: set = set()
    hook = model.model.layers[0].mlp.down_proj.register_forward_hook(
        lambda mod, args, out: seen.add(out.dtype))
    try:
        rec = RelianceTracker(tok, TrackerConfig(batch_size=4, dtype=dtype),
                              items=ITEMS).measure(model)
    finally:
        hook.remove()
    return rec, seen


def test_bfloat16_runs_the_products_in_bfloat16(model, tok):
    full, full_seen = _measure_dtypes(model, tok, "float32")
    low, low_seen = _measure_dtypes(model, tok, "bfloat16")
    assert full_seen == {torch.float32} and low_seen == {torch.bfloat16}
    assert set(full) == set(low)
    assert low["attn_context"] == pytest.approx(full["attn_context"], abs=0.02)
    assert next(model.parameters()).dtype == torch.float32  # weights untouched


@pytest.mark.parametrize("fast", [True, False])
def test_auto_follows_the_device(model, tok, monkeypatch, fast):
    monkeypatch.setattr(tracker_mod, "fast_bf16", lambda device: fast)
    _, seen = _measure_dtypes(model, tok, "auto")
    assert seen == {torch.bfloat16 if fast else torch.float32}


def test_bad_dtype_names_the_field():
    with pytest.raises(ConfigError, match="track.dtype"):
        TrackerConfig(dtype="float8").validate()
