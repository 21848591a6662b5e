"""Frozen-dataclass configs and `--set key=value` overrides.

Every experiment has one frozen dataclass config (nested dataclasses allowed). Overrides name a
field by its dotted path (`finetune.lr=0.5`); the value is parsed to the field's annotated type.
An unknown key or an unparsable value is a `ConfigError` naming the key. `validate_config`
checks a whole config: the generic rules every config obeys (finite numbers, `eval_every` no
larger than `steps`, at least one worker or thread, seeds not negative, learning rates
positive), then the constraints declared on the fields themselves (`option`: a range or a
set of names, checked for every config that has the field), then each section's own
`validate()` for what spans several fields, with every error naming the field's full dotted
path (`sft.lr`).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from knowflow.errors import ConfigError, DataError
from knowflow.store.readers import decode_json

T = TypeVar("T")


def config_to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _parse(value: Any, tp: Any, key: str) -> Any:
    """Coerce `value` (a string from the command line, or a JSON value) to type `tp`. What
    `knowflow config` prints parses back: a JSON string ("gd") or list (["a", "b"])."""
    origin = get_origin(tp)
    value = _json_literal(value)
    if origin in (typing.Union, types.UnionType):
        options = get_args(tp)
        if type(None) in options and (value is None or value in ("none", "None", "null")):
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _parse(value, option, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"cannot parse {value!r} as {tp}", key)
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(f"{value!r} is not one of {', '.join(map(str, choices))}", key)
        return value
    if origin is tuple:
        if isinstance(value, str):
            value = _items(value)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"expected a list, got {_json_kind(value)}", key,
                              'give a JSON list (["a", "b"]) or comma-separated values')
        args = get_args(tp)
        item_tp = args[0] if args else str
        return tuple(_parse(v.strip() if isinstance(v, str) else v, item_tp, key) for v in value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError("expected a section, got a value", key)
        return config_from_dict(tp, value, prefix=f"{key}.")
    try:
        if tp is bool:
            if isinstance(value, bool):
                return value
            low = str(value).lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if tp is int:
            number = float(value) if isinstance(value, str) and \
                any(c in value.lower() for c in ".e") else value  # 1e3, 3.0 (not 5e-1, 2.5)
            if isinstance(number, bool) or (isinstance(number, float) and
                                            not number.is_integer()):
                raise ValueError(value)
            return int(number)
        if tp is float:
            number = float(value)
            if isinstance(value, bool) or not math.isfinite(number):
                raise ConfigError(f"{str(value)!r} is not a finite number", key,
                                  "give an ordinary number such as 0.001")
            return number
        if tp is str or tp is Path:
            if isinstance(value, dict | list):
                raise ConfigError(f"expected a string, got {_json_kind(value)}", key)
            return tp(value)
    except (TypeError, ValueError, OverflowError):
        name = getattr(tp, "__name__", str(tp))
        shown = value if not isinstance(value, (str, int)) or len(str(value)) <= 40 else \
            f"{str(value)[:20]}... ({len(str(value))} characters)"
        raise ConfigError(f"cannot parse {shown!r} as {name}", key) from None
    return value


def _items(text: str) -> list[str]:
    """A tuple field's comma-separated text as its items; an item `name:a,b` keeps the numbers
    after it (`pos:1,-1,subject` is two items: `pos:1,-1` and `subject`)."""
    items: list[str] = []
    for piece in (p.strip() for p in text.strip("()[] ").split(",")):
        if items and ":" in items[-1] and piece.lstrip("-").isdigit():
            items[-1] += "," + piece
        elif piece:
            items.append(piece)
    return items


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words ("a number", "an object")."""
    kinds = ((bool, "true or false"), (int | float, "a number"), (str, "a string"),
             (dict, "an object"), (list | tuple, "a list"), (type(None), "null"))
    return next((f"{name} ({value!r})" if name == "a number" else name
                 for t, name in kinds if isinstance(value, t)), type(value).__name__)


def _json_literal(value: Any) -> Any:
    """A command-line string that is a JSON string or list literal, decoded; else as given."""
    if isinstance(value, str) and len(value) >= 2 and (value[0], value[-1]) in (('"', '"'),
                                                                                ("[", "]")):
        try:
            decoded = decode_json(value, "--set", strict=False)
        except DataError:
            return value
        if isinstance(decoded, str) or (isinstance(decoded, list) and
                                        all(isinstance(v, str | int | float) for v in decoded)):
            return decoded
    return value


def refuse_renamed(cls: type, keys) -> None:
    """A key `cls` has renamed (its class attribute `RENAMED`: {old dotted key: new}, or
    {old: (new, how its values map)}) is a ConfigError naming the new key, not an unknown
    key."""
    renamed = getattr(cls, "RENAMED", {})
    for key in keys:
        if key in renamed:
            new, how = renamed[key] if isinstance(renamed[key], tuple) else (renamed[key], "")
            raise ConfigError(f"renamed to {new}", key,
                              f"set {new} instead (--set {new}=...){how}")


