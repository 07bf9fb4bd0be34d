"""The replay loop: the one place where the spec's prefix-hit semantics live.

For each request, in trace order:

1. scan its blocks from the first one and count the longest run ``k`` that is
   resident *before anything is touched* (the scan stops at the first miss: no
   skip-ahead, no set intersection);
2. record ``hit_blocks = k`` and ``hit_tokens = min(k * block_size, input_length)``
   (the last block of a prompt is usually partial);
3. access every block of the request, hit or miss, in order.

Policies never re-implement this loop. The reference engine is :func:`replay_reference` over a
policy object (``resident(b)``, a probe that changes nothing, and the access phase); the compiled
engine is the same loop in C (``KV_REPLAY`` in include/policy.h, instantiated in each policy's C
file with its probe and access inlined; driver.c dispatches to it). The serving simulator and the
overlapping-requests driver (lifecycle.py) scan a starting request the same way
(:func:`prefix_reference`, ``kv_request_start``).

A request-level policy (an engine that pins a running request's blocks, an offline bound) may
also supply ``hit_limit`` (the most blocks a request may hit, e.g. vLLM never hits the block
holding the last prompt token) and ``access_request`` (the whole access phase of step 3, told how
many blocks hit). The scan and the hit accounting stay here either way.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from .. import native


def prefix_reference(policy, is_resident, request, input_length, block_size) -> int:
    """Steps 1-2 in the reference engine: the longest resident prefix, in blocks, touching nothing."""
    limit = policy.hit_limit(len(request), input_length, block_size)
    k = 0
    while k < limit and is_resident(request[k]):
        k += 1
    return k


def replay_reference(offsets, blocks, input_length, block_size, policy, hit_blocks, hit_tokens) -> None:
    """Reference engine: plain Python over a policy object (see policies.base.ReferencePolicy)."""
    offsets = offsets.tolist()
    blocks = blocks.tolist()
    lengths = input_length.tolist()
    is_resident = policy.resident
    for i in range(len(lengths)):
        request = blocks[offsets[i]:offsets[i + 1]]
        k = hit_blocks[i] = prefix_reference(policy, is_resident, request, lengths[i], block_size)
        hit_tokens[i] = min(k * block_size, lengths[i])
        policy.access_request(i, request, k, lengths[i], block_size)


def trace_arrays(offsets, blocks, input_length):
    """The trace's arrays as the C functions read them (contiguous int64 / int32 / int64)."""
    return (np.ascontiguousarray(offsets, dtype=np.int64), np.ascontiguousarray(blocks, dtype=np.int32),
            np.ascontiguousarray(input_length, dtype=np.int64))


def replay_state(spec, state, offsets, blocks, input_length, block_size, hit_blocks, hit_tokens) -> None:
    """The compiled engine over `state` (spec.make_state's): the loop above, in C."""
    table, record = spec.compiled(state)
    offsets, blocks, input_length = trace_arrays(offsets, blocks, input_length)
    _c("kv_replay")(table, native.ptr(record), native.ptr(offsets), native.ptr(blocks), native.ptr(input_length),
                    input_length.shape[0], block_size, native.ptr(hit_blocks), native.ptr(hit_tokens))


def one_request(spec, state, offsets, blocks, input_length, block_size, i) -> int:
    """The compiled engine's loop body for request i alone (its scan, then its access phase): its
    hit blocks. For tests that check a policy between requests."""
    hit_blocks = np.zeros(1, dtype=np.int64)
    table, record = spec.compiled(state)
    offsets, blocks, input_length = trace_arrays(offsets, blocks, input_length)
    _c("kv_one_request")(table, native.ptr(record), native.ptr(offsets), native.ptr(blocks), native.ptr(input_length),
                         block_size, i, native.ptr(hit_blocks))
    return int(hit_blocks[0])


def resident(spec, state, b) -> bool:
    """The compiled engine's probe of block b in `state` (it changes nothing)."""
    table, record = spec.compiled(state)
    fn = native.function("kv_resident", ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    return bool(fn(table, native.ptr(record), b))


@lru_cache(maxsize=None)
def _c(name: str):
    p, i = ctypes.c_void_p, ctypes.c_int64
    signatures = {"kv_replay": (p, p, p, p, p, i, i, p, p), "kv_one_request": (p, p, p, p, p, i, i, p)}
    return native.function(name, None, *signatures[name])
