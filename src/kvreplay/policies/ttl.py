"""TTL: a block expires ``ttl`` seconds of trace time after its last access; optionally LRU-bounded.

Trace time: request i happens at ``now_i = max(timestamp[0..i])`` (timestamps are in
milliseconds). The running maximum keeps time from going backwards when the file is not
sorted by time: a request stamped earlier than one before it is served at the later time,
so it neither revives expired blocks nor makes recent ones look older.

State: the resident blocks in last-access order (head = least recently accessed) with the
time of each one's last access. Since a block's last-access time only grows and ``now``
never decreases, list order is also expiry order: the expired blocks are always a prefix
of the list.

Resident: ``b`` is resident at time ``now`` iff it was accessed and
``now - last_access(b) <= ttl * 1000`` (ms): a block is still resident at exactly ``ttl``
seconds and gone one instant later (Redis' rule: a key expires when ``now > expire_at``).
The prefix scan of request i compares times at ``now_i`` and changes nothing.

Access phase of request i (a request-level policy, at time ``now_i``): first every expired
block is dropped from the head of the list (counted as ``expirations``); then each block
of the request, in order: a resident one gets ``last_access = now_i`` and moves to the
most-recent end; a missing one is admitted at the most-recent end, after evicting the
least recently accessed block if ``capacity`` blocks are resident (an LRU eviction among
unexpired blocks, counted as ``evictions``).

Capacity is optional: without one (``replay(trace, "ttl", None, ...)``) the cache is
unbounded (capacity = the trace's number of distinct blocks) and only expiry removes blocks.
``final_cache_blocks`` counts the blocks unexpired at the last request's time.

Parameters: ``ttl`` (300.0 seconds, finite and > 0; one longer than the trace makes this plain LRU).
Counters: ``admissions``, ``evictions`` (capacity), ``expirations``; at the end
``final_cache_blocks = admissions - evictions - expirations``.

Source: time-to-live expiry with a sliding refresh on access, as in provider-side LLM prompt
caches (Anthropic's prompt caching keeps a cached prefix 5 minutes, refreshed each time it is
used: the 300 s default) and key-value stores (Redis ``EXPIRE``, whose expiry test
``now > expire_at`` fixes the boundary rule above).
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from ..jit import helper
from .base import ReferencePolicy, Param, PolicySpec, register_kernel, hold_arrays
from .lru import _append, _unlink  # the same recency list: HEAD/TAIL slots and prev/next fields match


class TTL(ReferencePolicy):
    """Reference TTL: an OrderedDict of block -> last access time (ms), least recent first."""

    def __init__(self, capacity: int, trace=None, ttl: float = 300.0):
        self.capacity = capacity
        self.ttl_ms = ttl * 1000.0
        self.times = trace.timestamp.tolist() if trace is not None else []
        # The time of the request being served: the driver probes residency before it calls
        # access_request, so the clock is advanced to the next request at the end of each one.
        self.now = self.times[0] if self.times else 0.0
        self.last: OrderedDict = OrderedDict()
        self.stats = {"admissions": 0, "evictions": 0, "expirations": 0}

    def resident(self, b) -> bool:
        t = self.last.get(b)
        return t is not None and self.now - t <= self.ttl_ms

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        while self.last and not self.resident(next(iter(self.last))):
            self.last.popitem(last=False)
            self.stats["expirations"] += 1
        for b in blocks:
            self.access(b)
        if request + 1 < len(self.times):
            self.now = max(self.now, self.times[request + 1])

    def access(self, b) -> None:
        if b in self.last:  # resident: access_request has dropped every expired block
            self.last.move_to_end(b)
        else:
            if len(self.last) >= self.capacity:
                self.last.popitem(last=False)
                self.stats["evictions"] += 1
            self.stats["admissions"] += 1
        self.last[b] = self.now

    def size(self) -> int:
        return sum(1 for b in self.last if self.resident(b))

    def resident_blocks(self):
        return [b for b in self.last if self.resident(b)]

    def counters(self) -> dict:
        return dict(self.stats)


# ---- compiled engine: the LRU list of lru.py plus a last-access time per block ---------------------

# HEAD and TAIL sit in the same meta slots as lru's, so lru's list operations apply unchanged.
HEAD, TAIL, SIZE, CAPACITY, ADMISSIONS, EVICTIONS, EXPIRATIONS = range(7)
TTL_MS, NOW = 0, 1  # slots of `clock` (float64): times are real numbers
TTLState = namedtuple("TTLState", ["cached", "last", "prev", "next", "times", "clock", "meta", "pins", "hold"])


def make_state(capacity: int, trace, ttl: float = 300.0) -> TTLState:
    num_blocks = trace.num_blocks
    times = np.array(trace.timestamp, dtype=np.float64)  # a private copy: the trace's is read-only
    meta = np.zeros(7, dtype=np.int64)
    meta[[HEAD, TAIL, CAPACITY]] = -1, -1, capacity
    clock = np.array([ttl * 1000.0, times[0] if times.size else 0.0], dtype=np.float64)
    return TTLState(
        cached=np.zeros(num_blocks, dtype=np.int8),
        last=np.zeros(num_blocks, dtype=np.float64),
        prev=np.full(num_blocks, -1, dtype=np.int32),
        next=np.full(num_blocks, -1, dtype=np.int32),
        times=times,
        clock=clock,
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def resident_mask(state: TTLState) -> np.ndarray:
    return (state.cached != 0) & (state.clock[NOW] - state.last <= state.clock[TTL_MS])


def read_state(state: TTLState) -> tuple[int, dict]:
    m = state.meta
    counters = {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS]), "expirations": int(m[EXPIRATIONS])}
    return int(np.count_nonzero(resident_mask(state))), counters


@helper
def _drop_head(st):
    m = st.meta
    victim = m[HEAD]
    _unlink(st, victim)
    st.cached[victim] = 0
    m[SIZE] -= 1


@helper
def _resident(st, b):
    return st.cached[b] != 0 and st.clock[NOW] - st.last[b] <= st.clock[TTL_MS]


@helper
def _access(st, b):
    m = st.meta
    if st.cached[b] != 0:
        if m[TAIL] != b:
            _unlink(st, b)
            _append(st, b)
    else:
        if m[SIZE] >= m[CAPACITY]:
            _drop_head(st)
            m[EVICTIONS] += 1
        _append(st, b)
        st.cached[b] = 1
        m[SIZE] += 1
        m[ADMISSIONS] += 1
    st.last[b] = st.clock[NOW]


@helper
def _access_request(st, request, blocks, start, end, hits, input_length, block_size):
    m = st.meta
    # Expired blocks are a prefix of the list (see the module docstring).
    while m[HEAD] >= 0 and not _resident(st, m[HEAD]):
        _drop_head(st)
        m[EXPIRATIONS] += 1
    for j in range(start, end):
        _access(st, blocks[j])
    if request + 1 < st.times.shape[0]:
        st.clock[NOW] = max(st.clock[NOW], st.times[request + 1])


register_kernel(TTLState, _resident, access_request_impl=_access_request)


def _check_ttl(value):
    return None if value > 0 else "must be > 0 seconds"  # NaN fails too


POLICY = PolicySpec(
    name="ttl",
    summary="TTL: a block expires ttl seconds of trace time after its last access; optional LRU capacity",
    reference=TTL,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    params=(Param("ttl", 300.0, float, "seconds of trace time a block stays resident after its last access", _check_ttl),),
    capacity="optional",
)
