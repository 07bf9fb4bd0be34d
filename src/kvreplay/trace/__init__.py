"""Traces: the columnar model and the readers that build it."""

from __future__ import annotations

import os

from .model import Trace
from .mooncake import read_mooncake
from .formats import FORMATS
from .writers import WRITE_FORMATS, write_trace



def load_trace(path, *, format: str = "auto", on_invalid: str = "error", sort_by_time: bool = False, keep_ids: bool = False,
               session_arrivals: str = "fixed", session_spacing: float = 60.0, seed: int = 0,
               subagent_sessions: bool = False, progress=None) -> Trace:
    """Load a trace file into a columnar :class:`Trace`.

    path: a file (plain or gzip), "-" for standard input, a directory (its *.json, *.jsonl,
        *.ndjson files, optionally .gz, in name order) or a list of those. Several files merge
        into one trace ordered by time, each file with its own block ids (see trace.ops.merge).
    format: "auto" (sniffed per file from its first record), "mooncake" (JSONL with
        input_length, hash_ids, timestamp, output_length), "bailian" (Alibaba Qwen JSONL, 16-token
        blocks, sessions from parent_chat_id), "claude-code" (one session per JSON file) or
        "agentic-mooncake" (AISimulate's and Dynamo's agentic rows: plays, dependencies).
    session_arrivals, session_spacing, seed: start offsets of Claude Code sessions when several
        are merged: "fixed" (every `session_spacing` seconds, default 60; or a string with its
        unit, "90s"), "poisson" (exponential gaps of mean `session_spacing`, seeded) or "zero".
    subagent_sessions: Claude Code: each subagent stream is its own session.
    on_invalid: "error" (default) raises TraceError naming file, line and field
        at the first bad record; "skip" drops bad records and records them in
        ``trace.invalid_records``.
    sort_by_time: reorder requests stably by timestamp (default: file order).
    keep_ids: keep the file's block ids in ``trace.original_ids``.
    progress: a kvreplay.progress callback, told ``(bytes, total bytes, "bytes read")`` as the
        files are read (not for standard input, whose size is unknown).
    """
    if format not in ("auto", *FORMATS):
        from ..errors import ConfigError

        raise ConfigError(f"unknown trace format {format!r} (known: auto, {', '.join(FORMATS)})")
    from .ops import load_paths

    trace = load_paths(path if isinstance(path, (list, tuple)) or not isinstance(path, os.PathLike) else os.fspath(path),
                       format=format, on_invalid=on_invalid,
                       keep_ids=keep_ids, session_arrivals=session_arrivals, session_spacing=session_spacing, seed=seed,
                       subagent_sessions=subagent_sessions, progress=progress)
    return trace.sorted_by_time() if sort_by_time else trace


__all__ = ["Trace", "load_trace", "read_mooncake", "FORMATS", "write_trace", "WRITE_FORMATS"]
