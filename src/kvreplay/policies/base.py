"""The policy contract: what every policy module provides, written once.

A policy module defines ``POLICY = PolicySpec(...)`` (registry.py finds it) with two engines of
one behaviour: a reference class (plain Python, the readable oracle) and a compiled state (numpy
arrays, built by ``make_state`` in the module) whose operations are C, in the file of the same
name (``lru.py`` / ``lru.c``, exporting ``kv_policy_lru``; include/policy.h gives the table, and
how a block-level policy gets the defaults below from its ``access`` alone).

Operations (reference: methods of a ReferencePolicy; compiled: the C table's functions):

- ``resident(b) -> bool``: is block b resident? A probe: it changes nothing (no recency, no
  frequency, no counter), however often it is called.
- ``access(b)``: the policy's reaction to one access of b: a hit refreshes (per policy), a miss
  admits and may evict. Block-level policies only.
- ``hit_limit(num_blocks, input_length, block_size) -> int``: the most blocks a request's prefix
  scan may count (default: all; vLLM and SGLang never reuse the block of the last prompt token).
- ``access_request(request, blocks, hits, input_length, block_size)``: the access phase of one
  request, told how many of its leading blocks hit (default: ``access(b)`` for each block in
  order). Request-level policies (vllm, radix, belady) replace it.

The driver (engine/driver.py) owns the request loop: scan the longest resident prefix with
``resident`` before touching anything, record ``min(k * block_size, L)``, then ``access_request``.
Policies never re-implement that loop.

Invariants, checked for every registered policy by tests/policies/test_contract.py:
1. Both engines give the same hit blocks for every request, the same final size, the same
   counters and the same stranded blocks.
2. ``resident`` changes nothing: extra probes leave every later result unchanged.
3. Resident blocks never exceed the capacity (Report.check_invariants, on every replay).
4. ``counters()`` (reference) and ``read_state`` (compiled) give the same keys whatever the trace,
   capacity or engine: integers, never floats.

Holding a running request's blocks (pin/unpin), for the serving simulator:

- ``pin(b)`` (block-level policies): ``b`` must be resident; one more hold on it. A held block is
  never evicted. Holds nest: ``unpin(b)`` removes one, and ``b`` is evictable again at zero.
- A miss that needs an eviction when every resident block is held is **refused**: the block is
  not admitted (``resident(b)`` stays false), nothing else changes, and ``refusals`` grows by one.
  What a policy does with a held block its eviction reaches (skip it, requeue it) is the
  policy's choice, written in its module docstring and in docs/policies.md.
- ``pin_request(request, blocks, hits, input_length, block_size) -> handles`` starts a request
  that will run for a while: its access phase, holding its blocks (default: ``access(b)`` then
  ``pin(b)`` for each block in order, stopping at the first refused block). ``len(handles)`` is
  the number of blocks held. The request was refused iff ``refusals`` grew; the caller then
  releases what was held (a block-level policy holds the leading blocks it admitted; ``vllm``
  and ``radix`` hold nothing, as their engines allocate all or nothing).
- ``unpin_request(request, blocks, input_length, block_size, handles)`` ends it: releases its
  holds in the policy's order (default first to last; ``vllm`` tail first, as
  ``KVCacheManager.free``; ``radix`` unlocks the request's tree path, as SGLang's
  ``dec_lock_ref``).
- Sequential replay (``access_request``) holds nothing across requests, and stays exactly what it
  was: for ``vllm`` and ``radix`` it *is* ``pin_request`` then ``unpin_request``.
- Callers with holds go through ``pin_request``. A compiled block-level policy's access takes a
  constant ``holds`` flag: the sequential replay's copy is compiled without the hold checks.

Invariants of the lifecycle, checked for every registered policy by tests/policies/test_lifecycle.py:
5. Both engines agree on random interleavings of request starts and finishes (hits, blocks held,
   refusals, final residents, counters).
6. A held block stays resident; resident blocks never exceed the capacity.
7. A refusal happens only when the start cannot fit beside the held blocks: for block-level
   policies, when every resident block is held; for vllm and radix (all or nothing), when the
   blocks not held are too few for the whole start (``everything_held()`` answers for the last
   refused start).
8. Releasing every running request leaves nothing held.

The eviction log, for a memory tier below the cache that takes what the cache evicts
(write-back). Off by default; ``with_eviction_log(state, size)`` turns it on for a compiled
state, ``policy.evicted = []`` for a reference policy:

- A block is logged exactly when it stops being resident (``resident(b)`` goes from True to
  False) because of an eviction, once, at that moment, in the order it happens. Moving inside
  the policy is not logged (s3fifo S -> M, arc T1 -> T2); a block sent to a ghost
  list (s3fifo G, arc B1/B2, 2q A1out) is logged as it leaves the resident set; dropping a
  ghost id logs nothing. A block evicted and re-admitted within one request is logged each time
  it is evicted.
- Per policy: ``vllm`` logs a hash when its last holding block is reused (a duplicated hash
  stays resident while another block holds it); ``radix`` logs, for each evicted leaf, its
  pages first to last, a block id when the last page holding it anywhere in the tree goes
  (its resident set: the ids in the tree);
  ``belady`` logs an evicted block, never a bypassed one; ``ttl`` logs an expired block when
  its residency ends: at the end of a request's access phase, when the clock moves to the next
  request's time (unheld blocks past their time, least recent first), and at the release of a
  held block whose time is up (``unpin_request``), not when the next request drops them;
  ``infinite`` never logs.
- Compiled: every eviction path calls ``kv_log_eviction(&st->h, victim)`` (include/holds.h): one
  compare, marked unlikely, when the log is off (``hold`` of 3 slots).
- Checked by tests/policies/test_eviction_log.py: both engines log the same blocks in the same
  order, request by request, sequentially and under holds, and the log is what left the
  resident set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import ConfigError
from .. import native
from ..units import Seconds, seconds_arg


@dataclass(frozen=True)
class Param:
    """One tunable parameter of a policy."""

    name: str
    default: Any
    kind: type  # int, float, or units.Seconds (a duration: a number of seconds, or a string with its unit)
    help: str
    check: Callable[[Any], str | None] = lambda value: None  # returns a complaint or None

    def what(self) -> str:
        """The parameter as the API and the command line name it: "small_ratio (--small-ratio)"."""
        return f"{self.name} (--{self.name.replace('_', '-')})"

    def convert(self, policy: str, value: Any) -> Any:
        if self.kind is int:
            if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
                raise ConfigError(f"{policy}: {self.what()} must be an integer, not {value!r}")
            value = int(value)
        elif self.kind is Seconds:
            value = seconds_arg(value, f"{policy}: {self.name}")
            if value != value or value in (float("inf"), float("-inf")):
                raise ConfigError(f"{policy}: {self.name} must be a finite duration, not {value!r}")
        elif self.kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{policy}: {self.what()} must be a number, not {value!r}")
            value = float(value)
            if value != value or value in (float("inf"), float("-inf")):
                raise ConfigError(f"{policy}: {self.what()} must be a finite number, not {value!r}")
        complaint = self.check(value)
        if complaint:
            raise ConfigError(f"{policy}: {self.what()} {complaint}, got {value!r}")
        return value


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy.

    reference(capacity, trace, **params) -> a ReferencePolicy (resident(b), access(b),
        size(), counters(), resident_blocks()): the readable engine.
    make_state(capacity, trace, **params) -> namedtuple of numpy arrays on which the
        compiled driver's overloads act.
    read_state(state) -> (final_cache_blocks, counters dict).
    resident_mask(state) -> bool array over block ids: what is resident at the end.
    sizes(capacity, **params) -> dict of derived sizes shown in reports (e.g. small_cap).
    capacity: "required", "optional" (None means unbounded) or "ignored" (bounds such as infinite).
    native: the name of its compiled operations in the core (``kv_policy_<native>`` in
        policies/<module>.c; None: a policy with the reference engine only).
    check_block_size(block_size): refuses a block size the policy cannot use (ConfigError).
    """

    name: str
    summary: str
    reference: Callable
    make_state: Callable | None
    read_state: Callable | None
    resident_mask: Callable | None = None
    params: tuple[Param, ...] = ()
    sizes: Callable[..., dict] = field(default=lambda capacity, **params: {})
    capacity: str = "required"
    native: str | None = None
    #: raises ConfigError for a block size the policy cannot work with (deepseek: 64-token units)
    check_block_size: Callable[[int], None] = field(default=lambda block_size: None)
    #: a request's blocks enter the cache when it stores them (store_request) or finishes
    #: (unpin_request), not when it starts (trtllm: TensorRT-LLM stores blocks for reuse)
    caches_at_release: bool = False

    # ---- what the rest of kvreplay asks about the policy (its traits, declared here, with it) ----
    #: a bound (infinite, belady), not a cache an engine runs: never served, never "the best", no headroom
    bound: bool = False
    #: why the serving simulator refuses it, its engine's scheduler not being modelled ("": served)
    not_served: str = ""
    #: the engine style (serving/styles.py) whose own cache this is and whose scheduler alone serves it,
    #: when that scheduler serves no other cache (trtllm); the refusal says `style_only_why`
    style_only: str | None = None
    style_only_why: str = ""
    #: a request's start is all or nothing inside the policy (vllm, radix, trtllm): the serving kernel
    #: asks it; for every other policy the kernel first checks that the start fits beside held blocks
    request_level: bool = False
    #: its compiled state grows with every pin_request (radix: nodes and an arena; belady: heap
    #: entries), so the simulator sizes it by the calls it will get
    sized_per_call: bool = False
    #: its residency is a pure function of each block's own state, changed only by the operations on a
    #: request's blocks and by logged evictions: a state-aware router scans it through bits
    #: (serving/kernel/requests.c settle_bits). Not ttl (blocks expire with the clock), not radix (its
    #: probe follows a path)
    residency_bits: bool = False
    #: the hybrid-model layout it serves ("vllm": vLLM's block pool over layer groups; "sglang":
    #: SGLang's full and SWA pools), and its replay over layer groups (kv_semantics="hybrid"):
    #: (trace, capacity, groups, block_size, engine, retention, chunk, in_full) -> (hit blocks,
    #: counters, resident count, about); None: it replays every layer as full attention only
    layout: str = "vllm"
    replay_groups: Callable | None = None
    #: its replay over layer groups says which hits were in the full-attention groups, for the
    #: hybrid miss account (engine/misses.py hybrid_account): vllm
    group_miss_account: bool = False
    #: why it may end well below its capacity although the trace has more blocks ("": not said)
    below_capacity: str = ""
    #: the lines `kvreplay run` adds for it (report -> list[str]) and the fields its JSON report adds
    #: (report -> dict)
    notes: Callable = field(default=lambda report: [])
    report_fields: Callable = field(default=lambda report: {})

    def compiled(self, state) -> tuple[int, "np.ndarray"]:
        """(the address of its C table, the record of `state` its operations take): the arrays of
        `state` must stay alive while C works on them."""
        if not self.native:
            raise ConfigError(f"policy {self.name!r} has no compiled operations: use the reference engine")
        table, layout = native.policy(self.native)
        return table, native.bind(state, layout, f"{self.name} state")

    def resolve(self, params: dict) -> dict:
        """Defaults filled in, values converted and checked; unknown names are an error."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(known))
        if unknown:
            allowed = ", ".join(known) or "none"
            raise ConfigError(f"{self.name}: unknown parameter {unknown[0]!r} (parameters: {allowed})")
        return {name: p.convert(self.name, params.get(name, p.default)) for name, p in known.items()}


def in_range(lo=None, hi=None, lo_open=False, hi_open=False):
    """A Param.check that bounds a value."""

    def check(value):
        if lo is not None and (value <= lo if lo_open else value < lo):
            return f"must be {'>' if lo_open else '>='} {lo}"
        if hi is not None and (value >= hi if hi_open else value > hi):
            return f"must be {'<' if hi_open else '<='} {hi}"
        return None

    return check


class ReferencePolicy:
    """Base of the reference (plain Python) policies: block-level defaults for the request hooks
    and the holds of running requests (see the contract above)."""

    refusals = 0  # misses refused because every resident block was held
    evicted = None  # a list: the eviction log (see the contract above); None: off

    def note_evicted(self, b) -> None:
        """Block b has just stopped being resident by an eviction: log it when the log is on."""
        if self.evicted is not None:
            self.evicted.append(b)

    def hit_limit(self, num_blocks: int, input_length: int, block_size: int) -> int:
        """The most blocks this request may hit: all of them."""
        return num_blocks

    def cached_blocks(self, num_blocks: int, input_length: int, block_size: int) -> int:
        """Of a request's leading blocks, how many its access phase caches: all of them (vllm and
        radix: its full blocks only, never the prompt's partial tail)."""
        return num_blocks

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        """Access every block of the request, in order."""
        for b in blocks:
            self.access(b)

    def resident_blocks(self):
        """Every resident block id (for end-of-replay statistics)."""
        raise NotImplementedError

    # ---- holds (pin/unpin) ----

    @property
    def pins(self) -> dict:
        """Block -> holds on it; a block that is not held is absent."""
        if "_pins" not in self.__dict__:
            self._pins = {}
        return self._pins

    def held(self, b) -> bool:
        return b in self.pins

    def pin(self, b) -> None:
        if not self.resident(b):
            raise ValueError(f"pin({b!r}): only a resident block can be held")
        self.pins[b] = self.pins.get(b, 0) + 1

    def unpin(self, b) -> None:
        left = self.pins[b] - 1
        if left:
            self.pins[b] = left
        else:
            del self.pins[b]

    def held_count(self) -> int:
        """Blocks with at least one hold."""
        return len(self.pins)

    def everything_held(self) -> bool:
        """True when no resident block may be evicted: a miss that needs room is refused."""
        return len(self.pins) >= self.size()

    def refuse(self) -> None:
        self.refusals += 1

    def refused_when_all_held(self) -> bool:
        """The contract's refusal: when every resident block is held, count a refusal: True."""
        if self.everything_held():
            self.refuse()
            return True
        return False

    def pin_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> list:
        """Access and hold every block in order; stop at the first refused one. The held blocks."""
        held = []
        for b in blocks:
            refusals = self.refusals
            self.access(b)
            if self.refusals != refusals:
                break
            if self.resident(b):  # (a policy may decline a block without a refusal: belady's bypass)
                self.pin(b)
                held.append(b)
        return held

    def unpin_request(self, request: int, blocks: list, input_length: int, block_size: int, handles: list) -> None:
        """Release the request's holds, first to last."""
        for b in handles:
            self.unpin(b)


