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

Not yet in the contract: holding a running request's blocks (pin/unpin) for the serving
simulator (issue 10, item 2): vllm and radix already pin a request's blocks inside
``access_request`` (vLLM's ref_cnt, SGLang's lock_ref), but no policy exposes it separately.
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
    read_state(state) -> (final_cache_blocks, counters dict).
    resident_mask(state) -> bool array over block ids: what is resident at the end.
    sizes(capacity, **params) -> dict of derived sizes shown in reports (e.g. small_cap).
    capacity: "required", "optional" (None means unbounded) or "ignored" (bounds such as infinite).
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
    """Base of the reference (plain Python) policies: block-level defaults for the request hooks."""

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


def register_kernel(state_class, resident_impl, access_impl=None, *, access_request_impl=None, hit_limit_impl=None) -> None:
    """Make the compiled driver call these functions (``@helper``s) for states of `state_class`.

    A block-level policy gives resident_impl(st, b) and access_impl(st, b). A request-level
    policy may replace the access phase (access_request_impl with the signature of
    :func:`access_request`) and cap the prefix scan (hit_limit_impl). Each op's parameters are
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
    pasted = access_request_impl is None or getattr(access_request_impl, "targetoptions", {}).get("inline") == "always"
    options = {"inline": "always"} if pasted else {"jit_options": {"nogil": True, "_nrt": False}}

    @overload(access_request, **options)
    def _access_request(st, request, blocks, start, end, hits, input_length, block_size):
        if matches(st):
            if access_request_body is None:

                def every_block(st, request, blocks, start, end, hits, input_length, block_size):
                    for j in range(start, end):
                        access_impl(st, blocks[j])  # the op itself: pasted if it is an inline helper

                return every_block
            return access_request_body


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
