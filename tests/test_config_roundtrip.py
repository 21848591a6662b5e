"""Every line `knowflow config NAME` prints is accepted back by `--set` and changes nothing
(`parts=["inversion"]`, `optimizer="gd"` and `dtype="float32"` among them), and
numbers that are not whole are never cut to an integer field (`seed=5e-1` became 0)."""

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.config import config_to_dict
from knowflow.errors import ConfigError
from knowflow.experiments.registry import list_experiments
from knowflow.experiments.runner import build_config, default_config_dict

runner = CliRunner()


@pytest.mark.parametrize("name", sorted(e.name for e in list_experiments()))
def test_every_printed_line_parses_back_to_the_same_config(name):
    out = runner.invoke(app, ["config", name])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if "=" in line]
    assert lines
    rebuilt = build_config(name, lines)
    assert config_to_dict(rebuilt) == default_config_dict(name)


@pytest.mark.parametrize("value", ["5e-1", "2.5e0", "2.5", "1e-3"])
def test_an_integer_field_refuses_a_number_that_is_not_whole(value):
    with pytest.raises(ConfigError, match="seed"):
        build_config("cpi-toy", [f"seed={value}"])


def test_an_integer_field_takes_whole_numbers_in_any_spelling():
    for value in ("3", "3.0", "3e0", "30e-1"):
        assert build_config("cpi-toy", [f"seed={value}"]).seed == 3


def test_json_strings_and_lists_from_knowflow_config_parse():
    cfg = build_config("cpi-toy", ['parts=["inversion"]', 'finetune.optimizer="gd"'])
    assert cfg.parts == ("inversion",) and cfg.finetune.optimizer == "gd"
