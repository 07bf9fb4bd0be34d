"""A Fenwick (binary indexed) tree over access times, for the plain-Python references of the
one-pass kernels (analysis/mrc.py, analysis/stats.py; compiled: include/fenwick.h): a 1 at time t
marks a block's latest use, so the prefix sum up to t counts the blocks last used at or before t.
`tree` is a list of n + 1 counts (tree[0] unused)."""

from __future__ import annotations


def fenwick_sum(tree, i: int) -> int:
    """tree[1] + ... + tree[i] (i >= 0)."""
    total = 0
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


def fenwick_add(tree, i: int, delta: int) -> None:
    """Add `delta` at position i (1 <= i < len(tree))."""
    n = len(tree) - 1
    while i <= n:
        tree[i] += delta
        i += i & -i
