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
from ..jit import helper
from .base import (RELEASES, Param, PolicySpec, ReferencePolicy, built_twice, hold_arrays, in_range, log_eviction,
                   refused_when_all_held, register_kernel, wrap)


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
S_HEAD, S_SIZE, M_HEAD, M_SIZE, G_HEAD, G_COUNT, G_SIZE = 0, 1, 2, 3, 4, 5, 6
SMALL_CAP, MAIN_CAP, GHOST_CAP, MAX_FREQ, GHOST_FREQ = 7, 8, 9, 10, 11
ADMISSIONS, PROMOTIONS, GHOST_HITS, REQUEUES, EVICTIONS = 12, 13, 14, 15, 16
M_LIMIT = 17
# with holds: 1 + the hold[RELEASES] count at which a pass over S found every block held (0: none
# found). Until a block is released, S stays all held (only blocks pinned right after their
# admission join it), so _small_drain skips its pass: S was one more held block per miss
# (7,000-block passes made the serving simulator 13x slower under load; docs/performance.md §10).
S_ALL_HELD = 18
META_SLOTS = 19

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


@helper(inline=False)
def _ghost_drop_oldest(st):
    """Pop ring entries from the head until one live entry is gone (dead ones are skipped)."""
    m, ring = st.meta, st.ghost
    n = ring.shape[0]
    while m[G_COUNT] > 0:
        i = m[G_HEAD]
        v = ring[i]
        m[G_HEAD] = wrap(i + 1, n)
        m[G_COUNT] -= 1
        if st.where[v] == IN_GHOST and st.ghost_slot[v] == i:
            st.where[v] = NOWHERE
            m[G_SIZE] -= 1
            return


@helper(inline=False)
def _ghost_compact(st):
    """Keep only the live entries, in order, from the head on."""
    m, ring = st.meta, st.ghost
    n = ring.shape[0]
    head = m[G_HEAD]
    w = head
    for k in range(m[G_COUNT]):
        i = wrap(head + k, n)
        v = ring[i]
        if st.where[v] == IN_GHOST and st.ghost_slot[v] == i:
            ring[w] = v
            st.ghost_slot[v] = w
            w = wrap(w + 1, n)
    m[G_COUNT] = m[G_SIZE]


@helper
def _ghost_insert(st, b):
    m = st.meta
    st.meta[EVICTIONS] += 1
    log_eviction(st, b)  # b leaves S or M: resident no more
    if st.where[b] == IN_GHOST:  # re-enters at the tail (not reached from S or M, kept for the spec)
        st.where[b] = NOWHERE
        m[G_SIZE] -= 1
    elif m[G_SIZE] >= m[GHOST_CAP]:
        _ghost_drop_oldest(st)
    ring = st.ghost
    n = ring.shape[0]
    if m[G_COUNT] == n:
        _ghost_compact(st)
    i = wrap(m[G_HEAD] + m[G_COUNT], n)
    ring[i] = b
    st.ghost_slot[b] = i
    m[G_COUNT] += 1
    m[G_SIZE] += 1
    st.where[b] = IN_GHOST


# ---- holds: the rare paths, compiled once each and only into the op of running requests ----

@helper(inline=False)
def _to_ghost(st, b):
    """_ghost_insert for the rare paths: compiled once, not pasted into each of them."""
    _ghost_insert(st, b)


@helper(inline=False)
def _main_requeue_held(st):
    """M's held heads go back to its tail (in use: freq kept) until its head is unheld: True;
    False when M holds only held blocks (one pass, order unchanged) or none."""
    m, ring, pins = st.meta, st.main, st.pins
    n = ring.shape[0]
    for _ in range(m[M_SIZE]):
        head = m[M_HEAD]
        v = ring[head]
        if pins[v] == 0:
            return True
        ring[wrap(head + m[M_SIZE], n)] = v  # a full ring: the tail slot is the head's own
        m[M_HEAD] = wrap(head + 1, n)
    return False


