"""SGLang 0.5.23's hybrid prefix caches (hybrid/unified_radix.py) by hand, and against the
per-request hits SGLang's own UnifiedRadixCache gave on 24 scenarios.

The hand cases derive every number in a comment (P = page size = block size, W = window;
positions in tokens; "live" = the node holds SWA KV, "tomb" = a tombstone, full KV only).
tests/real_engines/test_sglang_hybrid.py runs the same cases (HAND_CASES) through SGLang's own
cache and checks it agrees request by request.
"""

from __future__ import annotations

import hashlib
import json
import math
import random

import numpy as np
import pytest

import kvreplay
from kvreplay.hybrid.coordinator import Group
from kvreplay.hybrid.unified_radix import UnifiedRadix, replay_radix_hybrid


def SWA(window):
    return [Group("full"), Group("sliding_window", window=window)]


MAMBA = [Group("full"), Group("mamba")]


def tree(cache):
    """(start, end, first page, live|tomb, state|-) for every node, depth first."""
    out = []

    def walk(node, start):
        for child in sorted(node.children.values(), key=lambda c: str(c.key[0])):
            out.append((start, start + len(child.key), child.key[0], "live" if child.swa else "tomb",
                        "state" if child.mamba else "-"))
            walk(child, start + len(child.key))

    walk(cache.root, 0)
    return out


def ids(prefix, n, start=0):
    return [f"{prefix}{i}" for i in range(start, start + n)]


A = ids("a", 20)
B = ids("b", 20)
C = ids("c", 20)

#: name -> (the cache's arguments, the requests (hash ids, prompt tokens)); the tests below follow
#: them step by step, the opt-in test runs them through SGLang's own cache
WINDOW = dict(groups=SWA(2), block_size=1, full_pages=100, swa_pages=100, chunk_tokens=6)
HAND_CASES = {
    # a 12-token prompt, then one request sharing its first n tokens (a fresh cache each)
    **{f"window_{n}": (WINDOW, [(A[:12], 12), (A[:n] + ["x0", "x1", "x2"], n + 3)]) for n in (3, 4, 5, 12)},
    "branching": (dict(groups=SWA(2), block_size=1, full_pages=100, swa_pages=100, chunk_tokens=6),
                  [(A[:12], 12), (A[:3] + B[:5], 8), (A[:3] + C[:5], 8)]),
    "swa_pressure": (dict(groups=SWA(2), block_size=1, full_pages=100, swa_pages=6, chunk_tokens=None),
                     [(A[:4], 4), (B[:4], 4), (A[:4] + ["z"], 5)]),
    "full_pressure": (dict(groups=SWA(2), block_size=1, full_pages=10, swa_pages=10, chunk_tokens=None),
                      [(A[:4], 4), (B[:4], 4), (C[:4], 4), (A[:2] + ["x", "y"], 4)]),
    "mamba_no_buffer": (dict(groups=MAMBA, block_size=1, full_pages=100, mamba_slots=10, chunk_tokens=None,
                             mamba_strategy="no_buffer"),
                        [(A[:10], 10), (A[:6] + B[:4], 10), (A[:10] + ["c"], 11), (A[:6] + ["d0", "d1"], 8)]),
    "mamba_extra_buffer": (dict(groups=MAMBA, block_size=16, full_pages=100, mamba_slots=10, chunk_tokens=None),
                           [(A[:10], 160), (A[:10] + ["n"], 170), (A[:5] + B[:5], 160), (A[:4] + C[:2], 96)]),
}


def make(name):
    config, requests = HAND_CASES[name]
    config = dict(config)
    return UnifiedRadix(config.pop("groups"), config.pop("block_size"), **config), requests


def serve_all(cache, requests):
    hits = []
    for pages, length in requests:
        hits.append(cache.serve(pages, length))
        cache.check()  # every page and slot is free or in the tree, nothing locked
    return hits


# ---- the SWA window rule, with tombstones -------------------------------------------------------------

