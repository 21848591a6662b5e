"""Errors the user can fix. The CLI renders each as one line and exits with code 2.

Every message has the shape `<path or field>: <what is wrong>; <what to do>`: the first part
says where, the second what, and the hint (optional) how to fix it.
"""

from __future__ import annotations


class KnowflowError(Exception):
    """Base class: bad input, an impossible config, a missing model."""

    def __init__(self, message: str, hint: str | None = None):
        self.message, self.hint = message, hint
        super().__init__(f"{message}; {hint}" if hint else message)


class ConfigError(KnowflowError):
    """An impossible or unknown configuration value; `field` is its full dotted path, or the
    command-line option that set it (`--limit`), which the message then starts with."""

    def __init__(self, message: str, field: str | None = None, hint: str | None = None):
        self.field = field
        where = (f"{field}: " if field.startswith("--") else f"config field '{field}': ") \
            if field else ""
        super().__init__(where + message, hint)
        self.message = message

    def under(self, prefix: str) -> ConfigError:
        """The same error with its field named from an outer config (`lr` -> `sft.lr`)."""
        if not prefix or (self.field or "").startswith((prefix, "--")):
            return self
        return ConfigError(self.message, prefix + self.field if self.field else
                           prefix.rstrip("."), self.hint)


class DataError(KnowflowError):
    """A malformed data file; names the file, the line and the field."""

    def __init__(self, path: object, message: str, line: int | None = None,
                 field: str | None = None, hint: str | None = None):
        self.path, self.line, self.field = str(path), line, field
        where = self.path + (f", line {line}" if line is not None else "")
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}", hint)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, `signal` 15) during a run; `run_dir` (if any) is left resumable."""

    def __init__(self, run_dir: object = None, signal: int | None = None):
        self.run_dir, self.signal = run_dir, signal
        super().__init__(str(run_dir or ""))


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so a terminated run unwinds as an interrupted
    one does (its workers stopped, a resumable run left resumable, the rest removed)."""

    signal = 15


def memory_error(hint: str = "choose smaller sizes") -> KnowflowError:
    """The one message for running out of memory (the CLI boundary and the experiment runner
    both raise or print it)."""
    return KnowflowError("memory: this config needs more memory than the machine has", hint)


def out_of_memory(exc: BaseException) -> bool:
    """A MemoryError, or torch's allocator refusing (a config asked for too much)."""
    text = str(exc)
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()))
