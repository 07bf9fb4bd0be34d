"""Reuse distances at each request's prefix scan, one per access, in one compiled pass
(distances.c), kept per trace.

``distance[j]`` of the access at flat position j (block b of request i): 1 + the number of
distinct blocks that requests before i used since b's previous use (-1: no request before i used
b). It is the smallest LRU cache that still holds b when request i arrives: an LRU cache of C
blocks holds b then exactly when ``distance <= C`` (LRU's inclusion property; analysis/mrc.py
builds its curve on the same distances). The miss account gives it for every evicted block, so
a reader sees which capacity would have kept it: distances_at computes those alone, with a tree of
1.5 times the blocks instead of arrays per access (on a 60M-access trace, 131 MiB instead of 524).
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from .. import native

_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def scan_distances(trace) -> np.ndarray:
    """int32 per access (read-only): the distance defined above (at most the trace's blocks, which
    are int32 ids); computed once per trace."""
    out = _CACHE.get(trace)
    if out is None:
        accesses = trace.num_accesses
        out = np.empty(max(1, accesses), dtype=np.int32)
        tree = np.zeros(accesses + 1, dtype=np.int32)
        last = np.zeros(max(1, trace.num_blocks), dtype=np.int64)
        offsets = np.ascontiguousarray(trace.offsets, dtype=np.int64)
        blocks = np.ascontiguousarray(trace.blocks, dtype=np.int32)
        if native.use_core():
            p, i = ctypes.c_void_p, ctypes.c_int64
            native.function("kv_scan_distances", None, p, i, p, p, p, p)(
                native.ptr(offsets), len(trace), native.ptr(blocks), native.ptr(out), native.ptr(tree),
                native.ptr(last))
        else:
            _scan_distances_reference(offsets.tolist(), blocks.tolist(), out, [0] * (accesses + 1),
                                      [0] * max(1, trace.num_blocks))
        out = out[:accesses]
        out.flags.writeable = False
        _CACHE[trace] = out
    return out


def distances_at(trace, at: np.ndarray, slots: int | None = None) -> np.ndarray:
    """int32 per flat position of `at` (ascending): ``scan_distances(trace)[at]`` without an array
    per access (kv_distances_at: a tree of `slots` time slots, default 1.5 times the trace's blocks,
    renumbered when they run out); what the miss account's evicted detail reads. Without the
    core, or when the trace's scan is kept already: that scan, indexed."""
    at = np.ascontiguousarray(at, dtype=np.int64)
    scanned = _CACHE.get(trace)
    if scanned is not None or not native.use_core():
        return (scanned if scanned is not None else scan_distances(trace))[at]
    blocks_used = max(1, trace.num_blocks)
    size = min(blocks_used + blocks_used // 2 + 1, 2**31 - 1) if slots is None else int(slots)
    if size <= blocks_used:
        raise ValueError(f"distances_at needs more slots than the trace's {blocks_used:,} blocks, not {size:,}")
    out = np.empty(max(1, at.size), dtype=np.int32)
    tree = np.zeros(size + 1, dtype=np.int32)
    owner = np.full(size + 1, -1, dtype=np.int32)
    last = np.zeros(blocks_used, dtype=np.int32)
    offsets = np.ascontiguousarray(trace.offsets, dtype=np.int64)
    blocks = np.ascontiguousarray(trace.blocks, dtype=np.int32)
    p, i = ctypes.c_void_p, ctypes.c_int64
    native.function("kv_distances_at", None, p, i, p, p, i, p, p, p, i, p)(
        native.ptr(offsets), len(trace), native.ptr(blocks), native.ptr(at), at.size, native.ptr(out), native.ptr(tree),
        native.ptr(owner), size, native.ptr(last))
    return out[:at.size]


def _scan_distances_reference(offsets: list, blocks: list, out: np.ndarray, tree: list, last: list) -> None:
    """kv_scan_distances (distances.c) in Python, for an install without the core: a Fenwick tree
    over access times marks each block's latest use; a request reads its distances before it marks."""
    size = len(tree) - 1

    def marks_upto(k):
        total = 0
        while k > 0:
            total += tree[k]
            k -= k & -k
        return total

    def add(k, delta):
        while k <= size:
            tree[k] += delta
            k += k & -k

    marked = t = 0
    for i in range(len(offsets) - 1):
        start, end = offsets[i], offsets[i + 1]
        for j in range(start, end):
            p = last[blocks[j]]
            out[j] = -1 if p == 0 else marked - marks_upto(p) + 1
        for j in range(start, end):
            p = last[blocks[j]]
            if p == 0:
                marked += 1
            else:
                add(p, -1)
            t += 1
            add(t, 1)
            last[blocks[j]] = t


_PEAKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def running_max(trace) -> np.ndarray:
    """Per access, the largest scan distance of its request's blocks up to and including it, a
    first use counting as num_blocks + 1 (more than any cache needs): an LRU cache of C blocks
    hits block j of a request exactly when this is <= C. Computed once per trace (read-only)."""
    out = _PEAKS.get(trace)
    if out is None:
        never = trace.num_blocks + 1
        distance = scan_distances(trace)
        d = np.where(distance < 0, never, distance)
        request = np.repeat(np.arange(len(trace), dtype=np.int64), np.diff(trace.offsets))
        stride = never + 1
        out = np.maximum.accumulate(request * stride + d) - request * stride
        out.flags.writeable = False
        _PEAKS[trace] = out
    return out
