"""load_model(device_map="auto", max_memory=...): a model split by accelerate (here the CPU
holds only some layers, the rest offloaded to disk) gives the unsplit model's logits."""

import re

import pytest
import torch

from knowflow.errors import ConfigError
from knowflow.lens.load import load_model


def test_device_map_split_equals_unsplit(tiny_model_dir, tmp_path):
    whole, tok = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    n_params = sum(p.numel() * p.element_size() for p in whole.parameters())
    split, _ = load_model(str(tiny_model_dir), device="cpu", dtype="float32",
                          device_map="auto", max_memory={"cpu": n_params * 3 // 4},
                          offload_folder=tmp_path / "offload")
    placed = set(split.hf_device_map.values())
    assert "disk" in placed and "cpu" in placed, split.hf_device_map
    batch = tok(["Paris is the capital of", "The sky is"], return_tensors="pt", padding=True)
    with torch.no_grad():
        want = whole(**batch).logits
        got = split(**batch).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a CPU-only machine")
@pytest.mark.parametrize("device_map", ["cuda", "cuda:1", {"": "cuda:0"}, {"model": 0}])
def test_a_device_map_naming_a_missing_gpu_is_refused_before_loading(tiny_model_dir,
                                                                     device_map, monkeypatch):
    """Not torch's AssertionError ("Torch not compiled with CUDA enabled") from inside
    from_pretrained: one ConfigError naming device_map, before any file is read."""
    import knowflow.lens.load as load

    monkeypatch.setattr(load, "_resolve", lambda *a, **k: pytest.fail("loading began"))
    with pytest.raises(ConfigError) as err:
        load_model(str(tiny_model_dir), device_map=device_map)
    assert str(err.value).startswith("config field 'device_map': device 'cuda")
    assert "CUDA is not available on this machine" in str(err.value)


@pytest.mark.parametrize("device_map,max_memory,said", [
    ("tpu", None, "device 'tpu': unknown device"),
    (3.5, None, "expected one of auto, balanced, balanced_low_0, sequential"),
    ({"model": [1]}, None, "[1] is not a device"),
    ("auto", "20GiB", "config field 'max_memory': must map devices to sizes"),
])
def test_a_device_map_that_names_no_device_is_refused(tiny_model_dir, device_map, max_memory,
                                                       said):
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_model(str(tiny_model_dir), device_map=device_map, max_memory=max_memory)
