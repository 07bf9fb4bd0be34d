"""The policy contract: what every policy module provides, written once.

A policy module defines ``POLICY = PolicySpec(...)`` (registry.py finds it) with two engines of
one behaviour: a reference class (plain Python, the readable oracle) and compiled state + ops.

Operations (reference: methods of a ReferencePolicy; compiled: overloads of the stubs below on
the policy's state type, registered with ``register_kernel``):

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
- Callers with holds go through ``pin_request``. A compiled policy may build its sequential
  ``access`` without the hold checks, to keep the replay kernel's compile time (s3fifo and 2q
  do: their ops are built twice, with and without holds, and ``pin_request`` uses the one with).

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
- Compiled: every eviction path calls ``log_eviction(st, victim)``: a shape check when the log
  is off (``hold`` of 3 slots). arc's sequential state has no ``hold``: its log is on the held
  state (``spec.held_state``), which the serving layer and the lifecycle use anyway.
- Checked by tests/policies/test_eviction_log.py: both engines log the same blocks in the same
  order, request by request, sequentially and under holds, and the log is what left the
  resident set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import ConfigError
from ..jit import HAVE_NUMBA, helper


@dataclass(frozen=True)
class Param:
    """One tunable parameter of a policy."""

    name: str
    default: Any
    kind: type  # int or float
    help: str
    check: Callable[[Any], str | None] = lambda value: None  # returns a complaint or None

    def convert(self, policy: str, value: Any) -> Any:
        if self.kind is int:
            if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
                raise ConfigError(f"{policy}: {self.name} must be an integer, not {value!r}")
            value = int(value)
        elif self.kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{policy}: {self.name} must be a number, not {value!r}")
            value = float(value)
            if value != value or value in (float("inf"), float("-inf")):
                raise ConfigError(f"{policy}: {self.name} must be a finite number, not {value!r}")
        complaint = self.check(value)
        if complaint:
            raise ConfigError(f"{policy}: {self.name} {complaint}, got {value!r}")
        return value


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy.

    reference(capacity, trace, **params) -> a ReferencePolicy (resident(b), access(b),
        size(), counters(), resident_blocks()): the readable engine.
    make_state(capacity, trace, **params) -> namedtuple of numpy arrays on which the
        compiled driver's overloads act.
    held_state(capacity, trace, **params) -> the state running requests use (engine/lifecycle.py),
        when it differs from make_state's: a policy whose sequential state has no ``pins`` keeps
        its replay kernel exactly as it was before holds (docs/performance.md §9). None: make_state.
    read_state(state) -> (final_cache_blocks, counters dict).
    resident_mask(state) -> bool array over block ids: what is resident at the end.
    sizes(capacity, **params) -> dict of derived sizes shown in reports (e.g. small_cap).
    capacity: "required", "optional" (None means unbounded) or "ignored" (bounds such as infinite).
    native: the name of its compiled operations in the core (``kv_policy_<native>`` in
        policies/<module>.c; None: numba only, while the port lasts).
    """

    name: str
    summary: str
    reference: Callable
    make_state: Callable | None
    read_state: Callable | None
    resident_mask: Callable | None = None
    held_state: Callable | None = None
    params: tuple[Param, ...] = ()
    sizes: Callable[..., dict] = field(default=lambda capacity, **params: {})
    capacity: str = "required"
    native: str | None = None

    def compiled(self, state) -> tuple[int, "np.ndarray"]:
        """(the address of its C table, the record of `state` its operations take): the arrays of
        `state` must stay alive while C works on them."""
        from .. import native

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
# ``hold`` (HELD: blocks with at least one hold; REFUSALS). ----

# hold slots: blocks held, refused misses, and releases (a block's last hold removed: a policy
# that scans for an unheld block can skip the scan while nothing was released since it found none)
HELD, REFUSALS, RELEASES = 0, 1, 2
# the eviction log's slots, when hold is longer than LOG_HEAD (with_eviction_log): blocks logged
# since the last take, blocks that found the log full; the log itself from LOG_HEAD on
LOG_COUNT, LOG_LOST = 3, 4
LOG_HEAD = 5


def hold_arrays(num_blocks: int) -> dict:
    """The two fields every compiled state adds for holds (see the contract above)."""
    import numpy as np

    return {"pins": np.zeros(max(1, num_blocks), dtype=np.int32), "hold": np.zeros(3, dtype=np.int64)}


def with_eviction_log(state, size: int):
    """The compiled state with an eviction log of `size` blocks (see the contract above): a longer
    ``hold`` array, its first slots kept. The numba type is the same, so nothing recompiles.
    `size` must cover the evictions between two take_evictions: one operation logs only blocks
    resident before it or admitted by it, so capacity + its block count always suffices."""
    import numpy as np

    if "hold" not in getattr(state, "_fields", ()):
        raise ConfigError(f"{type(state).__name__} has no hold array: log evictions on the held state (spec.held_state or spec.make_state)")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ConfigError(f"eviction log size must be a whole number >= 1, got {size!r}")
    new = np.zeros(LOG_HEAD + int(size), dtype=np.int64)
    new[:3] = state.hold[:3]
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