def test_a_hit_after_a_tombstone_needs_a_whole_window_of_live_tokens():
    cache, requests = make("window_3")
    # r0: 12 tokens, P = 1, W = 2, chunks of 6: [0, 6) then [6, 12).
    # After chunk 1 the request checkpoints with key 6: pre = 6 - 1 = 5; 5 - W = 3 >= cursor 0 + 1, so
    # it frees its SWA KV below floor(5 - ceilP(max(W, P))) = 5 - 2 = 3: cursor 3. The insert makes
    # the new leaf [0, 6) a tombstone below the cursor, [0, 3), live from 3 on; the live part [3, 6)
    # is longer than ceilP(W) = 2, so it is split to leave its last 2 tokens alone: [3, 4), [4, 6).
    # The final chunk's insert (release: no more freeing) adds [6, 12) live, capped: [6, 10), [10, 12).
    assert cache.serve(*requests[0]) == 0
    assert [(s, e, live) for s, e, _, live, _ in tree(cache)] == [
        (0, 3, "tomb"), (3, 4, "live"), (4, 6, "live"), (6, 10, "live"), (10, 12, "live")]
    assert cache.pools.swa_free == 100 - 9  # 9 live tokens; the tombstone's 3 went back at the checkpoint
    # The match's SWA check: run = +inf, a tombstone sets it to 0 (and fails), a live node adds its
    # tokens and passes iff run >= W = 2. A request sharing the first n tokens (limit n + 3 - 1):
    # n = 3: [0, 3) is a tombstone -> hit 0
    assert cache.serve(*requests[1]) == 0
    # n = 4: [0, 3) tomb (run 0), [3, 4) live (run 1 < 2) -> still 0
    assert serve_all(*make("window_4")) == [0, 0]
    # n = 5: ... [4, 6) split at 5: [4, 5) live, run 2 >= 2 -> hit 5
    assert serve_all(*make("window_5")) == [0, 5]
    # n = 12: [10, 12) passes -> hit 12
    assert serve_all(*make("window_12")) == [0, 12]


def test_the_branching_insert_makes_a_shared_prefix_hittable_for_the_next_sibling():
    cache, requests = make("branching")
    cache.serve(*requests[0])  # the tree of the test above: [0, 3) tomb, [3, 4) [4, 6) ... live
    # r1 = a0 a1 a2 + 5 of its own (8 tokens): [0, 3) is a tombstone -> hit 0, but the full KV
    # matched 3 tokens: swa_branching_seqlen = floorP(3) = 3 > 0.
    assert cache.serve(*requests[1]) == 0
    # Its first chunk [0, 6) checkpoints with the key cut at the branch, 3: pre = 2, 2 - W = 0 < 0 + 1:
    # nothing freed, cursor 0. Inserting [0, 3) overlaps the tombstone at positions >= the cursor:
    # SGLang recovers it from r1's own KV (one full copy freed, r1's SWA KV becomes the node's).
    # The branch is in: out of window again with pre = 6 - 1 = 5: cursor max(0, 3) = 3, threshold
    # 5 - 2 = 3, nothing more. The final insert adds r1's [3, 8) live, capped at 2: [3, 6), [6, 8).
    assert [(s, e, first, live) for s, e, first, live, _ in tree(cache) if first in ("a0", "b0", "b3")] == [
        (0, 3, "a0", "live"), (3, 6, "b0", "live"), (6, 8, "b3", "live")]
    # r2, the next sibling over a0 a1 a2: [0, 3) is live now, run = inf + 3 passes -> hit 3
    assert cache.serve(*requests[2]) == 3


# ---- eviction order ------------------------------------------------------------------------------------

