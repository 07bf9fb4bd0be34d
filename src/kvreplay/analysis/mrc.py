"""One-pass exact LRU hit curve under longest-prefix semantics.

LRU has the inclusion property: a cache of C blocks holds exactly the C most
recently used distinct blocks, so block b is resident iff its stack distance
(1 + the number of distinct blocks used since b's last use) is at most C.

At a request's prefix scan (before it touches anything), let d_j be the stack
distance of its j-th block and m_j = max(d_0..d_j). The request hits at least
j+1 blocks exactly when m_j <= C, so block j adds
``min((j+1)*block_size, L) - min(j*block_size, L)`` hit tokens to every capacity
C >= m_j. One pass computes every m_j (a Fenwick tree over access times counts the
distinct blocks used since a given time); sorting them gives the hit tokens of
every capacity at once. Admissions at capacity C are the accesses whose distance
at access time exceeds C.

The result equals a separate ``lru`` replay at each capacity (tested).
"""

from __future__ import annotations

import numpy as np

from ..engine.replay import as_trace, check_capacity, warmup_count
from ..errors import ConfigError

try:
    from numba import njit
except ImportError:  # pragma: no cover
    def njit(*args, **kwargs):
        return (lambda f: f) if not (args and callable(args[0])) else args[0]

NEVER = np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def _distances(offsets, blocks, num_blocks, scan_max, access_distance):  # pragma: no cover - compiled
    """scan_max[p]: running max of stack distances over the request's blocks up to position p,
    taken before the request's accesses; access_distance[p]: the distance when block p is accessed."""
    n = blocks.shape[0]
    tree = np.zeros(n + 1, dtype=np.int32)  # Fenwick over access times 1..n: 1 = a block's latest use
    last = np.full(num_blocks, -1, dtype=np.int64)
    marked = 0
    t = 0
    for i in range(offsets.shape[0] - 1):
        start, end = offsets[i], offsets[i + 1]
        running = 0
        for j in range(start, end):
            p = last[blocks[j]]
            if p < 0:
                d = NEVER
            else:
                s = 0
                q = p
                while q > 0:
                    s += tree[q]
                    q -= q & -q
                d = marked - s + 1
            if d > running:
                running = d
            scan_max[j] = running
        for j in range(start, end):
            b = blocks[j]
            p = last[b]
            if p < 0:
                access_distance[j] = NEVER
                marked += 1
            else:
                s = 0
                q = p
                while q > 0:
                    s += tree[q]
                    q -= q & -q
                access_distance[j] = marked - s + 1
                q = p
                while q <= n:
                    tree[q] -= 1
                    q += q & -q
            t += 1
            q = t
            while q <= n:
                tree[q] += 1
                q += q & -q
            last[b] = t


def mrc(trace, capacities="auto", block_size: int | None = None, *, warmup_fraction: float = 0.0) -> dict:
    """Exact LRU hit tokens at every capacity in one pass.

    Returns ``{"trace", "policy": "lru", "block_size", "warmup_fraction", "window", "points": [...]}``
    with one point per capacity: ``cache_capacity_blocks``, ``total_hit_tokens``,
    ``total_prompt_tokens``, ``hit_rate``, ``final_cache_blocks``, ``admissions``, ``evictions``.
    """
    from ..engine.replay import DEFAULT_BLOCK_SIZE
    from ..output.report import window_text
    from .sweep import auto_capacities

    trace = as_trace(trace)
    block_size = int(block_size or trace.block_size or DEFAULT_BLOCK_SIZE)
    if block_size < 1:
        raise ConfigError(f"block_size must be >= 1, got {block_size}")
    if isinstance(capacities, str):
        if capacities != "auto":
            raise ConfigError(f"capacities must be a list of block counts or 'auto', got {capacities!r}")
        capacities = auto_capacities(trace.num_blocks)
    capacities = [check_capacity(c) for c in capacities]
    warmup = warmup_count(len(trace), warmup_fraction)

    n = trace.num_accesses
    scan_max = np.empty(n, dtype=np.int64)
    access_distance = np.empty(n, dtype=np.int64)
    _distances(trace.offsets, trace.blocks, trace.num_blocks, scan_max, access_distance)

    # Tokens block j of its request adds once the capacity reaches scan_max[j].
    counts = np.diff(trace.offsets)
    request_of = np.repeat(np.arange(len(trace)), counts)
    position = np.arange(n) - np.repeat(trace.offsets[:-1], counts)
    length = trace.input_length[request_of]
    gain = np.minimum((position + 1) * block_size, length) - np.minimum(position * block_size, length)
    counted = request_of >= warmup
    thresholds = scan_max[counted]
    order = np.argsort(thresholds, kind="stable")
    cumulative = np.concatenate(([0], np.cumsum(gain[counted][order])))
    sorted_thresholds = thresholds[order]
    sorted_access = np.sort(access_distance)
    distinct = trace.num_blocks
    prompt = int(trace.input_length[warmup:].sum())
    points = []
    for c in capacities:
        hits = int(cumulative[np.searchsorted(sorted_thresholds, c, side="right")])
        admissions = int(n - np.searchsorted(sorted_access, c, side="right"))
        final = min(c, distinct)
        points.append({
            "cache_capacity_blocks": c, "total_hit_tokens": hits, "total_prompt_tokens": prompt,
            "hit_rate": hits / prompt if prompt else 0.0, "final_cache_blocks": final,
            "admissions": admissions, "evictions": admissions - final,
        })
    return {
        "trace": trace.source, "policy": "lru", "block_size": block_size,
        "warmup_fraction": float(warmup_fraction), "window": window_text(warmup, len(trace)), "points": points,
    }
