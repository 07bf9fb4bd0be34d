"""Traces: the columnar model and the readers that build it."""

from __future__ import annotations

import os

from .model import Trace
from .mooncake import read_mooncake

FORMATS = ("mooncake",)


def load_trace(path, *, format: str = "auto", on_invalid: str = "error", sort_by_time: bool = False, keep_ids: bool = False) -> Trace:
    """Load a trace file into a columnar :class:`Trace`.

    path: a file (plain or gzip), or "-" for standard input.
    format: "auto" or "mooncake" (JSONL with input_length, hash_ids, timestamp, output_length).
    on_invalid: "error" (default) raises TraceError naming file, line and field
        at the first bad record; "skip" drops bad records and records them in
        ``trace.invalid_records``.
    sort_by_time: reorder requests stably by timestamp (default: file order).
    keep_ids: keep the file's block ids in ``trace.original_ids``.
    """
    if format not in ("auto", *FORMATS):
        from ..errors import ConfigError

        raise ConfigError(f"unknown trace format {format!r} (known: auto, {', '.join(FORMATS)})")
    trace = read_mooncake(os.fspath(path), on_invalid=on_invalid, keep_ids=keep_ids)
    return trace.sorted_by_time() if sort_by_time else trace


__all__ = ["Trace", "load_trace", "read_mooncake", "FORMATS"]