def test_swa_pressure_tombstones_the_coldest_internal_node_and_keeps_its_full_kv():
    cache, requests = make("swa_pressure")
    # r0 (4 tokens, no chunking): one leaf [0, 4) live, capped at ceilP(W) = 2: [0, 2) enters the
    # SWA LRU first, then [2, 4); the insert's refresh puts [2, 4) first, [0, 2) next (MRU first).
    assert cache.serve(*requests[0]) == 0
    assert [n.key[0] for n in cache.swa_lru.order()] == ["a2", "a0"]
    # r1 (4 new tokens) needs 4 SWA tokens, 6 - 4 = 2 are free: shortfall 2. The full pool has room,
    # so only the SWA walk runs: from the cold end, a0's [0, 2) (it has a child: not a leaf) loses
    # its SWA KV (a tombstone, its full KV stays), which frees enough.
    assert cache.serve(*requests[1]) == 0
    assert [(s, e, first, live) for s, e, first, live, _ in tree(cache)] == [
        (0, 2, "a0", "tomb"), (2, 4, "a2", "live"), (0, 2, "b0", "live"), (2, 4, "b2", "live")]
    # r2 = a0..a3 + z (limit 4): [0, 2) tomb (run 0, fails), [2, 4) live (run 2 >= W) -> hit 4:
    # a tombstone on the path costs nothing once W live tokens follow it.
    # Its 1 token finds no free SWA slot: the walk skips a2 (r2 locks the window it hit), b2 is
    # warmer than b0, so b0 is tombstoned.
    assert cache.serve(*requests[2]) == 4
    assert [(s, e, first, live) for s, e, first, live, _ in tree(cache)] == [
        (0, 2, "a0", "tomb"), (2, 4, "a2", "live"), (4, 5, "z", "live"), (0, 2, "b0", "tomb"), (2, 4, "b2", "live")]
    assert cache.stats["swa_evictions"] == 4 and cache.stats["evictions"] == 0


def test_full_pressure_deletes_the_least_recently_used_leaf_whole():
    cache, requests = make("full_pressure")
    # a, b: two leaves each ([0, 2) and [2, 4), capped at W = 2): 8 of 10 full pages.
    # c needs 4 tokens, 2 are free: the full walk deletes the oldest unlocked leaf, a's [2, 4) (with
    # its SWA KV), and stops: 4 free. a's [0, 2) stays, a leaf now.
    assert serve_all(cache, requests[:3]) == [0, 0, 0]
    assert cache.stats["evictions"] == 2 and cache.stats["evicted_nodes"] == 1
    assert [(s, e, first) for s, e, first, _, _ in tree(cache)] == [
        (0, 2, "a0"), (0, 2, "b0"), (2, 4, "b2"), (0, 2, "c0"), (2, 4, "c2")]
    # a0 a1 + x y: hits a's surviving head (2), then needs 2 tokens with none free: the oldest
    # unlocked leaf is now b's [2, 4) (a's [0, 2) is locked by the request)
    assert cache.serve(*requests[3]) == 2
    assert [(s, e, first) for s, e, first, _, _ in tree(cache)] == [
        (0, 2, "a0"), (2, 4, "x"), (0, 2, "b0"), (0, 2, "c0"), (2, 4, "c2")]


# ---- Mamba: the deepest state -------------------------------------------------------------------------

def test_mamba_hits_the_deepest_node_holding_a_state():
    cache, requests = make("mamba_no_buffer")
    # no_buffer (P = 1): a finishing request donates its state to the node ending at its prompt's end.
    assert cache.serve(*requests[0]) == 0  # [0, 10) with a state
    # r1 shares 6 tokens: the match splits [0, 10) at 6 and the upper part [0, 6) has no state
    # (a split leaves the state on the lower part) -> hit 0 although 6 tokens of full KV match
    assert cache.serve(*requests[1]) == 0
    assert [(s, e, st) for s, e, _, _, st in tree(cache)] == [(0, 6, "-"), (6, 10, "state"), (6, 10, "state")]
    # r2 = a0..a9 + c: the deepest state on its path ends at 10 -> hit 10
    assert cache.serve(*requests[2]) == 10
    # r3 = a0..a5 + 2 more: no state at or above 6 on its path -> 0
    assert cache.serve(*requests[3]) == 0
    assert cache.pools.mamba_free == 10 - 4  # states at [6, 10) twice, r2's [10, 11) and r3's [6, 8)


