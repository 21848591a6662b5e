"""load_model(device_map="auto", max_memory=...): a model split by accelerate (here the CPU
holds only some layers, the rest offloaded to disk) gives the unsplit model's logits."""

import torch

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
