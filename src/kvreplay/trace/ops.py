"""Operations that build one trace from others."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .. import native
from ..errors import ConfigError
from ..progress import tell
from ..units import seconds_arg
from .dependencies import Dependencies
from .retention import Retention
from .model import Trace

MAX_REPORTED_LINES = 20


def _describe_sources(traces: Sequence[Trace]) -> str:
    if len(traces) <= 3:
        return ", ".join(t.source for t in traces)
    return f"{traces[0].source} and {len(traces) - 1} more"


def _shared_blocks(traces: Sequence[Trace]) -> tuple[np.ndarray, int, np.ndarray | list]:
    """Blocks of every trace mapped through their original ids into one id space."""
    for t in traces:
        if t.original_ids is None:
            raise ConfigError(f"{t.source}: sharing ids by their original value needs the file's ids "
                              "(load the trace with keep_ids=True)")
    per_trace = [np.asarray(t.original_ids) if isinstance(t.original_ids, np.ndarray) else None for t in traces]
    if all(a is not None and a.dtype.kind in "iu" for a in per_trace):
        raw = np.concatenate([a.astype(np.int64)[t.blocks] for a, t in zip(per_trace, traces)])
        original, inverse = np.unique(raw, return_inverse=True)
        return inverse.reshape(-1).astype(np.int32), int(original.size), original
    table: dict = {}
    out = []
    for t in traces:
        ids = list(t.original_ids)
        out.extend(table.setdefault(ids[b], len(table)) for b in t.blocks.tolist())
    return np.array(out, dtype=np.int32), len(table), list(table)


def merge(traces: Sequence[Trace], namespace: bool = True, offsets_ms: Sequence[float] | None = None) -> Trace:
    """One trace holding every request of `traces`, ordered by time.

    Requests are ordered stably by timestamp + their input's offset (ties: earlier input
    first, then file order).

    namespace: True (default) gives each input its own block ids, so two inputs never share
        a block even when their files use the same ids (ids are private to a session file);
        the result keeps no original ids. False shares blocks by original id (every input
        needs ``original_ids``: load with ``keep_ids=True``); the result keeps the union.
    offsets_ms: one start offset (ms) per input, added to its timestamps (default: none).

    Sessions are renumbered per input: an input without a session column is one session;
    an input's sessions become consecutive numbers after the previous input's.
    All inputs must declare the same block size (or all none).
    """
    traces = list(traces)
    if not traces:
        raise ConfigError("merge needs at least one trace")
    offsets_ms = [0.0] * len(traces) if offsets_ms is None else [float(x) for x in offsets_ms]
    if len(offsets_ms) != len(traces):
        raise ConfigError(f"got {len(offsets_ms)} offsets for {len(traces)} traces")
    if not np.isfinite(offsets_ms).all():
        raise ConfigError("offsets must be finite")
    sizes = {t.block_size for t in traces}
    if len(sizes) > 1:
        detail = ", ".join(f"{t.source}: {t.block_size}" for t in traces)
        raise ConfigError(f"cannot merge traces with different block sizes ({detail})")
    if namespace:
        bases = np.cumsum([0] + [t.num_blocks for t in traces])
        if bases[-1] >= 2**31:
            raise ConfigError("merged trace has too many distinct blocks (more than 2**31)")
        blocks = np.concatenate([t.blocks.astype(np.int64) + base for t, base in zip(traces, bases)]).astype(np.int32)
        num_blocks, original = int(bases[-1]), None
    else:
        blocks, num_blocks, original = _shared_blocks(traces)
    sessions, base = [], 0
    for t in traces:
        if t.session is None:
            local, count = np.zeros(len(t), dtype=np.int64), 1
        else:
            values, local = np.unique(t.session, return_inverse=True)
            local, count = local.reshape(-1), values.size
        sessions.append(local + base)
        base += count
    counts = np.concatenate([np.diff(t.offsets) for t in traces])
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    formats = {t.format for t in traces}
    invalid = None
    if any(t.invalid_records for t in traces):
        lines = [f"{t.source}:{line}" for t in traces if t.invalid_records for line in t.invalid_records["first_lines"]]
        invalid = {"count": sum(t.invalid_records["count"] for t in traces if t.invalid_records),
                   "first_lines": lines[:MAX_REPORTED_LINES]}
    merged = Trace(
        offsets=offsets, blocks=blocks,
        input_length=np.concatenate([t.input_length for t in traces]),
        output_length=np.concatenate([t.output_length for t in traces]),
        timestamp=np.concatenate([t.timestamp + off for t, off in zip(traces, offsets_ms)]),
        num_blocks=num_blocks, block_size=traces[0].block_size, source=_describe_sources(traces),
        format=formats.pop() if len(formats) == 1 else "merged", original_ids=original,
        invalid_records=invalid, session=np.concatenate(sessions),
        retention=Retention.concat([t.retention for t in traces], [len(t) for t in traces]),
        dependencies=Dependencies.concat([t.dependencies for t in traces], [len(t) for t in traces]),
        samples=None if all(t.samples is None for t in traces) else np.concatenate(
            [np.zeros(len(t), dtype=np.int64) if t.samples is None else t.samples for t in traces]),
    )
    order = np.argsort(merged.timestamp, kind="stable")
    return merged if np.array_equal(order, np.arange(order.size)) else merged.take(order)


def session_offsets_ms(count: int, arrivals: str = "fixed", spacing_s: float = 60.0, seed: int = 0) -> np.ndarray:
    """Start times (ms) of `count` sessions: "fixed" (0, s, 2s, ...), "poisson" (0, then
    exponential gaps of mean s, seeded) or "zero" (all at 0)."""
    if arrivals not in ("fixed", "poisson", "zero"):
        raise ConfigError(f"session arrivals must be fixed, poisson or zero, not {arrivals!r}")
    spacing_s = seconds_arg(spacing_s, "session spacing")
    if not (np.isfinite(spacing_s) and spacing_s >= 0):
        raise ConfigError(f"session spacing must be a non-negative number of seconds, got {spacing_s!r}")
    if arrivals == "zero" or count == 0:
        return np.zeros(count)
    if arrivals == "fixed":
        return np.arange(count) * spacing_s * 1000.0
    gaps = np.random.default_rng(seed).exponential(spacing_s, size=count - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)]) * 1000.0


# Loading several files, a directory, and guessing a file's format.

TRACE_SUFFIXES = (".json", ".jsonl", ".ndjson")


def trace_paths(path) -> list[str]:
    """The files `path` names: itself, or a directory's ``*.json``, ``*.jsonl``, ``*.ndjson``
    (each optionally ``.gz``) in name order, hidden files left out; a list expands each item."""
    import os

    from ..errors import TraceError

    if isinstance(path, (list, tuple)):
        if not path:
            raise ConfigError("no trace files given")
        return [p for item in path for p in trace_paths(item)]
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"a trace is a path to a trace file (or a Trace), got {type(path).__name__} {path!r}")
    path = os.fspath(path)
    if path != "-" and os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith(".")
                       and n.lower().removesuffix(".gz").endswith(TRACE_SUFFIXES) and os.path.isfile(os.path.join(path, n)))
        if not names:
            raise TraceError(path, "is a directory, expected a trace file")
        return [os.path.join(path, n) for n in names]
    return [path]


def start_offsets_ms(traces: Sequence[Trace], arrivals: str = "fixed", spacing_s: float = 60.0, seed: int = 0) -> list[float]:
    """Start offset (ms) of each trace to merge: Claude Code traces are timed from their session's
    start and get the next start time of `arrivals` (in order); others keep their clocks (0)."""
    own_clock = [t.format == "claude-code" for t in traces]
    starts = iter(session_offsets_ms(sum(own_clock), arrivals, spacing_s, seed).tolist())
    return [next(starts) if own else 0.0 for own in own_clock]


def load_paths(path, *, format: str = "auto", on_invalid: str = "error", keep_ids: bool = False,
               session_arrivals: str = "fixed", session_spacing: float = 60.0, seed: int = 0,
               subagent_sessions: bool = False, progress=None) -> Trace:
    """Read one or several trace files (see ``load_trace``); several are merged with ``merge``:
    ids namespaced per file, ordered by time. Claude Code files are timed from their session's
    start, so each gets a start offset from `session_arrivals` (in file order); line formats
    keep their own timestamps."""
    from ..errors import TraceError
    from .formats import CATCH_ALL, read, sniff_format, tried

    paths = trace_paths(path)
    session_offsets_ms(0, session_arrivals, session_spacing, seed)  # check the options before reading
    traces = []
    sizes = [0 if p == "-" else os.path.getsize(p) for p in paths] if progress is not None else [0] * len(paths)
    for k, p in enumerate(paths):
        fmt = sniff_format(p) if format == "auto" else format
        before = sum(sizes[:k])
        told = None if progress is None else (
            lambda done, before=before: tell(progress, before + done, sum(sizes), "bytes read"))
        try:
            got = read(p, fmt, on_invalid=on_invalid, keep_ids=keep_ids, subagent_sessions=subagent_sessions,
                       progress=told)
            traces.extend(got if isinstance(got, list) else [got])  # (a corpus file: one trace per session)
        except TraceError as e:
            if format == "auto" and fmt == CATCH_ALL and e.line == 1 and getattr(e, "unrecognised", False):
                # The catch-all took a file no reader recognised: say so, not only what it missed.
                e.msg += f" (no format recognised the first record: tried {tried()}; read as {fmt}; see --format)"
            raise
        tell(progress, before + sizes[k], sum(sizes), "bytes read")
    native.release_free_memory()  # what the readers' parsed chunks freed
    if len(traces) == 1:
        return traces[0]
    merged = merge(traces, namespace=True, offsets_ms=start_offsets_ms(traces, session_arrivals, session_spacing, seed))
    if not isinstance(path, (list, tuple)) or len(paths) == 1:
        from dataclasses import replace

        merged = replace(merged, source=os.fspath(path))  # a directory
    return merged