def test_mamba_extra_buffer_caches_up_to_the_tracked_state_only():
    cache, requests = make("mamba_extra_buffer")
    # P = 16, grid max(64, P) = 64. r0 (160 tokens, 10 pages): the prefill keeps a state at
    # 0 + floor(160 / 64) * 64 = 128, and the release inserts the key cut there: [0, 128), 8 pages;
    # the last 2 pages are not cached at all.
    assert cache.serve(*requests[0]) == 0
    assert [(s, e, st) for s, e, _, _, st in tree(cache)] == [(0, 8, "state")]
    assert cache.pools.mamba_free == 10 - 1
    # r1 (170 tokens, the same 10 pages + 1): hits the state at 128 tokens (8 pages); its extend
    # (42 tokens) is shorter than the grid: no state, nothing inserted
    assert cache.serve(*requests[1]) == 8
    assert tree(cache) == [(0, 8, "a0", "tomb", "state")]
    # r2 shares 5 pages (80 tokens): the split upper part [0, 5) has no state -> hit 0; the Mamba
    # branching point is floor64(80) = 64, on the 64-grid of its extend: the prefill keeps its state
    # there instead of at 128, and the release caches [0, 64): 4 pages, splitting [0, 5) once more
    assert cache.serve(*requests[2]) == 0
    assert [(s, e, st) for s, e, _, _, st in tree(cache)] == [(0, 4, "state"), (4, 5, "-"), (5, 8, "state")]
    # r3 = a0..a3 + 2 pages: hits the new state, 4 pages
    assert cache.serve(*requests[3]) == 4


# ---- the replay API -----------------------------------------------------------------------------------

def test_replay_radix_hybrid_returns_hits_and_the_cache():
    requests = [(ids("s", 6) + ids("u", n, 10 * k), 16 * (6 + n)) for k, n in enumerate([3, 5, 2, 8, 4])]
    trace = kvreplay.Trace.from_requests(requests)
    hits, cache = replay_radix_hybrid(trace, SWA(32), 16, full_pages=200, chunk_tokens=64)
    # P = 16, W = 32 (2 pages), chunks of 64 tokens (4 pages). r0 (9 pages): chunk [0, 64) frees its
    # SWA KV below floorP(63 - 32) = 16 (a tombstone [0, 1)), chunk [64, 128) below floorP(127 - 32) =
    # 80 (a tombstone [4, 5), pages); the rest is live: [1, 2) [2, 4) [5, 6) [6, 8) [8, 9).
    # r1 shares the 6 pages of s: [0, 1) tomb, [1, 2) run 16 < 32, [2, 4) 48 passes, [4, 5) tomb,
    # [5, 6) 16 < 32 -> hit 4. Its branching point (6 pages) cuts its first checkpoint at 96 tokens,
    # which recovers [4, 5) from its own KV: r2 .. r4 hit all 6 shared pages.
    assert hits.dtype == np.int64 and hits.tolist() == [0, 4, 6, 6, 6]
    assert cache.resident_count() == 6 + 3 + 5 + 2 + 8 + 4
    assert set(cache.stats) >= {"admissions", "evictions", "swa_evictions", "mamba_evictions"}
    assert cache.pools.swa_pages == int(200 * 16 * 0.8) // 16  # SGLang's --swa-full-tokens-ratio 0.8


def test_a_prompt_larger_than_the_full_pool_is_refused():
    cache = UnifiedRadix(SWA(8), 4, full_pages=3)
    assert cache.serve(ids("a", 4), 13) == 0 and cache.stats["rejected"] == 1 and cache.resident_count() == 0


@pytest.mark.parametrize("groups, kwargs, message", [
    ([Group("sliding_window", window=8)], {}, "full-attention"),
    ([Group("full"), Group("sliding_window", window=8), Group("sliding_window", window=16)], {}, "one window"),
    (MAMBA, {"mamba_strategy": "no_buffer"}, "page size 1"),
    (MAMBA, {"chunk_tokens": 8}, "at least one page"),
    (MAMBA, {"mamba_slots": 4}, "cannot serve one request"),
])
def test_configurations_sglang_does_not_build_are_refused(groups, kwargs, message):
    with pytest.raises(ValueError, match=message):
        UnifiedRadix(groups, 16, full_pages=100, **kwargs)


def test_chunked_local_attention_is_a_sliding_window_of_its_chunk():
    # SGLang runs Llama 4's chunked attention as a sliding window of attention_chunk_size
    cache = UnifiedRadix([Group("full"), Group("chunked_local", chunk=64)], 16, full_pages=100)
    assert cache.has_swa and cache.W == 64


@pytest.mark.parametrize("groups", [SWA(48), MAMBA, SWA(48) + [Group("mamba")], [Group("full")]],
                         ids=["swa", "mamba", "swa+mamba", "full"])
