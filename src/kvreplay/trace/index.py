"""Per-block facts computed in one pass over the accesses, in O(unique blocks) memory."""

from __future__ import annotations

import numpy as np



def _first_access(offsets, blocks, first, pred) -> None:
    """Compiled: index.c."""
    import ctypes

    from .. import native

    p, i = ctypes.c_void_p, ctypes.c_int64
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    blocks = np.ascontiguousarray(blocks, dtype=np.int32)
    native.function("kv_first_access", None, p, i, p, p, p)(offsets.ctypes.data, offsets.shape[0] - 1, blocks.ctypes.data,
                                                           first.ctypes.data, pred.ctypes.data)


def first_access(offsets: np.ndarray, blocks: np.ndarray, num_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, pred): for each block, the flat position of its first access (-1 if never used) and
    the block before it in that request (-1 when it starts the request or is never used)."""
    first = np.full(num_blocks, -1, dtype=np.int64)
    pred = np.full(num_blocks, -1, dtype=np.int32)
    _first_access(offsets, blocks, first, pred)
    return first, pred
