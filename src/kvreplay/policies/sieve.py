"""SIEVE (Zhang, Yang, Yue, Vigfusson, Rashmi, NSDI 2024, "SIEVE is Simpler than LRU"), Algorithm 1.

State: one FIFO queue of resident blocks (head = newest, tail = oldest), a
``visited`` bit per resident block, and a hand pointing at the next eviction
candidate (or at nothing, meaning "start from the tail").

Resident: every block in the queue. Final size is the queue's length.

Access of ``b`` (every block of every request, after the prefix scan):
- resident: ``visited = 1``; nothing moves (lazy promotion);
- otherwise, if the queue holds ``capacity`` blocks, evict one: start at the hand
  (at the tail when the hand points at nothing); while the block there is
  visited, clear its bit and step one place toward the head, wrapping from past
  the head back to the tail; evict the first unvisited block found, and leave
  the hand on the block just newer than it (nothing if it was the head, so the
  next eviction starts again from the tail). Then insert ``b`` at the head with
  ``visited = 0``.

The hand keeps its place between evictions. Blocks it has passed (older than
it, their bits just cleared) stay until it wraps round to them again; blocks
newer than it, every new block included, are examined first, so a new block not
hit before the hand reaches it goes quickly (the paper's "quick demotion"),
while a hit keeps a block where it is ("lazy promotion").

Holds (pin): a held block is in use, so the hand passes over it in place, visited or not, and
leaves its visited bit untouched (holding is not an access, and a pass that could not evict the
block does not use up its second chance; PostgreSQL's clock sweep treats a pinned buffer the
same way); the hand keeps its usual moves, so the block is examined again when the hand comes
round. The sweep ends: some resident block is unheld, and within two turns of the hand its bit
is clear. A miss when every resident block is held is refused.

Parameters: none. Counters: ``admissions`` (blocks inserted), ``evictions``.
Source: Algorithm 1 of the NSDI'24 paper; libCacheSim's ``Sieve.c`` (which
keeps the visited bit as a 0/1 ``freq``) implements the same hand moves.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .base import ReferencePolicy, PolicySpec, hold_arrays, meta_slots


class SIEVE(ReferencePolicy):
    """Reference SIEVE: the paper's Algorithm 1 over a doubly linked list held in dicts.

    ``newer[b]`` is the neighbour toward the head (the paper's ``b.prev``), ``older[b]``
    the neighbour toward the tail; None at the ends.
    """

    def __init__(self, capacity: int, trace=None):
        self.capacity = capacity
        self.visited: dict = {}  # resident block -> visited bit
        self.newer: dict = {}
        self.older: dict = {}
        self.head = self.tail = self.hand = None
        self.stats = {"admissions": 0, "evictions": 0}

    def resident(self, b) -> bool:
        return b in self.visited

    def access(self, b) -> None:
        if b in self.visited:
            self.visited[b] = True
            return
        if len(self.visited) >= self.capacity:
            if self.refused_when_all_held():
                return
            self._evict()
        self._insert_at_head(b)
        self.stats["admissions"] += 1

    def _evict(self) -> None:
        o = self.hand if self.hand is not None else self.tail
        while self.visited[o] or self.held(o):
            if not self.held(o):  # held: in use, passed over in place with its bit kept
                self.visited[o] = False
            o = self.newer[o] if self.newer[o] is not None else self.tail
        self.hand = self.newer[o]  # None when o is the head: the next eviction starts at the tail
        self._remove(o)
        self.note_evicted(o)
        self.stats["evictions"] += 1

    def _insert_at_head(self, b) -> None:
        self.newer[b], self.older[b] = None, self.head
        if self.head is not None:
            self.newer[self.head] = b
        else:
            self.tail = b
        self.head = b
        self.visited[b] = False

    def _remove(self, b) -> None:
        newer, older = self.newer.pop(b), self.older.pop(b)
        if newer is not None:
            self.older[newer] = older
        else:
            self.head = older
        if older is not None:
            self.newer[older] = newer
        else:
            self.tail = newer
        del self.visited[b]

    def size(self) -> int:
        return len(self.visited)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return self.visited.keys()


# ---- compiled engine: the queue threaded through per-block newer/older arrays (-1 = none) -------

META = meta_slots("sieve")  # the meta array's slots, by the names sieve.c gives them
HEAD, TAIL, HAND, SIZE, CAPACITY, ADMISSIONS, EVICTIONS = META.HEAD, META.TAIL, META.HAND, META.SIZE, META.CAPACITY, META.ADMISSIONS, META.EVICTIONS
META_SLOTS = len(META)
SIEVEState = namedtuple("SIEVEState", ["cached", "visited", "newer", "older", "meta", "pins", "hold"])


def make_state(capacity: int, trace) -> SIEVEState:
    num_blocks = trace.num_blocks
    meta = np.zeros(META_SLOTS, dtype=np.int64)
    meta[[HEAD, TAIL, HAND, CAPACITY]] = -1, -1, -1, capacity
    return SIEVEState(
        cached=np.zeros(num_blocks, dtype=np.int8),
        visited=np.zeros(num_blocks, dtype=np.int8),
        newer=np.full(num_blocks, -1, dtype=np.int32),
        older=np.full(num_blocks, -1, dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: SIEVEState) -> tuple[int, dict]:
    m = state.meta
    return int(m[SIZE]), {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS])}


def resident_mask(state: SIEVEState) -> np.ndarray:
    return state.cached != 0


POLICY = PolicySpec(
    name="sieve",
    native="sieve",
    summary="SIEVE: FIFO queue + visited bit + a hand that sweeps tail to head (Zhang et al., NSDI'24)",
    reference=SIEVE,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    residency_bits=True,
)
