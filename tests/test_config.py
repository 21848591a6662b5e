"""Dotted-key overrides on frozen dataclass configs."""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowflow.config import (
    apply_overrides,
    config_from_dict,
    config_to_dict,
    flatten,
    option,
    validate_config,
)
from knowflow.errors import ConfigError
from knowflow.experiments.registry import get_experiment
from knowflow.experiments.runner import build_config


@dataclass(frozen=True)
class Inner:
    lr: float = 0.1
    steps: int = 10
    kind: Literal["a", "b"] = "a"


@dataclass(frozen=True)
class Outer:
    seed: int = 0
    flag: bool = False
    names: tuple[str, ...] = ("x", "y")
    limit: int | None = None
    inner: Inner = field(default_factory=Inner)


def test_overrides_parse_to_field_types():
    cfg = apply_overrides(Outer(), ["inner.lr=3e-4", "inner.steps=200", "flag=true",
                                    "names=a,b,c", "limit=none", "inner.kind=b"])
    assert cfg.inner == Inner(lr=3e-4, steps=200, kind="b")
    assert cfg.flag is True and cfg.names == ("a", "b", "c") and cfg.limit is None
    assert apply_overrides(Outer(), {"limit": "7"}).limit == 7


@pytest.mark.parametrize("override, message", [
    ("inner.nope=1", "unknown key"), ("nope=1", "unknown key"), ("inner.steps=1.5", "int"),
    ("inner.kind=c", "not one of"), ("flag=maybe", "bool"), ("seed", "key=value"),
    ("seed.x=1", "is a value"),
])
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(Outer(), [override])


@given(seed=st.integers(-10**6, 10**6), lr=st.floats(1e-6, 10), steps=st.integers(0, 10**5))
def test_round_trip_through_dict(seed, lr, steps):
    cfg = Outer(seed=seed, inner=Inner(lr=lr, steps=steps))
    assert config_from_dict(Outer, config_to_dict(cfg)) == cfg
    flat = flatten(config_to_dict(cfg))
    assert apply_overrides(Outer(), {k: v for k, v in flat.items() if k != "names"}) == cfg


@dataclass(frozen=True)
class Leaf:
    rate: float = 0.5

    def validate(self) -> None:  # names its field without a prefix, as sections do
        if not 0 < self.rate < 1:
            raise ConfigError("must lie in (0, 1)", "rate")


@dataclass(frozen=True)
class Middle:
    leaf: Leaf = field(default_factory=Leaf)
    eval_every: int = 5
    steps: int = 10


@dataclass(frozen=True)
class Top:
    middle: Middle = field(default_factory=Middle)
    seed: int = 0


@pytest.mark.parametrize("override,path", [
    ({"middle.leaf.rate": 2.0}, "middle.leaf.rate"),
    ({"middle.eval_every": 20}, "middle.eval_every"),
    ({"seed": -1}, "seed"),
    ({"middle.leaf.rate": float("nan")}, "middle.leaf.rate"),
])
def test_validator_walks_nested_sections_and_names_the_full_path(override, path):
    from knowflow.config import validate_config

    validate_config(Top())
    with pytest.raises(ConfigError) as err:
        validate_config(apply_overrides(Top(), override) if "nan" not in str(override)
                        else Top(Middle(Leaf(float("nan")))))
    assert err.value.field == path
    assert str(err.value).startswith(f"config field '{path}'")


def _lr_paths(cfg, prefix: str = "") -> list[str]:
    import dataclasses

    out = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += _lr_paths(value, f"{prefix}{f.name}.")
        elif f.name == "lr":
            out.append(prefix + f.name)
    return out


def test_every_experiment_names_a_bad_nested_lr_by_its_dotted_path():
    """`knowflow run X --set sft.lr=-1` says "config field 'sft.lr'" (not 'lr')."""
    from knowflow.experiments.registry import list_experiments
    from knowflow.experiments.runner import build_config

    nested = []
    for exp in list_experiments():
        for path in _lr_paths(exp.config_cls()):
            if "." not in path:
                continue
            nested.append(path)
            with pytest.raises(ConfigError) as err:
                build_config(exp.name, [f"{path}=-1"])
            assert err.value.field == path, exp.name
    assert "sft.lr" in nested and "finetune.lr" in nested


