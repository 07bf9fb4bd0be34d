"""Requests that overlap: starts and finishes in any order, each running request holding its blocks.

The sequential replay (driver.py) finishes every request before the next one starts. Here a
list of events says when each request starts and when it finishes; between the two it holds its
blocks (the policy contract's ``pin_request`` / ``unpin_request``, policies/base.py), so the
prefix cache only gets what running requests leave. This is the engine side of the serving
simulator: the simulator decides *when* (arrivals, scheduling, time); this module does *what* a
start and a finish do to the cache, in both engines.

Events: an integer array; ``0 <= e < n`` starts request ``e`` (the prefix scan, exactly as in the
sequential replay, then ``pin_request``), ``e < 0`` finishes request ``-e - 1``
(``unpin_request``), ``e >= n`` stores running request ``e - n`` (``store_request``: its computed
prompt enters the cache while it runs, as TensorRT-LLM's storeContextBlocks; a policy without
that step does nothing). Each request starts at most once and finishes at most once, after its
start; a request never finished is still running at the end.

A start can be **refused** (the request's missing blocks do not fit beside the blocks running
requests hold): the result says which, and how many blocks it holds (a block-level policy holds
the leading blocks it admitted until its finish event releases them; vllm and radix hold none).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import native
from ..errors import ConfigError
from ..policies.base import read_holds
from ..policies.registry import get_policy
from ..trace.model import resolve_block_size
from . import driver
from .driver import prefix_reference
from .replay import as_trace, check_capacity, resolve_engine


@dataclass
class Lifecycle:
    """What overlapping requests did to one cache (arrays indexed by request)."""

    policy: str
    capacity: int
    block_size: int
    started: np.ndarray  # bool: the request had a start event
    hit_blocks: np.ndarray  # the longest resident prefix at its start
    hit_tokens: np.ndarray  # min(hit_blocks * block_size, input_length)
    held_blocks: np.ndarray  # blocks it held after its start
    refused: np.ndarray  # bool: its start was refused
    final_cache_blocks: int
    resident: np.ndarray  # bool over block ids, at the end
    held_at_end: int  # blocks still held by requests without a finish event
    refusals: int
    counters: dict


def check_events(events, num_requests: int) -> np.ndarray:
    """The events as int64, or ConfigError naming the first one out of order."""
    try:
        events = np.asarray(events, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"events must be whole numbers (request i starts: i; it finishes: -i-1; it stores: n+i), "
                          f"got {events!r}") from None
    if events.ndim != 1:
        raise ConfigError(f"events must be a flat list, got shape {events.shape}")
    state = np.zeros(num_requests, dtype=np.int8)  # 0 waiting, 1 running, 2 finished
    for k, e in enumerate(events.tolist()):
        if e >= num_requests:
            i = e - num_requests
            if i >= num_requests:
                raise ConfigError(f"event {k}: request {e} does not exist ({num_requests} requests; request i "
                                  f"stores at n + i, up to {2 * num_requests - 1})")
            if state[i] != 1:
                raise ConfigError(f"event {k}: request {i} stores (event {e} = n + {i}) but is not running")
            continue
        i = e if e >= 0 else -e - 1
        if i >= num_requests:
            raise ConfigError(f"event {k}: request {i} does not exist ({num_requests} requests)")
        want = 0 if e >= 0 else 1
        if state[i] != want:
            what = "starts twice" if e >= 0 else ("finishes before it starts" if state[i] == 0 else "finishes twice")
            raise ConfigError(f"event {k}: request {i} {what}")
        state[i] += 1
    return events


def start_reference(policy, i, request, input_length, block_size):
    """One start in the reference engine: (hit blocks, handles, refused)."""
    k = prefix_reference(policy, policy.resident, request, input_length, block_size)
    refusals = policy.refusals
    handles = policy.pin_request(i, request, k, input_length, block_size)
    return k, handles, policy.refusals != refusals


def run_reference(offsets, blocks, input_length, block_size, policy, events, hit_blocks, held, refused, on_event=None):
    """Reference engine: plain Python over a policy object. on_event(k) runs after event k (tests)."""
    offsets, blocks, lengths = offsets.tolist(), blocks.tolist(), input_length.tolist()
    num = len(lengths)
    handles = {}
    for n, e in enumerate(events.tolist()):
        if e >= num:
            i = e - num
            if hasattr(policy, "store_request"):
                policy.store_request(i, blocks[offsets[i]:offsets[i + 1]], lengths[i], block_size, handles[i])
        elif e >= 0:
            request = blocks[offsets[e]:offsets[e + 1]]
            hit_blocks[e], handles[e], refused[e] = start_reference(policy, e, request, lengths[e], block_size)
            held[e] = len(handles[e])
        else:
            i = -e - 1
            policy.unpin_request(i, blocks[offsets[i]:offsets[i + 1]], lengths[i], block_size, handles.pop(i))
        if on_event is not None:
            on_event(n)


def run_state(spec, state, trace, block_size, events, hit_blocks, held, refused, handles) -> None:
    """The compiled engine's events over `state` (refused: a bool array), in C (engine/driver.c
    kv_run_events, which starts requests with kv_request_start), for the requests of `trace` (its
    offsets, blocks and input lengths). Request i's handles live at handles[offsets[i] + i:]."""
    events = np.ascontiguousarray(events, dtype=np.int64)
    table, record = spec.compiled(state)
    offsets, blocks, lengths = driver.trace_arrays(trace.offsets, trace.blocks, trace.input_length)
    refused8 = refused.view(np.int8)
    _c_run_events()(table, native.ptr(record), native.ptr(offsets), native.ptr(blocks), native.ptr(lengths),
                    lengths.shape[0], block_size, native.ptr(events), events.shape[0], native.ptr(hit_blocks), native.ptr(held),
                    native.ptr(refused8), native.ptr(handles))


