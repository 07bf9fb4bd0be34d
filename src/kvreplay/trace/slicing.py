"""Slices of a trace: a range of requests, a time window, the first sessions.

A slice is a self-contained trace: the kept requests in their original order, block ids
renumbered densely over the blocks those requests use (keeping the ids' relative order,
so a Mooncake file written from the slice loads back to the same ids), sessions
renumbered 0..S-1 in order of first appearance, original ids cut down to the kept blocks.

Semantics (every filter given is applied to the whole trace; a request is kept when it
passes all of them):

- ``requests=(start, stop)`` or ``slice(start, stop)``: Python's half-open range over
  trace positions; negative values count from the end and out-of-range values clamp,
  exactly as for a list (``(-100, None)`` is the last 100 requests).
- ``time_ms=(t0, t1)``: requests with ``t0 <= timestamp < t1`` (ms, as in the trace;
  None leaves that end open). The trace is not reordered.
- ``sessions=N``: the requests of the first N sessions (by first appearance); needs a
  trace with a session column.

A slice that keeps nothing raises ConfigError that says why.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..errors import ConfigError
from .model import Trace


def _request_mask(n: int, requests) -> tuple[np.ndarray, str]:
    if isinstance(requests, slice):
        if requests.step not in (None, 1):
            raise ConfigError(f"requests: a step is not supported (got {requests.step})")
        start, stop = requests.start, requests.stop
    else:
        try:
            start, stop = requests
        except (TypeError, ValueError):
            raise ConfigError(f"requests must be (start, stop) or a slice, not {requests!r}") from None
    for v in (start, stop):
        if v is not None and not isinstance(v, (int, np.integer)):
            raise ConfigError(f"requests: bounds must be integers or None, not {v!r}")
    lo, hi, _ = slice(start, stop).indices(n)
    mask = np.zeros(n, dtype=bool)
    mask[lo:hi] = True
    text = f"{'' if start is None else start}:{'' if stop is None else stop}"
    return mask, f"requests {text} (positions {lo}..{max(lo, hi)} of {n})"


def _ms(value) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _time_mask(timestamp: np.ndarray, time_ms) -> tuple[np.ndarray, str]:
    try:
        t0, t1 = time_ms
    except (TypeError, ValueError):
        raise ConfigError(f"time_ms must be (t0, t1) in ms, not {time_ms!r}") from None
    mask = np.ones(timestamp.shape[0], dtype=bool)
    for v in (t0, t1):
        if v is not None and not (isinstance(v, (int, float, np.integer, np.floating)) and not math.isnan(v)):
            raise ConfigError(f"time_ms: bounds must be numbers or None, not {v!r}")
    if t0 is not None:
        mask &= timestamp >= t0
    if t1 is not None:
        mask &= timestamp < t1
    lo = "" if t0 is None else _ms(t0)
    hi = "" if t1 is None else _ms(t1)
    span = f"{_ms(timestamp.min())}..{_ms(timestamp.max())}" if timestamp.size else "none"
    return mask, f"time {lo}:{hi} ms (the trace's timestamps span {span} ms)"


def _session_mask(trace: Trace, sessions) -> tuple[np.ndarray, str]:
    session = getattr(trace, "session", None)
    if session is None:
        raise ConfigError(f"sessions: the trace ({trace.format}) has no sessions")
    if not isinstance(sessions, (int, np.integer)) or sessions < 1:
        raise ConfigError(f"sessions must be a whole number >= 1, not {sessions!r}")
    first = _first_appearance_rank(session)
    return first < sessions, f"sessions {sessions}"


def _first_appearance_rank(values: np.ndarray) -> np.ndarray:
    """Each value's rank by first appearance (0 for the value seen first, ...), per position."""
    uniq, first_index, inverse = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[np.argsort(first_index, kind="stable")] = np.arange(uniq.size)
    return rank[inverse.reshape(-1)]


