"""LRU: evict the block whose last access is oldest.

State: one recency list (head = least recently used, tail = most recent).
Resident: every block in the list. Access of a resident block moves it to the
tail; access of a missing block evicts the head when the list holds
``capacity`` blocks, then appends the block at the tail. Within a request the
blocks are accessed first to last, so a request's tail blocks end up most
recent (compare ``lru-tail`` in later versions, which refreshes them tail first).

Holds (pin): a held block at the least recent end is in use: it moves to the most recent end
and the next one is considered (requeued, not skipped in place). A miss when every resident block
is held is refused.

Parameters: none. Counters: ``admissions``, ``evictions``.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from .base import ReferencePolicy, PolicySpec, hold_arrays, meta_slots


class LRU(ReferencePolicy):
    """Reference LRU over an OrderedDict (first item = least recently used)."""

    def __init__(self, capacity: int, trace=None):
        self.capacity = capacity
        self.order: OrderedDict = OrderedDict()
        self.stats = {"admissions": 0, "evictions": 0}

    def resident(self, b) -> bool:
        return b in self.order

    def access(self, b) -> None:
        if b in self.order:
            self.order.move_to_end(b)
            return
        if len(self.order) >= self.capacity:
            if self.refused_when_all_held():
                return
            while self.held(victim := next(iter(self.order))):
                self.order.move_to_end(victim)  # held: in use, so it becomes most recent
            del self.order[victim]
            self.note_evicted(victim)
            self.stats["evictions"] += 1
        self.order[b] = None
        self.stats["admissions"] += 1

    def size(self) -> int:
        return len(self.order)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return self.order.keys()


# ---- compiled engine: a doubly linked list threaded through per-block prev/next arrays ----------

META = meta_slots("lru")  # the meta array's slots, by the names lru.c gives them
HEAD, TAIL, SIZE, CAPACITY, ADMISSIONS, EVICTIONS = META.HEAD, META.TAIL, META.SIZE, META.CAPACITY, META.ADMISSIONS, META.EVICTIONS
LRUState = namedtuple("LRUState", ["cached", "prev", "next", "meta", "pins", "hold"])


def make_state(capacity: int, trace) -> LRUState:
    num_blocks = trace.num_blocks
    meta = np.zeros(6, dtype=np.int64)
    meta[[HEAD, TAIL, CAPACITY]] = -1, -1, capacity
    return LRUState(
        cached=np.zeros(num_blocks, dtype=np.int8),
        prev=np.full(num_blocks, -1, dtype=np.int32),
        next=np.full(num_blocks, -1, dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: LRUState) -> tuple[int, dict]:
    m = state.meta
    return int(m[SIZE]), {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS])}


POLICY = PolicySpec(
    name="lru",
    native="lru",
    summary="LRU: evict the least recently accessed block",
    reference=LRU,
    make_state=make_state,
    read_state=read_state,
    resident_mask=lambda state: state.cached != 0,
    residency_bits=True,
)
