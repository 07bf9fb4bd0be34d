"""The replay loop: the one place where the spec's prefix-hit semantics live.

For each request, in trace order:

1. scan its blocks from the first one and count the longest run ``k`` that is
   resident *before anything is touched* (the scan stops at the first miss: no
   skip-ahead, no set intersection);
2. record ``hit_blocks = k`` and ``hit_tokens = min(k * block_size, input_length)``
   (the last block of a prompt is usually partial);
3. access every block of the request, hit or miss, in order.

Policies never re-implement this loop. A block-level policy supplies
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

import hashlib

try:
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    HAVE_NUMBA = False


def resident(state, block):
    """Compiled-engine probe: is `block` resident? Each policy overloads this for its state type."""
    raise NotImplementedError


def access(state, block):
    """Compiled-engine access of `block`. Each policy overloads this for its state type."""
    raise NotImplementedError


def hit_limit(state, num_blocks, input_length, block_size):
    """Compiled-engine cap on a request's hit blocks (default: all of its blocks)."""
    raise NotImplementedError


def access_request(state, request, blocks, start, end, hits, input_length, block_size):
    """Compiled-engine access phase of request `request` (default: access(b) for every block in order)."""
    raise NotImplementedError


def replay_reference(offsets, blocks, input_length, block_size, policy, hit_blocks, hit_tokens) -> None:
    """Reference engine: plain Python over a policy object (see policies.base.ReferencePolicy)."""
    offsets = offsets.tolist()
    blocks = blocks.tolist()
    lengths = input_length.tolist()
    is_resident = policy.resident
    for i in range(len(lengths)):
        request = blocks[offsets[i]:offsets[i + 1]]
        limit = policy.hit_limit(len(request), lengths[i], block_size)
        k = 0
        while k < limit and is_resident(request[k]):
            k += 1
        hit_blocks[i] = k
        hit_tokens[i] = min(k * block_size, lengths[i])
        policy.access_request(i, request, k, lengths[i], block_size)


if HAVE_NUMBA:

    # _nrt=False: the loop allocates nothing, and without it numba updates the reference
    # count of every state array on every access, which made replay 14x slower.
    @njit(cache=True, nogil=True, _nrt=False)
    def replay_compiled(offsets, blocks, input_length, block_size, state, hit_blocks, hit_tokens):  # pragma: no cover - compiled
        """Compiled engine: the same loop as replay_reference, specialised per policy state type."""
        for i in range(input_length.shape[0]):
            start, end = offsets[i], offsets[i + 1]
            limit = hit_limit(state, end - start, input_length[i], block_size)
            k = 0
            while k < limit:
                if not resident(state, blocks[start + k]):
                    break
                k += 1
            hit_blocks[i] = k
            hit_tokens[i] = min(k * block_size, input_length[i])
            access_request(state, i, blocks, start, end, k, input_length[i], block_size)


def compiled(fn):
    """A standalone kernel (readers, analyses): numba's ``njit(cache=True, nogil=True)`` where
    numba is installed; the plain function otherwise (same results, slower)."""
    return njit(cache=True, nogil=True)(fn) if HAVE_NUMBA else fn


def key_cache_on_sources(paths, kernel=None) -> None:
    """Make a compiled kernel's on-disk cache (default: the driver's) depend on the source of
    every helper it inlines from other files.

    numba keys a cached function on its own file only, but the driver inlines each policy's
    operations from other modules: without this, editing a policy would keep running the
    stale cached kernel. Relies on numba internals; where they differ, caching is unchanged.
    """
    if not HAVE_NUMBA:
        return
    try:
        cache_file = (kernel or replay_compiled)._cache._cache_file
        stamp = cache_file._source_stamp
    except AttributeError:  # pragma: no cover - other numba versions
        return
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            digest.update(f.read())
    cache_file._source_stamp = (stamp, digest.hexdigest())
