"""Per-block facts computed in one pass over the accesses, in O(unique blocks) memory."""

from __future__ import annotations

import numpy as np



def _first_access(offsets, blocks, first, pred) -> None:
    """Compiled: index.c; without the core, the same in numpy (_first_access_numpy)."""
    from .. import native

    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    blocks = np.ascontiguousarray(blocks, dtype=np.int32)
    if not native.use_core():
        _first_access_numpy(offsets, blocks, first, pred)
        return
    p, i = native.POINTER, native.COUNT
    native.function("kv_first_access", None, p, i, p, p, p)(offsets.ctypes.data, offsets.shape[0] - 1, blocks.ctypes.data,
                                                           first.ctypes.data, pred.ctypes.data)


def _first_access_numpy(offsets, blocks, first, pred) -> None:
    """index.c's pass, vectorised: a block's first access is its first flat position; the block
    before it there, unless that position starts a request."""
    if blocks.size == 0:
        return
    used, position = np.unique(blocks, return_index=True)
    first[used] = position
    starts = np.zeros(blocks.size, dtype=bool)
    starts[offsets[:-1][offsets[:-1] < blocks.size]] = True
    pred[used] = np.where(starts[position], -1, blocks[np.maximum(position - 1, 0)])


def first_access(offsets: np.ndarray, blocks: np.ndarray, num_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, pred): for each block, the flat position of its first access (-1 if never used) and
    the block before it in that request (-1 when it starts the request or is never used)."""
    first = np.full(num_blocks, -1, dtype=np.int64)
    pred = np.full(num_blocks, -1, dtype=np.int32)
    _first_access(offsets, blocks, first, pred)
    return first, pred