@helper(inline=False)
def _log_append(hold, b):
    """Compiled once: the part of log_eviction that runs only with the log on."""
    n = hold[LOG_COUNT]
    if n < hold.shape[0] - LOG_HEAD:
        hold[LOG_HEAD + n] = b
        hold[LOG_COUNT] = n + 1
    else:
        hold[LOG_LOST] += 1


if HAVE_NUMBA:
    from llvmlite import ir
    from numba.core import cgutils, types as _types
    from numba.extending import intrinsic

    @intrinsic
    def rarely(typingctx, cond):
        """`cond`, marked unlikely for LLVM (``llvm.expect``), so that the block it guards is laid
        out off the hot path: without it, the never-taken log branch made the lru and s3fifo
        replay kernels 3-6% slower (docs/policies.md, "Eviction log")."""

        def codegen(context, builder, signature, args):
            bit = ir.IntType(1)
            expect = cgutils.get_or_insert_function(builder.module, ir.FunctionType(bit, [bit, bit]), "llvm.expect.i1")
            return builder.call(expect, [args[0], ir.Constant(bit, 0)])

        return _types.boolean(_types.boolean), codegen
else:
    def rarely(cond):
        return cond


@helper
def log_eviction(st, b):
    """Log block b, which has just stopped being resident by an eviction. With the log off (hold
    of 3 slots) this is one comparison, pasted into every eviction path of the replay kernels."""
    if rarely(st.hold.shape[0] > LOG_HEAD):
        _log_append(st.hold, b)


@helper
def clear_evictions(st):
    """Compiled take_evictions for a caller that read the log in place: the log is emptied (a
    count of lost blocks, LOG_LOST, stays: check it first)."""
    if st.hold.shape[0] > LOG_HEAD:
        st.hold[LOG_COUNT] = 0


def read_holds(state) -> tuple[int, int]:
    """(blocks held, refusals) of a compiled state."""
    return int(state.hold[HELD]), int(state.hold[REFUSALS])


def built_twice(ops):
    """(op, held op) from ``ops(holds)``: the access op built for sequential replay, which never
    holds a block (``holds`` False: a closure constant, so numba prunes every ``if holds:`` branch
    before typing and the replay kernel is the one without holds), and for running requests
    (``holds`` True: give it to register_kernel as held_access_impl). Hold checks in the replay
    kernel had cost arc half its speed (docs/performance.md §9)."""
    return ops(False), ops(True)


@helper
def pin(st, b):
    """Compiled ``pin``: one more hold on resident block b."""
    if st.pins[b] == 0:
        st.hold[HELD] += 1
    st.pins[b] += 1


@helper
def unpin(st, b):
    """Compiled ``unpin``: one hold less on b."""
    st.pins[b] -= 1
    if st.pins[b] == 0:
        st.hold[HELD] -= 1
        st.hold[RELEASES] += 1


@helper
def refuse(st):
    st.hold[REFUSALS] += 1


@helper
def refused_when_all_held(st, resident):
    """The contract's refusal, compiled: when all `resident` blocks are held (held blocks are
    resident, so HELD >= resident says it), count a refusal and return True; else False."""
    if st.hold[HELD] >= resident:
        refuse(st)
        return True
    return False


# The compiled engine's view of a policy: the driver (engine/driver.py) calls resident, hit_limit
# and access_request on a policy's state, overloaded per state type by register_kernel; `access`
# fixes the signature of a block-level policy's op.

def resident(st, b):
    """Compiled-engine probe: is block `b` resident in state `st`? Each policy overloads this."""
    raise NotImplementedError


def access(st, b):
    """Compiled-engine access of block `b`: the signature a block-level policy's access op takes
    (the default access phase calls the op directly)."""
    raise NotImplementedError


def hit_limit(st, num_blocks, input_length, block_size):
    """Compiled-engine cap on a request's hit blocks (default: all of its blocks)."""
    raise NotImplementedError


def access_request(st, request, blocks, start, end, hits, input_length, block_size):
    """Compiled-engine access phase of request `request` (default: access(b) for every block in order)."""
    raise NotImplementedError


def pin_request(st, request, blocks, start, end, hits, input_length, block_size, handles, base):
    """Compiled ``pin_request`` of request `request` (blocks[start:end]): the access phase, holding
    its blocks; writes their handles to handles[base:base + n] and returns n (default: access(b)
    then pin(b) for each block, the handle is the block id)."""
    raise NotImplementedError


def unpin_request(st, request, blocks, start, end, input_length, block_size, handles, base, n):
    """Compiled ``unpin_request``: release the n holds handles[base:base + n] of a pin_request."""
    raise NotImplementedError


