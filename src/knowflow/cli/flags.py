"""Command-line options generated from config dataclasses: one builder for every command.

A command declares the dataclasses its options come from (`command`: its job config and the
small option classes it shares with others, `ModelOptions`, `OutOptions`, ...); every field
declared with `knowflow.config.option(default, help)` becomes `--<name>` of the field's type,
default and help (a bool whose default is True: `--no-<name>`; `bool | None`:
`--<name>/--no-<name>`; a tuple: repeatable, each value split on commas by the config; a
section declared with `flags="prefix_"` adds its fields' options with that prefix). The
command receives one config instance per dataclass: its defaults with the given options (and
`--set key=value` for the job config) applied, validated once by `config.resolve_config`. A
`ConfigError` the command raises about a field one of its options sets is shown as that
option (`--limit: must be at least 1`), unless `--set` set the field (then its key is named).

Commands are built when they run: `knowflow --help` lists them from their docstrings without
importing the configs (which import torch); a command's own `--help` builds it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from typer.core import TyperCommand, TyperGroup

from knowflow.errors import ConfigError

SET_HELP = "Override a config field: key=value (repeatable)."


@dataclasses.dataclass(frozen=True)
class Flag:
    """One option: `--<name>` sets `keys` ((section parameter, dotted field path), ...)."""

    name: str
    keys: tuple[tuple[str, str], ...]
    tp: Any
    default: Any
    help: str
    switch: bool | None = None  # a bool's option: the value `--<name>` sets

    @property
    def opt(self) -> str:
        return "--" + self.name.replace("_", "-")


def _optional(tp: Any) -> Any:
    """`X | None` -> X; any other type as it is."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    return tp


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _fields(cls: type, param: str, prefix: str = "", path: str = "") -> list[Flag]:
    """The options of `cls`'s fields (and of its flagged sections), one per field."""
    hints = typing.get_type_hints(cls)
    found: list[Flag] = []
    for f in dataclasses.fields(cls):
        meta, tp = f.metadata, hints[f.name]
        if "flags" in meta:
            found += _fields(tp, param, prefix + meta["flags"], f"{path}{f.name}.")
            continue
        if "help" not in meta and "flag" not in meta:
            continue
        default, name = _default(f), meta.get("flag") or prefix + f.name
        switch = None
        if tp is bool:
            switch = not default
            if "flag" not in meta and default:
                name = "no_" + name
        found.append(Flag(name, ((param, path + f.name),), tp, default, meta.get("help", ""),
                          switch))
    return found


def flags_of(sections: dict[str, type]) -> list[Flag]:
    """Every option of `sections` ({parameter: dataclass}); fields that name one option are
    set by it together, with the first one's help."""
    merged: dict[str, Flag] = {}
    for param, cls in sections.items():
        for flag in _fields(cls, param):
            if flag.name in merged:
                first = merged[flag.name]
                flag = dataclasses.replace(first, keys=first.keys + flag.keys,
                                           help=first.help or flag.help)
            merged[flag.name] = flag
    return list(merged.values())


def _cli_type(tp: Any) -> Any:
    """What click parses for a field of type `tp` (the config parses the rest)."""
    tp = _optional(tp)
    origin = typing.get_origin(tp)
    if origin is tuple:
        item = (typing.get_args(tp) or (str,))[0]
        return list[Path] if item is Path else list[str]
    if origin is Literal or origin in (typing.Union, types.UnionType):
        return str
    return tp


def _parameter(flag: Flag) -> inspect.Parameter:
    """The option typer reads: the field's default shown (and used only to tell whether
    the option was given, `_given`)."""
    if flag.switch is not None:
        tp, default, decl = bool, False, (flag.opt,)
    elif _optional(flag.tp) is bool:  # bool | None: --name/--no-name
        tp, default, decl = bool | None, flag.default, (f"{flag.opt}/--no-{flag.opt[2:]}",)
    else:
        tp, decl = _cli_type(flag.tp), (flag.opt,)
        default = flag.default
        if default is dataclasses.MISSING:
            default = inspect.Parameter.empty  # a required option
        elif isinstance(default, tuple):
            default = list(default) or None
        elif default is not None and not isinstance(default, (int, float, str, Path)):
            default = str(default)
        if default is None:
            tp = tp | None
    return inspect.Parameter(flag.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[tp, typer.Option(*decl, help=flag.help)])


def _given(context: typer.Context, name: str) -> bool:
    """Whether option `name` was given (else its default shows)."""
    source = context.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def _value(flag: Flag, value: Any) -> Any:
    """The value an option given on the command line sets its fields to."""
    if flag.switch is not None:
        return flag.switch
    if isinstance(value, list) and _cli_type(flag.tp) == list[str]:
        return ",".join(value)  # each value may itself be comma-separated
    return value


