"""CLOCK: a circular buffer of frames, a reference counter per frame and a sweeping hand.

State: ``capacity`` frames in a circle, each holding one block and a counter of
``bits`` bits (``bits = 1``: the classic reference bit; ``max_count = 2**bits - 1``),
and a hand pointing at a frame. The hand starts at frame 0.

Resident: every block held by a frame. Final size is the number of filled frames.

Access of ``b`` (every block of every request, after the prefix scan):
- resident: ``count = min(count + 1, max_count)``; nothing moves;
- not resident and a frame is still free (the cache is not full yet): ``b`` fills
  the next free frame with count 0; the hand does not move;
- not resident and every frame is full: while the frame under the hand has
  ``count >= 1``, decrement it (a second chance) and advance the hand; the first
  frame found with count 0 loses its block (evicted), takes ``b`` with count 0,
  and the hand advances past it.

A new block starts with its bit clear (count 0), as in libCacheSim's Clock
(``obj->clock.freq = 0`` on insert): it is the hand's first victim unless hit
before the hand comes round. Frames fill in order 0, 1, ... while the hand rests
on frame 0, so the circle read from the hand is the admission order:
libCacheSim's queue formulation (evict at the tail, re-insert a tail with freq
>= 1 at the head with freq - 1) makes exactly the same decisions.

Holds (pin): a held block is in use, so the hand skips its frame in place without touching its
counter (no second chance is spent on a block that could not be evicted anyway, and none is
counted), as PostgreSQL's clock sweep passes a pinned buffer without decrementing its usage
count. The sweep ends: some frame is unheld, and within ``max_count + 1`` turns of the hand its
counter reaches 0. A miss when every frame is full and every resident block is held is refused
(while a frame is free a miss fills it, whatever is held).

Parameters: ``bits`` (1): counter width, 1..7 (libCacheSim's ``n-bit-counter``).
Counters: ``admissions``, ``evictions``, ``second_chances`` (counter decrements
by the hand: with ``bits = 1``, reference bits cleared).
Source: Corbató's CLOCK (1968) as in libCacheSim ``cache/eviction/Clock.c``
(default ``n-bit-counter=1``).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .base import ReferencePolicy, Param, PolicySpec, in_range, hold_arrays, meta_slots


class Clock(ReferencePolicy):
    """Reference CLOCK: a list of frames that grows to `capacity`, one counter per frame."""

    def __init__(self, capacity: int, trace=None, bits: int = 1):
        self.capacity = capacity
        self.max_count = 2**bits - 1
        self.frames: list = []  # block held by each frame, in circle order
        self.count: list = []  # counter of each frame
        self.frame_of: dict = {}  # resident block -> its frame
        self.hand = 0
        self.stats = {"admissions": 0, "evictions": 0, "second_chances": 0}

    def resident(self, b) -> bool:
        return b in self.frame_of

    def access(self, b) -> None:
        if b in self.frame_of:
            f = self.frame_of[b]
            self.count[f] = min(self.count[f] + 1, self.max_count)
            return
        if len(self.frames) < self.capacity:  # a free frame: fill it, the hand stays
            self.stats["admissions"] += 1
            self.frame_of[b] = len(self.frames)
            self.frames.append(b)
            self.count.append(0)
            return
        if self.refused_when_all_held():
            return
        self.stats["admissions"] += 1
        while self.count[self.hand] >= 1 or self.held(self.frames[self.hand]):
            if not self.held(self.frames[self.hand]):  # held: in use, skipped with its counter kept
                self.count[self.hand] -= 1
                self.stats["second_chances"] += 1
            self.hand = (self.hand + 1) % self.capacity
        del self.frame_of[self.frames[self.hand]]
        self.note_evicted(self.frames[self.hand])
        self.stats["evictions"] += 1
        self.frames[self.hand], self.count[self.hand] = b, 0
        self.frame_of[b] = self.hand
        self.hand = (self.hand + 1) % self.capacity

    def size(self) -> int:
        return len(self.frames)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return self.frame_of.keys()


# ---- compiled engine: a ring of min(capacity, num_blocks) frames; the counter lives per block ---

META = meta_slots("clock")  # the meta array's slots, by the names clock.c gives them
HAND, SIZE, CAPACITY, MAX_COUNT, ADMISSIONS, EVICTIONS, SECOND_CHANCES = META.HAND, META.SIZE, META.CAPACITY, META.MAX_COUNT, META.ADMISSIONS, META.EVICTIONS, META.SECOND_CHANCES
META_SLOTS = len(META)
ClockState = namedtuple("ClockState", ["cached", "count", "frames", "meta", "pins", "hold"])


def make_state(capacity: int, trace, bits: int = 1) -> ClockState:
    num_blocks = trace.num_blocks
    meta = np.zeros(META_SLOTS, dtype=np.int64)
    meta[[CAPACITY, MAX_COUNT]] = capacity, 2**bits - 1
    # With capacity > num_blocks the frames never fill, so the ring never wraps: num_blocks frames do.
    return ClockState(
        cached=np.zeros(num_blocks, dtype=np.int8),
        count=np.zeros(num_blocks, dtype=np.int8),
        frames=np.zeros(max(1, min(capacity, num_blocks)), dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: ClockState) -> tuple[int, dict]:
    m = state.meta
    names = ("admissions", "evictions", "second_chances")
    return int(m[SIZE]), {n: int(m[s]) for n, s in zip(names, (ADMISSIONS, EVICTIONS, SECOND_CHANCES))}


def resident_mask(state: ClockState) -> np.ndarray:
    return state.cached != 0


POLICY = PolicySpec(
    name="clock",
    native="clock",
    summary="CLOCK: circular frames with a reference bit (or n-bit counter) and a sweeping hand",
    reference=Clock,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    params=(Param("bits", 1, int, "width of the per-frame reference counter (1: a reference bit)", in_range(1, 7)),),
    residency_bits=True,
)
