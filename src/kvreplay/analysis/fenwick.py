"""A Fenwick (binary indexed) tree over access times, inlined into the one-pass kernels
(analysis/mrc.py, analysis/stats.py): a 1 at time t marks a block's latest use, so the
prefix sum up to t counts the blocks last used at or before t."""

from __future__ import annotations

from ..jit import helper


@helper
def fenwick_sum(tree, i):
    """tree[1] + ... + tree[i] (i >= 0)."""
    total = 0
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


@helper
def fenwick_add(tree, i, delta):
    """Add `delta` at position i (1 <= i < len(tree))."""
    n = tree.shape[0] - 1
    while i <= n:
        tree[i] += delta
        i += i & -i
