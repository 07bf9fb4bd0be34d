"""LFU: evict the least frequently used block; among those, the least recently used.

State: a frequency per resident block (its accesses since it was last admitted) and its
last-access order. Resident: every block with a frequency. Access of a resident block adds
one to its frequency and makes it the most recent; access of a missing block, when
``capacity`` blocks are resident, first evicts the block with the smallest frequency, the
least recently accessed one among equals, then admits the new block with frequency 1.

The frequency is in-cache: nothing is remembered about evicted blocks, so a block
re-admitted after an eviction starts again at 1 however often it was used before (the
classic LFU of the literature; "perfect LFU", which keeps counts forever, is not this).
A new block therefore often is the next victim: with a full cache of blocks at frequency
>= 2, each new block evicts the previous new one.

Holds (pin): a held block with the smallest frequency is in use by a running request: it is
skipped in place (it keeps its bucket, frequency and recency; a hold is not an access, so it
earns no count) and the next candidate is considered: the next least recent block of the same
frequency, then the next frequency up. The victim is thus the unheld resident block with the
smallest (frequency, last access), the definition above restricted to unheld blocks. Moving a
held block would have to give it a count or a recency it did not earn; left in place, it is the
first candidate again once released. A miss when every resident block is held is refused.

Parameters: none. Counters: ``admissions``, ``evictions``.

Source: textbook LFU with LRU tie-breaking. The compiled engine is O(1) per access, after
Shah, Mitra & Matani, "An O(1) algorithm for implementing the LFU cache eviction scheme"
(2010), with an array of per-frequency lists (each in recency order) indexed by frequency
and a pointer to the smallest frequency in place of the paper's list of frequency nodes.
"""

from __future__ import annotations

import heapq
from collections import namedtuple
from itertools import count

import numpy as np

from .base import ReferencePolicy, PolicySpec, hold_arrays, meta_slots


class LFU(ReferencePolicy):
    """Reference LFU: the victim is the resident block with the smallest (frequency, last access).

    A heap of (frequency, last_access, block) entries with lazy deletion: an entry whose
    values are no longer the block's current ones is stale and skipped when popped.
    """

    def __init__(self, capacity: int, trace=None):
        self.capacity = capacity
        self.freq: dict = {}  # resident block -> accesses since admission
        self.last: dict = {}  # resident block -> tick of its last access
        self.heap: list = []
        self.ticks = count()
        self.stats = {"admissions": 0, "evictions": 0}

    def resident(self, b) -> bool:
        return b in self.freq

    def access(self, b) -> None:
        if b not in self.freq:
            if len(self.freq) >= self.capacity:
                if self.refused_when_all_held():
                    return
                self._evict()
            self.freq[b] = 0  # in-cache frequency: starts afresh on every admission
            self.stats["admissions"] += 1
        self.freq[b] += 1
        self.last[b] = next(self.ticks)
        heapq.heappush(self.heap, (self.freq[b], self.last[b], b))

    def _evict(self) -> None:
        held = []  # current entries of held blocks: skipped in place, pushed back unchanged
        while True:  # ends: some resident block is not held (access refuses otherwise)
            entry = f, t, b = heapq.heappop(self.heap)
            if self.freq.get(b) == f and self.last[b] == t:
                if not self.held(b):
                    break
                held.append(entry)
        for entry in held:
            heapq.heappush(self.heap, entry)
        del self.freq[b], self.last[b]
        self.note_evicted(b)
        self.stats["evictions"] += 1

    def size(self) -> int:
        return len(self.freq)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return self.freq.keys()


# ---- compiled engine: frequency buckets -----------------------------------------------------------

# Bucket f is a doubly linked list (through per-block prev/next, -1 = none) of the resident
# blocks with frequency f, least recent at the head: a block enters bucket f at the access
# that gave it frequency f and stays until its next access or its eviction, so bucket order
# is last-access order. The victim is the head of bucket MIN_FREQ. A block's frequency never
# exceeds its number of accesses in the trace, which sizes the bucket arrays.
META = meta_slots("lfu")  # the meta array's slots, by the names lfu.c gives them
SIZE, CAPACITY, MIN_FREQ, ADMISSIONS, EVICTIONS = META.SIZE, META.CAPACITY, META.MIN_FREQ, META.ADMISSIONS, META.EVICTIONS
LFUState = namedtuple("LFUState", ["freq", "prev", "next", "bucket_head", "bucket_tail", "meta", "pins", "hold"])


def make_state(capacity: int, trace) -> LFUState:
    num_blocks = trace.num_blocks
    max_accesses = int(np.bincount(trace.blocks, minlength=1).max())
    meta = np.zeros(5, dtype=np.int64)
    meta[CAPACITY] = capacity
    return LFUState(
        freq=np.zeros(num_blocks, dtype=np.int32),  # 0 = not resident
        prev=np.full(num_blocks, -1, dtype=np.int32),
        next=np.full(num_blocks, -1, dtype=np.int32),
        bucket_head=np.full(max_accesses + 2, -1, dtype=np.int32),
        bucket_tail=np.full(max_accesses + 2, -1, dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: LFUState) -> tuple[int, dict]:
    m = state.meta
    return int(m[SIZE]), {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS])}


POLICY = PolicySpec(
    name="lfu",
    native="lfu",
    summary="LFU: evict the least frequently used block (in-cache counts), least recently used among ties",
    reference=LFU,
    make_state=make_state,
    read_state=read_state,
    resident_mask=lambda state: state.freq != 0,
    residency_bits=True,
)
