"""Options generated from configs (`knowflow.cli.flags`): every option of every command names
real fields of its config classes, parses to their type and shows their default, has a help,
and `--help` lists exactly the generated options; a given option sets exactly its fields, and
options left out leave the config's defaults."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.cli.flags import flags_of
from knowflow.config import apply_overrides
from knowflow.evaluation.options import EvalConfig
from knowflow.probes import PROBES
from knowflow.train.sft_job import SFTJobConfig

runner = CliRunner()


def _commands(command=None, path=()):
    """(path, click command) of every command built from config classes, groups included."""
    command = command or typer.main.get_command(app)
    if getattr(command, "spec", None) is not None:
        yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands())


def field_of(cls, key: str) -> tuple[dataclasses.Field, typing.Any]:
    """(the dataclass field, its type) at dotted `key` of `cls`."""
    *sections, name = key.split(".")
    for section in sections:
        cls = typing.get_type_hints(cls)[section]
    (f,) = [f for f in dataclasses.fields(cls) if f.name == name]
    return f, typing.get_type_hints(cls)[name]


def kinds(tp) -> set:
    """The command-line types a field of type `tp` takes: its own; str for a Literal, a
    union of several types or a tuple's items (repeatable, comma-separated); Path for a tuple
    of paths."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return {str}
    if origin is tuple:
        return {Path} if typing.get_args(tp)[0] is Path else {str}
    if origin in (typing.Union, types.UnionType):
        rest = [t for t in typing.get_args(tp) if t is not type(None)]
        return kinds(rest[0]) if len(rest) == 1 else {str}
    return {tp}


def test_the_walk_finds_every_command():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"eval", "sft", "curate", "augment", "run", "report", "explain", "explain fit",
            "export lm-eval"} <= names
    assert {n.split()[1] for n in names if n.startswith("probe ")} == set(PROBES)


def _python(param) -> type:
    """The Python type an option's values are parsed to (a list's items)."""
    tp = param.type_descriptor.annotation
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = args[0]
    return typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp


def _defaults(cls):
    """`cls` with its defaults (a required field given a placeholder)."""
    return cls(**{f.name: Path("x") for f in dataclasses.fields(cls)
                  if f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING})


def _get(cfg, key: str):
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_option_is_a_config_field_of_its_type_and_default(path, command):
    sections = command.spec.sections()
    flags = {f.name: f for f in flags_of(sections)}
    options = [p for p in command.params if p.param_type_name == "option"
               and p.name not in ("help", "set_")]
    assert {p.name for p in options} == set(flags), path
    for param in options:
        flag = flags[param.name]
        assert flag.help.strip(), (path, flag.opt)  # every option says what it does
        for section, key in flag.keys:
            f, tp = field_of(sections[section], key)
            assert f.default == flag.default, (path, key)  # one option, one default
            if flag.switch is not None:  # a switch sets the bool to what its default is not
                assert tp is bool and flag.switch is not f.default and not param.default, key
                continue
            assert _python(param) in kinds(tp), (path, key, param.type, tp)
            if param.required or param.default is None:
                assert f.default in (dataclasses.MISSING, None, ()), (path, key)
                continue
            shown = ",".join(map(str, param.default)) if isinstance(param.default, list) \
                else param.default  # what --help shows parses back to the field's default
            assert _get(apply_overrides(_defaults(sections[section]), {key: shown}), key) == \
                f.default, (path, key, shown)


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_lists_exactly_the_generated_options(path, command):
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    assert res.exit_code == 0, res.output
    listed = set()
    for line in res.output.splitlines():  # the first column: an option (a switch's two forms)
        first = re.match(r"│ (\*)? {0,4}(--[\w-]+(?: +--[\w-]+)?) +<", line)
        if first:
            listed |= set(first.group(2).split())
    flags = flags_of(command.spec.sections())
    tri = {f"--no-{f.opt[2:]}" for f in flags if f.switch is None and
           typing.get_origin(f.tp) in (typing.Union, types.UnionType) and
           bool in typing.get_args(f.tp)}
    expected = {f.opt for f in flags} | tri | {"--help"} | \
        ({"--set"} if command.spec.sets else set())
    assert listed == expected, path


