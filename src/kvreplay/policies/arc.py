"""ARC (Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST 2003), as Figure 4.

State: four LRU lists (head = least recently used, tail = most recent) and a target ``p``.

- ``T1``: resident blocks seen once since they entered the directory (recency).
- ``T2``: resident blocks seen at least twice (frequency).
- ``B1``, ``B2``: ghosts: ids recently evicted from T1 / T2, no payload, NOT resident:
  a prefix that reaches a ghost block stops there.
- ``p``: the target size of T1, a real number in [0, c] (c = capacity), starting at 0.

Residency: ``b`` is resident iff ``b in T1 or b in T2``. Final size is ``|T1| + |T2|``
(at most c; the directory ``|T1| + |T2| + |B1| + |B2|`` holds at most 2c ids).

Access of ``x`` (every block of every request, after the prefix scan), Figure 4 case by case:

- I. ``x`` in T1 or T2 (a hit): move x to the MRU end of T2.
- II. ``x`` in B1: ``p = min(c, p + delta1)`` with ``delta1 = 1`` if ``|B1| >= |B2|`` else
  ``|B2| / |B1|``; REPLACE(x, p); move x from B1 to the MRU end of T2 (it becomes resident).
- III. ``x`` in B2: ``p = max(0, p - delta2)`` with ``delta2 = 1`` if ``|B2| >= |B1|`` else
  ``|B1| / |B2|``; REPLACE(x, p); move x from B2 to the MRU end of T2.
- IV. ``x`` in none of the lists (a complete miss), with ``L1 = T1 + B1``:
  A. ``|L1| == c``: if ``|T1| < c``, drop B1's LRU id and REPLACE(x, p); otherwise (B1 is
     empty) evict T1's LRU block outright (it does not go to B1).
  B. ``|L1| < c`` and ``|T1| + |T2| + |B1| + |B2| >= c``: if that total is ``2c``, drop B2's
     LRU id; then REPLACE(x, p).
  Then put x at the MRU end of T1.

REPLACE(x, p): if T1 is not empty and (``|T1| > p`` or (x in B2 and ``|T1| == p``)), evict
T1's LRU block to the MRU end of B1; otherwise evict T2's LRU block to the MRU end of B2.
The deltas are computed with x still in its ghost list (the paper adapts first).

Holds (pin): a held block is in use by a running request. When REPLACE (or case IV.A's outright
delete) reaches a held LRU block of T1 or T2, the block moves to the MRU end of its own list, as
if referenced, but with none of a reference's other effects (p is not adapted, a T1 block stays
in T1), and the next LRU block of that list is considered. When every block of the list REPLACE
chose is held (the walk then goes once round it, leaving its order as it was), REPLACE takes the
other list's unheld LRU block instead, into that list's ghost list (T1 -> B1, T2 -> B2): ARC's
target p only steers which list gives way, so a list pinned down by running requests makes the
other one give way, as a cache that must admit the block would. Case IV.A's delete (T1 holds all
c blocks, T2 and B1 are empty) skips held blocks the same way. A miss (a complete miss or a ghost
hit) when all c resident blocks are held is refused before anything changes: p, the ghost lists,
the counters and the directory stay as they were, and a ghost stays a ghost. Either way REPLACE
moves one block T1 -> B1 or T2 -> B2, which keeps ``|L1|``, ``|L2|`` and the directory as they
were, so ``|T1| + |T2| <= c``, ``|L1| <= c`` and the directory ``<= 2c`` hold as in the paper.

Eviction log (base.py): REPLACE's victim (it leaves T1 or T2 for a ghost list) and case IV.A's
deleted block. Moves T1 -> T2 and ghost drops are not logged.

``p`` and the deltas are real numbers, as in the paper (Figure 4 writes the deltas as the
plain ratios ``|B2|/|B1|`` and ``|B1|/|B2|``, with no rounding, and lets p range over [0, c]). Both engines keep ``p`` as an IEEE float64 and compute it with
the same operations (``min(c, p + |B2| / |B1|)``, true division of two exact integers), so
they agree bit for bit; libCacheSim's ARC.c also keeps ``p`` as a double. With a real ``p`` the
tie rule ``|T1| == p`` only fires when ``p`` happens to be a whole number.

Parameters: none. Counters: ``admissions`` (complete misses, case IV, into T1),
``ghost_hits`` = ``b1_hits`` + ``b2_hits`` (cases II and III: ghost ids that re-enter the cache
in T2), ``evictions`` (resident blocks leaving T1 or T2: to a ghost list in REPLACE, or out
altogether in case IV.A), and ``p`` (the final target, a float). A block entering the cache
is counted by exactly one of ``admissions`` and ``ghost_hits``, so
``final_cache_blocks = admissions + ghost_hits - evictions``.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from .base import ReferencePolicy, PolicySpec, hold_arrays, meta_slots


class ARC(ReferencePolicy):
    """Reference ARC: Figure 4 of the paper, line by line (OrderedDicts, first item = LRU)."""

    def __init__(self, capacity: int, trace=None):
        self.c = capacity
        self.p = 0.0
        self.T1: OrderedDict = OrderedDict()
        self.T2: OrderedDict = OrderedDict()
        self.B1: OrderedDict = OrderedDict()
        self.B2: OrderedDict = OrderedDict()
        self.stats = dict.fromkeys(("admissions", "evictions", "ghost_hits", "b1_hits", "b2_hits"), 0)

    def resident(self, b) -> bool:
        return b in self.T1 or b in self.T2

    def access(self, x) -> None:
        T1, T2, B1, B2, c = self.T1, self.T2, self.B1, self.B2, self.c
        if x in T1 or x in T2:  # Case I
            T1.pop(x, None)
            T2.pop(x, None)
            T2[x] = None
            return
        if self.size() >= c and self.refused_when_all_held():  # a miss with nothing evictable
            return
        if x in B1:  # Case II
            self.stats["ghost_hits"] += 1
            self.stats["b1_hits"] += 1
            delta = 1.0 if len(B1) >= len(B2) else len(B2) / len(B1)
            self.p = min(float(c), self.p + delta)
            self._replace(x)
            del B1[x]
            T2[x] = None
        elif x in B2:  # Case III
            self.stats["ghost_hits"] += 1
            self.stats["b2_hits"] += 1
            delta = 1.0 if len(B2) >= len(B1) else len(B1) / len(B2)
            self.p = max(0.0, self.p - delta)
            self._replace(x)
            del B2[x]
            T2[x] = None
        else:  # Case IV
            self.stats["admissions"] += 1
            if len(T1) + len(B1) == c:  # Case A
                if len(T1) < c:
                    B1.popitem(last=False)
                    self._replace(x)
                else:
                    victim = self._unheld_lru(T1)
                    del T1[victim]
                    self.note_evicted(victim)
                    self.stats["evictions"] += 1
            else:  # Case B: |L1| < c
                total = len(T1) + len(T2) + len(B1) + len(B2)
                if total >= c:
                    if total == 2 * c:
                        B2.popitem(last=False)
                    self._replace(x)
            T1[x] = None

    def _replace(self, x) -> None:
        self.stats["evictions"] += 1
        chosen, other = (self.T1, self.B1), (self.T2, self.B2)
        if not (self.T1 and (len(self.T1) > self.p or (x in self.B2 and len(self.T1) == self.p))):
            chosen, other = other, chosen
        for source, ghost in (chosen, other):  # the other list only when the chosen one is all held
            victim = self._unheld_lru(source)
            if victim is not None:
                del source[victim]
                ghost[victim] = None
                self.note_evicted(victim)
                return
        raise AssertionError("REPLACE with every resident block held: access refuses that miss first")

    def _unheld_lru(self, lst):
        """lst's least recent block without a hold; each held block before it moves to lst's MRU end
        (in use). None when every block of lst is held (one full turn: lst's order is unchanged)."""
        for _ in range(len(lst)):
            victim = next(iter(lst))
            if not self.held(victim):
                return victim
            lst.move_to_end(victim)
        return None

    def size(self) -> int:
        return len(self.T1) + len(self.T2)

    def resident_blocks(self):
        return [*self.T1, *self.T2]

    def counters(self) -> dict:
        return {**self.stats, "p": self.p}


# ---- compiled engine ------------------------------------------------------------------------------

# A block is in at most one of the four lists, so all four are threaded through the same
# per-block prev/next arrays (-1 = none); `where` says which list (0 = none).
NOWHERE, T1, T2, B1, B2 = 0, 1, 2, 3, 4
# meta slots: list L's head, tail and size are meta[HEADS + L], meta[TAILS + L], meta[SIZES + L]
# (L = 1..4; slots 0, 5 and 10 are unused so list ids equal `where` codes).
META = meta_slots("arc")  # the meta array's slots, by the names arc.c gives them
HEADS, TAILS, SIZES = META.HEADS, META.TAILS, META.SIZES
CAPACITY, ADMISSIONS, EVICTIONS, B1_HITS, B2_HITS = META.CAPACITY, META.ADMISSIONS, META.EVICTIONS, META.B1_HITS, META.B2_HITS
META_SLOTS = len(META)
# the same slots one by one (arc.c's layout names every slot; HEADS, TAILS and SIZES are the unused ones)
T1_HEAD, T2_HEAD, B1_HEAD, B2_HEAD = META.T1_HEAD, META.T2_HEAD, META.B1_HEAD, META.B2_HEAD
T1_TAIL, T2_TAIL, B1_TAIL, B2_TAIL = META.T1_TAIL, META.T2_TAIL, META.B1_TAIL, META.B2_TAIL
T1_SIZE, T2_SIZE, B1_SIZE, B2_SIZE = META.T1_SIZE, META.T2_SIZE, META.B1_SIZE, META.B2_SIZE

# `target` is float64[1]: p is real, so it cannot live in the int64 meta array.
ARCState = namedtuple("ARCState", ["where", "prev", "next", "target", "meta", "pins", "hold"])


def make_state(capacity: int, trace) -> ARCState:
    """The state of every replay (sequential, running requests, tiers); the sequential replay's
    access leaves the hold checks out (arc.c)."""
    num_blocks = trace.num_blocks
    meta = np.zeros(META_SLOTS, dtype=np.int64)
    for lst in (T1, T2, B1, B2):
        meta[HEADS + lst] = -1
        meta[TAILS + lst] = -1
    meta[CAPACITY] = capacity
    return ARCState(
        where=np.zeros(num_blocks, dtype=np.int8),
        prev=np.full(num_blocks, -1, dtype=np.int32),
        next=np.full(num_blocks, -1, dtype=np.int32),
        target=np.zeros(1, dtype=np.float64),
        meta=meta,
        **hold_arrays(num_blocks),
    )


def read_state(state: ARCState) -> tuple[int, dict]:
    m = state.meta
    b1, b2 = int(m[B1_HITS]), int(m[B2_HITS])
    counters = {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS]), "ghost_hits": b1 + b2,
                "b1_hits": b1, "b2_hits": b2, "p": float(state.target[0])}
    return int(m[SIZES + T1] + m[SIZES + T2]), counters


def resident_mask(state: ARCState) -> np.ndarray:
    return (state.where == T1) | (state.where == T2)


POLICY = PolicySpec(
    name="arc",
    native="arc",
    summary="ARC: recency list T1 + frequency list T2, ghost lists B1/B2 tune T1's target p (Megiddo & Modha, FAST'03)",
    reference=ARC,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    residency_bits=True,
    below_capacity="ARC's lists fill by its adaptation; ghost hits decide the T1/T2 split",
)
