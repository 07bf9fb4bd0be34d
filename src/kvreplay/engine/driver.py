"""The replay loop: the one place where the spec's prefix-hit semantics live.

For each request, in trace order:

1. scan its blocks from the first one and count the longest run ``k`` that is
   resident *before anything is touched* (the scan stops at the first miss: no
   skip-ahead, no set intersection);
2. record ``hit_blocks = k`` and ``hit_tokens = min(k * block_size, input_length)``
   (the last block of a prompt is usually partial);
3. access every block of the request, hit or miss, in order.

Policies never re-implement this loop; the serving lifecycle (lifecycle.py) scans a starting
request with the same functions (prefix_reference, prefix_compiled). A block-level policy supplies
``resident(b)`` (a probe that changes nothing) and ``access(b)``: as methods of
a small Python class for the reference engine, and as numba overloads of
:func:`resident` and :func:`access` on its state type for the compiled engine.

A request-level policy (an engine that pins a running request's blocks, an
offline bound) may also supply ``hit_limit`` (the most blocks a request may hit,
e.g. vLLM never hits the block holding the last prompt token) and
``access_request`` (the whole access phase of step 3, told how many blocks hit).
The scan and the hit accounting stay here either way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import policies
from ..jit import HAVE_NUMBA, helper, key_cache_on_sources
from ..policies.base import access_request, hit_limit, resident


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


def replay_native(spec, state, offsets, blocks, input_length, block_size, hit_blocks, hit_tokens) -> None:
    """The compiled engine: the same loop in C (policies/<name>.c instantiates it per policy)."""
    from .. import native

    table, record = spec.compiled(state)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    blocks = np.ascontiguousarray(blocks, dtype=np.int32)
    input_length = np.ascontiguousarray(input_length, dtype=np.int64)
    _c_replay()(table, native.ptr(record), native.ptr(offsets), native.ptr(blocks), native.ptr(input_length),
                input_length.shape[0], block_size, native.ptr(hit_blocks), native.ptr(hit_tokens))


def replay_state(spec, state, offsets, blocks, input_length, block_size, hit_blocks, hit_tokens) -> None:
    """The compiled engine over `state`: C where the policy is ported, numba otherwise."""
    if spec.native:
        replay_native(spec, state, offsets, blocks, input_length, block_size, hit_blocks, hit_tokens)
    else:
        replay_compiled(offsets, blocks, input_length, block_size, state, hit_blocks, hit_tokens)


def one_request(spec, state, offsets, blocks, input_length, block_size, i) -> int:
    """The compiled engine's loop body for request i alone (its scan, then its access phase): its
    hit blocks. For tests that check a policy between requests."""
    hit_blocks = np.zeros(1, dtype=np.int64)
    if not spec.native:
        return int(one_request_compiled(offsets, blocks, input_length, block_size, state, i))
    table, record = spec.compiled(state)
    from .. import native

    blocks = np.ascontiguousarray(blocks, dtype=np.int32)
    lengths = np.ascontiguousarray(input_length, dtype=np.int64)
    _c_one_request()(table, native.ptr(record), native.ptr(np.ascontiguousarray(offsets, dtype=np.int64)),
                     native.ptr(blocks), native.ptr(lengths), block_size, i, native.ptr(hit_blocks))
    return int(hit_blocks[0])


def _c_one_request():
    import ctypes

    from .. import native

    p, i = ctypes.c_void_p, ctypes.c_int64
    return native.function("kv_one_request", None, p, p, p, p, p, i, i, p)


def _c_replay():
    import ctypes

    from .. import native

    p, i = ctypes.c_void_p, ctypes.c_int64
    return native.function("kv_replay", None, p, p, p, p, p, i, i, p, p)


if HAVE_NUMBA:
    from numba import njit

    @helper
    def prefix_compiled(state, blocks, start, end, input_length, block_size):
        """Steps 1-2 in the compiled engine (prefix_reference): blocks[start:end]'s longest
        resident prefix, touching nothing. The serving lifecycle (lifecycle.py) scans with it too."""
        limit = hit_limit(state, end - start, input_length, block_size)
        k = 0
        while k < limit:
            if not resident(state, blocks[start + k]):
                break
            k += 1
        return k

    # _nrt=False: the loop allocates nothing, and without it numba updates the reference
    # count of every state array on every access, which made replay 14x slower.
    @njit(cache=True, nogil=True, _nrt=False)
    def replay_compiled(offsets, blocks, input_length, block_size, state, hit_blocks, hit_tokens):  # pragma: no cover - compiled
        """Compiled engine: the same loop as replay_reference, specialised per policy state type."""
        for i in range(input_length.shape[0]):
            start, end = offsets[i], offsets[i + 1]
            k = prefix_compiled(state, blocks, start, end, input_length[i], block_size)
            hit_blocks[i] = k
            hit_tokens[i] = min(k * block_size, input_length[i])
            access_request(state, i, blocks, start, end, k, input_length[i], block_size)

    @njit(cache=True, nogil=True, _nrt=False)
    def one_request_compiled(offsets, blocks, input_length, block_size, state, i):  # pragma: no cover - compiled
        start, end = offsets[i], offsets[i + 1]
        k = prefix_compiled(state, blocks, start, end, input_length[i], block_size)
        access_request(state, i, blocks, start, end, k, input_length[i], block_size)
        return k

    key_cache_on_sources(one_request_compiled, [__file__, *sorted(str(p) for p in Path(policies.__file__).parent.glob("*.py"))])

    # The driver pastes every policy's operations: key its disk cache on all of their sources.
    key_cache_on_sources(replay_compiled, [__file__, *sorted(str(p) for p in Path(policies.__file__).parent.glob("*.py"))])
