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
A held block is resident whatever its age (see Holds below).
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

Holds (pin): a held block is in use, so it never expires and is never evicted. It stays
resident while held whatever its age (a later request's prefix scan may hit it, which refreshes
it) and keeps its place in the list and its last-access time: moving it would break the list's
time order, on which expiry relies. Expiry drops the unheld blocks among the expired prefix of
the list and passes over the held ones, so a block released after its time is up expires at the
next request's expiry check. A capacity eviction takes the least recently accessed unheld
block, held blocks skipped in place. A miss at capacity when every resident block is held is
refused. A running request (``pin_request``) does what ``access_request`` does (expiry, its
blocks in order, each held once accessed, then the clock moves to the next request's time), so
requests should start in trace order; a finish does not move the clock.

Eviction log (base.py): expiry is lazy, but its moment is known, so the log is exact. When the
clock moves (the end of an access phase), the unheld blocks whose time is then up stop being
resident: they are logged there, least recent first, and the next expiry check drops them
without logging them again. A held block whose time is up is logged at its last release
(``unpin_request``). Capacity evictions are logged as they happen.

Parameters: ``ttl`` (300.0 seconds, finite and > 0; one longer than the trace makes this plain LRU).
Counters: ``admissions``, ``evictions`` (capacity), ``expirations``; at the end of a sequential
replay ``final_cache_blocks = admissions - evictions - expirations``.

Source: time-to-live expiry with a sliding refresh on access, as in provider-side LLM prompt
caches (Anthropic's prompt caching keeps a cached prefix 5 minutes, refreshed each time it is
used: the 300 s default) and key-value stores (Redis ``EXPIRE``, whose expiry test
``now > expire_at`` fixes the boundary rule above).
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from ..units import Seconds
from .base import ReferencePolicy, Param, PolicySpec, hold_arrays, meta_slots


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
        return t is not None and (self.now - t <= self.ttl_ms or self.held(b))  # held: in use

    def _expire(self) -> None:
        """Drop the expired blocks (a prefix of the list), passing over held ones."""
        expired = []
        for b, t in self.last.items():
            if self.now - t <= self.ttl_ms:
                break
            if not self.held(b):
                expired.append(b)
        for b in expired:
            del self.last[b]
        self.stats["expirations"] += len(expired)

    def _tick(self, request: int) -> None:
        """The clock moves to the next request's time."""
        if request + 1 < len(self.times):
            self.now = max(self.now, self.times[request + 1])
            if self.evicted is not None:
                self._note_expired()

    def _note_expired(self) -> None:
        """The clock has moved: the unheld blocks past their time stop being resident now (the
        next request's _expire drops them), so the eviction log gets them now."""
        for b, t in self.last.items():
            if self.now - t <= self.ttl_ms:
                break
            if not self.held(b):
                self.note_evicted(b)

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        self._expire()
        for b in blocks:
            self.access(b)
        self._tick(request)

    def pin_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> list:
        self._expire()
        held = super().pin_request(request, blocks, hits, input_length, block_size)
        self._tick(request)
        return held

    def unpin_request(self, request: int, blocks: list, input_length: int, block_size: int, handles: list) -> None:
        """Release first to last; a block whose time is up stops being resident at its last release."""
        for b in handles:
            self.unpin(b)
            if not self.resident(b):
                self.note_evicted(b)

    def access(self, b) -> None:
        if b in self.last:  # resident: _expire has dropped every expired unheld block
            self.last.move_to_end(b)
        else:
            if len(self.last) >= self.capacity:
                if len(self.pins) >= len(self.last):  # everything_held(), as every listed block is resident here
                    self.refuse()
                    return
                victim = next(v for v in self.last if not self.held(v))  # held: skipped in place
                del self.last[victim]
                self.note_evicted(victim)
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
META = meta_slots("ttl")  # the meta array's slots, by the names ttl.c gives them
HEAD, TAIL, SIZE, CAPACITY, ADMISSIONS, EVICTIONS, EXPIRATIONS = META.HEAD, META.TAIL, META.SIZE, META.CAPACITY, META.ADMISSIONS, META.EVICTIONS, META.EXPIRATIONS
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
    return (state.cached != 0) & ((state.clock[NOW] - state.last <= state.clock[TTL_MS]) | (state.pins != 0))


def read_state(state: TTLState) -> tuple[int, dict]:
    m = state.meta
    counters = {"admissions": int(m[ADMISSIONS]), "evictions": int(m[EVICTIONS]), "expirations": int(m[EXPIRATIONS])}
    return int(np.count_nonzero(resident_mask(state))), counters


def _check_ttl(value):
    return None if value > 0 else "must be > 0 seconds"  # NaN fails too


POLICY = PolicySpec(
    name="ttl",
    native="ttl",
    summary="TTL: a block expires ttl seconds of trace time after its last access; optional LRU capacity",
    reference=TTL,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    params=(Param("ttl", 300.0, Seconds, "seconds of trace time a block stays resident after its last access", _check_ttl),),
    capacity="optional",
    below_capacity="blocks expire after the TTL whatever the capacity",
)
