"""2Q, full version (Johnson and Shasha, VLDB 1994, "2Q: a low overhead high performance buffer
management replacement algorithm", Figure "full version").

State: two resident queues that share the ``capacity`` slots, and one ghost queue.

- ``A1in``: FIFO of blocks seen once recently (head = oldest). New blocks land here.
  Its target size is ``kin_cap = max(1, round(capacity * kin))``; it may exceed it
  (it holds every slot while Am is empty) and is drained only down to it.
- ``Am``: LRU of blocks re-referenced after leaving A1in (head = least recent):
  whatever slots A1in does not hold.
- ``A1out``: FIFO of at most ``kout_cap = max(1, round(capacity * kout))`` block ids
  evicted from A1in, no payload. Ghost ids are NOT resident: a prefix that reaches
  one stops there.

Rounding is Python's round (half to even), as for S3FIFO's small_cap.

Residency: ``b`` is resident iff ``b in A1in or b in Am``. Final size is ``|A1in| + |Am|``.

Access of ``b`` (every block of every request, after the prefix scan):
- in Am: move to Am's most recent end;
- in A1in: nothing (a burst of references to a new block does not promote it);
- in A1out: remove from A1out, reclaim a slot, append to Am's most recent end;
- otherwise: reclaim a slot, append to A1in's tail.

Reclaim (only when ``|A1in| + |Am| == capacity``): if ``|A1in| > kin_cap``, evict
A1in's head and remember its id at A1out's tail (a full A1out first drops its
oldest id); otherwise evict Am's least recent block, which is not remembered.
``b`` is taken out of A1out before the reclaim (as libCacheSim's TwoQ does), so
it never occupies an A1out place while its own slot is reclaimed.

The reclaim never finds Am empty when it needs it: Am empty and the cache full
means ``|A1in| = capacity > kin_cap``. So ``kin_cap`` must be below capacity:
capacity 1 is rejected, as is a ``kin`` that rounds to the whole capacity (a
clear ConfigError, never a loop). ``kin_cap`` and ``kout_cap`` are at least 1.

Holds (pin): a held block is in use by a running request and is never evicted. Where a reclaim
would evict one, each queue treats it as it treats a block in use: A1in's held head goes back to
A1in's tail (requeued, not skipped in place: a FIFO as if it had just entered; a hold is not a
re-reference, which 2Q keeps from promoting a correlated burst, so it does not move to Am), Am's
held least recent block moves to Am's most recent end (LRU), and the next candidate is
considered. When the queue the reclaim chose holds only held blocks (one pass, order
unchanged), the other queue gives up its first unheld block instead (from A1in: to A1out; from
Am: not remembered), so ``|A1in| + |Am|`` never exceeds the capacity. A miss when the cache is
full and every resident block is held is refused before anything moves (a ghost stays in A1out).
Without holds none of this happens; the kernel's sequential op is compiled without it (``_ops``).

Eviction log (base.py): the block each reclaim evicts (A1in's head, to A1out, or Am's least
recent block) is logged; A1out -> Am is a ghost hit, not logged.

Parameters: ``kin`` (0.25, A1in's share of capacity), ``kout`` (0.5, A1out's
length as a share of capacity; the paper's recommended values).
Counters: ``admissions`` (new blocks into A1in), ``ghost_hits`` (A1out to Am),
``evictions`` (resident blocks leaving the cache, from either queue),
``am_evictions`` (those evicted from Am; ``evictions - am_evictions`` went from
A1in to A1out).
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from ..errors import ConfigError
from .base import ReferencePolicy, Param, PolicySpec, hold_arrays, meta_slots


def queue_sizes(capacity: int, kin: float = 0.25, kout: float = 0.5) -> tuple[int, int]:
    """(kin_cap, kout_cap) for a capacity; raises ConfigError when Am could never get a slot."""
    kin_cap = max(1, round(capacity * kin))
    kout_cap = max(1, round(capacity * kout))
    if kin_cap >= capacity:
        raise ConfigError(
            f"2q: capacity {capacity} with kin {kin} gives kin_cap {kin_cap} (at least 1, round half to even), "
            f"which leaves Am no slot; 2Q needs kin_cap < capacity (capacity >= 2 and a smaller kin)"
        )
    return kin_cap, kout_cap


class TwoQ(ReferencePolicy):
    """Reference 2Q: the paper's full-version pseudo-code over three OrderedDicts (first item = head)."""

    def __init__(self, capacity: int, trace=None, kin: float = 0.25, kout: float = 0.5):
        self.capacity = capacity
        self.kin_cap, self.kout_cap = queue_sizes(capacity, kin, kout)
        self.a1in: OrderedDict = OrderedDict()  # FIFO: head = oldest
        self.am: OrderedDict = OrderedDict()  # LRU: head = least recent
        self.a1out: OrderedDict = OrderedDict()  # ghost FIFO of ids
        self.stats = dict.fromkeys(("admissions", "ghost_hits", "evictions", "am_evictions"), 0)

    def resident(self, b) -> bool:
        return b in self.a1in or b in self.am

    def access(self, b) -> None:
        if b in self.am:
            self.am.move_to_end(b)
        elif b in self.a1in:
            pass
        elif self.size() >= self.capacity and self.everything_held():
            self.refuse()  # nothing can make room
        elif b in self.a1out:
            del self.a1out[b]
            self.stats["ghost_hits"] += 1
            self._reclaim()
            self.am[b] = None
        else:
            self.stats["admissions"] += 1
            self._reclaim()
            self.a1in[b] = None

    def _reclaim(self) -> None:
        if len(self.a1in) + len(self.am) < self.capacity:
            return  # a free slot
        self.stats["evictions"] += 1
        from_a1in = len(self.a1in) > self.kin_cap
        if not self._unheld_first(self.a1in if from_a1in else self.am):
            from_a1in = not from_a1in  # that queue holds only held blocks: the other one gives one up
            self._unheld_first(self.a1in if from_a1in else self.am)
        if from_a1in:
            y, _ = self.a1in.popitem(last=False)
            self.note_evicted(y)
            if len(self.a1out) >= self.kout_cap:
                self.a1out.popitem(last=False)
            self.a1out[y] = None
        else:
            victim, _ = self.am.popitem(last=False)  # not remembered
            self.note_evicted(victim)
            self.stats["am_evictions"] += 1

    def _unheld_first(self, queue: OrderedDict) -> bool:
        """Held blocks at the front go to the back (A1in: its tail; Am: its most recent end) until
        the first one is unheld; False when every block is held (one pass, order unchanged)."""
        for _ in range(len(queue)):
            first = next(iter(queue))
            if not self.held(first):
                return True
            queue.move_to_end(first)
        return False

    def size(self) -> int:
        return len(self.a1in) + len(self.am)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return [*self.a1in, *self.am]


