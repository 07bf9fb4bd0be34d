"""Sessions inferred from prefix extension, for traces that do not record them (Mooncake's).

A conversation's next turn sends the whole conversation so far: the previous prompt, the previous
answer, the new message. Its block ids therefore start with every full block of the previous
turn's prompt. So request i **extends** request j when j was sent strictly earlier and j's full
blocks (its first floor(L / block size) ids: its last, partial block is hashed over fewer tokens
than i has there) are a prefix of i's ids. Of the requests i extends, it follows the one with the
longest such prefix (the latest of equal ones): with every turn of a conversation extending the
one before, the longest is the latest turn, while a shorter match can be a stranger's request
that shares a system prompt.

A system prompt that many sessions share would otherwise chain strangers together (every request
of Mooncake's conversation trace starts with the same block). So blocks that at least
max(100, 1% of the requests) requests hold are the trace's **common blocks**, and a prefix made of
common blocks only is no extension: a request that extends nothing else starts a session.

Each inferred session is a chain (or a tree, when two later turns extend one request); sessions are
numbered by their first request. No think time is recorded: the serving simulator estimates it
(serving/closed.py). ``infer_links`` also says how many requests were attached and at what share of
their blocks.
"""

from __future__ import annotations

import numpy as np

from .dependencies import Dependencies
from .model import Trace, resolve_block_size

#: blocks held by at least max(COMMON_MIN_REQUESTS, COMMON_SHARE x requests) requests are common
COMMON_MIN_REQUESTS = 100
COMMON_SHARE = 0.01
RULE = ("inferred from prefix extension: a request follows the earlier request whose full blocks are the longest "
        "prefix of its own, beyond the blocks at least max(100, 1% of the requests) requests share")

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping)."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _M64
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
    return x ^ (x >> np.uint64(31))


