"""Per-block facts computed in one pass over the accesses, in O(unique blocks) memory."""

from __future__ import annotations

import numpy as np

from ..jit import kernel


def _first_access_py(offsets, blocks, first, pred):
    for i in range(offsets.shape[0] - 1):
        previous = -1
        for p in range(offsets[i], offsets[i + 1]):
            b = blocks[p]
            if first[b] < 0:
                first[b] = p
                pred[b] = previous
            previous = b


_first_access = kernel(_first_access_py)


def first_access(offsets: np.ndarray, blocks: np.ndarray, num_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, pred): for each block, the flat position of its first access (-1 if never used) and
    the block before it in that request (-1 when it starts the request or is never used)."""
    first = np.full(num_blocks, -1, dtype=np.int64)
    pred = np.full(num_blocks, -1, dtype=np.int32)
    _first_access(offsets, blocks, first, pred)
    return first, pred