@pytest.mark.parametrize("full_pages, chunk", [(60, 64), (400, None)])
def test_pools_balance_after_every_request(groups, full_pages, chunk):
    # random conversations over shared prefixes; check() asserts that every full page, SWA page and
    # state slot is either free or held by the tree once a request is done
    rng = random.Random(7)
    cache = UnifiedRadix(groups, 16, full_pages=full_pages, swa_pages=full_pages // 2, mamba_slots=12,
                         chunk_tokens=chunk)
    convs = []
    for k in range(300):
        if convs and rng.random() < 0.6:
            c = rng.choice(convs)
            c.extend(ids(f"t{k}-", rng.randrange(1, 6)))
        else:
            c = ids("sys", rng.randrange(1, 8)) + ids(f"n{k}-", rng.randrange(1, 6))
            convs.append(c)
        c[:] = c[:40]
        cache.serve(list(c), 16 * len(c) - rng.randrange(16))
        cache.check()
    assert cache.stats["evictions"] > 0 or full_pages > 100


# ---- regression: SGLang 0.5.23's own UnifiedRadixCache, 24 scenarios ------------------------------------
#
# /tmp/notes/sglang_hybrid_drive.py ran SGLang 0.5.23's real cache code on CPU (UnifiedRadixCache with
# both tree cores, SWAComponent / MambaComponent, SWATokenToKVPoolAllocator, match_kv_cache,
# checkpoint_kv_cache, release_kv_cache, ScheduleBatch.maybe_evict_swa, ...) one request at a time,
# with decoding (request i's outputs are out_base, out_base + 1, ...; the next turn's prompt contains
# them). The generators below are that driver's scenario definitions, copied; ORACLE holds, per
# scenario, a digest of the prompts and output lengths SGLang was given (to tie the regenerated
# requests to that run), the hits SGLang's code gave (identical with the Python and the Rust tree
# core) and the pools after the last request: (full free, full in tree, SWA or Mamba free, SWA or
# Mamba in the tree), tokens / slots. Its two concurrent scenarios (one prefill batch of several
# requests) are left out: kvreplay serves one request at a time.

def _toks(base, n):
    return list(range(base, base + n))


def _multi_turn_convs(sys_len, turns, user_len, out_len, n_convs, base=1000):
    system = _toks(base, sys_len)
    reqs = []
    for c in range(n_convs):
        hist = list(system)
        for t in range(turns):
            prompt = hist + _toks(base + 10000 * (c + 1) + 100 * t, user_len)
            out_base = base + 10000 * (c + 1) + 100 * t + 50
            reqs.append((prompt, out_len, out_base))
            hist = prompt + _toks(out_base, out_len)
    return reqs


def _random_trace(seed, n_convs, n_sys):
    rng = random.Random(seed)
    systems = [_toks(100000 * (k + 1), rng.randrange(8, 40)) for k in range(n_sys)]
    state = [{"hist": list(systems[rng.randrange(n_sys)]), "turn": 0} for _ in range(n_convs)]
    reqs, nxt = [], 10_000_000
    while state and len(reqs) < 60:
        st = state[rng.randrange(len(state))]
        prompt = st["hist"] + list(range(nxt, nxt + rng.randrange(1, 30)))
        nxt += 100
        olen = rng.randrange(1, 12)
        reqs.append((prompt, olen, nxt))
        st["hist"] = prompt + list(range(nxt, nxt + olen))
        nxt += 100
        st["turn"] += 1
        if st["turn"] >= 5 or len(st["hist"]) > 150:
            state.remove(st)
    return reqs


