"""vllm (vLLM v1's block pool), rule by rule, on tiny hand-built traces (both engines).

Notation in comments: pool blocks are numbered 1..capacity as in vLLM (0 is vLLM's null
block); ``a@3`` is block 3 holding hash a, ``3`` alone a free block with no hash.
Q=[..] is the free queue, head (reused first) to tail. Unless said otherwise block_size=1
and input_length = len(hash_ids), so every block is full and hit tokens = hit blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine import driver
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.errors import ConfigError
from kvreplay.policies import vllm
from conftest import MOONCAKE, shared_path
from strategies import engines_agree, replay_blocks, requests


def run(reqs, capacity, engine, block_size=1, **params):
    return replay_blocks("vllm", reqs, capacity, engine, block_size, **params)


def reference_pool(reqs, capacity, block_size=1, **params):
    """The reference pool after replaying reqs, and a function naming a block's hash."""
    trace = kvreplay.Trace.from_requests([(ids, len(ids) * block_size if length is None else length) for ids, length in reqs])
    pool = vllm.VLLM(capacity, trace, **params)
    n = len(trace)
    driver.replay_reference(trace.offsets, trace.blocks, trace.input_length, block_size, pool,
                            np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    names = trace.original_ids

    def show(b):
        return f"{names[pool.block_hash[b]]}@{b}" if b in pool.block_hash else str(b)

    return pool, show


def test_block_aligned_resend_hits_all_but_the_last_block(engine):
    # [a,b,c] L=3 twice: the cap is (3 - 1) // 1 = 2 blocks, so the resend hits a, b and
    # recomputes c (vLLM needs the logits of the last prompt token).
    r = run([(list("abc"), None)] * 2, 10, engine)
    assert r.hit_tokens.tolist() == [0, 2]
    # block_size 4: [a,b] L=8 resent hits 1 block (4 tokens); [a,b,x] L=9 may hit both (cap 8 // 4 = 2).
    r = run([(["a", "b"], 8), (["a", "b"], 8), (["a", "b", "x"], 9)], 10, engine, block_size=4)
    assert r.hit_tokens.tolist() == [0, 4, 8]


def test_last_token_recompute_zero_lifts_the_cap(engine):
    # Same resend with the cap lifted: all 3 blocks hit and nothing is recomputed, so no duplicate.
    r = run([(list("abc"), None)] * 2, 10, engine, last_token_recompute=0)
    assert r.hit_tokens.tolist() == [0, 3]
    assert r.counters["duplicate_blocks"] == 0 and r.counters["admissions"] == 3


def test_partial_tail_is_never_cached_nor_hit(engine):
    # block_size 4.
    # [a,b] L=6: a is full and cached; b is a partial tail: not cached.
    # [a,b,c] L=12: cap (12 - 1) // 4 = 2, but b is not resident -> 1 block (4 tokens).
    #   Here b and c are full blocks: cached.
    # [a,b] L=6: b is resident now, but it is this prompt's partial tail: cap (6 - 1) // 4 = 1
    #   -> 4 tokens; with last_token_recompute=0 the cap is 6 // 4 = 1 as well.
    reqs = [(["a", "b"], 6), (["a", "b", "c"], 12), (["a", "b"], 6)]
    for params in ({}, {"last_token_recompute": 0}):
        r = run(reqs, 10, engine, block_size=4, **params)
        assert r.hit_tokens.tolist() == [0, 4, 4]
        assert r.counters["admissions"] == 3  # a, then b and c


def test_blocks_are_freed_tail_first(engine):
    # capacity 4.
    # [a,b,c]: blocks 1, 2, 3; freed c, b, a -> Q=[4, c@3, b@2, a@1]
    # [x,y]:   takes 4 (never used), then c@3 (evicts c); freed y, x -> Q=[b@2, a@1, y@3, x@4]
    # [a,b,c,d]: a, b hit, c was evicted -> 2. Freeing head first (a, b, c) would have
    #   evicted a instead and this request would hit nothing.
    r = run([(list("abc"), None), (list("xy"), None), (list("abcd"), None)], 4, engine)
    assert r.hit_tokens.tolist() == [0, 0, 2]
    # Evictions: c, then y@3 and x@4 for [a,b,c,d]'s two new blocks.
    assert r.counters["evictions"] == 3


def test_free_queue_order_in_the_reference():
    pool, show = reference_pool([(list("abc"), None)], 4)
    assert [show(b) for b in pool.free_queue()] == ["4", "c@3", "b@2", "a@1"]
    pool, show = reference_pool([(list("abc"), None), (list("xy"), None)], 4)
    assert [show(b) for b in pool.free_queue()] == ["b@2", "a@1", "y@3", "x@4"]
    # Blocks without a hash are put back at the very head, the request's last one first
    # (vLLM's prepend_n): block_size 4, capacity 5.
    # (["a"], 12): blocks 1, 2, 3; only a@1 has a hash. Freed 3, 2 -> Q=[3, 2, 4, 5, a@1]
    # ([], 1): takes 3 and puts it back at the head -> the same queue.
    # ([], 9): takes 3, 2, 4 -> frees 4, 2, 3 -> Q=[4, 2, 3, 5, a@1]
    for n, expected in [(1, ["3", "2", "4", "5", "a@1"]), (2, ["3", "2", "4", "5", "a@1"]), (3, ["4", "2", "3", "5", "a@1"])]:
        pool, show = reference_pool([(["a"], 12), ([], 1), ([], 9)][:n], 5, block_size=4)
        assert [show(b) for b in pool.free_queue()] == expected


def test_blocks_without_hash_go_to_the_head(engine):
    # capacity 3, block_size 4.
    # [a] L=4:    a@1; Q=[2, 3, a@1]
    # [b,c] L=6:  takes 2, 3: b@2 full, 3 holds the partial tail (no hash).
    #             Freed: 3 goes to the HEAD, b@2 to the tail -> Q=[3, a@1, b@2]
    # [d] L=4:    takes 3 (no eviction): d@3 -> Q=[a@1, b@2, d@3]
    # [a,x] L=5:  a hits (4 tokens). Had the tail block been appended like a cached one
    #             (Q=[a@1, 3, b@2]), [d] would have evicted a.
    reqs = [(["a"], 4), (["b", "c"], 6), (["d"], 4), (["a", "x"], 5)]
    r = run(reqs, 3, engine, block_size=4)
    assert r.hit_tokens.tolist() == [0, 0, 0, 4]
    assert r.counters["evictions"] == 1  # [a,x] needs a second block: the head, b@2
    pool, show = reference_pool(reqs[:2], 3, block_size=4)
    assert [show(b) for b in pool.free_queue()] == ["3", "a@1", "b@2"]


def test_hit_pins_only_the_first_holder_of_a_hash(engine):
    # capacity 6.
    # [a,b]:   a@1, b@2; Q=[3, 4, 5, 6, b@2, a@1]
    # [z]:     cap 0 hits; z@3; Q=[4, 5, 6, b@2, a@1, z@3]
    # [a,b]:   a hits (cap 1); b is recomputed into 4: two blocks hold b (duplicate);
    #          Q=[5, 6, b@2, z@3, b@4, a@1]
    # [a,b,c]: a, b hit; the lookup of b returns block 2, the first to hold b: 2 is pinned
    #          and freed to the tail, 4 stays where it was. c@5.
    #          Q=[6, z@3, b@4, c@5, b@2, a@1]
    # [x,y]:   takes 6 and z@3: z is evicted. Q=[b@4, c@5, b@2, a@1, y@3, x@6]
    # [z,w]:   z is gone -> 0. Had the lookup pinned the newest holder (4), b@2 would have
    #          stayed ahead of z and been evicted in its place, and z would hit.
    reqs = [(list("ab"), None), (["z"], None), (list("ab"), None), (list("abc"), None), (list("xy"), None), (list("zw"), None)]
    r = run(reqs, 6, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 2, 0, 0]
    # [z,w] then evicts b@4 (b stays resident in 2) and c@5.
    assert r.counters == {"admissions": 9, "evictions": 3, "duplicate_blocks": 1, "pinned_peak": 3, "oversize_requests": 0}
    assert r.final_cache_blocks == 6  # b@2 a@1 y@3 x@6 z@4 w@5
    pool, show = reference_pool(reqs[:4], 6)
    assert [show(b) for b in pool.free_queue()] == ["6", "z@3", "b@4", "c@5", "b@2", "a@1"]


def test_hit_does_not_refresh_until_the_request_is_freed(engine):
    # capacity 4.
    # [a,b]:   Q=[3, 4, b@2, a@1]
    # [a,b,c]: a, b hit; c@3. Freed c, b, a: the hit blocks go back to the tail AFTER the
    #          request's new block: Q=[4, c@3, b@2, a@1].
    # [x,y]:   takes 4, then c@3 (the prefix a, b, though older, is kept).
    # [a,b,c,d]: a, b hit; c is gone -> 2. An LRU refreshing a and b at the hit and then
    #          admitting c would have evicted a first and hit nothing here.
    reqs = [(list("ab"), None), (list("abc"), None), (list("xy"), None), (list("abcd"), None)]
    assert run(reqs, 4, engine).hit_tokens.tolist() == [0, 2, 0, 2]
    lru = kvreplay.replay(kvreplay.Trace.from_requests([(ids, len(ids)) for ids, _ in reqs]), "lru", 4, 1, engine=engine)
    assert lru.hit_tokens.tolist()[-1] == 0


def test_exact_resend_duplicates_only_when_a_spare_block_exists(engine):
    # [a,b,c] twice. Capacity 4: Q=[4, c@3, b@2, a@1]; the resend pins a, b and takes block 4
    # for c: two blocks hold c. Capacity 3: Q=[c@3, b@2, a@1]; the only free block is c@3
    # itself: c is evicted and cached again in the same block.
    r4 = run([(list("abc"), None)] * 2, 4, engine)
    assert r4.counters["duplicate_blocks"] == 1 and r4.counters["evictions"] == 0
    assert r4.final_cache_blocks == 4
    r3 = run([(list("abc"), None)] * 2, 3, engine)
    assert r3.counters["duplicate_blocks"] == 0 and r3.counters["evictions"] == 1
    assert r3.final_cache_blocks == 3
    # A hash repeated inside one request is cached twice too: [a,b,a] -> 3 blocks, 2 hashes.
    r = run([(list("aba"), None)], 10, engine)
    assert r.counters["duplicate_blocks"] == 1 and r.final_cache_blocks == 3


def test_request_larger_than_capacity_keeps_what_fits(engine):
    # capacity 3: [a,b,c,d] needs 4 blocks; it is served with 3 (its first 3, a, b, c).
    #   Freed c, b, a -> Q=[c@3, b@2, a@1].
    # [a,b,c] (fits) hits a, b (cap 2) and takes c@3 for c: evicted and cached again.
    r = run([(list("abcd"), None), (list("abc"), None)], 3, engine)
    assert r.hit_tokens.tolist() == [0, 2]
    assert r.counters == {"admissions": 4, "evictions": 1, "duplicate_blocks": 0, "pinned_peak": 3, "oversize_requests": 1}
    assert r.final_cache_blocks == 3


def test_capacity_one(engine):
    # [a]: a@1. [a]: cap 0 -> no hit; a is evicted and cached again in block 1.
    # [a,b]: a hits (cap 1); 2 blocks needed, 1 exists: oversize, only a is held.
    # [a,a,a]: cap 2: both a's hit the same block 1 (a hash repeated in a request; chained
    #   hashes never do this) -> 2 hits, held twice, nothing to allocate.
    r = run([(["a"], None), (["a"], None), (["a", "b"], None), (["a", "a", "a"], None)], 1, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 2]
    assert r.counters == {"admissions": 2, "evictions": 1, "duplicate_blocks": 0, "pinned_peak": 1, "oversize_requests": 2}
    assert r.final_cache_blocks == 1


def test_capacity_beyond_the_trace(engine):
    # 10**9 blocks for 4 hashes: nothing is evicted, and no array is sized by the capacity.
    reqs = [(list("abc"), None)] * 2 + [(list("abcd"), None)]
    r = run(reqs, 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 2, 3]
    assert r.counters["evictions"] == 0 and r.counters["duplicate_blocks"] == 1
    assert r.final_cache_blocks == 5  # a, b, c twice, d
    state = vllm.make_state(10**9, kvreplay.Trace.from_requests([(ids, len(ids)) for ids, _ in reqs]))
    assert max(a.size for a in state) <= 12


def test_zero_length_and_empty_requests(engine):
    # L=0 holds no block; an empty hash list with L>0 holds hashless blocks only.
    r = run([([], 0), (["a"], 0), ([], 5), (["a"], 1), (["a", "b"], 2)], 3, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 1]


@pytest.mark.parametrize("value", [2, -1, 0.5])
def test_last_token_recompute_must_be_0_or_1(value, engine):
    with pytest.raises(ConfigError, match="last_token_recompute"):
        run([(["a"], None)], 4, engine, last_token_recompute=value)


def test_registered_with_its_parameter():
    spec = kvreplay.policies.registry.get_policy("vLLM")
    assert spec.name == "vllm" and spec.resolve({}) == {"last_token_recompute": 1}


# ---- reference == compiled ------------------------------------------------------------------------

def check_engines_agree(reqs, block_size, capacity, params):
    trace = kvreplay.Trace.from_requests(reqs)
    ref, _ = engines_agree(trace, "vllm", capacity, block_size, **params)
    return ref


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.one_of(st.integers(1, 30), st.just(10**9)), st.sampled_from([0, 1]))
def test_engines_agree_on_random_traces(trace_and_size, capacity, recompute):
    reqs, block_size = trace_and_size
    check_engines_agree(reqs, block_size, capacity, {"last_token_recompute": recompute})


