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
from ..engine.misses import CAUSES, block_tokens
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
    positions = np.arange(start, trace.num_accesses, dtype=np.int64)
    tokens = block_tokens(trace, block_size, positions)
    distance = scan_distances(trace)[start:]
    peak = running_max(trace, scan_distances(trace))[start:]
    never = distance < 0
    seen = ~never
    by_distance = _cumulative(distance[seen], tokens[seen])
    reached = peak <= trace.num_blocks  # a first use at or before the block: no capacity hits it
    by_peak = _cumulative(peak[reached], tokens[reached])
    lengths = np.asarray(trace.input_length[warmup:], dtype=np.int64)
    beyond = np.maximum(0, lengths - np.diff(trace.offsets)[warmup:] * block_size)
    first_use, partial = exact_sum(tokens[never]), exact_sum(beyond)
    seen_total = exact_sum(tokens[seen])
    rows = []
    for c in capacities:
        within, hits = by_distance(c), by_peak(c)
        rows.append({column("first_use"): first_use, column("evicted"): seen_total - within,
                     column("behind_hole"): within - hits, column("partial_block"): partial,
                     column("namespace"): None, column("layer_groups"): None, column("concurrency"): None,
                     "total_hit_tokens": hits})
    return rows


def _cumulative(values: np.ndarray, weights: np.ndarray):
    """x -> the sum of `weights` whose value is <= x."""
    order = np.argsort(values, kind="stable")
    keys = values[order]
    sums = np.concatenate([[0], np.cumsum(weights[order])])
    return lambda x: int(sums[np.searchsorted(keys, x, side="right")])