def register_kernel(state_class, resident_impl, access_impl=None, *, access_request_impl=None, hit_limit_impl=None,
                    pin_request_impl=None, unpin_request_impl=None, held_access_impl=None) -> None:
    """Make the compiled driver call these functions (``@helper``s) for states of `state_class`.

    A block-level policy gives resident_impl(st, b) and access_impl(st, b). A request-level
    policy may replace the access phase (access_request_impl with the signature of
    :func:`access_request`), cap the prefix scan (hit_limit_impl) and replace how a running
    request holds and releases its blocks (pin_request_impl, unpin_request_impl). A policy whose
    access op is compiled without the hold checks gives the op with them as held_access_impl: the
    default pin_request calls that one. Each op's parameters are
    named as the stub's: its own body is then what the driver pastes (no wrapper around it, one
    level less for numba's inliner, whose cost compounds with every level; see jit.py).
    """
    if not HAVE_NUMBA:
        return
    import inspect

    from numba import types
    from numba.extending import overload

    def body(op, stub):
        if op is None:
            return None
        fn = getattr(op, "py_func", op)
        if list(inspect.signature(fn).parameters) != list(inspect.signature(stub).parameters):
            raise TypeError(f"{fn.__qualname__}{inspect.signature(fn)} must take the parameters of {stub.__name__}{inspect.signature(stub)}")
        return fn

    resident_body = body(resident_impl, resident)
    body(access_impl, access)  # the default access phase below calls the op itself
    access_request_body = body(access_request_impl, access_request)
    hit_limit_body = body(hit_limit_impl, hit_limit)
    pin_request_body = body(pin_request_impl, pin_request)
    held_access = access_impl if held_access_impl is None else held_access_impl
    unpin_request_body = body(unpin_request_impl, unpin_request)

    def matches(st):
        return isinstance(st, types.BaseNamedTuple) and st.instance_class is state_class

    @overload(resident, inline="always")
    def _resident(st, b):
        if matches(st):
            return resident_body

    @overload(hit_limit, inline="always")
    def _hit_limit(st, num_blocks, input_length, block_size):
        if matches(st):
            if hit_limit_body is None:
                return lambda st, num_blocks, input_length, block_size: num_blocks
            return hit_limit_body

    # A request-level access phase compiled on its own (helper(inline=False)) stays a call, one
    # per request: pasting its body would make numba copy all of it into the driver.
    def options_of(op):
        if op is None or getattr(op, "targetoptions", {}).get("inline") == "always":
            return {"inline": "always"}
        return {"jit_options": {"nogil": True, "_nrt": False}}

    @overload(access_request, **options_of(access_request_impl))
    def _access_request(st, request, blocks, start, end, hits, input_length, block_size):
        if matches(st):
            if access_request_body is None:

                def every_block(st, request, blocks, start, end, hits, input_length, block_size):
                    for j in range(start, end):
                        access_impl(st, blocks[j])  # the op itself: pasted if it is an inline helper

                return every_block
            return access_request_body

    @overload(pin_request, **options_of(pin_request_impl))
    def _pin_request(st, request, blocks, start, end, hits, input_length, block_size, handles, base):
        if matches(st):
            if pin_request_body is None:

                def hold_every_block(st, request, blocks, start, end, hits, input_length, block_size, handles, base):
                    n = 0
                    for j in range(start, end):
                        b = blocks[j]
                        refusals = st.hold[REFUSALS]
                        held_access(st, b)
                        if st.hold[REFUSALS] != refusals:
                            break
                        if resident_impl(st, b):
                            pin(st, b)
                            handles[base + n] = b
                            n += 1
                    return n

                return hold_every_block
            return pin_request_body

    @overload(unpin_request, **options_of(unpin_request_impl))
    def _unpin_request(st, request, blocks, start, end, input_length, block_size, handles, base, n):
        if matches(st):
            if unpin_request_body is None:

                def release_every_block(st, request, blocks, start, end, input_length, block_size, handles, base, n):
                    for k in range(n):
                        unpin(st, handles[base + k])

                return release_every_block
            return unpin_request_body


@helper
def wrap(i, n):
    """``i % n`` for ring-buffer indices (0 <= i < 2n): a compare instead of an integer division
    on every queue operation (worth up to ~25% of fifo/s3fifo replay time), and no branch
    (each basic block of a pasted helper costs compile time, see jit.py)."""
    return i - n * (i >= n)


# Intrusive doubly linked lists over index arrays (LRU orders, ghost queues, frequency buckets,
# free queues): node x's neighbours are prev[x] and nxt[x], -1 for none; the list's ends live in
# heads[head_at] and tails[tail_at] (a slot of a policy's meta array, or one bucket of a per-
# frequency array). One implementation for every kernel, compiled once (LLVM inlines these small
# functions; pasting them with numba made the kernels with many list splices slow to compile).

@helper(inline=False)
def list_unlink(prev, nxt, heads, head_at, tails, tail_at, x):
    """Take node x out of its list (x must be in it) and clear its links."""
    p, n = prev[x], nxt[x]
    if p >= 0:
        nxt[p] = n
    else:
        heads[head_at] = n
    if n >= 0:
        prev[n] = p
    else:
        tails[tail_at] = p
    prev[x] = -1
    nxt[x] = -1


@helper(inline=False)
def list_append(prev, nxt, heads, head_at, tails, tail_at, x):
    """Put node x (in no list) at the tail."""
    tail = tails[tail_at]
    prev[x] = tail
    if tail >= 0:
        nxt[tail] = x
    else:
        heads[head_at] = x
    tails[tail_at] = x
