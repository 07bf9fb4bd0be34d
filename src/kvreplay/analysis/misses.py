"""The miss account in tables: one column per cause, and LRU's account at every capacity at once.

A replay's account is engine/misses.py's (every request's prompt tokens = hit tokens + its
missed tokens per cause). A sweep row carries the window's totals as ``miss_<cause>_tokens``
(None for a cause the replay cannot see: engine/misses.py's ``not_measured``).

LRU at every capacity from one pass (a sweep's lru rows come from analysis/mrc.py's stack
distances): with d_j the reuse distance of block j at its request's scan (engine/distances.py)
and m_j the largest of d_0..d_j, an LRU cache of C blocks hits block j iff m_j <= C; a missed
block is in the cache iff d_j <= C (behind a hole), else a first use when no earlier request
used it, else evicted. The same account as an lru replay at each capacity (tested).
"""

from __future__ import annotations

import numpy as np

from ..engine.distances import running_max, scan_distances
from ..engine.misses import CAUSES
from ..trace.model import exact_sum


def column(cause: str) -> str:
    return f"miss_{cause}_tokens"


COLUMNS = tuple(column(c) for c in CAUSES)


def row_columns(report) -> dict:
    """A sweep row's miss columns from a Report (all None when it has no account)."""
    account = report.misses
    if account is None:
        return dict.fromkeys(COLUMNS)
    totals = account.totals()
    return {column(c): (None if c in account.not_measured else totals[c]) for c in CAUSES}


def lru_account(trace, capacities, block_size: int, warmup: int) -> list[dict]:
    """For each capacity, the miss columns of an lru replay of the window (module doc)."""
    start = int(trace.offsets[warmup])
    counts = np.diff(trace.offsets)
    lengths = np.asarray(trace.input_length, dtype=np.int64)
    position = np.arange(trace.num_accesses, dtype=np.int64) - np.repeat(trace.offsets[:-1], counts)
    tokens = np.clip(np.repeat(lengths, counts) - position * block_size, 0, block_size)[start:]
    distance = scan_distances(trace)[start:]
    peak = running_max(trace)[start:]
    top = trace.num_blocks + 1  # a first use's peak: beyond every capacity that matters
    never = distance < 0
    by_distance = _cumulative(np.where(never, top, distance), tokens, top)
    by_peak = _cumulative(peak, tokens, top)
    beyond = np.maximum(0, lengths[warmup:] - counts[warmup:] * block_size)
    first_use, partial = exact_sum(tokens[never]), exact_sum(beyond)
    seen_total = exact_sum(tokens) - first_use
    rows = []
    for c in capacities:
        within, hits = by_distance(c), by_peak(c)
        rows.append({column("first_use"): first_use, column("evicted"): seen_total - within,
                     column("behind_hole"): within - hits, column("partial_block"): partial,
                     column("namespace"): None, column("layer_groups"): None, column("concurrency"): None,
                     "total_hit_tokens": hits})
    return rows


def _cumulative(values: np.ndarray, weights: np.ndarray, top: int):
    """x -> the sum of `weights` whose value is <= x, for x < top (values in 0..top; top is
    never counted). bincount sums in float64: exact, every partial sum being below 2**53."""
    if weights.size and int(weights.sum()) >= 2**53:
        raise OverflowError("more than 2**53 tokens: the one-pass account would not be exact")
    sums = np.cumsum(np.bincount(values, weights=weights, minlength=top + 1)[:top].round().astype(np.int64))
    return lambda x: int(sums[min(int(x), top - 1)]) if top > 0 else 0
