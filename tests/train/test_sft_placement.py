"""Training stays where the model is: the Trainer's device and mixed precision follow the
model's own device and weights, not merely whether CUDA exists (CPU-only tests; the CUDA
branches are checked with faked parameters and faked CUDA queries)."""

from types import SimpleNamespace

import torch

from knowflow.train.sft import SFTConfig, placement, training_args


class _Fake:
    """A stand-in model whose one parameter claims a device and dtype."""

    def __init__(self, device: str, dtype: torch.dtype):
        self.param = SimpleNamespace(device=torch.device(device), dtype=dtype)

    def parameters(self):
        yield self.param


def test_a_cpu_model_trains_on_the_cpu_even_where_cuda_exists(tmp_path, monkeypatch):
    model = torch.nn.Linear(2, 2)
    assert placement(model) == {"use_cpu": True, "dataloader_pin_memory": False, "bf16": False}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert placement(None)["use_cpu"] is False        # no model: CUDA, as the Trainer would
    args = training_args(SFTConfig(), tmp_path, model=model)
    assert args.use_cpu is True and args.bf16 is False and args.dataloader_pin_memory is False


def test_bf16_mixed_precision_only_for_float32_weights_on_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    on_gpu = placement(_Fake("cuda", torch.float32))
    assert on_gpu == {"use_cpu": False, "dataloader_pin_memory": True, "bf16": True}
    assert placement(_Fake("cuda", torch.bfloat16))["bf16"] is False   # already half
    assert placement(_Fake("cuda", torch.float16))["bf16"] is False
    assert placement(_Fake("mps", torch.float32)) == {
        "use_cpu": False, "dataloader_pin_memory": False, "bf16": False}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert placement(_Fake("cuda", torch.float32))["bf16"] is False    # e.g. a V100
