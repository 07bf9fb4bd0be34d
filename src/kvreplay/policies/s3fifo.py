"""S3FIFO (Yang et al., SOSP 2023, "FIFO queues are all you need"), exactly as the kvreplay spec fixes it.

State: three FIFO queues (head = oldest, tail = newest) and a saturating
frequency counter per resident block.

- Small ``S``: ``small_cap = round(capacity * small_ratio)`` blocks (Python's
  round, i.e. half to even: round(2.5) == 2, round(409.6) == 410). New blocks land here.
- Main ``M``: ``main_cap = capacity - small_cap`` blocks, second-chance eviction.
- Ghost ``G``: ``ghost_cap = main_cap`` block ids, no payload. Ghost entries are
  NOT resident: a prefix that reaches a ghost block stops there.

Residency: ``b`` is resident iff ``b in S or b in M``. Final size is ``|S| + |M|``.

Access of ``b`` (every block of every request, after the prefix scan):
- in S or M: ``freq = min(freq + 1, max_freq)``;
- in G: remove from G, admit to M with ``freq = ghost_freq`` (0 in the canonical variant);
- otherwise: admit to S with freq 0.

Admit to S: while ``|S| >= small_cap`` pop the head of S; a popped block with
freq >= 1 moves to M keeping its freq (not reset), one with freq 0 goes to G.
Then append at the tail of S.

Admit to M: while ``|M| >= main_cap`` look at the head of M; freq >= 1: pop it,
decrement its freq and re-append it at the tail (second chance); freq 0: pop it
into G and stop (exactly one real eviction). Then append at the tail of M.

Insert into G: an id already in G is removed first (it re-enters at the tail);
otherwise a full G drops its head. Then append at the tail.

Holds (pin): a held block is in use by a running request and is never evicted. Where the rules
above would pop a held block from the head of S or M, it goes back to the tail of its own queue
with its freq unchanged (requeued, not skipped in place: a ring cannot leave it there; and being
in use is not a second chance: no decrement, no ``requeues``), and the next head is considered;
a queue whose blocks are all held gives up nothing (one pass, its order unchanged).

- S holds only held blocks when a block must enter it: the block enters anyway (S goes over
  ``small_cap``) and, if the cache is full, M gives up one block instead (second chance). While
  S is over ``small_cap`` by ``k``, M's limit is ``main_cap - k``, so ``|S| + |M|`` never exceeds
  the capacity. The next admission to S drains it by the rule above ("while ``|S| >=
  small_cap``"). So the new blocks of running requests stay on probation in S however many there
  are, and once released their cold ones (freq 0) leave quickly, the paper's quick demotion,
  instead of reaching M unfiltered.
- M at its limit holds only held blocks: a block S promotes goes to G instead (an eviction, not
  a promotion), and a ghost hit waits in S, at its tail with freq ``ghost_freq`` (a ghost hit, not
  an admission).
- A miss when every resident block is held and ``|S| + |M|`` is the capacity is refused before
  anything moves (the block stays where it was, in G or nowhere). With every block held and room
  left, the miss is admitted without an eviction (S going over ``small_cap`` if it must).

With no holds none of this happens: S never exceeds ``small_cap``, the rules above are exact,
and the kernel's sequential op is compiled without any of it (``_ops``).

Eviction log (base.py): every block sent to G from S or M (``evictions``) is logged as it goes;
S -> M and a ghost hit are moves, not logged.

Parameters: ``small_ratio`` (0.1), ``max_freq`` (3), ``ghost_freq`` (0).
Queues of size 0 are rejected: S3FIFO needs ``small_cap >= 1`` and ``main_cap >= 1``
(capacity 5 at ratio 0.1 gives small_cap 0: use capacity >= 6 or a larger ratio).

Counters: ``admissions`` (new blocks into S), ``promotions`` (S to M),
``ghost_hits`` (G to M; to S when M gives up nothing, holds), ``requeues`` (second chances in M), ``evictions``
(resident blocks sent to G).
"""

from __future__ import annotations

from collections import OrderedDict, deque, namedtuple

import numpy as np

from ..errors import ConfigError
from .base import Param, PolicySpec, ReferencePolicy, hold_arrays, in_range, meta_slots


def queue_sizes(capacity: int, small_ratio: float = 0.1, max_freq: int = 3, ghost_freq: int = 0) -> tuple[int, int, int]:
    """(small_cap, main_cap, ghost_cap) for a capacity; raises ConfigError when a queue would be empty."""
    if ghost_freq > max_freq:
        raise ConfigError(f"s3fifo: ghost_freq {ghost_freq} exceeds max_freq {max_freq}")
    small_cap = round(capacity * small_ratio)
    main_cap = capacity - small_cap
    if small_cap < 1 or main_cap < 1:
        raise ConfigError(
            f"s3fifo: capacity {capacity} with small_ratio {small_ratio} gives small_cap {small_cap} and "
            f"main_cap {main_cap} (round half to even); both queues need at least 1 block"
        )
    return small_cap, main_cap, main_cap