# ---- compiled engine ------------------------------------------------------------------------------

NOWHERE, IN_A1IN, IN_AM, IN_A1OUT = 0, 1, 2, 3
# meta slots
META = meta_slots("twoq")  # the meta array's slots, by the names twoq.c gives them
A1IN_HEAD, A1IN_SIZE, AM_HEAD, AM_TAIL, AM_SIZE, OUT_HEAD, OUT_TAIL, OUT_SIZE = META.A1IN_HEAD, META.A1IN_SIZE, META.AM_HEAD, META.AM_TAIL, META.AM_SIZE, META.OUT_HEAD, META.OUT_TAIL, META.OUT_SIZE
CAPACITY, KIN_CAP, KOUT_CAP, ADMISSIONS, GHOST_HITS, EVICTIONS, AM_EVICTIONS = META.CAPACITY, META.KIN_CAP, META.KOUT_CAP, META.ADMISSIONS, META.GHOST_HITS, META.EVICTIONS, META.AM_EVICTIONS
META_SLOTS = len(META)

# A1in only pops its head and pushes its tail: a ring buffer. Am (move to the tail) and A1out
# (removal from the middle on a ghost hit) are doubly linked lists; a block is in at most one
# of them, so they share one pair of per-block prev/next arrays (-1 = none), each list with its
# own head/tail slots in meta.
TwoQState = namedtuple("TwoQState", ["where", "a1in", "prev", "next", "meta", "pins", "hold"])


def make_state(capacity: int, trace, kin: float = 0.25, kout: float = 0.5) -> TwoQState:
    num_blocks = trace.num_blocks
    kin_cap, kout_cap = queue_sizes(capacity, kin, kout)
    meta = np.zeros(META_SLOTS, dtype=np.int64)
    meta[[AM_HEAD, AM_TAIL, OUT_HEAD, OUT_TAIL]] = -1
    meta[[CAPACITY, KIN_CAP, KOUT_CAP]] = capacity, kin_cap, kout_cap
    return TwoQState(
        where=np.zeros(num_blocks, dtype=np.int8),
        a1in=np.zeros(max(1, min(capacity, num_blocks)), dtype=np.int32),  # A1in may hold every slot
        prev=np.full(num_blocks, -1, dtype=np.int32),
        next=np.full(num_blocks, -1, dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: TwoQState) -> tuple[int, dict]:
    m = state.meta
    names = ("admissions", "ghost_hits", "evictions", "am_evictions")
    slots = (ADMISSIONS, GHOST_HITS, EVICTIONS, AM_EVICTIONS)
    return int(m[A1IN_SIZE] + m[AM_SIZE]), {n: int(m[s]) for n, s in zip(names, slots)}


def resident_mask(state: TwoQState) -> np.ndarray:
    return (state.where == IN_A1IN) | (state.where == IN_AM)


# ---- holds: the rare paths, compiled once each and only into the op of running requests ----


def _sizes(capacity, kin, kout, **_):
    kin_cap, kout_cap = queue_sizes(capacity, kin, kout)
    return {"kin_cap": kin_cap, "kout_cap": kout_cap}


# Written as chained comparisons so that NaN fails them.
def _check_kin(value):
    return None if 0 < value < 1 else "must be > 0 and < 1"


def _check_kout(value):
    return None if 0 < value <= 1000 else "must be > 0 and <= 1000"


POLICY = PolicySpec(
    name="2q",
    native="twoq",
    summary="2Q (full version): FIFO A1in + ghost FIFO A1out + LRU Am (Johnson & Shasha, VLDB'94)",
    reference=TwoQ,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    params=(
        Param("kin", 0.25, float, "A1in's share of capacity (kin_cap = max(1, round(capacity * kin)))", _check_kin),
        Param("kout", 0.5, float, "A1out's length as a share of capacity (kout_cap = max(1, round(capacity * kout)))", _check_kout),
    ),
    sizes=_sizes,
    residency_bits=True,
    below_capacity="2Q's Am fills only on a re-access from the ghost A1out",
)