@dataclasses.dataclass(frozen=True)
class Command:
    """A command whose options come from `sections` (a function returning {parameter:
    dataclass}, called when the command is built). `job`: the parameter whose config `--set`
    overrides (with `sets` its help; without a job, the command's `sets` parameter receives
    them); `job_if_given`: the job config is None unless an option or `--set` sets it (the
    entry point's own then applies, e.g. a resumed run's)."""

    fn: Callable
    sections: Callable[[], dict[str, type]]
    job: str | None = None
    sets: str | None = None
    job_if_given: bool = False

    def __call__(self, *args, **kwargs):  # the command itself, called as Python
        return self.fn(*args, **kwargs)

    def build(self) -> Callable:
        """The function typer reads: the command's own parameters (arguments), then one per
        option, then `--set`."""
        sections = self.sections()
        flags = flags_of(sections)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(self.fn, eval_str=True).parameters.values()
               if p.name not in sections and p.name != "sets"]
        params = own + [_parameter(f) for f in flags]
        if self.sets is not None:
            params.append(inspect.Parameter("set_", inspect.Parameter.KEYWORD_ONLY, default=None,
                                            annotation=Annotated[list[str] | None, typer.Option(
                                                "--set", help=self.sets)]))

        params.append(inspect.Parameter("typer_context", inspect.Parameter.KEYWORD_ONLY,
                                        annotation=typer.Context))

        @functools.wraps(self.fn)
        def run(*, typer_context: typer.Context, **kwargs: Any) -> Any:
            if typer_context.invoked_subcommand:
                return None  # a group's subcommand runs instead
            sets = kwargs.pop("set_", None) or []
            given: dict[str, dict[str, Any]] = {name: {} for name in sections}
            for flag in flags:
                value = kwargs.pop(flag.name)
                if _given(typer_context, flag.name) and (flag.switch is None or value):
                    for param, key in flag.keys:
                        given[param][key] = _value(flag, value)
            with named_as_flags(flags, sets):
                configs = {name: self._resolve(name, cls, given[name], sets)
                           for name, cls in sections.items()}
                if self.job is None and self.sets is not None:  # the command applies them
                    configs["sets"] = sets
                return self.fn(**kwargs, **configs)

        del run.__wrapped__  # typer reads the signature below, not the command's
        run.__signature__ = inspect.Signature(params)
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    def _resolve(self, name: str, cls: type, given: dict[str, Any], sets: list[str]) -> Any:
        """`cls` with the given options (its required ones first), then `--set` for the job
        config, validated once."""
        from knowflow.config import resolve_config

        if name == self.job and self.job_if_given and not given and not sets:
            return None
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        base = cls(**{key: given.pop(key) for key in required}) if required else None
        return resolve_config(cls, base, given, sets if name == self.job else None)


def command(sections: Callable[[], dict[str, type]], *, job: str | None = None,
            sets: str | None = None, job_if_given: bool = False
            ) -> Callable[[Callable], Command]:
    """Declare a command's option classes (see `Command`)."""
    return lambda fn: Command(fn, sections, job, sets, job_if_given)


def _options_of_fields(flags: list[Flag]) -> dict[str, str]:
    """{dotted field: the option that sets it}, and a field's bare name where only one option
    sets a field of that name (the name a library check may raise)."""
    by_field: dict[str, str] = {}
    leaves: dict[str, set[str]] = {}
    for flag in flags:
        for _, key in flag.keys:
            by_field[key] = flag.opt
            leaves.setdefault(key.rsplit(".", 1)[-1], set()).add(flag.opt)
    for leaf, opts in leaves.items():
        if len(opts) == 1:
            by_field.setdefault(leaf, next(iter(opts)))
    return by_field


@contextlib.contextmanager
def named_as_flags(flags: list[Flag], sets: list[str]) -> Iterator[None]:
    """A `ConfigError` about a field an option of `flags` sets is raised again naming the
    option; a field `sets` ("key=value") gave, itself or in its section, keeps its key."""
    by_field = _options_of_fields(flags)
    set_keys = [s.split("=", 1)[0].strip() for s in sets]
    try:
        yield
    except ConfigError as exc:
        if exc.field not in by_field or any(exc.field == key or exc.field.startswith(key + ".")
                                            for key in set_keys):
            raise
        raise ConfigError(exc.message, by_field[exc.field], exc.hint) from None


def _lazy(base: type, spec: Command, name: str, guard: Callable[[Callable], Callable]
          ) -> type:
    """A click command (or group) class whose parameters and callback are `spec`'s (run
    inside `guard`), built on first use (parsing its arguments, showing its help), not when
    its group lists it."""

    def real(self) -> TyperCommand:
        built = self.__dict__.get("_built")
        if built is None:
            app = typer.Typer(add_completion=False)
            app.command(name)(guard(spec.build()))
            built = self.__dict__["_built"] = typer.main.get_command(app)
        return built

    def ignore(self, value) -> None:
        """click's constructor sets the placeholder's (no parameters, an empty callback)."""

    return type(f"Lazy{base.__name__}", (base,), {
        "spec": spec,
        "params": property(lambda self: real(self).params, ignore),
        "callback": property(lambda self: real(self).callback, ignore),
    })


def _placeholder(spec: Command) -> Callable:
    def placeholder() -> None:
        return None

    placeholder.__doc__ = spec.fn.__doc__
    return placeholder


def add(app: typer.Typer, name: str, spec: Command, guard: Callable[[Callable], Callable]
        ) -> None:
    """Register `spec` as `app`'s command `name`, run inside `guard`."""
    app.command(name, cls=_lazy(TyperCommand, spec, name, guard))(_placeholder(spec))


def group(spec: Command, guard: Callable[[Callable], Callable], **kwargs: Any) -> typer.Typer:
    """A command group whose own options (used when no subcommand is named) are `spec`'s."""
    app = typer.Typer(cls=_lazy(TyperGroup, spec, "group", guard),
                      invoke_without_command=True, add_completion=False, **kwargs)
    app.callback()(_placeholder(spec))
    return app
