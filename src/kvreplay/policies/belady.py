"""Belady's MIN, offline: evict the resident block whose next use is farthest in the future.

Next use, for prefix semantics: the replay visits block accesses in a fixed order
(requests in trace order, blocks in request order), so every access has a flat
position p. A block's next use after the access at p is the position of its next
access; a block never accessed again gets ``num_accesses + p`` (later than any real
use, and unique: among dead blocks, the one accessed last goes first). Every key is
unique, so the victim is always well defined and both engines agree.

With chained hashes, a block's predecessors sit before it in every request that
contains it, so their next use is never later than its own: farthest-first evicts a
prefix from its tail, which is what a prefix cache wants. It is still MIN on the
block stream, not a proven optimum for prefix hit tokens (that problem is harder);
``infinite`` is the true ceiling.

Resident: blocks in the cache. A hit refreshes the block's next use. A miss, when
the cache is full, evicts the resident block with the farthest next use, then admits
the block, unless ``admit_bypass`` is 1 and the block's own next use is farther than
every resident block's: then it is not admitted (counted in ``bypasses``).

Parameters: ``admit_bypass`` (0). Counters: ``admissions``, ``evictions``, ``bypasses``.
Needs the whole trace in advance (an offline bound, not a deployable policy).
"""

from __future__ import annotations

import heapq
from collections import namedtuple

import numpy as np

from ..jit import helper
from .base import Param, PolicySpec, ReferencePolicy, in_range, register_kernel, hold_arrays


def next_use(trace) -> np.ndarray:
    """int64[num_accesses]: for each flat access position p, the position of the same block's next
    access, or num_accesses + p when there is none."""
    n = trace.num_accesses
    out = np.arange(n, 2 * n, dtype=np.int64)
    if n:
        order = np.argsort(trace.blocks, kind="stable")  # positions grouped by block, ascending
        same = trace.blocks[order[1:]] == trace.blocks[order[:-1]]
        out[order[:-1][same]] = order[1:][same]
    return out


class Belady(ReferencePolicy):
    """Reference MIN with a heap of (-next_use, block) and lazy deletion."""

    def __init__(self, capacity: int, trace=None, admit_bypass: int = 0):
        self.capacity = capacity
        self.admit_bypass = admit_bypass
        self.next_use = next_use(trace).tolist()
        self.offsets = trace.offsets.tolist()
        self.key: dict = {}  # resident block -> its next use
        self.heap: list = []
        self.stats = {"admissions": 0, "evictions": 0, "bypasses": 0}

    def resident(self, b) -> bool:
        return b in self.key

    def _farthest(self) -> tuple[int, int]:
        while True:
            neg_key, b = self.heap[0]
            if self.key.get(b) == -neg_key:
                return -neg_key, b
            heapq.heappop(self.heap)  # stale: the block was refreshed or evicted since

    def access_request(self, request, blocks, hits, input_length, block_size) -> None:
        start = self.offsets[request]
        for j, b in enumerate(blocks):
            key = self.next_use[start + j]
            if b not in self.key and len(self.key) >= self.capacity:
                far_key, victim = self._farthest()
                if self.admit_bypass and key > far_key:
                    self.stats["bypasses"] += 1
                    continue
                heapq.heappop(self.heap)
                del self.key[victim]
                self.stats["evictions"] += 1
            if b not in self.key:
                self.stats["admissions"] += 1
            self.key[b] = key
            heapq.heappush(self.heap, (-key, b))

    def access(self, b) -> None:  # pragma: no cover - Belady needs positions: access_request is used
        raise NotImplementedError("belady accesses blocks through access_request")

    def size(self) -> int:
        return len(self.key)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return self.key.keys()


# ---- compiled engine: a binary max-heap of (key, block) in arrays, lazy deletion -----------------

SIZE, CAPACITY, HEAP_SIZE, BYPASS, ADMISSIONS, EVICTIONS, BYPASSES = range(7)
BeladyState = namedtuple("BeladyState", ["key", "next_use", "heap_key", "heap_block", "meta", "pins", "hold"])


def make_state(capacity: int, trace, admit_bypass: int = 0) -> BeladyState:
    meta = np.zeros(7, dtype=np.int64)
    meta[CAPACITY], meta[BYPASS] = capacity, admit_bypass
    # One push per access at most, so the heap never needs more slots than accesses.
    slots = max(1, trace.num_accesses)
    return BeladyState(
        key=np.full(trace.num_blocks, -1, dtype=np.int64),  # -1: not resident
        next_use=next_use(trace),
        heap_key=np.zeros(slots, dtype=np.int64),
        heap_block=np.zeros(slots, dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: BeladyState) -> tuple[int, dict]:
    m = state.meta
    return int(m[SIZE]), {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS]), "bypasses": int(m[BYPASSES])}


@helper
def _heap_push(st, key, b):
    hk, hb, m = st.heap_key, st.heap_block, st.meta
    i = m[HEAP_SIZE]
    m[HEAP_SIZE] += 1
    while i > 0:
        parent = (i - 1) // 2
        if hk[parent] >= key:
            break
        hk[i] = hk[parent]
        hb[i] = hb[parent]
        i = parent
    hk[i] = key
    hb[i] = b


@helper
def _heap_pop(st):
    hk, hb, m = st.heap_key, st.heap_block, st.meta
    m[HEAP_SIZE] -= 1
    n = m[HEAP_SIZE]
    key, b = hk[n], hb[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and hk[child + 1] > hk[child]:
            child += 1
        if hk[child] <= key:
            break
        hk[i] = hk[child]
        hb[i] = hb[child]
        i = child
    hk[i] = key
    hb[i] = b


@helper
def _drop_stale(st):
    while st.key[st.heap_block[0]] != st.heap_key[0]:
        _heap_pop(st)


@helper
def _resident(st, b):
    return st.key[b] >= 0


@helper
def _access_request(st, request, blocks, start, end, hits, input_length, block_size):
    m = st.meta
    for j in range(start, end):
        b = blocks[j]
        key = st.next_use[j]
        if st.key[b] < 0:
            if m[SIZE] >= m[CAPACITY]:
                _drop_stale(st)
                if m[BYPASS] != 0 and key > st.heap_key[0]:
                    m[BYPASSES] += 1
                    continue
                st.key[st.heap_block[0]] = -1
                _heap_pop(st)
                m[SIZE] -= 1
                m[EVICTIONS] += 1
            m[SIZE] += 1
            m[ADMISSIONS] += 1
        st.key[b] = key
        _heap_push(st, key, b)


register_kernel(BeladyState, _resident, access_request_impl=_access_request)

POLICY = PolicySpec(
    name="belady",
    summary="Belady's MIN (offline): evict the block whose next use is farthest",
    reference=Belady,
    make_state=make_state,
    read_state=read_state,
    resident_mask=lambda state: state.key >= 0,
    params=(Param("admit_bypass", 0, int, "1: do not admit a block whose next use is farther than every resident block's", in_range(0, 1)),),
)
