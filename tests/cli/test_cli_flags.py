"""Options generated from configs (`cli.common.ConfigFlag`): each flag that maps one to one to
config fields names real fields, parses to their types, shows their defaults, and sets exactly
those fields — checked against the configs themselves, which the CLI does not import until a
command runs."""

from __future__ import annotations

import dataclasses
import types
import typing

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.cli import eval as eval_cli
from knowflow.cli import sft as sft_cli
from knowflow.config import apply_overrides
from knowflow.evaluation.options import EvalConfig
from knowflow.train.criticality import CurateConfig
from knowflow.train.sft_job import SFTJobConfig

runner = CliRunner()
COMMANDS = [(SFTJobConfig, (*sft_cli.SFT_FLAGS, *sft_cli.DEVICE_FLAGS)),
            (EvalConfig, (*eval_cli.PROMPT_FLAGS, *eval_cli.BATCH_FLAGS,
                          *eval_cli.DECODING_FLAGS)),
            (CurateConfig, sft_cli.CURATE_FLAGS)]


def field_of(cls, key: str):
    """(the dataclass field, its type, its default) at dotted `key` of `cls`."""
    *sections, name = key.split(".")
    for section in sections:
        cls = typing.get_type_hints(cls)[section]
    (f,) = [f for f in dataclasses.fields(cls) if f.name == name]
    default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    return f, typing.get_type_hints(cls)[name], default


def kinds(tp) -> set:
    """The command-line types a config field of type `tp` takes: its own; str for a Literal
    of names or a tuple (comma-separated, parsed by the config); each member of a union."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return {str}
    if origin is tuple:
        return {str}
    if origin in (typing.Union, types.UnionType):
        return set().union(*(kinds(t) for t in typing.get_args(tp) if t is not type(None)))
    return {tp}


@pytest.mark.parametrize("cls,flags", COMMANDS, ids=["sft", "eval", "curate"])
def test_every_flag_names_fields_of_its_type_and_default(cls, flags):
    assert len(flags) >= 4  # a guard: the tables are the commands' flags
    for flag in flags:
        for key in flag.keys:
            _, tp, default = field_of(cls, key)
            if flag.switch is not None:  # a switch sets the bool to what its default is not
                assert bool in kinds(tp) and flag.switch is not default, key
            else:
                assert flag.type in kinds(tp), (key, flag.type, tp)
            if flag.default is not None:  # the default --help shows is the config's
                parsed = apply_overrides(cls(), {key: flag.default})
                assert str(getattr(parsed, key)) == str(default) or \
                    float(flag.default) == default, (key, flag.default, default)
            else:
                assert default is None or flag.switch is not None or cls is SFTJobConfig, key


def test_sft_flags_become_exactly_their_overrides(monkeypatch):
    seen = {}

    def fake_run(name, overrides, **kwargs):
        seen["overrides"] = overrides
        raise SystemExit(0)

    monkeypatch.setattr("knowflow.experiments.runner.run_experiment", fake_run)
    res = runner.invoke(app, ["sft", "--lr", "0.001", "--seed", "3", "--prompt-format", "plain",
                              "--no-track", "--curate-keep-out", "--set", "sft.lr=0.5"])
    assert res.exit_code == 0, res.output
    assert seen["overrides"] == ["sft.lr=0.001", "sft.prompt_format=plain",
                                 "track.prompt_format=plain", "sft.seed=3", "mixture.seed=3",
                                 "tracking=False", "curate.readmit=False", "sft.lr=0.5"]
    cfg = apply_overrides(SFTJobConfig(), seen["overrides"])
    assert (cfg.sft.lr, cfg.mixture.seed, cfg.tracking, cfg.curate.readmit) == (0.5, 3, False,
                                                                               False)
    runner.invoke(app, ["sft"])
    assert seen["overrides"] == []  # nothing given: the config's defaults stand


def test_eval_flags_build_the_config_they_name(monkeypatch):
    seen = {}

    def fake_validate(cfg):  # the config the command built, before any work
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr(EvalConfig, "validate", fake_validate)
    res = runner.invoke(app, ["eval", "--no-context", "--limit", "3", "--alpha", "0,1",
                              "--no-known-filter", "--batch-size", "2"])
    assert res.exit_code == 0, res.output
    assert seen["cfg"] == EvalConfig(use_context=False, limit=3, alpha="0,1", known_filter=False,
                                     batch_size=2, beta="0.3")
    runner.invoke(app, ["eval"])
    assert dataclasses.replace(seen["cfg"], alpha=1.0, beta=0.3) == EvalConfig()