def prefix_tree_requests(seed, num_requests, block_size, num_nodes=300, max_depth=14):
    """Prompts that are root-to-node paths of a random tree of num_nodes blocks (so ids are
    chained), nodes drawn with Zipf popularity; a third block-aligned, 15% exact resends, and
    10% with lengths that disagree with their ids."""
    rng = np.random.default_rng(seed)
    parent, depth = [], []
    for i in range(num_nodes):
        p = i - int(rng.integers(1, 5))
        if p < 0 or depth[p] >= max_depth:
            p = -1
        parent.append(p)
        depth.append(1 if p < 0 else depth[p] + 1)
    popularity = rng.permutation(num_nodes)
    out = []
    for _ in range(num_requests):
        if out and rng.random() < 0.15:
            out.append(out[int(rng.integers(len(out)))])
            continue
        node = int(popularity[min(int(rng.zipf(1.2)) - 1, num_nodes - 1)])
        ids = []
        while node >= 0:
            ids.append(node)
            node = parent[node]
        ids.reverse()
        n = len(ids)
        r = rng.random()
        if r < 0.33:
            length = n * block_size
        elif r < 0.9:
            length = int(rng.integers((n - 1) * block_size + 1, n * block_size + 1))
        else:
            length = int(rng.integers(0, (n + 3) * block_size))
        out.append((ids, length))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity,recompute", [(8, 1), (24, 1), (24, 0), (100, 1), (10**9, 1)])