@helper(inline=False)
def _miss_held(st, b, w):
    """The start of a miss with holds: (where b is, its freq if it enters S); where < 0: refused.
    Refused when every resident block is held and the cache is full: nothing can make room (held
    blocks are resident and never more than the capacity, so one comparison says both). A ghost
    hit when M is at its limit with only held blocks (or none) leaves G and waits in S with freq
    ghost_freq: M gives up nothing (a ghost hit, not an admission: the admission to S counts one,
    so it is taken back here)."""
    m = st.meta
    if refused_when_all_held(st, m[SMALL_CAP] + m[MAIN_CAP]):
        return -1, 0
    if w == IN_GHOST and m[M_SIZE] >= m[M_LIMIT] and \
            (m[M_SIZE] == 0 or st.pins[st.main[m[M_HEAD]]] != 0) and not _main_requeue_held(st):
        st.where[b] = NOWHERE
        m[G_SIZE] -= 1
        m[GHOST_HITS] += 1
        m[ADMISSIONS] -= 1
        return NOWHERE, m[GHOST_FREQ]
    return w, 0


@helper(inline=False)
def _main_blocked(st, b):
    """M is at its limit: requeue its held heads. False when its head can go; True when M holds
    only held blocks: then b, which S promoted, goes to G instead (a ghost hit was sent to S by
    _miss_held; S going over small_cap while M gives nothing would have been refused)."""
    if st.pins[st.main[st.meta[M_HEAD]]] == 0 or _main_requeue_held(st):
        return False
    st.meta[PROMOTIONS] -= 1  # counted by access before M turned out to give up nothing
    _to_ghost(st, np.int64(b))
    return True


@helper(inline=False)
def _small_drain(st, b, f):
    """The admission of b (freq f) to a full S, with holds: pop heads as the rule says ("while
    |S| >= small_cap"), held ones going back to the tail (one pass at most). While S is
    over, a popped block with freq >= 1 moves to M, which has room (its limit grows as S
    shrinks), one with 0 to G. True when S is at small_cap with an unheld head: the caller pops
    it and admits b. False when S holds only held blocks: b joined them here (S one more over
    small_cap) and M's limit dropped by one, M giving up a block if it was at it (second chance;
    M has an unheld block, or the miss would have been refused)."""
    m, ring, pins = st.meta, st.small, st.pins
    n = ring.shape[0]
    if m[S_SIZE] == m[SMALL_CAP] and pins[ring[m[S_HEAD]]] == 0:
        return True  # the common case
    held = 0  # held heads requeued since the last pop
    if m[S_ALL_HELD] == st.hold[RELEASES] + 1:
        held = m[S_SIZE]  # nothing released since S was found all held: a pass would only rotate it
    while held < m[S_SIZE]:
        head = m[S_HEAD]
        victim = ring[head]
        if pins[victim] != 0:
            ring[wrap(head + m[S_SIZE], n)] = victim
            m[S_HEAD] = wrap(head + 1, n)
            held += 1
            continue
        if m[S_SIZE] == m[SMALL_CAP]:
            return True
        held = 0
        m[S_HEAD] = wrap(head + 1, n)
        m[S_SIZE] -= 1
        m[M_LIMIT] += 1
        if st.freq[victim] >= 1:
            m[PROMOTIONS] += 1
            main = st.main
            main[wrap(m[M_HEAD] + m[M_SIZE], main.shape[0])] = victim
            m[M_SIZE] += 1
            st.where[victim] = IN_MAIN
        else:
            _to_ghost(st, np.int64(victim))
    m[S_ALL_HELD] = st.hold[RELEASES] + 1
    ring[wrap(m[S_HEAD] + m[S_SIZE], n)] = b
    m[S_SIZE] += 1
    st.where[b] = IN_SMALL
    st.freq[b] = f
    ring = st.main
    n = ring.shape[0]
    while m[M_SIZE] >= m[M_LIMIT]:
        _main_requeue_held(st)
        head = m[M_HEAD]
        victim = ring[head]
        m[M_HEAD] = wrap(head + 1, n)
        m[M_SIZE] -= 1
        if st.freq[victim] >= 1:
            st.freq[victim] -= 1
            ring[wrap(m[M_HEAD] + m[M_SIZE], n)] = victim
            m[M_SIZE] += 1
            m[REQUEUES] += 1
        else:
            _to_ghost(st, np.int64(victim))
            break
    m[M_LIMIT] -= 1
    return False