# ---- holds in the compiled engine: every state has ``pins`` (per block id: holds on it) and
# ``hold``, whose slots include/holds.h names: HELD (blocks with at least one hold), REFUSALS,
# RELEASES (a block's last hold removed: a policy that scans for an unheld block can skip the
# scan while nothing was released since it found none); with the eviction log on, LOG_COUNT
# (blocks logged since the last take), LOG_LOST (blocks that found the log full), and the log
# itself from LOG_HEAD on. ----

HOLD = native.slots("holds", "hold")
HELD, REFUSALS, RELEASES, LOG_COUNT, LOG_LOST = HOLD.HELD, HOLD.REFUSALS, HOLD.RELEASES, HOLD.LOG_COUNT, HOLD.LOG_LOST
LOG_HEAD = len(HOLD)


def meta_slots(symbol: str):
    """The slots of a policy's meta array by the names its C file gives them (``KV_LAYOUT``): Python
    sizes and reads the array by name, so the two never disagree on an index."""
    return native.slots(symbol, "meta", of_policy=True)


def hold_arrays(num_blocks: int) -> dict:
    """The two fields every compiled state adds for holds (see the contract above)."""
    return {"pins": np.zeros(max(1, num_blocks), dtype=np.int32), "hold": np.zeros(3, dtype=np.int64)}