def test_engines_agree_on_long_traces(seed, capacity, recompute):
    # 3000 requests over ~260 blocks: blocks are evicted and reused thousands of times, hashes
    # are held twice, capacity 8 is smaller than the longest prompts (14 to 17 blocks).
    reqs = prefix_tree_requests(seed, 3000, 16)
    assert kvreplay.Trace.from_requests(reqs).num_blocks < 400
    ref = check_engines_agree(reqs, 16, capacity, {"last_token_recompute": recompute})
    c = ref.counters
    assert c["admissions"] > 1000 and ref.hit_tokens.sum() > 0
    assert (c["evictions"] > 1000) == (capacity < 10**9)
    assert (c["oversize_requests"] > 0) == (capacity == 8)
    if recompute:
        assert c["duplicate_blocks"] > 10


@pytest.mark.parametrize("capacity", [1000, 4096])
def test_engines_agree_on_the_conversation_trace(capacity):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    ref = kvreplay.replay(trace, "vllm", capacity, 512, engine="reference")
    comp = kvreplay.replay(trace, "vllm", capacity, 512, engine="compiled")
    assert np.array_equal(comp.hit_tokens, ref.hit_tokens)
    assert comp.final_cache_blocks == ref.final_cache_blocks and comp.counters == ref.counters
    assert comp.stranded_blocks == ref.stranded_blocks
    assert ref.counters["evictions"] > 0 and ref.total_hit_tokens > 0