class S3FIFO(ReferencePolicy):
    """Reference S3FIFO: the spec's pseudo-code, line by line."""

    def __init__(self, capacity: int, trace=None, small_ratio: float = 0.1, max_freq: int = 3, ghost_freq: int = 0):
        self.small_cap, self.main_cap, self.ghost_cap = queue_sizes(capacity, small_ratio, max_freq, ghost_freq)
        self.capacity = capacity
        self.max_freq, self.ghost_freq = max_freq, ghost_freq
        self.small: deque = deque()  # block ids, head = left
        self.main: deque = deque()
        self.ghost: OrderedDict = OrderedDict()  # block id -> None, head = first
        self.freq: dict = {}  # freq of blocks in S or M
        self.where: dict = {}  # block -> "S" or "M"
        self.stats = dict.fromkeys(("admissions", "promotions", "ghost_hits", "requeues", "evictions"), 0)

    def resident(self, b) -> bool:
        return b in self.where

    def access(self, b) -> None:
        if b in self.where:
            self.freq[b] = min(self.freq[b] + 1, self.max_freq)
            return
        if self.size() >= self.capacity and self.refused_when_all_held():  # nothing can make room
            return
        if b in self.ghost:
            del self.ghost[b]
            self.stats["ghost_hits"] += 1
            if len(self.main) >= self._main_limit() and all(map(self.held, self.main)):
                self._admit_small(b, self.ghost_freq)  # M can give up nothing: b waits in S
            else:
                self._admit_main(b, self.ghost_freq)
        else:
            self.stats["admissions"] += 1
            self._admit_small(b, 0)

    def _main_limit(self) -> int:
        """main_cap, less what S holds beyond small_cap (only ever held blocks made it go over)."""
        return self.main_cap - max(0, len(self.small) - self.small_cap)

    def _unheld_head(self, queue: deque) -> bool:
        """Held heads go back to the tail (in use: freq kept) until the head is unheld; False when
        every block of the queue is held (after one pass, in the order it had)."""
        for _ in range(len(queue)):
            if not self.held(queue[0]):
                return True
            queue.rotate(-1)
        return False

    def _admit_small(self, b, freq: int) -> None:
        while len(self.small) >= self.small_cap:
            if not self._unheld_head(self.small):
                # S holds only held blocks: b joins them (S goes over small_cap), and M gives up
                # a block if that makes |S| + |M| exceed the capacity (M's limit drops by one).
                self._free_main(self._main_limit())
                break
            victim = self.small.popleft()
            del self.where[victim]
            vf = self.freq.pop(victim)
            if vf >= 1 and self._admit_main(victim, vf):  # freq kept, not reset
                self.stats["promotions"] += 1
            else:
                self._evict(victim)  # freq 0, or M at its limit holds only held blocks
        self.small.append(b)
        self.where[b], self.freq[b] = "S", freq

    def _admit_main(self, b, freq: int) -> bool:
        """Append b to M after making room; False (nothing moved) when M can give up nothing."""
        if not self._free_main(self._main_limit()):
            return False
        self.main.append(b)
        self.where[b], self.freq[b] = "M", freq
        return True

    def _free_main(self, limit: int) -> bool:
        """Second chance until M holds fewer than `limit` blocks (one real eviction at most);
        False when M holds only held blocks."""
        while len(self.main) >= limit:
            if not self._unheld_head(self.main):
                return False
            victim = self.main.popleft()
            if self.freq[victim] >= 1:
                self.freq[victim] -= 1  # second chance: back to the tail, one credit spent
                self.main.append(victim)
                self.stats["requeues"] += 1
                continue
            del self.where[victim], self.freq[victim]
            self._evict(victim)
            break
        return True

    def _evict(self, b) -> None:
        self.stats["evictions"] += 1
        self.note_evicted(b)  # it leaves S or M: resident no more
        if b in self.ghost:
            del self.ghost[b]
        elif len(self.ghost) >= self.ghost_cap:
            self.ghost.popitem(last=False)
        self.ghost[b] = None

    def size(self) -> int:
        return len(self.small) + len(self.main)

    def resident_blocks(self):
        return self.where.keys()

    def counters(self) -> dict:
        return dict(self.stats)


# ---- compiled engine ------------------------------------------------------------------------------