def slice_trace(trace: Trace, requests=None, time_ms=None, *, sessions: int | None = None) -> Trace:
    """The requests of `trace` that pass every filter given, as a self-contained trace.

    requests: ``(start, stop)`` or ``slice(start, stop)``, Python semantics (negative
        from the end, out of range clamps). time_ms: ``(t0, t1)``, keeps
        ``t0 <= timestamp < t1`` (ms; None = open end). sessions: keep the first N
        sessions (by first appearance).

    Block ids are renumbered densely over the kept requests' blocks (relative order
    kept), sessions 0..S-1 by first appearance; ``invalid_records`` is dropped (its line
    numbers describe the source file). Raises ConfigError when nothing is kept.
    """
    n = len(trace)
    mask = np.ones(n, dtype=bool)
    why = []
    if requests is not None:
        part, text = _request_mask(n, requests)
        mask &= part
        why.append(text)
    if time_ms is not None:
        part, text = _time_mask(trace.timestamp, time_ms)
        mask &= part
        why.append(text)
    if sessions is not None:
        part, text = _session_mask(trace, sessions)
        mask &= part
        why.append(text)
    kept = np.flatnonzero(mask)
    if kept.size == 0:
        raise ConfigError("the slice is empty: no request passes " + " and ".join(why))
    return _renumbered(trace.take(kept) if kept.size < n else trace)


def _renumbered(trace: Trace) -> Trace:
    """The trace with block ids dense over the blocks it uses and sessions 0..S-1."""
    present = np.zeros(trace.num_blocks, dtype=bool)
    present[trace.blocks] = True
    changes = {"invalid_records": None}
    if not present.all():
        remap = np.cumsum(present, dtype=np.int64) - 1
        changes["blocks"] = remap[trace.blocks].astype(np.int32)
        changes["num_blocks"] = int(remap[-1] + 1) if remap.size else 0
        table = trace.original_ids
        if table is not None:
            used = np.flatnonzero(present)
            changes["original_ids"] = table[used] if isinstance(table, np.ndarray) else [table[i] for i in used.tolist()]
    session = getattr(trace, "session", None)
    if session is not None and session.size:
        changes["session"] = _first_appearance_rank(session)
    return replace(trace, **changes)


# ----------------------------------------------------------------- option text (the CLI's)


def parse_request_range(text: str) -> tuple[int | None, int | None]:
    """``"A:B"`` -> (A, B); either side may be empty (open) or negative (from the end)."""
    parts = text.split(":")
    if len(parts) != 2:
        raise ConfigError(f"--requests {text}: expected START:STOP, e.g. 0:1000, -500: or :100")
    out = []
    for part in parts:
        part = part.strip().replace("_", "")
        if not part:
            out.append(None)
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise ConfigError(f"--requests {text}: {part!r} is not a whole number") from None
    return out[0], out[1]


def parse_time_range(text: str, timestamp: np.ndarray) -> tuple[float | None, float | None]:
    """``"T0:T1"`` -> (t0, t1) in absolute ms.

    Each side is a duration with its unit (units.parse_duration: 0s, 90s, 10m, 1500ms) after the
    trace's earliest timestamp, or, with a leading ``@``, a timestamp as the file counts it
    (``@1500ms``: 1500 ms on the file's clock). A bare number other than 0 is refused. Either side
    may be empty (open).
    """
    from ..units import parse_duration

    parts = text.split(":")
    if len(parts) != 2:
        raise ConfigError(f"--time {text}: expected T0:T1, durations after the first request (0s:1h) or "
                          "timestamps with @ (@1500ms:@90000ms)")
    start = float(timestamp.min()) if timestamp.size else 0.0
    out = []
    for part in parts:
        part = part.strip()
        if not part:
            out.append(None)
            continue
        absolute = part.startswith("@")
        seconds = parse_duration(part[1:] if absolute else part, f"--time {text}")
        out.append((0.0 if absolute else start) + 1000.0 * seconds)
    return out[0], out[1]


__all__ = ["slice_trace", "parse_request_range", "parse_time_range"]
