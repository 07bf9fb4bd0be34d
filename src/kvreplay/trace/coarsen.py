"""Coarser blocks from a hash-id trace: k consecutive blocks become one (exact for chained ids).

A trace's ids are chained: block j's id stands for every token up to the end of block j. A
block of k x block_size tokens ending where fine block (j + 1) k - 1 ends is therefore
identified by that fine block's id, as vLLM identifies a larger group block by the hash at its
last boundary (kv_cache_utils.BlockHashListWithBlockSize). A request keeps its prompt; its
coarse blocks are its fine ids at positions k - 1, 2k - 1, ..., plus its last fine id for a
partial tail (a partial block is never hit, so its id only has to be its own). What cannot be
made: a block size that is not a multiple of the trace's (hash ids never split).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import ConfigError


def coarsen(trace, factor: int, block_size: int):
    """`trace` (at `block_size` tokens per id) with `factor` ids per block: a trace at
    block_size x factor, ids renumbered densely in first-use order."""
    if isinstance(factor, bool) or not isinstance(factor, (int, np.integer)) or factor < 1:
        raise ConfigError(f"factor must be a whole number of blocks >= 1, got {factor!r}")
    if factor == 1:
        return trace
    keep = []
    for i in range(len(trace.input_length)):
        start, stop = int(trace.offsets[i]), int(trace.offsets[i + 1])
        picks = list(range(start + factor - 1, stop, factor))
        if (stop - start) % factor:
            picks.append(stop - 1)
        keep.append(picks)
    index = np.fromiter((j for picks in keep for j in picks), dtype=np.int64)
    offsets = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in keep], out=offsets[1:])
    fine = trace.blocks[index]
    used, dense = np.unique(fine, return_inverse=True)
    first = np.full(len(used), len(fine), dtype=np.int64)
    np.minimum.at(first, dense, np.arange(len(fine)))
    order = np.argsort(first, kind="stable")  # first-use order, as a loaded trace numbers its ids
    renumber = np.empty(len(used), dtype=np.int32)
    renumber[order] = np.arange(len(used), dtype=np.int32)
    return replace(trace, offsets=offsets, blocks=renumber[dense].astype(np.int32), num_blocks=int(len(used)),
                   block_size=block_size * factor, original_ids=None)