# ---- overlapping requests (pin_request / unpin_request) ---------------------------------------------

def test_running_requests_hold_their_blocks_and_a_start_is_all_or_nothing(engine):
    # capacity 4, block_size 1. Q as above; "held" blocks are in use (ref_cnt > 0), off the queue.
    # start 0 [a,b]:     blocks 1, 2 (never used): a@1, b@2 held. Q=[3, 4]
    # start 1 [c]:       c@3 held. Q=[4]
    # finish 1:          Q=[4, c@3]
    # start 2 [d,e]:     needs 2, 2 free: takes 4 and c@3 (c evicted). a@1, b@2, the oldest
    #                    hashes, are held: not in the queue, never evicted. (Had request 0
    #                    finished first, Q would be [4, b@2, a@1, c@3] and b would go.) Q=[]
    # finish 0:          tail first: Q=[b@2, a@1]
    # start 3 [a,b,f,g]: a, b hit (limit 3, f missing); they are free, so they count: 2 new +
    #                    2 free hits = 4 > 2 free blocks: refused, although 2 blocks are free
    #                    (allocate_slots allocates all or nothing). Nothing is touched.
    # finish 2:          e@3 then d@4 to the tail: Q=[b@2, a@1, e@3, d@4]
    # start 4 [a,b,f,g]: the same start now fits (4 <= 4): a, b leave the queue, e@3 and d@4
    #                    are evicted: f@3, g@4. All 4 blocks held (pinned_peak 4, as at start 2).
    # finish 4:          Q=[g@4, f@3, b@2, a@1]
    reqs = [(list("ab"), 2), (["c"], 1), (list("de"), 2), (list("abfg"), 4), (list("abfg"), 4)]
    trace = kvreplay.Trace.from_requests(reqs)
    events = [0, 1, -2, 2, -1, 3, -3, 4, -5]
    seen = {}

    def look(k, pool):
        names = trace.original_ids
        seen[k] = [f"{names[pool.block_hash[b]]}@{b}" if b in pool.block_hash else str(b) for b in pool.free_queue()]
        seen[k, "everything_held"] = pool.everything_held()

    kw = {"on_event": look} if engine == "reference" else {}
    out = replay_lifecycle(trace, "vllm", 4, events, 1, engine=engine, **kw)
    assert out.hit_blocks.tolist() == [0, 0, 0, 2, 2]
    assert out.held_blocks.tolist() == [2, 1, 2, 0, 4]
    assert out.refused.tolist() == [False, False, False, True, False]
    assert out.counters == {"admissions": 7, "evictions": 3, "duplicate_blocks": 0, "pinned_peak": 4, "oversize_requests": 0}
    assert sorted(trace.original_ids[b] for b in np.flatnonzero(out.resident)) == list("abfg")
    assert (out.final_cache_blocks, out.held_at_end, out.refusals) == (4, 0, 1)
    if engine == "reference":
        assert seen[3] == []  # after start 2: every block held
        assert seen[5] == ["b@2", "a@1"] and seen[5, "everything_held"]  # refused start 3
        assert seen[8] == ["g@4", "f@3", "b@2", "a@1"]


def test_a_hit_on_a_running_request_s_block_shares_it(engine):
    # capacity 3, block_size 1.
    # start 0 [a,b]:   a@1, b@2 held. Q=[3]
    # start 1 [a,b,c]: a, b hit blocks 1, 2, held by request 0 (ref_cnt 2): they need no free
    #                  block, so 1 new block fits in the 1 free one: c@3. Q=[]
    # start 2 [x]:     1 block needed, none free: refused.
    # finish 0:        ref_cnt of 1, 2 back to 1: still held, Q=[]
    # finish 1:        c@3, b@2, a@1 to the tail: Q=[c@3, b@2, a@1], nothing held
    reqs = [(list("ab"), 2), (list("abc"), 3), (["x"], 1)]
    trace = kvreplay.Trace.from_requests(reqs)
    out = replay_lifecycle(trace, "vllm", 3, [0, 1, 2, -1, -2], 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 2, 0]
    assert out.held_blocks.tolist() == [2, 3, 0]
    assert out.refused.tolist() == [False, False, True]
    assert out.counters == {"admissions": 3, "evictions": 0, "duplicate_blocks": 0, "pinned_peak": 3, "oversize_requests": 0}
    assert (out.held_at_end, out.refusals) == (0, 1)
