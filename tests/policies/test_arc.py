"""ARC (Megiddo & Modha, FAST'03, Figure 4), case by case on tiny hand-built traces (both engines),
then reference == compiled on random, long and real traces.

Notation in comments: lists are LRU first, T1=[..] T2=[..] resident, B1=[..] B2=[..] ghosts,
p the target size of T1, c the capacity. block_size=1 and input_length = len(hash_ids) unless
said otherwise, so hit tokens = hit blocks.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.errors import ConfigError
from conftest import MOONCAKE, shared_path
from strategies import engines_agree, lifecycles, replay_blocks, requests, zipf_trace


def run(reqs, capacity, engine, block_size=1, policy="arc"):
    return replay_blocks(policy, [(ids, None) for ids in reqs], capacity, engine, block_size)


def singles(text):
    """One single-block request per character."""
    return [[ch] for ch in text]


def test_hit_moves_to_t2_and_ghost_hits_adapt_p(engine):
    # c = 2.
    # [a] IV.B: |L1|=0 < 2, total 0 < 2: no replacement. T1=[a]                    miss
    # [b] IV.B: total 1 < 2. T1=[a,b]                                              miss
    # [a] I: T1 hit -> T2. T1=[b] T2=[a]                                           hit
    # [c] IV.B: |L1|=1 < 2, total 2 >= 2 (not 4): REPLACE: |T1|=1 > p=0 -> b to B1.
    #     T1=[c] T2=[a] B1=[b]                                                      miss
    # [a] I: T2=[a]                                                                 hit
    # [b] II: ghost, not resident. delta1 = 1 (|B1|=1 >= |B2|=0): p = min(2, 1) = 1.
    #     REPLACE: |T1|=1 > 1? no; b not in B2 -> T2's LRU a to B2. b -> T2.
    #     T1=[c] T2=[b] B2=[a] p=1                                                  miss
    # [a] III: delta2 = 1 (|B2|=1 >= |B1|=0): p = max(0, 0) = 0. REPLACE: |T1|=1 > 0 -> c to B1.
    #     a -> T2. T1=[] T2=[b,a] B1=[c] p=0                                        miss
    r = run(singles("abacaba"), 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 1, 0, 0]
    assert r.counters == {"admissions": 3, "evictions": 3, "ghost_hits": 2, "b1_hits": 1, "b2_hits": 1, "p": 0.0}
    assert r.final_cache_blocks == 2


def test_ghost_stops_the_prefix_and_every_block_is_accessed(engine):
    # c = 2. [a] [b] [a] [c] as above: T1=[c] T2=[a] B1=[b].
    # [a, b, c]: the scan sees a resident, b only a ghost -> 1 hit block. Then every block is
    # accessed: a (T2 hit), b (B1 hit: p=1, REPLACE evicts T2's LRU a to B2, b -> T2),
    # c (T1 hit -> T2): T1=[] T2=[b,c] B2=[a].
    # [a]: a is a ghost in B2 -> miss. [c]: c was moved to T2 by the access above -> hit.
    r = run([["a"], ["b"], ["a"], ["c"], ["a", "b", "c"], ["a"]], 2, engine)
    assert r.hit_blocks.tolist() == [0, 0, 1, 0, 1, 0]
    assert r.counters["b1_hits"] == 1 and r.counters["b2_hits"] == 1


def test_arc_keeps_t2_through_a_scan(engine):
    # c = 3. [a] [a] [b] [b]: T2=[a,b]. The scan c d e f g: p stays 0, so REPLACE always takes
    # T1's LRU while T1 is not empty:
    # [c] total 2 < 3: T1=[c]. [d] total 3: REPLACE c -> B1; T1=[d].
    # [e] total 4: REPLACE d -> B1; T1=[e] B1=[c,d].
    # [f] |L1| = 3 = c, |T1|=1 < 3: drop B1's LRU c, REPLACE e -> B1; T1=[f] B1=[d,e].
    # [g] likewise: T1=[g] B1=[e,f]. [a] [b]: still in T2 -> hits.
    # LRU at capacity 3 loses a and b to the scan.
    reqs = singles("aabbcdefgab")
    arc = run(reqs, 3, engine)
    assert arc.hit_tokens.tolist() == [0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1]
    assert arc.counters == {"admissions": 7, "evictions": 4, "ghost_hits": 0, "b1_hits": 0, "b2_hits": 0, "p": 0.0}
    assert run(reqs, 3, engine, policy="lru").hit_tokens.tolist()[-2:] == [0, 0]


def test_delta_is_a_real_ratio(engine):
    # c = 5. [a][a] .. [e][e]: T2=[a,b,c,d,e].
    # [f]: total 5 >= 5: REPLACE with T1 empty -> a to B2; T1=[f].  [f]: T2=[b,c,d,e,f], T1=[].
    # [g]: b to B2; [g] -> T2.  [h]: c to B2; T1=[h] T2=[d,e,f,g] B2=[a,b,c].
    # [i]: |L1|=1, total 8: REPLACE |T1|=1 > 0 -> h to B1; T1=[i].
    # [j]: total 9: i to B1; T1=[j] B1=[h,i] B2=[a,b,c] (total 10 = 2c).
    # [h]: B1 hit with |B1|=2 < |B2|=3: delta1 = 3/2 = 1.5 -> p = 1.5 (integer division would
    #      give 1, rounding up 2). REPLACE: |T1|=1 > 1.5? no -> d to B2. h -> T2.
    r = run(singles("aabbccddeeffgghijh"), 5, engine)
    assert r.counters["p"] == 1.5
    assert r.counters["b1_hits"] == 1
    assert r.hit_tokens.tolist()[-1] == 0


def test_tie_rule_evicts_t1_on_a_b2_hit_when_t1_equals_p(engine):
    # c = 3.
    # [a] [a]: T2=[a].  [b] [c]: T1=[b,c] (total 3).
    # [d]: total 3 >= 3: REPLACE |T1|=2 > 0 -> b to B1. T1=[c,d].
    # [b]: B1 hit, delta1 = 1 -> p = 1. REPLACE: |T1|=2 > 1 -> c to B1. T1=[d] T2=[a,b] B1=[c].
    # [c]: B1 hit, delta1 = 1 -> p = 2. REPLACE: |T1|=1 > 2? no -> T2's a to B2.
    #      T1=[d] T2=[b,c] B2=[a].
    # [a]: B2 hit, delta2 = 1 -> p = 1. REPLACE: |T1|=1 > 1? no, but a is in B2 and |T1| == p:
    #      T1's d goes to B1. T1=[] T2=[b,c,a].
    # [b]: hit. Without the tie rule REPLACE would have evicted T2's b and this would miss.
    r = run(singles("aabcdbcab"), 3, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 1]
    assert r.counters == {"admissions": 4, "evictions": 4, "ghost_hits": 3, "b1_hits": 2, "b2_hits": 1, "p": 1.0}


def test_complete_miss_with_full_l1_and_empty_b1_deletes_t1_lru_outright(engine):
    # c = 1. [a]: T1=[a]. [b]: |L1| = 1 = c and |T1| = c: a is deleted, NOT moved to B1.
    # [a]: a complete miss again (no ghost hit); b deleted. [b] likewise.
    r = run(singles("abab"), 1, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0]
    assert r.counters == {"admissions": 4, "evictions": 3, "ghost_hits": 0, "b1_hits": 0, "b2_hits": 0, "p": 0.0}
    assert r.final_cache_blocks == 1


def test_complete_miss_with_full_l1_drops_the_b1_lru(engine):
    # c = 2. [a][a]: T2=[a]. [b]: T1=[b]. [c]: REPLACE b to B1; T1=[c] B1=[b].
    # [d]: |L1| = 2 = c, |T1| = 1 < c: B1's LRU b is dropped, REPLACE c to B1. T1=[d] B1=[c].
    # [b]: b was dropped: a complete miss (not a B1 hit). |L1| = 2: drop c, REPLACE d to B1.
    # [c]: dropped too -> complete miss.
    r = run(singles("aabcdbc"), 2, engine)
    assert r.counters["ghost_hits"] == 0
    assert r.counters["admissions"] == 6
    # Same prefix, but re-access c while it is still in B1: a B1 hit.
    assert run(singles("aabcdc"), 2, engine).counters["b1_hits"] == 1


def test_complete_miss_with_full_directory_drops_the_b2_lru(engine):
    # c = 2. [a][a][b][b]: T2=[a,b].
    # [c]: |L1|=0, total 2: REPLACE with T1 empty -> a to B2. T1=[c].  [c]: T2=[b,c].
    # [d]: total 3: REPLACE with T1 empty -> b to B2. T1=[d] T2=[c] B2=[a,b].
    # [e]: |L1|=1 < 2 and total 4 = 2c: B2's LRU a is dropped; REPLACE d to B1. T1=[e] B2=[b].
    # [a]: a complete miss (a B2 hit if a had not been dropped).
    # [b]: still in B2 -> B2 hit (not resident: miss).
    r = run(singles("aabbccdeab"), 2, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 1, 0, 1, 0, 0, 0, 0]
    assert r.counters == {"admissions": 6, "evictions": 5, "ghost_hits": 1, "b1_hits": 0, "b2_hits": 1, "p": 0.0}


def test_capacity_one(engine):
    # c = 1. [a]: T1=[a]. [a]: T2=[a] (hit). [b]: total 1: REPLACE, T1 empty -> a to B2; T1=[b].
    # [a]: B2 hit, p = max(0, -1) = 0; REPLACE |T1|=1 > 0 -> b to B1; T2=[a].
    # [b]: B1 hit, delta1 = 1 (|B1| = |B2| = 1), p = min(1, 1) = 1; REPLACE: T1 empty -> a to B2.
    #      T2=[b].  [b]: hit.
    r = run(singles("aababb"), 1, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 0, 0, 1]
    assert r.counters == {"admissions": 2, "evictions": 3, "ghost_hits": 2, "b1_hits": 1, "b2_hits": 1, "p": 1.0}


def test_capacity_beyond_unique_blocks(engine):
    # Capacity 10**9 with 3 distinct blocks: nothing is evicted, nothing sized by capacity.
    r = run(singles("abcabc"), 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1]
    assert r.final_cache_blocks == 3
    assert r.counters["evictions"] == 0 and r.counters["p"] == 0.0


# ---- holds (pin/unpin): overlapping requests ----------------------------------------------------

def test_holds_requeue_in_the_own_list_fall_back_to_the_other_list_and_refuse(engine):
    # c = 3, block_size 1; each request is one or two blocks. H = held. Events in order:
    # R0 [b] starts, runs:    T1=[b(H)]                                               adm 1
    # R1 [c, d] start/finish: IV.B, totals 1 and 2 < 3. T1=[b(H),c,d]                  adm 3
    # R2 [e] start/finish:    |L1| = |T1| = 3 = c: IV.A deletes T1's LRU outright; b is held: to
    #                         T1's MRU end, T1=[c,d,b]; c deleted (no ghost). T1=[d,b,e]  adm 4, ev 1
    # R0 finishes (b released).
    # R3 [f]:                 IV.A again: T1's LRU is d (b was requeued behind it): d deleted.
    #                         T1=[b,e,f]                                           adm 5, ev 2
    #                         (skipping b in place would have left T1=[b,d,e] and deleted b.)
    # R4 [b]:                 hit (1 block), b -> T2. T1=[e,f] T2=[b]
    # R5 [g, h] starts, runs: g: IV.B (|L1|=2, total 3): REPLACE, |T1|=2 > p=0: e -> B1.
    #                         T1=[f,g(H)] B1=[e]                                    adm 6, ev 3
    #                         h: |L1| = 3 = c, |T1| = 2 < c: IV.A drops B1's e, REPLACE: f -> B1.
    #                         T1=[g(H),h(H)] B1=[f]                                 adm 7, ev 4
    # R6 [i] starts, runs:    |L1| = 3: IV.A drops B1's f; REPLACE chooses T1 (2 > 0), but g and h
    #                         are held (one full turn, T1 stays [g,h]): T2's LRU b -> B2 instead.
    #                         T1=[g,h,i] (all held) T2=[] B2=[b]                    adm 8, ev 5
    # R7 [b]:                 b is a ghost (0 hit blocks); all 3 resident blocks are held: refused,
    #                         before the B2 hit is counted or p adapted. R7 finishes (holds nothing).
    # R5 finishes (g, h released).
    # R8 [b] start/finish:    III: b2_hits 1, delta2 = 1, p = max(0, -1) = 0; REPLACE: |T1|=3 > 0:
    #                         g -> B1. b -> T2. T1=[h,i(H)] T2=[b] B1=[g]           ghost 1, ev 6
    # R6 never finishes: i stays held. Residents {h, i, b} = 8 + 1 - 6 = 3 blocks.
    trace = kvreplay.Trace.from_requests([(list(ids), len(ids)) for ids in
                                          ("b", "cd", "e", "f", "b", "gh", "i", "b", "b")])
    events = [0, 1, -2, 2, -3, -1, 3, -4, 4, -5, 5, 6, 7, -8, -6, 8, -9]
    out = replay_lifecycle(trace, "arc", 3, events, 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert out.held_blocks.tolist() == [1, 2, 1, 1, 1, 2, 1, 0, 1]
    assert out.refused.tolist() == [False] * 7 + [True, False]
    resident = {b for b, r in zip(trace.original_ids, out.resident) if r}
    assert resident == {"h", "i", "b"}
    assert out.counters == {"admissions": 8, "evictions": 6, "ghost_hits": 1, "b1_hits": 0, "b2_hits": 1, "p": 0.0}
    assert (out.held_at_end, out.refusals) == (1, 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lifecycles(), st.integers(1, 12))
def test_directory_bounds_hold_under_holds(case, capacity):
    # Figure 4's invariants, after every start and finish: |T1| + |T2| <= c, |L1| = |T1| + |B1| <= c,
    # the directory <= 2c, 0 <= p <= c; held blocks are resident, and a full cache stays full.
    reqs, block_size, events = case
    seen = {"full": False}

    def check(k, arc):
        t1, t2, b1, b2, c = len(arc.T1), len(arc.T2), len(arc.B1), len(arc.B2), arc.c
        assert t1 + t2 <= c and t1 + b1 <= c and t1 + t2 + b1 + b2 <= 2 * c
        assert 0.0 <= arc.p <= c
        assert all(b in arc.T1 or b in arc.T2 for b in arc.pins)
        assert not (b1 or b2) or t1 + t2 == c  # ghosts exist only once the cache is full
        seen["full"] |= t1 + t2 == c
        assert not seen["full"] or t1 + t2 == c

    trace = kvreplay.Trace.from_requests(reqs)
    try:
        replay_lifecycle(trace, "arc", capacity, events, block_size, engine="reference", on_event=check)
    except ConfigError:  # (as in test_lifecycle.py: a trace the replay refuses)
        return


# ---- reference == compiled ------------------------------------------------------------------------

def assert_engines_agree(trace, capacity, block_size):
    ref, _ = engines_agree(trace, "arc", capacity, block_size)
    c = ref.counters
    # Every block entering the cache is an admission or a ghost hit; ARC never exceeds c.
    assert ref.final_cache_blocks == c["admissions"] + c["ghost_hits"] - c["evictions"]
    assert ref.final_cache_blocks <= capacity
    assert 0.0 <= c["p"] <= capacity
    assert c["ghost_hits"] == c["b1_hits"] + c["b2_hits"]
    return ref


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.one_of(st.integers(1, 30), st.sampled_from([45, 4096])))
def test_engines_agree_on_random_traces(trace_and_size, capacity):
    reqs, block_size = trace_and_size
    assert_engines_agree(kvreplay.Trace.from_requests(reqs), capacity, block_size)



@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [7, 20, 64])
def test_engines_agree_on_long_zipf_traces(seed, capacity):
    ref = assert_engines_agree(zipf_trace(seed), capacity, 16)
    c = ref.counters
    # Both ghost lists are hit many times and p moves both ways.
    assert c["b1_hits"] > 20 and c["b2_hits"] > 20 and c["evictions"] > 100
    assert ref.total_hit_tokens > 0


@pytest.mark.parametrize("capacity", [1000, 4096])
def test_engines_agree_on_the_real_trace(capacity):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    ref = assert_engines_agree(trace, capacity, 512)
    assert ref.counters["b1_hits"] > 0 and ref.counters["b2_hits"] > 0
