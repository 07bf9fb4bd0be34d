"""One-pass exact LRU hit curve under longest-prefix semantics.

LRU has the inclusion property: a cache of C blocks holds exactly the C most
recently used distinct blocks, so block b is resident iff its stack distance
(1 + the number of distinct blocks used since b's last use) is at most C.

At a request's prefix scan (before it touches anything), let d_j be the stack
distance of its j-th block and m_j = max(d_0..d_j). The request hits at least
j+1 blocks exactly when m_j <= C, so block j adds
``min((j+1)*block_size, L) - min(j*block_size, L)`` hit tokens to every capacity
C >= m_j. One pass computes every m_j (a Fenwick tree over access times counts the
distinct blocks used since a given time) and adds each block's tokens to a
histogram indexed by m_j; its prefix sums are the hit tokens of every capacity at
once. Admissions at capacity C are the accesses whose distance at access time
exceeds C.

The result equals a separate ``lru`` replay at each capacity (tested).
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..engine.driver import trace_arrays
from ..engine.replay import as_trace, check_capacity, warmup_count
from ..engine.report import window_text
from ..errors import ConfigError
from ..progress import labelled, tell
from ..trace.model import exact_sum, resolve_block_size
from .fenwick import fenwick_add, fenwick_sum
from .results import CurveResult
from .capacities import auto_capacities
from .misses import COLUMNS as MISS_COLUMNS, lru_account


def _histograms_reference(offsets, blocks, input_length, block_size, warmup, hit_tokens_at, accesses_at,
                          told=None) -> None:
    """One pass over the trace (plain Python; compiled: mrc.c). hit_tokens_at[d]: hit tokens that
    need a capacity of exactly d blocks (the running max of stack distances at the prefix scan);
    accesses_at[d]: accesses whose stack distance when made is d. Index num_blocks + 1 stands for
    "never" (a first access). told(done, total): the requests done, now and then (as mrc.c)."""
    offsets, blocks, lengths = offsets.tolist(), blocks.tolist(), input_length.tolist()
    step = max(1, len(lengths) // 100)
    never = hit_tokens_at.shape[0] - 1
    hits, accesses = [0] * (never + 1), [0] * (never + 1)
    tree = [0] * (offsets[-1] + 1)  # Fenwick over access times 1..n: 1 = a block's latest use
    last = [-1] * never
    marked = 0
    t = 0
    for i in range(len(lengths)):
        if told is not None and i % step == 0:
            told(i, len(lengths))
        start, end = offsets[i], offsets[i + 1]
        length = lengths[i]
        running = 0
        for j in range(start, end):
            p = last[blocks[j]]
            d = never if p < 0 else marked - fenwick_sum(tree, p) + 1
            running = max(running, d)
            if i >= warmup:
                position = j - start
                hits[running] += min((position + 1) * block_size, length) - min(position * block_size, length)
        for j in range(start, end):
            b = blocks[j]
            p = last[b]
            if p < 0:
                accesses[never] += 1
                marked += 1
            else:
                accesses[marked - fenwick_sum(tree, p) + 1] += 1
                fenwick_add(tree, p, -1)
            t += 1
            fenwick_add(tree, t, 1)
            last[b] = t
    hit_tokens_at += hits
    accesses_at += accesses
    if told is not None:
        told(len(lengths), len(lengths))


def _histograms_compiled(offsets, blocks, input_length, block_size, warmup, hit_tokens_at, accesses_at,
                         told=None) -> None:
    """The same pass in C (mrc.c)."""
    offsets, blocks, input_length = trace_arrays(offsets, blocks, input_length)
    tree = np.zeros(int(offsets[-1]) + 1, dtype=np.int32)
    last = np.full(hit_tokens_at.shape[0] - 1, -1, dtype=np.int64)
    p, i = native.POINTER, native.COUNT
    alive, callback = native.callback(told)  # (alive: the C function, held while C may call it)
    native.function("kv_mrc_histograms", None, p, i, p, p, i, i, p, p, i, p, p, p)(
        native.ptr(offsets), input_length.shape[0], native.ptr(blocks), native.ptr(input_length), int(block_size), int(warmup),
        native.ptr(hit_tokens_at), native.ptr(accesses_at), hit_tokens_at.shape[0] - 1, native.ptr(tree), native.ptr(last),
        callback)


def mrc(trace, capacities="auto", block_size: int | None = None, *, warmup_fraction: float = 0.0,
        progress=None) -> CurveResult:
    """Exact LRU hit tokens at every capacity in one pass.

    Returns ``{"trace", "policy": "lru", "block_size", "warmup_fraction", "window", "num_requests",
    "points": [...]}`` with one point per capacity: ``cache_capacity_blocks``, ``total_hit_tokens``,
    ``total_prompt_tokens``, ``hit_rate``, ``final_cache_blocks``, ``admissions``, ``evictions``,
    ``oversize_requests``. The dict (a CurveResult) also gives the tidy table: ``rows()``,
    ``to_dict()`` (the JSON document of ``kvreplay mrc --json``), ``to_pandas()``, ``to_polars()``,
    ``to_arrow()`` (analysis/results.py). progress: a kvreplay.progress callback, told
    ``(done, total, "requests scanned")`` as the pass goes.
    """

    trace = as_trace(trace)
    block_size = resolve_block_size(block_size, trace)
    if isinstance(capacities, str):
        if capacities != "auto":
            raise ConfigError(f"capacities must be a list of block counts or 'auto', got {capacities!r}")
        capacities = auto_capacities(trace.num_blocks)
    if not isinstance(capacities, (list, tuple, range)) and not hasattr(capacities, "tolist"):
        raise ConfigError(f"capacities must be a list of block counts or 'auto', got {capacities!r}")
    capacities = [check_capacity(c) for c in capacities]
    warmup = warmup_count(len(trace), warmup_fraction)

    distinct = trace.num_blocks
    hit_tokens_at = np.zeros(distinct + 2, dtype=np.int64)
    accesses_at = np.zeros(distinct + 2, dtype=np.int64)
    histograms = _histograms_compiled if native.use_core() else _histograms_reference
    told = None if progress is None else labelled(progress, "requests scanned")
    tell(progress, 0, len(trace), "requests scanned")
    histograms(trace.offsets, trace.blocks, trace.input_length, block_size, warmup, hit_tokens_at, accesses_at, told)
    hits_within = np.cumsum(hit_tokens_at)  # [d]: hit tokens at capacity d (d <= distinct)
    accesses_within = np.cumsum(accesses_at)
    n = trace.num_accesses
    prompt = exact_sum(trace.input_length[warmup:])
    # oversize: requests of the window needing more blocks than the cache (engine/replay.py's rule)
    need = np.sort(-(-np.asarray(trace.input_length[warmup:], dtype=np.int64) // block_size))
    points = []
    accounts = lru_account(trace, capacities, block_size, warmup)  # the miss account per capacity (analysis/misses.py)
    for c, account in zip(capacities, accounts):
        hits = int(hits_within[min(c, distinct)])
        admissions = int(n - accesses_within[min(c, distinct)])
        final = min(c, distinct)
        points.append({
            "cache_capacity_blocks": c, "total_hit_tokens": hits, "total_prompt_tokens": prompt,
            "hit_rate": hits / prompt if prompt else 0.0, "final_cache_blocks": final,
            "admissions": admissions, "evictions": admissions - final,
            "oversize_requests": int(need.size - np.searchsorted(need, c, side="right")),
            **{k: account[k] for k in MISS_COLUMNS},
        })
    return CurveResult(
        trace=trace.source, policy="lru", block_size=block_size, warmup_fraction=float(warmup_fraction),
        window=window_text(warmup, len(trace)), num_requests=len(trace), points=points,
    )
