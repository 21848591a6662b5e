"""The default config's pretrained checkpoints ship with knowflow: `make demo` loads them
instead of pretraining, as long as the config (and so the hash) is the one they were made
with; `pretrain.shipped=false` pretrains anyway."""

import json

import pytest

from knowflow.experiments.inversion_tiny import pretrain
from knowflow.experiments.inversion_tiny.model import TinyModelConfig
from knowflow.experiments.inversion_tiny.pretrain import (
    SHIPPED,
    PretrainConfig,
    cache_key,
    load_pretrained,
    pretrained_path,
    recall_accuracy,
)
from knowflow.experiments.inversion_tiny.world import TinyWorldConfig, make_world

SEEDS = (0, 1, 2, 3, 4)


def _key(seed, **pre):
    return cache_key(TinyWorldConfig(), TinyModelConfig(), PretrainConfig(**pre), seed)


def test_every_default_seed_has_a_shipped_checkpoint_of_its_config():
    # fails when a default changes without new checkpoints: the demo would then pretrain
    assert sorted(p.name for p in SHIPPED.iterdir()) == sorted(_key(s) for s in SEEDS)
    for seed in SEEDS:
        log = json.loads((SHIPPED / _key(seed) / "pretrain.json").read_text())
        assert log["steps"] == PretrainConfig().steps and log["reached_targets"]


def test_where_it_comes_from_is_not_part_of_the_hash():
    assert _key(0, shipped=False) == _key(0)
    assert _key(0, steps=10) != _key(0)


@pytest.fixture
def no_training(monkeypatch, tmp_path):
    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(pretrain, "pretrain_model",
                        lambda *a: calls.append(a) or (_ for _ in ()).throw(RuntimeError("x")))
    return calls


def test_the_default_config_loads_the_shipped_checkpoint_without_training(no_training):
    path = pretrained_path(TinyWorldConfig(), TinyModelConfig(), PretrainConfig(), 0)
    assert path == SHIPPED / _key(0) and not no_training


def test_shipped_false_pretrains(no_training):
    with pytest.raises(RuntimeError):
        pretrained_path(TinyWorldConfig(), TinyModelConfig(), PretrainConfig(shipped=False), 0)
    assert len(no_training) == 1


def test_a_shipped_model_recalls_the_facts_its_log_says():
    model, tok, log = load_pretrained(SHIPPED / _key(3))
    assert recall_accuracy(model, tok, make_world(TinyWorldConfig(), 3)) == log["recall"] == 1.0
