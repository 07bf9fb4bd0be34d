"""radix (SGLang's RadixCache), rule by rule, on tiny hand-built traces (both engines).

Notation in comments: the tree as nodes [pages] with children after an arrow, e.g.
[a b]->{[c d], [x y]}; "tN" is the logical time of a request's last touch. Unless said
otherwise block_size = 1 and input_length = len(hash_ids), so hit tokens = hit blocks,
a request can hit at most len - 1 blocks (SGLang matches at most L - 1 tokens) and
there is no slack page in the eviction demand (P == 1). Capacity is in pages.
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
from kvreplay.policies import radix
from kvreplay.policies.radix import Radix
from conftest import MOONCAKE, shared_path
from strategies import replay_blocks, requests


def run(reqs, capacity, engine, block_size=1):
    """reqs: (hash_ids, input_length or None for len(hash_ids) * block_size)."""
    return replay_blocks("radix", reqs, capacity, engine, block_size)


def full(*requests):
    """Requests whose prompt fills every block exactly: ("a b c", ...) -> [([a, b, c], None), ...]."""
    return [(r.split(), None) for r in requests]


def test_split_where_requests_diverge_and_at_the_l_minus_1_cap(engine):
    # [a b c d]: tree [a b c d].
    # [a b x y]: limit 3; a b hit, x misses -> 2. The match ends inside [a b c d]: split
    #   into [a b]->[c d] (split 1); the insert adds [x y] under [a b].
    # [a b c d]: limit 3 -> a b c hit -> 3, and the match ends inside [c d]: split into
    #   [c]->[d] (split 2), although the whole request is cached.
    # [a b x y]: likewise 3, splitting [x y] (split 3).
    r = run(full("a b c d", "a b x y", "a b c d", "a b x y"), 100, engine)
    assert r.hit_tokens.tolist() == [0, 2, 3, 3]
    assert r.counters["node_splits"] == 3
    assert r.counters["admissions"] == 6  # a b c d, then x y; nothing after
    assert r.final_cache_blocks == 6


def test_the_last_token_is_never_matched(engine):
    # block_size 4. [a b] (L=8) twice: limit floor(7/4) = 1 block -> 4 tokens, not 8.
    # [a b c] (L=9): limit floor(8/4) = 2 -> 8 tokens.
    r = run([(["a", "b"], 8), (["a", "b"], 8), (["a", "b", "c"], 9)], 100, engine, block_size=4)
    assert r.hit_tokens.tolist() == [0, 4, 8]
    assert r.hit_blocks.tolist() == [0, 1, 2]


def test_partial_tail_page_is_never_inserted(engine):
    # block_size 4. [a b] with L=6: b holds 2 tokens: only [a] goes into the tree.
    # [a b c] (L=12): limit 2; a hits, b is not in the tree -> 1 block = 4 tokens.
    r = run([(["a", "b"], 6), (["a", "b", "c"], 12)], 100, engine, block_size=4)
    assert r.hit_tokens.tolist() == [0, 4]
    assert r.counters["admissions"] == 1 + 2  # [a]; then b c (c full at L=12)
    assert run([(["a", "b"], 6)], 100, engine, block_size=4).final_cache_blocks == 1


def test_hits_follow_the_tree_path_not_the_set_of_ids(engine):
    # [a b]; [c b]: a second page b, under c (the same id in two places: two pages).
    # [x b]: b is in the tree, but not under x -> 0.
    # [c b y]: limit 2, c b on one path -> 2.
    r = run(full("a b", "c b", "x b", "c b y"), 100, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 2]
    assert r.final_cache_blocks == 7  # [a b], [c b]->[y], [x b]: 7 pages, 5 distinct ids
    trace = kvreplay.Trace.from_requests([(ids, len(ids)) for ids, _ in full("a b", "c b", "x b", "c b y")])
    cache = Radix(100)
    hit = np.zeros(len(trace), dtype=np.int64)
    driver.replay_reference(trace.offsets, trace.blocks, trace.input_length, 1, cache, hit, hit.copy())
    assert sorted(trace.original_ids[b] for b in cache.resident_blocks()) == ["a", "b", "c", "x", "y"]


def test_repeated_ids_in_one_request(engine):
    # [a a a] is one node of three pages; [a a a a] walks it page by page: limit 3 -> 3.
    r = run(full("a a a", "a a a a", "a a"), 100, engine)
    assert r.hit_tokens.tolist() == [0, 3, 1]
    assert r.final_cache_blocks == 4


# Capacity 6.
# 1 [a b]   tree [a b] t1                                  (2 pages)
# 2 [c d]   + [c d] t2                                     (4)
# 3 [a b]   limit 1: a -> 1; the match splits [a]->[b] and touches both (t3); no eviction
#           (need 2 - 1 - 2 free < 1); the insert finds [a b] whole.     (4)
# 4 [e f g] need 3 - 0 - 2 free = 1: oldest leaf [c d] (t2; [b] is t3) goes whole: 2 pages
#           freed for 1 needed.                                          ([a]->[b], [e f g]: 5)
# 5 [a b z] limit 2: a b -> 2; need 3 - 2 - 1 = 0; + [z] under [b] (t5). (6)
# 6 [c d]   0 (evicted at 4); need 2 - 0 - 0 = 2: oldest leaf [e f g] (t4), 3 pages.
#           ([a]->[b]->[z], [c d] t6: 5)
# 7 [e f g] 0 (evicted whole at 6); need 3 - 0 - 1 = 2: oldest leaf [z] (t5): 1 page; its
#           parent [b] (t5) is now a childless unlocked leaf, the oldest: 1 more page -> 2.
#           ([a], [c d], [e f g]: 6)
# 8 [c d]   limit 1 -> 1: [c d] survived because [b] went before it. The match splits
#           [c]->[d]; need 2 - 1 - 0 = 1: [c] is locked, the leaves are [a] (t5),
#           [e f g] (t7) and [d] (t8): [a] goes (1 page).              ([c]->[d], [e f g]: 5)
LRU_TRACE = full("a b", "c d", "a b", "e f g", "a b z", "c d", "e f g", "c d")


def test_touching_the_path_whole_leaf_eviction_and_parent_becoming_a_leaf(engine):
    r = run(LRU_TRACE, 6, engine)
    # Without the touch at 3, [a b] (t1) would be evicted at 4 and request 5 would miss.
    # Evicting pages instead of whole leaves would keep [e] at 6 and request 7 would hit.
    # Without pushing [b] when it becomes a leaf, 7 would evict [c d] and 8 would miss.
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 2, 0, 0, 1]
    assert r.counters["evictions"] == 2 + 3 + 2 + 1
    assert r.counters["evicted_nodes"] == 5  # [c d], [e f g], [z], [b], [a]
    assert r.counters["node_splits"] == 2  # [a b] at 3, [c d] at 8
    assert r.final_cache_blocks == 5


def test_locked_prefix_is_not_evicted(engine):
    # With block_size 1 the lock never decides anything in a sequential replay: the matched
    # path was just touched, so it is the newest, and evicting every other leaf always
    # frees enough. The paged allocator's extra page can ask for more than that:
    # block_size 4, capacity 3.
    # 1 [x] (L=4): tree [x].
    # 2 [a b] (L=8): need 2 + 1 (slack) - 2 free = 1: [x] goes. tree [a b], 1 page free.
    # 3 [a b c] (L=12): limit 2 -> a b hit (8 tokens) and are locked. need 1 + 1 - 1 = 1,
    #   but the only leaf is locked: nothing is evicted (unlocked, [a b] would go, 2 pages),
    #   the one page really needed is free, and [c] is inserted under [a b].
    # 4 [a b c] (L=12): 8 tokens again. need 1 + 1 - 0 = 2: [c], beyond the matched path,
    #   is an unlocked leaf and goes (1 page); [a b] is locked, so it stops there. The
    #   insert puts [c] back.
    reqs = [(["x"], 4), (["a", "b"], 8), (["a", "b", "c"], 12), (["a", "b", "c"], 12)]
    r = run(reqs, 3, engine, block_size=4)
    assert r.hit_tokens.tolist() == [0, 0, 8, 8]
    assert r.counters["evictions"] == 2 and r.counters["evicted_nodes"] == 2
    assert r.counters["admissions"] == 1 + 2 + 1 + 1
    assert r.final_cache_blocks == 3


def test_paged_allocator_asks_for_one_extra_page(engine):
    # block_size 4: SGLang's paged extend asks for L - prefix tokens plus one page.
    # Capacity 4. [a] [b] [c] (L=4 each): 3 pages, 1 free; request 3 needed 1 + 1 - 2 = 0.
    # [d]: need 1 + 1 (slack) - 1 free = 1: [a] (oldest) is evicted although 1 page was free.
    # [a x] (L=8): limit 1; a is gone -> 0. need 2 + 1 - 1 free = 2: [b] and [c] go.
    reqs = [(["a"], 4), (["b"], 4), (["c"], 4), (["d"], 4), (["a", "x"], 8)]
    r = run(reqs, 4, engine, block_size=4)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 0]
    assert r.counters["evictions"] == 3
    # The same requests at block_size 1: no slack, [d] takes the free page, a stays -> 1;
    # [a x] then needs 2 - 1 - 0 = 1 page: [b] (a is locked).
    r1 = run([(ids, len(ids)) for ids, _ in reqs], 4, engine)
    assert r1.hit_tokens.tolist() == [0, 0, 0, 0, 1]
    assert r1.counters["evictions"] == 1


@pytest.mark.parametrize("capacity", [1, 2])
def test_request_larger_than_the_cache_is_refused(capacity, engine):
    # [a b c] needs 3 pages: refused (hits 0, nothing inserted or touched). Capacity 2:
    # [a b] is inserted; resent: limit 1 -> 1, splitting [a]->[b]; need 2 - 1 - 0 = 1:
    # the tail [b] goes (1 page) and is re-inserted. [a] (L=1, limit 0): need 1 - 0 - 0 = 1:
    # [b] goes, [a] stays. At capacity 1 every 2-block request is refused too; [a] fits.
    r = run(full("a b c", "a b", "a b", "a", "a"), capacity, engine)
    if capacity == 2:
        assert r.hit_tokens.tolist() == [0, 0, 1, 0, 0]
        assert r.counters["rejected"] == 1
        assert r.counters["evictions"] == 2
        assert r.final_cache_blocks == 1
    else:
        assert r.hit_tokens.tolist() == [0, 0, 0, 0, 0]
        assert r.counters["rejected"] == 3
        assert r.final_cache_blocks == 1


def test_capacity_beyond_every_block_never_evicts(engine):
    rng = np.random.default_rng(5)
    reqs = [([int(x) for x in rng.integers(0, 20, size=rng.integers(1, 8))], None) for _ in range(300)]
    r = run(reqs, 10**9, engine)
    assert r.counters["evictions"] == 0 and r.counters["rejected"] == 0
    assert r.hit_tokens.tolist() == unbounded_oracle([(ids, len(ids)) for ids, _ in reqs], 1)


def test_no_parameters():
    with pytest.raises(ConfigError, match="unknown parameter"):
        kvreplay.replay(kvreplay.Trace.from_requests([(["a"], 1)]), "radix", 4, 1, eviction="lfu")


def test_probe_changes_nothing():
    cache = Radix(10)
    cache.hit_limit(3, 3, 1)
    cache.access_request(0, ["a", "b", "c"], 0, 3, 1)
    before = (cache.size(), cache.counters(), cache.root.children["a"].last_access, cache.clock)
    assert cache.hit_limit(3, 3, 1) == 2
    assert cache.resident("a") and cache.resident("b")
    assert not cache.resident("x")
    assert (cache.size(), cache.counters(), cache.root.children["a"].last_access, cache.clock) == before
    assert len(cache.root.children["a"].blocks) == 3  # no split either
    cache.hit_limit(3, 3, 1)  # the cursor is back at the root
    assert not cache.resident("b")


# ---- differential and long traces ---------------------------------------------------------------

def unbounded_oracle(reqs, block_size):
    """Hits with nothing ever evicted: the longest prefix, up to the limit, inserted before."""
    inserted, hits = set(), []
    for ids, length in reqs:
        limit = radix.matchable_blocks(len(ids), length, block_size)
        k = 0
        while k < limit and tuple(ids[:k + 1]) in inserted:
            k += 1
        hits.append(min(k * block_size, length))
        for j in range(1, min(len(ids), length // block_size) + 1):
            inserted.add(tuple(ids[:j]))
    return hits


def both_engines(reqs, block_size, capacity):
    trace = kvreplay.Trace.from_requests(reqs)
    ref = kvreplay.replay(trace, "radix", capacity, block_size, engine="reference")
    comp = kvreplay.replay(trace, "radix", capacity, block_size, engine="compiled")
    assert comp.hit_tokens.tolist() == ref.hit_tokens.tolist()
    assert comp.hit_blocks.tolist() == ref.hit_blocks.tolist()
    assert comp.final_cache_blocks == ref.final_cache_blocks
    assert comp.counters == ref.counters
    assert comp.stranded_blocks == ref.stranded_blocks
    return ref


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.one_of(st.integers(1, 30), st.sampled_from([64, 4096, 10**9])))
def test_engines_match(trace_and_size, capacity):
    reqs, block_size = trace_and_size
    ref = both_engines(reqs, block_size, capacity)
    if capacity == 10**9:
        assert ref.hit_tokens.tolist() == unbounded_oracle(reqs, block_size)


def conversations(seed, num_requests=3000, num_prefixes=60):
    """Zipf-popular conversations over a few hundred blocks: each request resends a prefix
    of an earlier turn of its conversation and adds new blocks (ids reused across them)."""
    rng = np.random.default_rng(seed)
    popular = rng.zipf(1.4, size=num_requests) % num_prefixes
    history = {}
    reqs = []
    for i in range(num_requests):
        c = int(popular[i])
        turn = history.get(c, [c % 7, 7 + c])
        keep = int(rng.integers(max(1, len(turn) // 2), len(turn) + 1))
        ids = turn[:keep] + [int(x) for x in rng.integers(70, 400, size=int(rng.integers(0, 4)))]
        history[c] = ids[:12]
        reqs.append((ids, len(ids) * 16 - int(rng.integers(0, 16))))
    return reqs


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("capacity", [6, 20, 64, 200])
def test_long_trace_engines_match(seed, capacity):
    ref = both_engines(conversations(seed), 16, capacity)
    c = ref.counters
    assert c["evicted_nodes"] > 100 and c["node_splits"] > 10 and ref.total_hit_tokens > 0
    if capacity == 6:
        assert c["rejected"] > 0
    assert c["admissions"] - c["evictions"] == ref.final_cache_blocks


@pytest.mark.parametrize("capacity", [1000, 4096])
def test_conversation_trace_engines_match(capacity):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    ref = kvreplay.replay(trace, "radix", capacity, 512, engine="reference")
    comp = kvreplay.replay(trace, "radix", capacity, 512, engine="compiled")
    assert np.array_equal(ref.hit_tokens, comp.hit_tokens)
    assert ref.counters == comp.counters and ref.final_cache_blocks == comp.final_cache_blocks
    assert ref.counters["evicted_nodes"] > 1000 and ref.counters["node_splits"] > 0 and ref.total_hit_tokens > 0


def test_many_touches_without_eviction_then_lru_order(engine):
    # Capacity 9. [p q], then [a b c] and [d e f] alternate 100 times: their second match
    # splits [a b]->[c] and [d e]->[f]; the tree holds 8 pages and a resend needs just the
    # one free page (its last page is re-allocated: the match stops at L - 1), so nothing
    # is evicted while every request re-stamps its path: the compiled heap fills with stale
    # entries and is compacted many times, and [p q]'s entry, pushed first, must survive.
    # [x y]: need 2 - 0 - 1 = 1: the oldest leaf [p q] goes (2 pages).
    # [p q]: 0 (a lost heap entry would have kept it: 1); need 1: [c] (older than [f]).
    # [a b c]: 2; need 1: [f] ([a b] is locked).  [d e f]: 2; need 1: [x y] (2 pages).
    reqs = full("p q", *(["a b c", "d e f"] * 100), "x y", "p q", "a b c", "d e f")
    r = run(reqs, 9, engine)
    assert r.hit_tokens.tolist()[:5] == [0, 0, 0, 2, 2]
    assert r.hit_tokens.tolist()[-4:] == [0, 0, 2, 2]
    assert r.counters["evicted_nodes"] == 4  # [p q], [c], [f], [x y]
    assert r.counters["evictions"] == 2 + 1 + 1 + 2
    assert r.counters["node_splits"] == 2
    assert r.final_cache_blocks == 8


# ---- overlapping requests (pin_request / unpin_request) ---------------------------------------------

def test_a_locked_path_is_skipped_by_eviction_and_a_start_that_cannot_fit_is_refused(engine):
    # Capacity 6 pages, block_size 1 (no slack page). "held" = pages on locked paths plus pages
    # outside the tree; a start is admitted iff its pages beyond the hits fit in 6 - held.
    # start 0 [a b c]: tree [a b c], locked: held 3.
    # start 1 [d e]:   2 <= 6 - 3: + [d e] (no eviction: 6 - 3 tree pages - 0 outside = 3 free).
    # finish 1:        [d e] unlocked (stamped at its finish). held 3, tree 5.
    # start 2 [f g h]: 3 <= 6 - 3; need 3 - 1 free = 2: the oldest leaf [a b c] is locked, so it
    #                  is not a candidate (SGLang's evictable_leaves); [d e] goes (2 pages).
    #                  (Had request 0 finished first, [a b c] would have gone.) tree
    #                  [a b c], [f g h]: 6 pages, all held.
    # start 3 [a b x]: limit 2: a b hit -> 2; the match splits [a b]->[c] (split 1) and locks
    #                  [a b] (already locked by request 0). 1 page > 6 - 6: refused, unlocked.
    # finish 0:        the path [a b]->[c] is unlocked: [c] is an evictable leaf. held 3.
    # start 4 [a b x]: 2 hits again (no split: the path ends at [a b]); locking [a b] makes
    #                  held 5, and 1 <= 6 - 5: admitted. need 1 - 0 free = 1: [c] goes (1 page);
    #                  + [x] under [a b]. held 6.
    # finish 2, finish 4: nothing held; tree [a b]->[x], [f g h].
    reqs = full("a b c", "d e", "f g h", "a b x", "a b x")
    trace = kvreplay.Trace.from_requests([(ids, len(ids)) for ids, _ in reqs])
    events = [0, 1, -2, 2, 3, -1, 4, -3, -5]
    seen = {}

    def look(k, cache):
        seen[k] = (cache.held_count(), cache.everything_held())

    kw = {"on_event": look} if engine == "reference" else {}
    out = replay_lifecycle(trace, "radix", 6, events, 1, engine=engine, **kw)
    assert out.hit_blocks.tolist() == [0, 0, 0, 2, 2]
    assert out.held_blocks.tolist() == [3, 2, 3, 0, 3]
    assert out.refused.tolist() == [False, False, False, True, False]
    assert out.counters == {"admissions": 3 + 2 + 3 + 1, "evictions": 2 + 1, "evicted_nodes": 2, "node_splits": 1, "rejected": 0}
    assert sorted(trace.original_ids[b] for b in np.flatnonzero(out.resident)) == list("abfghx")
    assert (out.final_cache_blocks, out.held_at_end, out.refusals) == (6, 0, 1)
    if engine == "reference":
        assert seen[4] == (6, True) and seen[5] == (3, False) and seen[6] == (6, True)  # 6 of 6 held


def test_a_refused_start_evicts_nothing(engine):
    # Capacity 4, block_size 1.
    # start 0 [a b]:   locked, held 2.   start 1 [c], finish 1: tree [a b], [c]; held 2.
    # start 2 [x y z]: 3 pages > 4 - 2: refused before any eviction, although [c] is evictable
    #                  and 1 page is free (SGLang's scheduler leaves it waiting).
    # start 3 [c d]:   limit 1: c hits -> 1 ([c] survived); locking [c] makes held 3; 1 <= 1:
    #                  admitted, 1 page free: no eviction; + [d] under [c].
    reqs = full("a b", "c", "x y z", "c d")
    trace = kvreplay.Trace.from_requests([(ids, len(ids)) for ids, _ in reqs])
    out = replay_lifecycle(trace, "radix", 4, [0, 1, -2, 2, 3, -4, -1], 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 0, 0, 1]
    assert out.held_blocks.tolist() == [2, 1, 0, 2]
    assert out.refused.tolist() == [False, False, True, False]
    assert out.counters == {"admissions": 4, "evictions": 0, "evicted_nodes": 0, "node_splits": 0, "rejected": 0}
    assert (out.final_cache_blocks, out.held_at_end, out.refusals) == (4, 0, 1)