def _ops(holds):
    """The compiled access op, built twice. holds=False is sequential replay, which never holds a
    block: `holds` is a closure constant, so numba prunes every `if holds` branch before typing
    and the replay kernel is the spec's code alone (it compiles as fast as it did without holds;
    S never holds more than small_cap blocks there, so M_LIMIT is main_cap). holds=True is the op
    of running requests (the default pin_request, through held_access_impl), with the rules of the module docstring."""

    @helper
    def admit_main(st, b, f):
        """Append b to M with freq f after making room (second chance)."""
        m, ring = st.meta, st.main
        n = ring.shape[0]
        while m[M_SIZE] >= m[M_LIMIT]:
            if holds:
                if _main_blocked(st, b):
                    return
            head = m[M_HEAD]
            victim = ring[head]
            m[M_HEAD] = wrap(head + 1, n)
            m[M_SIZE] -= 1
            if st.freq[victim] >= 1:
                st.freq[victim] -= 1
                ring[wrap(m[M_HEAD] + m[M_SIZE], n)] = victim
                m[M_SIZE] += 1
                m[REQUEUES] += 1
            else:
                _ghost_insert(st, victim)
                break
        ring[wrap(m[M_HEAD] + m[M_SIZE], n)] = b
        m[M_SIZE] += 1
        st.where[b] = IN_MAIN
        st.freq[b] = f

    @helper
    def access(st, b):
        w = st.where[b]
        if w == IN_SMALL or w == IN_MAIN:
            if st.freq[b] < st.meta[MAX_FREQ]:
                st.freq[b] += 1
            return
        m = st.meta
        fb = 0  # b's freq if it enters S
        if holds:
            w, fb = _miss_held(st, b, w)
            if w < 0:
                return
        if w == IN_GHOST:
            # Leave G first: the ring entry is dead from now on (and admit_main may push to G).
            st.where[b] = NOWHERE
            m[G_SIZE] -= 1
            m[GHOST_HITS] += 1
            to_main, f = b, m[GHOST_FREQ]
        else:
            # Admit to S. S never holds more than small_cap blocks without holds, so "while S is
            # full, pop its head" pops at most once: an `if` (with holds, S over small_cap or a
            # held head take the rare path, _small_drain). A popped block with freq >= 1 moves
            # to M (below: the order does not matter, M and G never hold b) keeping its freq;
            # one with 0 goes to G.
            m[ADMISSIONS] += 1
            to_main, f = -1, 0
            ring = st.small
            n = ring.shape[0]
            if m[S_SIZE] >= m[SMALL_CAP]:
                if holds:
                    if not _small_drain(st, b, fb):
                        return  # S holds only held blocks: b joined them, M gave one up
                head = m[S_HEAD]
                victim = ring[head]
                m[S_HEAD] = wrap(head + 1, n)
                m[S_SIZE] -= 1
                if st.freq[victim] >= 1:
                    m[PROMOTIONS] += 1
                    to_main, f = victim, st.freq[victim]
                else:
                    _ghost_insert(st, victim)
            ring[wrap(m[S_HEAD] + m[S_SIZE], n)] = b
            m[S_SIZE] += 1
            st.where[b] = IN_SMALL
            st.freq[b] = fb
        if to_main >= 0:
            # One call site for the admission to M (each pasted copy of it costs compile time).
            admit_main(st, to_main, f)

    return access


_access, _access_held = built_twice(_ops)  # see base.built_twice


@helper
def _resident(st, b):
    w = st.where[b]
    return w == IN_SMALL or w == IN_MAIN


register_kernel(S3FIFOState, _resident, _access, held_access_impl=_access_held)


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
)