@lru_cache(maxsize=None)
def _c_run_events():
    p, i = ctypes.c_void_p, ctypes.c_int64
    return native.function("kv_run_events", None, p, p, p, p, p, i, i, p, i, p, p, p, p)


def replay_lifecycle(trace, policy: str, capacity: int | None, events, block_size: int | None = None, *,
                     engine: str | None = None, on_event=None, **params) -> Lifecycle:
    """Run `events` (see the module docstring) over `trace` through one cache of `capacity` blocks.

    on_event(k, cache) (reference engine only) runs after each event, for checks.
    """
    trace = as_trace(trace)
    spec = get_policy(policy)
    if spec.capacity == "ignored" or (capacity is None and spec.capacity == "optional"):
        capacity = max(1, trace.num_blocks)
    capacity = check_capacity(capacity)
    block_size = resolve_block_size(block_size, trace)
    spec.check_block_size(block_size)
    params = spec.resolve(params)
    n = len(trace)
    events = check_events(events, n)
    engine = resolve_engine(engine)
    if engine == "compiled" and not spec.native:
        engine = "reference"  # a policy with the reference engine only
    if on_event is not None and engine != "reference":
        raise ConfigError("on_event needs the reference engine")
    hit_blocks = np.zeros(n, dtype=np.int64)
    held = np.zeros(n, dtype=np.int64)
    refused = np.zeros(n, dtype=np.bool_)
    if engine == "compiled":
        state = spec.make_state(capacity, trace, **params)
        handles = np.zeros(trace.num_accesses + n, dtype=np.int64)
        run_state(spec, state, trace, block_size, events, hit_blocks, held, refused, handles)
        final, counters = spec.read_state(state)
        mask = spec.resident_mask(state)
        held_at_end, refusals = read_holds(state)
    else:
        cache = spec.reference(capacity, trace, **params)
        hook = None if on_event is None else (lambda k: on_event(k, cache))
        run_reference(trace.offsets, trace.blocks, trace.input_length, block_size, cache, events, hit_blocks, held, refused, hook)
        final, counters = cache.size(), cache.counters()
        mask = np.zeros(trace.num_blocks, dtype=bool)
        mask[list(cache.resident_blocks())] = True
        held_at_end, refusals = cache.held_count(), cache.refusals
    started = np.zeros(n, dtype=bool)
    started[events[(events >= 0) & (events < n)]] = True
    return Lifecycle(
        policy=spec.name, capacity=capacity, block_size=block_size, started=started, hit_blocks=hit_blocks,
        hit_tokens=np.minimum(hit_blocks * block_size, np.asarray(trace.input_length)), held_blocks=held,
        refused=refused, final_cache_blocks=final, resident=mask, held_at_end=held_at_end, refusals=refusals,
        counters=counters,
    )
