"""FIFO: evict the block admitted longest ago; hits change nothing.

State: one queue of resident blocks in admission order (head = oldest).
Access of a resident block does nothing; access of a missing block evicts the
head when the queue holds ``capacity`` blocks, then appends the block at the
tail.

Holds (pin): a held block at the head goes back to the tail, as if admitted now (a ring
cannot leave it in place), and the next head is considered. A miss when every resident block is
held is refused.

Parameters: none. Counters: ``admissions``, ``evictions``.
"""

from __future__ import annotations

from collections import deque, namedtuple

import numpy as np

from .base import ReferencePolicy, PolicySpec, hold_arrays, meta_slots


class FIFO(ReferencePolicy):
    """Reference FIFO over a deque and a set."""

    def __init__(self, capacity: int, trace=None):
        self.capacity = capacity
        self.queue: deque = deque()
        self.members: set = set()
        self.stats = {"admissions": 0, "evictions": 0}

    def resident(self, b) -> bool:
        return b in self.members

    def access(self, b) -> None:
        if b in self.members:
            return
        if len(self.queue) >= self.capacity:
            if self.refused_when_all_held():
                return
            while self.held(self.queue[0]):
                self.queue.rotate(-1)  # held: back to the tail, as if admitted now
            victim = self.queue.popleft()
            self.members.remove(victim)
            self.note_evicted(victim)
            self.stats["evictions"] += 1
        self.queue.append(b)
        self.members.add(b)
        self.stats["admissions"] += 1

    def size(self) -> int:
        return len(self.queue)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return self.members


# ---- compiled engine: a ring buffer (never longer than the number of distinct blocks) -----------

META = meta_slots("fifo")  # the meta array's slots, by the names fifo.c gives them
HEAD, SIZE, CAPACITY, ADMISSIONS, EVICTIONS = META.HEAD, META.SIZE, META.CAPACITY, META.ADMISSIONS, META.EVICTIONS
FIFOState = namedtuple("FIFOState", ["cached", "ring", "meta", "pins", "hold"])


def make_state(capacity: int, trace) -> FIFOState:
    num_blocks = trace.num_blocks
    meta = np.zeros(5, dtype=np.int64)
    meta[CAPACITY] = capacity
    return FIFOState(
        cached=np.zeros(num_blocks, dtype=np.int8),
        ring=np.zeros(max(1, min(capacity, num_blocks)), dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: FIFOState) -> tuple[int, dict]:
    m = state.meta
    return int(m[SIZE]), {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS])}


POLICY = PolicySpec(
    name="fifo",
    native="fifo",
    summary="FIFO: evict the oldest admitted block; hits do not refresh",
    reference=FIFO,
    make_state=make_state,
    read_state=read_state,
    resident_mask=lambda state: state.cached != 0,
    residency_bits=True,
)
