"""The sequential replay with tiers (``kvreplay run --tiers``): the driver's loop, the prefix scan
run through the tiers. The readable engine is here; the compiled one is replay.c."""

from __future__ import annotations

import ctypes

import numpy as np

from ... import native
from .parse import Tier
from .pools import Pools


def in_hbm(policy, b) -> bool:
    """Is block b anywhere in a reference policy's cache? (A radix tree's `resident` follows one
    path, so its ids are read from its page counts, or a tree's own in_hbm; the C table's in_hbm
    says the same.)"""
    if hasattr(policy, "in_hbm"):
        return policy.in_hbm(b)
    if hasattr(policy, "page_count"):
        return policy.page_count.get(b, 0) > 0
    return policy.resident(b)


def hbm_gaps(policy) -> bool:
    """May a hit prefix continue through a cached block after a stretch loaded from a tier? Yes
    for a cache of blocks; not for a radix tree, whose path ends where its match ends."""
    return not hasattr(policy, "page_count") and not hasattr(policy, "in_hbm")


def replay_reference(offsets, blocks, input_length, block_size, policy, tiers: list[Tier], hit_blocks, hit_tokens,
                     tier_hits, copies: str = "move") -> list:
    """The readable engine: `policy` a reference policy (its eviction log turned on here), each
    tier an OrderedDict in LRU or FIFO order. Returns the tiers' final contents."""
    from collections import OrderedDict

    policy.evicted = []
    pools = [OrderedDict() for _ in tiers]
    T = len(tiers)
    move = copies == "move"

    def demote(b):
        for t, pool in enumerate(pools):
            if b in pool:
                if tiers[t].policy == "lru":
                    pool.move_to_end(b)
                return
            victim = pool.popitem(last=False)[0] if len(pool) >= tiers[t].blocks else None
            pool[b] = None
            if victim is None:
                return
            b = victim

    for i in range(len(input_length)):
        request = [int(x) for x in blocks[offsets[i]:offsets[i + 1]]]
        L = int(input_length[i])
        limit = policy.hit_limit(len(request), L, block_size)
        k = 0
        while k < limit and policy.resident(request[k]):
            k += 1
        k2 = k
        counts = [0] * (T + 1)
        while k2 < limit:
            b = request[k2]
            if hbm_gaps(policy) and in_hbm(policy, b):
                counts[T] = 0
            else:
                t = next((t for t, pool in enumerate(pools) if b in pool), -1)
                if t < 0:
                    break
                counts[t] += 1
                counts[T] = t + 1
                if not move and tiers[t].policy == "lru":
                    pools[t].move_to_end(b)
            k2 += 1
        hit_blocks[i] = k2
        hit_tokens[i] = min(k2 * block_size, L)
        tier_hits[i, :] = counts
        policy.access_request(i, request, k, L, block_size)
        if move:  # what entered HBM leaves the tiers (not a partial tail vllm and radix never cache)
            for b in request[k:policy.cached_blocks(len(request), L, block_size)]:
                for pool in pools:
                    pool.pop(b, None)
        log, policy.evicted = policy.evicted, []
        for b in log:
            if not in_hbm(policy, b):
                demote(b)
    return [list(pool) for pool in pools]


def replay_tiers(trace, spec, capacity: int, params: dict, tiers: list[Tier], block_size: int, engine: str,
                 copies: str = "move"):
    """Hits with the tiers (sequential, one request at a time): (hit_blocks, hit_tokens,
    tier_hits (n x T+1), policy counters, final HBM blocks, per-tier counts)."""
    n = len(trace)
    hit_blocks = np.zeros(n, dtype=np.int64)
    hit_tokens = np.zeros(n, dtype=np.int64)
    tier_hits = np.zeros((n, len(tiers) + 1), dtype=np.int64)
    if engine == "compiled":
        from ...policies.base import with_eviction_log
        from ..driver import trace_arrays

        # one request evicts at most the blocks resident, and no cache holds more than the trace's
        # distinct blocks: a GPU pool of 10^12 blocks needs no log of 10^12 entries
        log = min(capacity, max(1, trace.num_blocks)) + int(np.diff(trace.offsets).max(initial=0)) + 1
        state = with_eviction_log(spec.make_state(capacity, trace, **params), log)
        pools = Pools(tiers, 1, trace.num_blocks, copies=copies)
        table, record = spec.compiled(state)
        pool_record = pools.record()
        offsets, blocks, lengths = trace_arrays(trace.offsets, trace.blocks, trace.input_length)
        _c_replay_tiers()(table, native.ptr(record), native.ptr(pool_record), native.ptr(offsets), native.ptr(blocks),
                          native.ptr(lengths), n, block_size, native.ptr(hit_blocks), native.ptr(hit_tokens),
                          native.ptr(tier_hits))
        final, counters = spec.read_state(state)
        totals = [pools.totals(t) for t in range(len(tiers))]
    else:
        cache = spec.reference(capacity, trace, **params)
        contents = replay_reference(trace.offsets, trace.blocks, trace.input_length, block_size, cache, tiers,
                                    hit_blocks, hit_tokens, tier_hits, copies)
        final, counters = cache.size(), cache.counters()
        totals = [{"resident": len(c)} for c in contents]
    return hit_blocks, hit_tokens, tier_hits, counters, final, totals


def _c_replay_tiers():
    p, i = ctypes.c_void_p, ctypes.c_int64
    return native.function("kv_replay_tiers", None, p, p, p, p, p, p, i, i, p, p, p)


def split_by_tier(tiers: list[Tier], tier_hits, hit_blocks, hit_tokens, block_size: int) -> dict:
    """Hit tokens per request per tier (HBM first): block counts x block size, the
    min(k x block_size, L) cap taken off the tier of the last hit block."""
    T = len(tiers)
    tokens = tier_hits[:, :T] * block_size
    hbm = (hit_blocks - tier_hits[:, :T].sum(axis=1)) * block_size
    excess = hit_blocks * block_size - hit_tokens
    last = tier_hits[:, T]
    hbm = hbm - np.where(last == 0, excess, 0)
    out = {"hbm": hbm}
    for t, tier in enumerate(tiers):
        out[tier.name] = tokens[:, t] - np.where(last == t + 1, excess, 0)
    return out


def tier_rows(tiers, per_request: dict, measured, prompt_tokens, totals, block_bytes=None) -> list[dict]:
    """One row per tier (HBM first): its hit tokens and their share of the measured prompt tokens."""
    prompt = int(np.asarray(prompt_tokens)[measured].sum())
    rows = []
    for name, tokens in per_request.items():
        hit = int(tokens[measured].sum())
        row = {"name": name}
        if name != "hbm":
            t = [x.name for x in tiers].index(name)
            row.update(tiers[t].to_dict(block_bytes), **totals[t])
        row.update(hit_tokens=hit, hit_rate=hit / prompt if prompt else 0.0)
        rows.append(row)
    return rows
