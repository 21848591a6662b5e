"""The per-kind gradient projections on context attention (the multi-layer Prop. 1) against
finite differences, on a small pretrained tiny-world model."""

import pytest
import torch

from helpers import TINY_MODEL, TINY_WORLD
from knowflow.experiments.inversion_tiny.mechanism import (
    context_attention,
    gradient_projections,
    kind_loss,
)
from knowflow.experiments.inversion_tiny.model import TinyModelConfig, encode
from knowflow.experiments.inversion_tiny.pretrain import (
    PretrainConfig,
    load_pretrained,
    pretrained_path,
)
from knowflow.experiments.inversion_tiny.world import (
    Mixture,
    TinyWorldConfig,
    evaluation_sets,
    finetuning_set,
    make_world,
)
from knowflow.lens.adapt import TrainableConfig, prepare_trainable

WORLD = TinyWorldConfig(**TINY_WORLD)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KNOWFLOW_CACHE", str(tmp_path_factory.mktemp("cache")))
        return _pretrained()


def _pretrained():
    pre = PretrainConfig(steps=150, eval_every=150, batch_size=8, lr=3e-3)
    path = pretrained_path(WORLD, TinyModelConfig(**TINY_MODEL), pre, 0)
    model, tok, _ = load_pretrained(path)
    model = model.double()
    world = make_world(WORLD, 0)
    train = finetuning_set(world, Mixture(40, 0.3, 0.5, 0.2, 0), 0)
    cf = evaluation_sets(world, 0)["cf"]
    return model, encode(tok, cf), cf, encode(tok, train), [ex.kind for ex in train]


@pytest.mark.parametrize("mode", ["qk_only", "full"])
def test_projection_matches_finite_difference(setup, mode):
    model, cf_batch, cf, train_batch, kinds = setup
    model = prepare_trainable(model, TrainableConfig(mode=mode))
    proj = gradient_projections(model, cf_batch, cf, train_batch, kinds)
    assert set(proj) == {"grad_ctx_C", "grad_ctx_C+S", "grad_ctx_S"}
    params = [p for p in model.parameters() if p.requires_grad]
    for kind in ("C", "C+S", "S"):
        with torch.enable_grad():
            grads = torch.autograd.grad(kind_loss(model, train_batch, kinds, kind), params)
        # a central difference along -grad; the step moves the parameters by 1e-3 in norm
        # (eager attention takes its softmax in float32, which bounds the usable precision)
        eps = 1e-3 / float(torch.sqrt(sum((g ** 2).sum() for g in grads)))
        with torch.no_grad():
            ends = []
            for sign in (1, -1):
                for p, g in zip(params, grads, strict=True):
                    p -= sign * eps * g
                ends.append(context_attention(model, cf_batch, cf))
                for p, g in zip(params, grads, strict=True):
                    p += sign * eps * g
        fd = ((ends[0] - ends[1]) / (2 * eps)).tolist()  # (layers,)
        scale = max(abs(v) for v in fd)  # layers whose derivative is ~0 compare absolutely
        assert proj[f"grad_ctx_{kind}"] == pytest.approx(fd, rel=2e-2, abs=1e-2 * scale)
        assert any(abs(v) > 1e-4 for v in fd)  # the check is not trivially 0 == 0


def test_no_trainable_parameters_no_projection(setup):
    model, cf_batch, cf, train_batch, kinds = setup
    for p in model.parameters():
        p.requires_grad_(False)
    assert gradient_projections(model, cf_batch, cf, train_batch, kinds) == {}
    for p in model.parameters():
        p.requires_grad_(True)