def _scenarios():
    """label -> (cache arguments, [(prompt tokens, output tokens, first output token)])"""
    def swa(P, W, full, s):
        return dict(groups=SWA(W), block_size=P, full_pages=full // P, swa_pages=s // P)

    def mamba(full, m, P=1, strategy="no_buffer"):
        return dict(groups=MAMBA, block_size=P, full_pages=full // P, mamba_slots=m, mamba_strategy=strategy)

    conv = _multi_turn_convs(sys_len=16, turns=3, user_len=6, out_len=4, n_convs=2)
    short = [(_toks(500, 6), 2, 900), (_toks(500, 4) + _toks(600, 3), 2, 910), (_toks(500, 30), 2, 920),
             (_toks(500, 12) + _toks(700, 20), 2, 930), (_toks(500, 12) + _toks(800, 20), 2, 940),
             (_toks(500, 25) + _toks(850, 5), 2, 950)]
    branch = [(_toks(500, 30), 4, 900), (_toks(500, 20) + _toks(600, 10), 1, 910),
              (_toks(500, 20) + _toks(700, 10), 1, 920)]
    one_at_a_time = [(_toks(300, 20) + _toks(400, 4), 3, 990), (_toks(300, 20) + _toks(450, 4), 3, 995),
                     (_toks(300, 20) + _toks(470, 4), 3, 999)]
    long_out = [(_toks(2000, 20), 300, 3000), (_toks(2000, 20) + _toks(3000, 299) + _toks(4000, 5), 3, 5000),
                (_toks(2000, 20) + _toks(3000, 150) + _toks(6000, 5), 3, 7000)]
    eb = [(_toks(20000, 150), 3, 21000), (_toks(20000, 150) + _toks(22000, 10), 3, 23000),
          (_toks(20000, 100) + _toks(24000, 40), 3, 25000), (_toks(20000, 100) + _toks(26000, 40), 3, 27000),
          (_toks(20000, 30), 300, 28000), (_toks(20000, 30) + _toks(28000, 299) + _toks(29000, 4), 3, 29500)]
    out = {
        "A swa P=1 W=8 full=400 swa=400": (swa(1, 8, 400, 400), conv),
        "B swa P=1 W=8 short matches": (swa(1, 8, 400, 400), short),
        "B' swa P=1 W=8 short matches, max_new_tokens=1": (swa(1, 8, 400, 400), [(p, 1, b) for p, _, b in short]),
        "B'' swa P=1 W=8 branch pending at release": (swa(1, 8, 400, 400), branch),
        "C swa P=1 W=8 full=200 swa=48 (SWA pressure)": (swa(1, 8, 200, 48), conv),
        "D swa P=1 W=8 full=72 swa=72 (full pressure)": (swa(1, 8, 72, 72), conv),
        "E swa P=4 W=6 full=400 swa=400": (swa(4, 6, 400, 400), conv),
        "F' same requests one at a time": (swa(1, 8, 400, 400), one_at_a_time),
        "G mamba no_buffer P=1 full=400 mamba=16": (mamba(400, 16), conv),
        "H mamba short/branching": (mamba(400, 16), short),
        "I mamba no_buffer P=1 full=400 mamba=4 (mamba pressure)": (mamba(400, 4), conv),
        "K swa P=1 W=8 long decode": (swa(1, 8, 1200, 1200), long_out),
        "K' swa P=4 W=8 long decode": (swa(4, 8, 1200, 1200), long_out),
    }
    for P in (1, 16):
        out[f"M mamba extra_buffer P={P} grid={math.lcm(64, P)}"] = (mamba(2000, 24, P, "extra_buffer"), eb)
    for seed in range(3):
        rq = _random_trace(seed, n_convs=12, n_sys=3)
        out[f"R{seed} swa P=1 W=16 full=500 swa=240 random"] = (swa(1, 16, 500, 240), rq)
        out[f"R{seed} swa P=4 W=10 full=640 swa=260 random"] = (swa(4, 10, 640, 260), rq)
        out[f"R{seed} mamba P=1 full=500 mamba=6 random"] = (mamba(500, 6), rq)
    return out


#: label -> (prompts digest, SGLang's hits in tokens, pools after the last request); from SGLang
#: 0.5.23's own code via /tmp/notes/sglang_hybrid_drive.py (its oracle JSON and printed pool sizes)
ORACLE = {
    'A swa P=1 W=8 full=400 swa=400': ('28734bae37987fc2', [0, 25, 35, 0, 25, 35], (326, 74, 333, 67)),
    'B swa P=1 W=8 short matches': ('500c791a7d91e1bb', [0, 4, 6, 6, 12, 12], (316, 84, 342, 58)),
    "B' swa P=1 W=8 short matches, max_new_tokens=1": ('1d5f30418a94d308', [0, 4, 6, 12, 12, 25], (322, 78, 322, 78)),
    "B'' swa P=1 W=8 branch pending at release": ('9d52c1223a33d6eb', [0, 0, 20], (357, 43, 358, 42)),
    'C swa P=1 W=8 full=200 swa=48 (SWA pressure)': ('28734bae37987fc2', [0, 25, 35, 0, 25, 35], (126, 74, 0, 48)),
    'D swa P=1 W=8 full=72 swa=72 (full pressure)': ('28734bae37987fc2', [0, 25, 35, 0, 25, 35], (1, 71, 8, 64)),
    'E swa P=4 W=6 full=400 swa=400': ('28734bae37987fc2', [0, 24, 32, 0, 24, 32], (328, 72, 332, 68)),
    "F' same requests one at a time": ('0d87b0c299ab7b0b', [0, 0, 20], (362, 38, 373, 27)),
    'G mamba no_buffer P=1 full=400 mamba=16': ('28734bae37987fc2', [0, 25, 35, 0, 25, 35], (326, 74, 4, 12)),
    'H mamba short/branching': ('500c791a7d91e1bb', [0, 0, 6, 6, 6, 6], (316, 84, 4, 12)),
    'I mamba no_buffer P=1 full=400 mamba=4 (mamba pressure)': ('28734bae37987fc2', [
        0, 25, 35, 0, 25, 35
    ], (329, 71, 0, 4)),
    'K swa P=1 W=8 long decode': ('1adf2a69ceb623f5', [0, 319, 20], (867, 333, 1116, 84)),
    "K' swa P=4 W=8 long decode": ('1adf2a69ceb623f5', [0, 316, 20], (868, 332, 1108, 92)),
    'M mamba extra_buffer P=1 grid=64': ('750db1c80218d483', [0, 128, 0, 64, 0, 256], (1554, 446, 19, 5)),
    'M mamba extra_buffer P=16 grid=64': ('750db1c80218d483', [0, 128, 0, 64, 0, 256], (1536, 464, 19, 5)),
    'R0 swa P=1 W=16 full=500 swa=240 random': ('d4c2bf447f4d4fa6', [
        0, 0, 0, 60, 0, 34, 0, 58, 34, 10, 34, 34, 47, 0, 46, 59, 85, 89, 112, 32, 0, 10, 81, 93, 141, 10,
        113, 88, 0, 57, 34, 34, 0, 34, 0, 71, 87, 34, 149, 0, 34, 10, 42, 119, 99, 34, 136, 34, 0, 10, 127,
        103, 0, 118, 10, 106, 34, 0, 82, 107
    ], (24, 476, 7, 233)),
    'R0 swa P=4 W=10 full=640 swa=260 random': ('d4c2bf447f4d4fa6', [
        0, 0, 0, 60, 0, 32, 0, 56, 32, 8, 32, 32, 44, 0, 44, 56, 84, 88, 112, 32, 0, 76, 80, 92, 140, 8,
        112, 88, 0, 56, 32, 32, 0, 32, 0, 68, 84, 32, 148, 8, 32, 72, 40, 116, 96, 32, 136, 32, 0, 0, 124,
        100, 32, 116, 0, 104, 32, 0, 80, 104
    ], (28, 612, 28, 232)),
    'R0 mamba P=1 full=500 mamba=6 random': ('d4c2bf447f4d4fa6', [
        0, 0, 0, 60, 0, 0, 0, 58, 0, 0, 0, 0, 0, 0, 0, 0, 0, 89, 112, 0, 0, 0, 81, 93, 0, 0, 113, 0, 0, 57,
        0, 0, 0, 0, 0, 71, 0, 0, 149, 0, 0, 0, 42, 0, 99, 0, 136, 0, 0, 0, 127, 103, 0, 118, 0, 106, 0, 0,
        82, 107
    ], (46, 454, 0, 6)),
    'R1 swa P=1 W=16 full=500 swa=240 random': ('4424452bdc8b1b20', [
        0, 0, 31, 41, 16, 0, 16, 41, 12, 16, 12, 12, 0, 27, 12, 12, 12, 0, 12, 0, 12, 0, 93, 94, 12, 126,
        16, 12, 12, 59, 68, 16, 16, 0, 16, 117, 12, 12, 114, 66, 58, 81, 12, 96, 0, 64, 0, 64, 77, 90, 12,
        97, 109, 16, 127, 12, 12, 16, 0, 95
    ], (7, 493, 113, 127)),
    'R1 swa P=4 W=10 full=640 swa=260 random': ('4424452bdc8b1b20', [
        0, 0, 28, 40, 16, 0, 16, 40, 12, 16, 12, 12, 0, 24, 12, 12, 60, 64, 44, 16, 12, 16, 92, 92, 12, 124,
        16, 12, 12, 56, 68, 16, 16, 0, 16, 116, 12, 76, 112, 64, 56, 80, 12, 96, 0, 64, 0, 64, 76, 88, 12,
        96, 108, 16, 124, 12, 12, 16, 0, 92
    ], (8, 632, 108, 152)),
    'R1 mamba P=1 full=500 mamba=6 random': ('4424452bdc8b1b20', [
        0, 0, 31, 41, 0, 0, 0, 41, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 126, 0, 0, 0, 0, 68,
        0, 0, 0, 0, 0, 0, 0, 114, 0, 0, 0, 0, 96, 0, 64, 0, 0, 77, 90, 0, 97, 109, 0, 127, 0, 0, 0, 0, 95
    ], (71, 429, 0, 6)),
    'R2 swa P=1 W=16 full=500 swa=240 random': ('c530c67f0ee9a9d8', [
        0, 0, 0, 13, 0, 38, 22, 37, 32, 49, 37, 13, 0, 13, 0, 43, 35, 33, 56, 58, 54, 73, 67, 95, 0, 91, 0,
        0, 93, 0, 13, 123, 13, 13, 13, 74, 38, 13, 62, 93, 0, 13, 28, 33, 13, 93, 68, 83, 0, 13, 13, 0, 0,
        60, 51, 62, 88, 0, 100, 129
    ], (4, 496, 34, 206)),
    'R2 swa P=4 W=10 full=640 swa=260 random': ('c530c67f0ee9a9d8', [
        0, 0, 0, 12, 0, 36, 20, 36, 32, 48, 36, 12, 0, 12, 0, 40, 32, 32, 56, 56, 52, 72, 64, 92, 0, 88, 0,
        0, 92, 0, 0, 120, 12, 0, 12, 72, 36, 12, 60, 92, 0, 12, 28, 32, 12, 92, 68, 80, 0, 80, 0, 32, 8, 60,
        48, 60, 88, 0, 100, 128
    ], (12, 628, 52, 208)),
    'R2 mamba P=1 full=500 mamba=6 random': ('c530c67f0ee9a9d8', [
        0, 0, 0, 0, 0, 38, 22, 0, 0, 49, 0, 0, 0, 0, 0, 43, 35, 0, 56, 0, 54, 73, 0, 95, 0, 0, 0, 0, 0, 0,
        0, 123, 0, 0, 0, 74, 38, 0, 62, 0, 0, 0, 28, 33, 0, 0, 68, 83, 0, 0, 0, 0, 0, 60, 51, 0, 88, 0, 100,
        129
    ], (15, 485, 0, 6)),
}


@pytest.mark.parametrize("label", list(ORACLE))
def test_sglang_own_cache_request_by_request(label):
    config, requests = _scenarios()[label]
    digest, expected, pools = ORACLE[label]
    given = json.dumps([[prompt, out_len] for prompt, out_len, _ in requests]).encode()
    assert hashlib.sha256(given).hexdigest()[:16] == digest, "these are not the requests SGLang was given"
    config = dict(config)
    cache = UnifiedRadix(config.pop("groups"), config.pop("block_size"), chunk_tokens=None, **config)
    P = cache.P
    hits = []
    for prompt, out_len, out_base in requests:
        tokens = prompt + _toks(out_base, out_len)
        pages = [tuple(tokens[i:i + P]) for i in range(0, len(tokens) - P + 1, P)]  # one page key per P tokens
        hits.append(cache.serve(pages, len(prompt), out_len) * P)
        cache.check()
    assert hits == expected
    aux = ((cache.pools.swa_free * P, cache.swa_resident_count() * P) if cache.has_swa
           else (cache.pools.mamba_free, cache.mamba_state_count()))
    assert (cache.pools.full_free * P, cache.resident_count() * P) + aux == pools
