"""Errors with a place: the CLI turns them into `FILE:LINE: field: message` and exit code 2."""

from __future__ import annotations


class KvreplayError(Exception):
    """Base class of every error kvreplay raises on purpose (bad input, bad options)."""


class TraceError(KvreplayError):
    """A trace file (or one of its records) cannot be used.

    `line` is 1-based; `field` names the offending JSON key when there is one.
    """

    def __init__(self, path: str, msg: str, line: int | None = None, field: str | None = None):
        self.path = path
        self.line = line
        self.field = field
        self.msg = msg
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.field}: {self.msg}" if self.field else f"{where}: {self.msg}"


class ConfigError(KvreplayError, ValueError):
    """An option or parameter value that cannot be used (unknown policy, bad capacity, ...)."""


class OutputError(KvreplayError):
    """An output file cannot be written (missing directory, a directory in the way, no space)."""

    def __init__(self, path: str, msg: str):
        self.path = path
        self.msg = msg
        super().__init__(f"{path}: {msg}")


class MissingDependencyError(KvreplayError):
    """An optional library a feature needs (pandas, polars, pyarrow) is not installed; the message
    names the pip extra that installs it (``pip install 'kvreplay[parquet]'``)."""


class InvariantError(AssertionError):
    """A replay result broke one of the spec's invariants. Always a bug in kvreplay."""
