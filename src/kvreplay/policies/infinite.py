"""Infinite cache: nothing is ever evicted. The ceiling for a trace.

Resident: every block accessed before. A hit changes nothing; a miss admits the
block. Capacity is ignored (reports show the number of unique blocks). Its hit
rate is the most any policy can reach on the trace under prefix semantics: a
request can only hit blocks that some earlier request accessed.

Holds (pin): nothing is ever evicted, so a held block has nothing to fear and no miss is ever
refused; the default ``pin_request`` / ``unpin_request`` (access and hold each block in order,
release first to last) apply, and holds change no result.

Parameters: none. Counters: ``admissions`` (distinct blocks), ``evictions`` (always 0).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .base import PolicySpec, ReferencePolicy, hold_arrays, meta_slots


class Infinite(ReferencePolicy):
    """Reference infinite cache: a set."""

    def __init__(self, capacity: int, trace=None):
        self.seen: set = set()

    def resident(self, b) -> bool:
        return b in self.seen

    def access(self, b) -> None:
        self.seen.add(b)

    def size(self) -> int:
        return len(self.seen)

    def counters(self) -> dict:
        return {"admissions": len(self.seen), "evictions": 0}

    def resident_blocks(self):
        return self.seen


META = meta_slots("infinite")  # the meta array's slots, by the names infinite.c gives them
SIZE = META.SIZE  # meta slot: distinct blocks seen
InfiniteState = namedtuple("InfiniteState", ["seen", "meta", "pins", "hold"])


def make_state(capacity: int, trace) -> InfiniteState:
    return InfiniteState(seen=np.zeros(trace.num_blocks, dtype=np.int8), meta=np.zeros(1, dtype=np.int64), **hold_arrays(trace.num_blocks))


def read_state(state: InfiniteState) -> tuple[int, dict]:
    return int(state.meta[SIZE]), {"admissions": int(state.meta[SIZE]), "evictions": 0}


POLICY = PolicySpec(
    name="infinite",
    native="infinite",
    summary="infinite cache: never evicts (the ceiling for a trace)",
    reference=Infinite,
    make_state=make_state,
    read_state=read_state,
    resident_mask=lambda state: state.seen != 0,
    capacity="ignored",
    bound=True,
    residency_bits=True,
)