def test_listing_the_commands_imports_no_torch():
    code = ("import sys; from typer.testing import CliRunner; from knowflow.cli import app; "
            "r = CliRunner().invoke(app, ['--help']); "
            "r2 = CliRunner().invoke(app, ['probe', '--help']); "
            "print(r.exit_code, r2.exit_code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["0", "0", "False"]


def test_sft_flags_set_exactly_their_fields(monkeypatch):
    seen = {}

    def fake_finetune(**kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr("knowflow.api.finetune", fake_finetune)
    res = runner.invoke(app, ["sft", "--lr", "0.001", "--seed", "3", "--prompt-format", "plain",
                              "--no-track", "--curate-keep-out", "--track", "cf-capitals",
                              "--track", "cf-world,cf-bio", "--set", "sft.lr=0.5"])
    assert res.exit_code == 0, res.output
    cfg = seen["config"]
    assert cfg == dataclasses.replace(
        SFTJobConfig(), tracking=False,
        sft=dataclasses.replace(SFTJobConfig().sft, lr=0.5, seed=3, prompt_format="plain"),
        mixture=dataclasses.replace(SFTJobConfig().mixture, seed=3),
        track=dataclasses.replace(SFTJobConfig().track, prompt_format="plain",
                                  suites=("cf-capitals", "cf-world", "cf-bio")),
        curate=dataclasses.replace(SFTJobConfig().curate, readmit=False))
    runner.invoke(app, ["sft", "--resume"])
    assert seen["config"] is None and seen["resume"] is True  # a resumed run's own config


def test_eval_flags_build_the_config_they_name(monkeypatch):
    seen = {}

    def fake_evaluate(model, data, *, config, **kwargs):
        seen["cfg"], seen["data"], seen["kwargs"] = config, data, kwargs
        raise SystemExit(0)

    monkeypatch.setattr("knowflow.api.evaluate", fake_evaluate)
    res = runner.invoke(app, ["eval", "--limit", "3", "--alpha", "0,1",
                              "--no-known-filter", "--batch-size", "2", "--suite", "cf-bio",
                              "--device", "cpu", "--offline", "--method", "cad"])
    assert res.exit_code == 0, res.output
    assert seen["cfg"] == EvalConfig(limit=3, alpha="0,1", known_filter=False, batch_size=2,
                                     method="cad")
    assert seen["data"] == ["cf-bio"] and seen["kwargs"]["device"] == "cpu"
    assert seen["kwargs"]["offline"] is True and seen["kwargs"]["out"] is None
    runner.invoke(app, ["eval"])
    assert seen["cfg"] == EvalConfig() and seen["data"] is None  # nothing given: defaults


def test_a_flag_names_the_option_in_errors_and_set_names_the_key():
    given = runner.invoke(app, ["probe", "knockout", "--window", "0", "--limit", "0"])
    assert "error: --limit: must be at least 1" in given.output
    sets = runner.invoke(app, ["eval", "--set", "limit=0"])
    assert sets.exit_code == 2 and "No such option: --set" in sets.output  # eval has none
    via_set = runner.invoke(app, ["sft", "--set", "sft.lr=-1"])
    assert "config field 'sft.lr': must be positive" in via_set.output


@pytest.mark.parametrize("kind,old,new", [("knockout", "sources", "source"),
                                          ("sublayer", "sublayers", "sublayer")])
def test_renamed_config_keys_are_refused_with_the_new_name(kind, old, new):
    res = runner.invoke(app, ["probe", kind, "--set", f"{old}=last"])
    assert res.exit_code == 2 and f"'{old}': renamed to {new}" in res.output