NOWHERE, IN_SMALL, IN_MAIN, IN_GHOST = 0, 1, 2, 3
# meta slots (G_HEAD: ring index of the ghost ring's oldest entry; G_COUNT: entries in the ring,
# dead ones included; G_SIZE: live ghost entries; M_LIMIT: main_cap less what S holds beyond
# small_cap, which only held blocks make it do, so main_cap without holds)
META = meta_slots("s3fifo")  # the meta array's slots, by the names s3fifo.c gives them
S_HEAD, S_SIZE, M_HEAD, M_SIZE, G_HEAD, G_COUNT, G_SIZE = META.S_HEAD, META.S_SIZE, META.M_HEAD, META.M_SIZE, META.G_HEAD, META.G_COUNT, META.G_SIZE
SMALL_CAP, MAIN_CAP, GHOST_CAP, MAX_FREQ, GHOST_FREQ = META.SMALL_CAP, META.MAIN_CAP, META.GHOST_CAP, META.MAX_FREQ, META.GHOST_FREQ
ADMISSIONS, PROMOTIONS, GHOST_HITS, REQUEUES, EVICTIONS = META.ADMISSIONS, META.PROMOTIONS, META.GHOST_HITS, META.REQUEUES, META.EVICTIONS
M_LIMIT = META.M_LIMIT
# with holds: 1 + the hold[RELEASES] count at which a pass over S found every block held (0: none
# found). Until a block is released, S stays all held (only blocks pinned right after their
# admission join it), so _small_drain skips its pass: S was one more held block per miss
# (7,000-block passes made the serving simulator 13x slower under load; benchmarks/RESULTS.md, the serving simulator speed record).
S_ALL_HELD = META.S_ALL_HELD
META_SLOTS = len(META)

# S and M are ring buffers (they only pop the head and push the tail). G also loses entries from
# the middle (a ghost hit), so it is a ring with lazy deletion: the entry at ring index i is live
# iff its block is still IN_GHOST and ghost_slot[block] == i; a ghost hit just changes `where`,
# and the dead entry is skipped when it reaches the head. A full ring is compacted (live entries
# are at most half of it, so that is amortised O(1)). Fewer scattered writes than a linked list.
S3FIFOState = namedtuple("S3FIFOState", ["where", "freq", "small", "main", "ghost", "ghost_slot", "meta", "pins", "hold"])


def make_state(capacity: int, trace, small_ratio: float = 0.1, max_freq: int = 3, ghost_freq: int = 0) -> S3FIFOState:
    num_blocks = trace.num_blocks
    small_cap, main_cap, ghost_cap = queue_sizes(capacity, small_ratio, max_freq, ghost_freq)
    meta = np.zeros(META_SLOTS, dtype=np.int64)
    meta[[SMALL_CAP, MAIN_CAP, GHOST_CAP, MAX_FREQ, GHOST_FREQ, M_LIMIT]] = small_cap, main_cap, ghost_cap, max_freq, ghost_freq, main_cap
    # No queue can hold more distinct blocks than the trace has; S may hold the whole capacity
    # (held blocks, see the module docstring).
    live_ghosts = max(1, min(ghost_cap, num_blocks))
    return S3FIFOState(
        where=np.zeros(num_blocks, dtype=np.int8),
        freq=np.zeros(num_blocks, dtype=np.int8),
        small=np.zeros(max(1, min(capacity, num_blocks)), dtype=np.int32),
        main=np.zeros(max(1, min(main_cap, num_blocks)), dtype=np.int32),
        ghost=np.zeros(2 * live_ghosts + 2, dtype=np.int32),
        ghost_slot=np.zeros(num_blocks, dtype=np.int32),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: S3FIFOState) -> tuple[int, dict]:
    m = state.meta
    names = ("admissions", "promotions", "ghost_hits", "requeues", "evictions")
    slots = (ADMISSIONS, PROMOTIONS, GHOST_HITS, REQUEUES, EVICTIONS)
    return int(m[S_SIZE] + m[M_SIZE]), {n: int(m[s]) for n, s in zip(names, slots)}


def resident_mask(state: S3FIFOState) -> np.ndarray:
    return (state.where == IN_SMALL) | (state.where == IN_MAIN)


# ---- holds: the rare paths, compiled once each and only into the op of running requests ----


def _sizes(capacity, small_ratio, **_):
    small_cap, main_cap, ghost_cap = queue_sizes(capacity, small_ratio)
    return {"small_cap": small_cap, "main_cap": main_cap, "ghost_cap": ghost_cap}


def _check_ghost_freq(value):
    return "must be >= 0" if value < 0 else None


POLICY = PolicySpec(
    name="s3fifo",
    native="s3fifo",
    summary="S3FIFO: small FIFO + second-chance main FIFO + ghost FIFO (Yang et al., SOSP'23)",
    reference=S3FIFO,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    params=(
        Param("small_ratio", 0.1, float, "small queue share of capacity (rounded half to even)", in_range(0, 1, True, True)),
        Param("max_freq", 3, int, "saturation of the per-block frequency counter", in_range(0, 127)),
        Param("ghost_freq", 0, int, "freq of a block re-admitted to main from the ghost queue (<= max_freq)", _check_ghost_freq),
    ),
    sizes=_sizes,
    residency_bits=True,
    below_capacity=("S3FIFO's main queue M fills only when a block is re-accessed while in the small queue S or "
                    "returns from the ghost queue; with little reuse M stays mostly empty (docs/policies.md, S3FIFO "
                    "details)"),
)
