"""Per-request KV retention priorities: TensorRT-LLM's ``KvCacheRetentionConfig`` in a trace.

A request may carry token ranges, each with a priority and an optional duration
(TensorRT-LLM's ``TokenRangeRetentionConfig(tokenStart, tokenEnd, priority, durationMs)``):
the blocks of those tokens are kept at that priority (0-100; higher is evicted later) and, after
the duration, fall back to the default. docs/formats.md says how each format writes them:
Mooncake JSONL's optional ``priority`` (one range over the whole prompt) and ``priority_ranges``
(``[[start, end or null, priority, duration_ms or null], ...]``).

Stored flat, as the trace's blocks are: request i's ranges are ``start[offsets[i]:offsets[i+1]]``
and the matching entries of ``end`` (-1: to the end of the request), ``priority`` and
``duration_ms`` (inf: no duration).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

MIN_PRIORITY, MAX_PRIORITY = 0, 100
OPEN = -1  # an end of -1: to the end of the request


def check_range(start, end, priority, duration_ms) -> str | None:
    """What is wrong with one range, or None."""
    def whole(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if not whole(start) or start < 0:
        return f"a range's start must be a whole number of tokens >= 0, got {start!r}"
    if end is not None and (not whole(end) or end <= start):
        return f"a range's end must be a whole number of tokens after its start ({start}) or null, got {end!r}"
    if not whole(priority) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        return f"a priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority!r}"
    if duration_ms is not None and (isinstance(duration_ms, bool) or not isinstance(duration_ms, (int, float))
                                    or not 0 < duration_ms < float("inf")):
        return f"a duration must be a positive number of milliseconds or null, got {duration_ms!r}"
    return None


@dataclass(frozen=True, eq=False)
class Retention:
    """Every request's retention ranges, flat (see the module docstring)."""

    offsets: np.ndarray
    start: np.ndarray
    end: np.ndarray
    priority: np.ndarray
    duration_ms: np.ndarray

    def __post_init__(self):
        for name, dtype in (("offsets", np.int64), ("start", np.int64), ("end", np.int64), ("priority", np.int64),
                            ("duration_ms", np.float64)):
            a = np.array(getattr(self, name), dtype=dtype)
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        m = self.start.shape[0]
        if self.offsets[0] != 0 or self.offsets[-1] != m or np.any(np.diff(self.offsets) < 0) or \
                any(a.shape != (m,) for a in (self.end, self.priority, self.duration_ms)):
            raise ConfigError("retention ranges: malformed offsets or columns")

    @classmethod
    def from_lists(cls, per_request) -> "Retention":
        """From one list per request of (start, end or None, priority, duration_ms or None)."""
        counts, rows = [], []
        for i, ranges in enumerate(per_request):
            ranges = list(ranges or ())
            for r in ranges:
                problem = check_range(*r)
                if problem:
                    raise ConfigError(f"request {i}: {problem}")
            counts.append(len(ranges))
            rows.extend(ranges)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        col = lambda k, none: [none if r[k] is None else r[k] for r in rows]  # noqa: E731
        return cls(offsets, col(0, 0), col(1, OPEN), col(2, 0), col(3, np.inf))

    @property
    def num_requests(self) -> int:
        return self.offsets.shape[0] - 1

    def ranges(self, i: int) -> list[tuple]:
        """Request i's ranges as (start, end or None, priority, duration_ms or None)."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return [(int(s), None if e == OPEN else int(e), int(p), None if not np.isfinite(d) else float(d))
                for s, e, p, d in zip(self.start[a:b], self.end[a:b], self.priority[a:b], self.duration_ms[a:b])]

    def take(self, order) -> "Retention":
        """The ranges of the requests at positions `order`, in that order."""
        from .model import ragged_take

        offsets, index = ragged_take(self.offsets, order)
        return Retention(offsets, self.start[index], self.end[index], self.priority[index], self.duration_ms[index])

    @staticmethod
    def concat(parts: list["Retention | None"], sizes: list[int]) -> "Retention | None":
        """The ranges of traces put one after another (a trace without any: requests without ranges)."""
        if all(p is None for p in parts):
            return None
        per_request = []
        for part, n in zip(parts, sizes):
            per_request += [[] for _ in range(n)] if part is None else [part.ranges(i) for i in range(n)]
        return Retention.from_lists(per_request)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.offsets, self.start, self.end, self.priority, self.duration_ms))