def config_from_dict(cls: type[T], data: dict, prefix: str = "") -> T:
    """Build `cls` from a (possibly partial) dict, e.g. a saved config.json."""
    if not prefix and isinstance(data, dict):
        refuse_renamed(cls, flatten(data))
    hints = _field_types(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a section (a JSON object), got {type(data).__name__}",
                          prefix.rstrip(".") or None)
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown key (known: {', '.join(sorted(names))})",
                          prefix + unknown[0])
    kwargs = {k: _parse(v, hints[k], prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def apply_overrides(cfg: T, overrides: list[str] | dict[str, Any]) -> T:
    """Return a copy of `cfg` with dotted-path overrides applied.

    `overrides` is a list of "key=value" strings (the CLI form) or a {key: value} dict.
    """
    items = overrides.items() if isinstance(overrides, dict) else [_split(o) for o in overrides]
    for key, value in items:
        refuse_renamed(type(cfg), [key])
        cfg = _set(cfg, key.split("."), value, key)
    return cfg


def resolve_config(cls: type[T], config: T | None = None,
                   *overrides: list[str] | dict[str, Any] | None) -> T:
    """The config a run uses: `config` (default: `cls()`) with each of `overrides` applied in
    turn (`apply_overrides`), then validated once. Every entry point and command resolves its
    config here."""
    if config is not None and not isinstance(config, cls):
        raise ConfigError(f"expected a {cls.__name__}, got a {type(config).__name__}", "config")
    cfg = config if config is not None else cls()
    for given in overrides:
        cfg = apply_overrides(cfg, given or {})
    validate_config(cfg)
    return cfg


def _split(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key=value")
    key, value = item.split("=", 1)
    if not key.strip():
        raise ConfigError(f"override {item!r} has an empty key")
    return key.strip(), value.strip()


def _set(cfg: Any, path: list[str], value: Any, full_key: str) -> Any:
    names = {f.name for f in dataclasses.fields(cfg)}
    head = path[0]
    if head not in names:
        raise ConfigError(f"unknown key (known here: {', '.join(sorted(names))})", full_key)
    current = getattr(cfg, head)
    if len(path) > 1:
        if not dataclasses.is_dataclass(current):
            raise ConfigError(f"'{head}' is a value, not a section", full_key)
        return dataclasses.replace(cfg, **{head: _set(current, path[1:], value, full_key)})
    tp = _field_types(type(cfg))[head]
    if dataclasses.is_dataclass(current):
        if isinstance(value, str):
            try:
                value = decode_json(value, "--set", strict=False)
            except DataError:  # damaged JSON, a 4300-digit number, ...
                value = None
        if not isinstance(value, dict) or not value:
            raise ConfigError("is a section, not a value" if not isinstance(value, dict) else
                              "an empty section sets nothing (it would not reset the section)",
                              full_key, f"set its fields with dotted keys ({full_key}.NAME="
                              "VALUE; see `knowflow config`)")
        try:  # a JSON object sets the fields it names; the others stay as they are
            section = apply_overrides(current, flatten(value))
        except ConfigError as exc:
            raise exc.under(full_key + ".") from None
        return dataclasses.replace(cfg, **{head: section})
    return dataclasses.replace(cfg, **{head: _parse(value, tp, full_key)})


def flatten(cfg_dict: dict, prefix: str = "", sep: str = ".") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: every settable key with its value (nested dicts joined
    with `sep`; lists stay as they are)."""
    out: dict[str, Any] = {}
    for k, v in cfg_dict.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}{sep}", sep))
        else:
            out[f"{prefix}{k}"] = v
    return out


def require(condition: bool, field: str, message: str) -> None:
    """Raise a ConfigError for `field` unless `condition` holds (used by validate())."""
    if not condition:
        raise ConfigError(message, field)


# Generic rules every config obeys, by field name: (test, what is wrong, applies to floats).
_MIN_ONE = (lambda v: v >= 1, "must be at least 1", False)
MAX_PROCESSES = 256   # workers and threads: a bound far above any machine knowflow runs on
MAX_SEED = 2**32 - 1  # numpy's
MAX_INT = 2**63 - 1   # no count, size or step of any config comes near it
_NAMED_RULES: dict[str, tuple[Any, str, bool]] = {
    "threads": _MIN_ONE, "workers": _MIN_ONE,
    "seed": (lambda v: v >= 0, "must not be negative", False),
    "seeds": (lambda v: v >= 0, "must not be negative", False),
    "lr": (lambda v: v > 0, "must be positive", True),
}
_UPPER_RULES: dict[str, int] = {"threads": MAX_PROCESSES, "workers": MAX_PROCESSES,
                                "seed": MAX_SEED, "seeds": MAX_SEED}


@dataclasses.dataclass(frozen=True)
class Bounds:
    """A field's declared constraint: a range (ge/gt below, le/lt above) or a set of names."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    one_of: tuple[str, ...] | None = None

    def holds(self, v: Any) -> bool:
        if self.one_of is not None:
            return v in self.one_of
        return not ((self.ge is not None and v < self.ge) or (self.gt is not None and v <= self.gt)
                    or (self.le is not None and v > self.le)
                    or (self.lt is not None and v >= self.lt))

    def message(self, v: Any) -> str:
        if self.one_of is not None:
            return f"{v!r} is not one of {', '.join(self.one_of)}"
        low, high = (self.ge, self.gt), (self.le, self.lt)
        if high == (None, None):
            return ("must not be negative" if self.ge == 0 else f"must be at least {self.ge:g}"
                    ) if self.ge is not None else ("must be positive" if self.gt == 0 else
                                                   f"must be greater than {self.gt:g}")
        if low == (None, None):
            return f"must be at most {self.le:g}" if self.le is not None else \
                f"must be below {self.lt:g}"
        lo = f"[{self.ge:g}" if self.ge is not None else f"({self.gt:g}"
        hi = f"{self.le:g}]" if self.le is not None else f"{self.lt:g})"
        return f"must lie in {lo}, {hi}"


def option(default: Any = dataclasses.MISSING, help: str | None = None, *,
           factory: Any = dataclasses.MISSING, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None, one_of: Any = None,
           flags: str | None = None, flag: str | None = None) -> Any:
    """A config field, declared with what the command line and the checks need to know.

    `help`: the field is a command-line option of every command built from its config,
    `--<name>` (underscores as dashes; a bool whose default is True: `--no-<name>`; a
    `bool | None`: `--<name>/--no-<name>`), of the field's type and default, with this help
    (`knowflow.cli.flags`); without it, the field is set with `--set` only. A field without a
    default is a required option. A constraint (`ge`/`gt`/`le`/`lt`: a range; `one_of`: a set
    of names) is checked by `validate_config` (None passes: an optional field left unset), and
    on each element of a tuple field, e.g. `fraction: float = option(0.25, "...", gt=0, lt=1)`.
    `flags`: a nested section's prefix for its fields' options ("" for none: `--lr` sets
    `sft.lr`; "track_": `--track-every` sets `track.every`); a section without it has none.
    `flag`: the option's whole name where it cannot be the field's own (a field that run
    folders save under its name), the section's prefix not added; a bool's `--<flag>` sets it
    to the opposite of its default (`tracking` = True: `flag="no_track"`). Fields of one
    command that name the same option are all set by it (`--seed` sets `sft.seed` and
    `mixture.seed`); a field with `flag` and no help joins the option another field
    declares."""
    metadata: dict[str, Any] = {}
    if help is not None:
        metadata["help"] = help
    if flags is not None:
        metadata["flags"] = flags
    if flag is not None:
        metadata["flag"] = flag
    if (ge, gt, le, lt, one_of) != (None,) * 5:
        metadata["bounds"] = Bounds(ge, gt, le, lt, tuple(one_of) if one_of is not None
                                    else None)
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


def _declared_checks(cfg: Any, prefix: str) -> None:
    for f in dataclasses.fields(cfg):
        rule = f.metadata.get("bounds")
        value = getattr(cfg, f.name)
        for v in (value if isinstance(value, tuple) else (value,)) if rule else ():
            if v is not None and not rule.holds(v):
                got = "" if rule.one_of is not None else f", got {v}"
                raise ConfigError(rule.message(v) + got, prefix + f.name)


def _generic_checks(cfg: Any, prefix: str) -> None:
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    for name, value in values.items():
        numbers = value if isinstance(value, tuple) else (value,)
        for v in numbers:
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{v!r} is not a finite number", prefix + name,
                                  "give an ordinary number such as 0.001")
            rule = _NAMED_RULES.get(name)
            number = isinstance(v, int) or (rule is not None and rule[2] and
                                             isinstance(v, float))
            if rule and number and not isinstance(v, bool) and not rule[0](v):
                raise ConfigError(f"{rule[1]}, got {v}", prefix + name)
            most = _UPPER_RULES.get(name, MAX_INT)
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) > most:
                raise ConfigError(f"must be at most {most}, got {v}", prefix + name)
    every, steps = values.get("eval_every"), values.get("steps")
    if isinstance(every, int) and isinstance(steps, int) and every > steps >= 1:
        raise ConfigError(f"{every} is larger than {prefix}steps={steps}", prefix + "eval_every",
                          f"evaluate at most every {steps} steps (or raise {prefix}steps)")
    _declared_checks(cfg, prefix)


def validate_config(cfg: Any, prefix: str = "") -> None:
    """Check `cfg` and its nested sections; errors name the full dotted path of the field.

    Sections are checked first (so `sft.lr` is reported as `sft.lr`, not as the `lr` that the
    section's own validate() names), then the generic rules, then `cfg.validate()`.
    """
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            validate_config(value, f"{prefix}{f.name}.")
    _generic_checks(cfg, prefix)
    validate = getattr(cfg, "validate", None)
    if validate is None:
        return
    try:
        if prefix and "prefix" in inspect.signature(validate).parameters:
            validate(prefix=prefix)
        else:
            validate()
    except ConfigError as exc:
        raise exc.under(prefix) from None