def with_eviction_log(state, size: int):
    """The compiled state with an eviction log of `size` blocks (see the contract above): a longer
    ``hold`` array, its first slots kept. `size` must cover the evictions between two take_evictions: one operation logs only blocks
    resident before it or admitted by it, so capacity + its block count always suffices."""
    if "hold" not in getattr(state, "_fields", ()):
        raise ConfigError(f"{type(state).__name__} has no hold array (a policy's make_state gives one)")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ConfigError(f"eviction log size must be a whole number >= 1, got {size!r}")
    new = np.zeros(LOG_HEAD + int(size), dtype=np.int64)
    new[:LOG_COUNT] = state.hold[:LOG_COUNT]
    return state._replace(hold=new)


def take_evictions(state):
    """The blocks logged since the last take, in eviction order (a copy); the log is emptied.
    RuntimeError when blocks found the log full: they are lost, and stay counted (LOG_LOST)."""
    hold = state.hold
    if hold.shape[0] <= LOG_HEAD:
        raise ConfigError("this state logs no evictions: make it with with_eviction_log(state, size)")
    if hold[LOG_LOST] > 0:
        raise RuntimeError(f"the eviction log of {hold.shape[0] - LOG_HEAD} blocks was full: "
                           f"{int(hold[LOG_LOST])} evictions were not logged; give with_eviction_log a larger size")
    n = int(hold[LOG_COUNT])
    out = hold[LOG_HEAD:LOG_HEAD + n].copy()
    hold[LOG_COUNT] = 0
    return out


def read_holds(state) -> tuple[int, int]:
    """(blocks held, refusals) of a compiled state."""
    return int(state.hold[HELD]), int(state.hold[REFUSALS])


class RequestOnlyPolicy(ReferencePolicy):
    """A request-level reference policy that holds nothing while a request runs (deepseek's disk,
    llama.cpp's slots): a start is its access phase, a finish changes nothing."""

    def pin_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> list:
        self.access_request(request, blocks, hits, input_length, block_size)
        return []

    def unpin_request(self, request: int, blocks: list, input_length: int, block_size: int, handles: list) -> None:
        pass

    def access(self, b) -> None:
        raise NotImplementedError(f"{type(self).__name__} is request-level: access_request")