def infer_links(trace: Trace, block_size: int | None = None) -> tuple[Dependencies, dict]:
    """(links, stats): each request's inferred predecessor (module docstring), and what was found:
    requests attached, their mean share of blocks in the matched prefix, sessions, common blocks."""
    n = len(trace)
    bs = resolve_block_size(block_size, trace)
    offsets = np.asarray(trace.offsets, dtype=np.int64)
    blocks = np.asarray(trace.blocks, dtype=np.int64)
    P = np.diff(offsets)
    full = np.minimum(P, np.asarray(trace.input_length, dtype=np.int64) // bs)
    request = np.repeat(np.arange(n), P)
    local = np.arange(blocks.size) - np.repeat(offsets[:-1], P)
    common, threshold = _common_blocks(trace, blocks, request)
    prefix = _prefix_hashes(blocks, offsets, local)
    # per position: how many uncommon blocks the prefix it ends holds
    uncommon = np.cumsum(~common[blocks] if blocks.size else np.zeros(0, dtype=bool))
    uncommon = uncommon - np.repeat(np.r_[0, uncommon][offsets[:-1]], P)
    i, j, k = _longest_matches(prefix, offsets, full, uncommon, (request, local), _send_order(trace))
    i, j, k = _same_blocks(i, j, k, offsets, blocks)
    pred = np.full(n, -1, dtype=np.int64)
    pred[i] = j
    has = pred >= 0
    deps_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(has, out=deps_offsets[1:])
    links = Dependencies(deps_offsets, pred[has], np.full(n, np.nan), RULE)
    return links, _link_stats(n, P, i, k, common, threshold)


def _common_blocks(trace: Trace, blocks: np.ndarray, request: np.ndarray) -> tuple[np.ndarray, int]:
    """(a bool per block id: held by many requests, that many): common blocks do not link."""
    n = len(trace)
    threshold = max(COMMON_MIN_REQUESTS, int(np.ceil(COMMON_SHARE * n)))
    if blocks.size:
        pairs = np.unique(blocks * max(n, 1) + request)
        holders = np.bincount(pairs // max(n, 1), minlength=int(trace.num_blocks))
    else:
        holders = np.zeros(0, dtype=np.int64)
    return holders >= threshold, threshold


def _prefix_hashes(blocks: np.ndarray, offsets: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Per position: a hash of the prefix of its request that it ends (its blocks and length)."""
    P = np.diff(offsets)
    with np.errstate(over="ignore"):
        term = (_mix(blocks) * _mix(local.astype(np.uint64) + np.uint64(1 << 40))) & _M64
        running = np.cumsum(term, dtype=np.uint64)
        before = np.r_[np.uint64(0), running][offsets[:-1]]
        return (running - np.repeat(before, P)) ^ _mix(local.astype(np.uint64) + np.uint64(1))


def _send_order(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, rank, bound): the requests in time order, each one's rank in it, and the rank of the
    first request sent at its time (j must be sent strictly before i)."""
    n = len(trace)
    order = np.argsort(np.asarray(trace.timestamp), kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    ts = np.asarray(trace.timestamp)[order]
    first_same = np.searchsorted(ts, ts, side="left")  # in rank: the first request sent at the same time
    bound = np.empty(n, dtype=np.int64)
    bound[order] = first_same
    return order, rank, bound


def _longest_matches(prefix, offsets, full, uncommon, positions: tuple, send_order: tuple):
    """(i, j, k): request i's longest prefix of k blocks that is the whole full-block prefix of a
    request j sent before it (the latest such j). Definitions: each request's full-block prefix;
    queries: every prefix of every request that holds an uncommon block. positions: (request,
    block index in its request) per position."""
    request, local = positions
    order, rank, bound = send_order
    n = full.size
    defs = np.flatnonzero(full > 0)
    def_pos = offsets[defs] + full[defs] - 1
    def_key = prefix[def_pos]
    keys, def_code = np.unique(def_key, return_inverse=True)
    width = n + 1
    codes = np.sort(def_code.astype(np.int64) * width + rank[defs])
    q = np.flatnonzero(uncommon > 0)
    q_key = prefix[q]
    q_rank = np.searchsorted(keys, q_key)
    found = q_rank < keys.size
    found[found] = keys[q_rank[found]] == q_key[found]
    q, q_rank = q[found], q_rank[found]
    at = np.searchsorted(codes, q_rank * width + bound[request[q]], side="left") - 1
    ok = at >= 0
    ok[ok] = codes[at[ok]] // width == q_rank[ok]
    q, at = q[ok], at[ok]
    j = order[codes[at] % width]
    i, k = request[q], local[q] + 1
    ok = full[j] == k  # (the hash includes the length; this guards the arithmetic)
    i, j, k = i[ok], j[ok], k[ok]
    # the longest match per request (the latest of equal ones: the definitions' latest was taken)
    last = np.lexsort((k, i))
    keep = np.r_[i[last][1:] != i[last][:-1], True] if last.size else np.zeros(0, dtype=bool)
    return i[last][keep], j[last][keep], k[last][keep]


def _same_blocks(i, j, k, offsets, blocks):
    """The matches whose k blocks are the same ids: a hash is not a proof (collisions are dropped)."""
    if not i.size:
        return i, j, k
    idx_i = np.repeat(offsets[i], k) + (np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k))
    idx_j = np.repeat(offsets[j], k) + (idx_i - np.repeat(offsets[i], k))
    same = blocks[idx_i] == blocks[idx_j]
    bad = np.repeat(np.arange(i.size), k)[~same]
    good = np.ones(i.size, dtype=bool)
    good[bad] = False
    return i[good], j[good], k[good]


def _link_stats(n: int, P, i, k, common, threshold: int) -> dict:
    """What infer_links found, with its sentence (``text``)."""
    share = k / np.maximum(P[i], 1) if i.size else np.zeros(0)
    stats = {"requests": n, "attached": int(i.size), "sessions": int(n - i.size),
             "mean_share_of_blocks": float(share.mean()) if share.size else None,
             "attached_blocks": int(k.sum()), "blocks_of_attached": int(P[i].sum()),
             "common_blocks": int(common.sum()), "common_threshold_requests": threshold, "rule": RULE}
    stats["text"] = (f"{stats['attached']:,} of {n:,} requests attached to an earlier request they extend"
                     + (f", at {100 * stats['mean_share_of_blocks']:.1f}% of their blocks on average"
                        if share.size else "")
                     + f"; {stats['sessions']:,} sessions ({stats['common_blocks']:,} common blocks, held by "
                       f"{threshold:,}+ requests, do not link)")
    return stats


def session_of(links: Dependencies, session: np.ndarray | None = None) -> np.ndarray:
    """Each request's session: the connected group of requests its links (and a `session` column,
    when given: requests of one session are one group) join, numbered 0..S-1 by first request (in
    trace order)."""
    n = links.num_requests
    parent = list(range(n))  # (a list: element access in the loop below)
    owner = np.repeat(np.arange(n), np.diff(links.offsets))
    edges_a, edges_b = owner, links.after
    if session is not None and n:
        same = Dependencies.chains(session, "")
        edges_a = np.r_[edges_a, np.repeat(np.arange(n), np.diff(same.offsets))]
        edges_b = np.r_[edges_b, same.after]
    for a, b in zip(edges_a.tolist(), edges_b.tolist()):
        ra, rb = a, b
        while parent[ra] != ra:
            parent[ra] = parent[parent[ra]]  # (path halving)
            ra = parent[ra]
        while parent[rb] != rb:
            parent[rb] = parent[parent[rb]]
            rb = parent[rb]
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    root = np.array(parent, dtype=np.int64)
    while True:
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    _, first, inverse = np.unique(root, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first, kind="stable"), kind="stable")[inverse.reshape(-1)]
