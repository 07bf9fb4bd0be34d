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

Holds (pin): a held block is in use, so it is never the victim: a miss evicts the unheld
resident block with the farthest next use (MIN restricted to what may go). Held blocks met on
the way down the heap are taken off and pushed back once the victim is found, so every resident
block keeps its one live heap entry. With ``admit_bypass`` the missing block's next use is
compared with that victim's, the farthest the cache could give up: a bypassed block is not
admitted and not held, without a refusal, and the request goes on with its next block. A miss
at capacity when every resident block is held is refused (before any bypass test). A running
request (``pin_request``) is ``access_request`` with each admitted or hit block held; its
handles are the held blocks, released first to last (the default ``unpin_request``: releasing
changes no next use).

Eviction log (base.py): each evicted block; a bypassed block was never resident, so it is not.

Parameters: ``admit_bypass`` (0). Counters: ``admissions``, ``evictions``, ``bypasses``.
Needs the whole trace in advance (an offline bound, not a deployable policy).
"""

from __future__ import annotations

import heapq
from collections import namedtuple

import numpy as np

from .. import native
from ..errors import ConfigError
from .base import Param, PolicySpec, ReferencePolicy, in_range, hold_arrays, meta_slots

#: next uses, heap keys and block keys are uint32 (4 bytes per access, not 8): a next use is below
#: 2 * num_accesses, so under ABSENT (a block's key when it is not resident) below 2**31 accesses.
MAX_ACCESSES = 2**31 - 1
ABSENT = np.iinfo(np.uint32).max
_CHUNK = 1 << 22  # positions per step of next_use's scatter (its temporaries stay small)


def _accesses(trace) -> int:
    n = trace.num_accesses
    if n > MAX_ACCESSES:
        raise ConfigError(f"belady: the trace has {n:,} block accesses; at most 2**31 - 1 = {MAX_ACCESSES:,} "
                          "(its next uses are 32-bit positions)")
    return n


def next_use(trace) -> np.ndarray:
    """uint32[num_accesses]: for each flat access position p, the position of the same block's next
    access, or num_accesses + p when there is none. In numpy (the reference engine's; the compiled
    engine's is belady.c's kv_belady_next_use, one pass from the end, see compiled_next_use)."""
    n = _accesses(trace)
    out = np.arange(n, 2 * n, dtype=np.uint32)
    if n:
        blocks = trace.blocks
        order = np.argsort(blocks, kind="stable").astype(np.uint32)  # positions grouped by block, ascending
        for start in range(0, n - 1, _CHUNK):
            here = order[start:start + _CHUNK + 1]
            same = blocks[here[1:]] == blocks[here[:-1]]
            out[here[:-1][same]] = here[1:][same]
    return out


def compiled_next_use(trace) -> np.ndarray:
    """next_use(trace), by the core in one pass: 4 bytes per access and per id, no sort."""
    n = _accesses(trace)
    out = np.empty(n, dtype=np.uint32)
    if n:
        blocks = np.ascontiguousarray(trace.blocks, dtype=np.int32)
        last = np.full(int(blocks.max()) + 1, ABSENT, dtype=np.uint32)
        p, i = native.POINTER, native.COUNT
        native.function("kv_belady_next_use", None, p, i, p, p)(blocks.ctypes.data, n, last.ctypes.data, out.ctypes.data)
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

    def _farthest_unheld(self) -> tuple[int, int, list]:
        """_farthest() among unheld blocks, on top of the heap: the held entries above it are
        taken off and returned (the caller pushes them back)."""
        aside = []
        while True:
            far_key, victim = self._farthest()
            if not self.held(victim):
                return far_key, victim, aside
            aside.append(heapq.heappop(self.heap))

    def access_request(self, request, blocks, hits, input_length, block_size) -> None:
        self._run(request, blocks, hold=False)

    def pin_request(self, request, blocks, hits, input_length, block_size) -> list:
        return self._run(request, blocks, hold=True)

    def _run(self, request, blocks, hold) -> list:
        """The access phase; with hold, each block admitted or hit is held. The held blocks."""
        start = self.offsets[request]
        held = []
        for j, b in enumerate(blocks):
            key = self.next_use[start + j]
            if b not in self.key and len(self.key) >= self.capacity:
                if self.refused_when_all_held():
                    break
                far_key, victim, aside = self._farthest_unheld()
                bypass = self.admit_bypass and key > far_key
                if not bypass:
                    heapq.heappop(self.heap)
                    del self.key[victim]
                    self.note_evicted(victim)
                    self.stats["evictions"] += 1
                for entry in aside:  # held: back on the heap
                    heapq.heappush(self.heap, entry)
                if bypass:
                    self.stats["bypasses"] += 1
                    continue
            if b not in self.key:
                self.stats["admissions"] += 1
            self.key[b] = key
            heapq.heappush(self.heap, (-key, b))
            if hold:
                self.pin(b)
                held.append(b)
        return held

    def access(self, b) -> None:  # pragma: no cover - Belady needs positions: access_request is used
        raise NotImplementedError("belady accesses blocks through access_request")

    def size(self) -> int:
        return len(self.key)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return self.key.keys()


# ---- compiled engine: a binary max-heap of (key, block) in arrays, lazy deletion -----------------

META = meta_slots("belady")  # the meta array's slots, by the names belady.c gives them
SIZE, CAPACITY, HEAP_SIZE, BYPASS, ADMISSIONS, EVICTIONS, BYPASSES = META.SIZE, META.CAPACITY, META.HEAP_SIZE, META.BYPASS, META.ADMISSIONS, META.EVICTIONS, META.BYPASSES
BeladyState = namedtuple("BeladyState", ["key", "next_use", "heap_key", "heap_block", "meta", "pins", "hold"])


def make_state(capacity: int, trace, admit_bypass: int = 0) -> BeladyState:
    meta = np.zeros(7, dtype=np.int64)
    meta[CAPACITY], meta[BYPASS] = capacity, admit_bypass
    # One push per access at most, so the heap never needs more slots than accesses; at most
    # `capacity` entries are live, so a push into a full heap drops the stale ones (belady.c
    # belady_make_room): twice the capacity keeps that rare, and a held block set aside takes the slot
    # its heap entry left.
    slots = max(1, min(trace.num_accesses, 2 * capacity + 2))
    return BeladyState(
        key=np.full(trace.num_blocks, ABSENT, dtype=np.uint32),  # ABSENT: not resident
        next_use=compiled_next_use(trace),
        heap_key=np.zeros(slots, dtype=np.uint32),
        heap_block=np.zeros(slots, dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: BeladyState) -> tuple[int, dict]:
    m = state.meta
    return int(m[SIZE]), {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS]), "bypasses": int(m[BYPASSES])}


# Holds (the lifecycle engine only; the sequential _access_request above never meets a held
# block). Held entries taken off the heap wait at the far end of the heap arrays, beyond the heap:
# each one taken off shrinks the heap by the slot it fills, so the two never overlap.


POLICY = PolicySpec(
    name="belady",
    native="belady",
    summary="Belady's MIN (offline): evict the block whose next use is farthest",
    reference=Belady,
    make_state=make_state,
    read_state=read_state,
    resident_mask=lambda state: state.key != ABSENT,
    params=(Param("admit_bypass", 0, int, "1: do not admit a block whose next use is farther than every resident block's", in_range(0, 1)),),
    bound=True,
    sized_per_call=True,
    residency_bits=True,
)
