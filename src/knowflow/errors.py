"""Errors the user can fix. The CLI renders each as one line and exits with code 2."""

from __future__ import annotations


class KnowflowError(Exception):
    """Base class: bad input, an impossible config, a missing model."""


class ConfigError(KnowflowError):
    """An impossible or unknown configuration value."""

    def __init__(self, message: str, field: str | None = None):
        self.field = field
        super().__init__(f"config field '{field}': {message}" if field else message)


class DataError(KnowflowError):
    """A malformed data file; names the file, the line and the field."""

    def __init__(self, path: object, message: str, line: int | None = None,
                 field: str | None = None):
        self.path, self.line, self.field = str(path), line, field
        where = self.path + (f", line {line}" if line is not None else "")
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")
