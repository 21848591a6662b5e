"""Dotted-key overrides on frozen dataclass configs."""

from dataclasses import dataclass, field
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowflow.config import apply_overrides, config_from_dict, config_to_dict, flatten
from knowflow.errors import ConfigError


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
