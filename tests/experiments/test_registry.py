"""experiments.registry: every experiment module registers exactly once, with a config class
that builds and validates, and an unknown name is refused naming the known ones."""

import ast
import dataclasses
from pathlib import Path

import pytest

import knowflow.experiments
from knowflow.errors import ConfigError
from knowflow.experiments import registry
from knowflow.experiments.registry import get_experiment, list_experiments, register


def _registered_in_source() -> set[str]:
    """The names passed to `@register(...)` in the experiments package's modules."""
    names = set()
    for path in Path(knowflow.experiments.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return names


def test_every_experiment_is_listed_once_in_name_order():
    names = [e.name for e in list_experiments()]
    assert names == sorted(_registered_in_source())
    assert {"cpi-toy", "ocr-toy", "inversion-tiny", "sft"} <= set(names)
    for exp in list_experiments():
        assert get_experiment(exp.name) is exp
        assert dataclasses.is_dataclass(exp.config_cls) and exp.description.strip()
        exp.config_cls().validate()  # the defaults are a valid run
        assert callable(exp.run) and callable(exp.plot)
        assert all(isinstance(c, str) for c in exp.columns)


def test_an_unknown_name_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError) as err:
        get_experiment("cpi_toy")
    message = str(err.value)
    assert "unknown experiment 'cpi_toy'" in message
    for exp in list_experiments():
        assert exp.name in message


def test_registering_a_name_twice_fails_and_a_new_name_is_found(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        n: int = 1

    def plot(run_dir):
        return []

    @register("zz-test", Cfg, plot, "a test experiment", columns=("n",))
    def run(cfg, out_dir):
        return {"n": cfg.n}

    exp = get_experiment("zz-test")
    assert (exp.config_cls, exp.run, exp.plot, exp.columns) == (Cfg, run, plot, ("n",))
    assert [e.name for e in list_experiments()][-1] == "zz-test"
    with pytest.raises(ValueError, match="'cpi-toy' registered twice"):
        register("cpi-toy", Cfg, plot, "again")(run)