def test_declared_field_constraints():
    """`config.option`: the constraint is declared on the field and checked by
    validate_config with the field's dotted path, for tuples element by element; None (an
    optional field left unset) passes."""
    @dataclass(frozen=True)
    class Inner:
        share: float = option(0.5, ge=0, lt=1)
        mode: str = option("a", one_of=("a", "b"))

    @dataclass(frozen=True)
    class Outer:
        inner: Inner = field(default_factory=Inner)
        every: tuple[int, ...] = option((1, 2), ge=1)
        cut: float | None = option(None, gt=0)

    validate_config(Outer())
    cases = {"inner.share=1": ("inner.share", "must lie in [0, 1), got 1.0"),
             "inner.share=-0.5": ("inner.share", "must lie in [0, 1), got -0.5"),
             "inner.mode=c": ("inner.mode", "'c' is not one of a, b"),
             "every=1,0": ("every", "must be at least 1, got 0"),
             "cut=0": ("cut", "must be positive, got 0.0")}
    for override, (name, message) in cases.items():
        with pytest.raises(ConfigError) as err:
            validate_config(apply_overrides(Outer(), [override]))
        assert err.value.field == name and message in str(err.value), (override, err.value)
    validate_config(apply_overrides(Outer(), ["cut=0.1", "inner.share=0"]))  # bounds hold


@pytest.mark.parametrize("experiment, old, new", [
    ("cpi-toy", "part.dynamic_every", "dynamic.every"),
    ("inversion-tiny", "curate_threshold", "dynamic.threshold"),
])
def test_a_renamed_key_names_its_new_key(experiment, old, new):
    """The dynamic-curation keys became one `dynamic` section: `--set` with an old key, or a
    saved config.json holding it, is refused naming the new key (not 'unknown key')."""
    with pytest.raises(ConfigError, match=rf"'{old}': renamed to {new}; set {new} instead"):
        build_config(experiment, [f"{old}=5"])
    section, _, name = old.rpartition(".")
    saved = {section: {name: 5}} if section else {name: 5}
    with pytest.raises(ConfigError, match=rf"renamed to {new}"):
        config_from_dict(get_experiment(experiment).config_cls, saved)
    assert getattr(build_config(experiment, [f"{new}=5"]).dynamic, new.split(".")[1]) == 5


def test_tuple_items_keep_a_named_list_and_paths_parse():
    """A tuple field's text splits on commas, but `name:1,-1` (knockout's explicit positions)
    stays one item; a Path field parses to a Path."""
    @dataclass(frozen=True)
    class Cfg:
        source: tuple[str, ...] = ("subject",)
        out: Path | None = None

    cfg = apply_overrides(Cfg(), {"source": "pos:1,-1,subject,pos:0", "out": "runs/x"})
    assert cfg.source == ("pos:1,-1", "subject", "pos:0") and cfg.out == Path("runs/x")


def test_an_error_about_an_option_starts_with_the_option():
    assert str(ConfigError("must be at least 1", "--limit")) == "--limit: must be at least 1"
    assert str(ConfigError("must be at least 1", "limit")) == \
        "config field 'limit': must be at least 1"
    assert ConfigError("x", "--limit").under("sft.").field == "--limit"


def test_option_declares_the_command_line_name_and_help():
    @dataclass(frozen=True)
    class Cfg:
        every: int = option(20, "Evaluate every N steps.", ge=1)
        tracking: bool = option(True, "Do not track.", flag="no_track")
        quiet: int = 0

    meta = {f.name: dict(f.metadata) for f in dataclasses.fields(Cfg)}
    assert meta["every"]["help"] == "Evaluate every N steps." and "bounds" in meta["every"]
    assert meta["tracking"]["flag"] == "no_track" and meta["quiet"] == {}
