"""SIEVE, rule by rule, on tiny hand-built traces (both engines), plus differential tests.

Notation in comments: Q=[..] is the queue from the tail (oldest) to the head (newest),
x* a visited block, ^x the block under the hand (no ^: the hand is unset and the next
eviction starts at the tail). block_size=1 and input_length = len(hash_ids), so hit
tokens = hit blocks.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.errors import ConfigError
from strategies import (
    assert_matches_oracle, engines_agree, real_trace_engines_agree, replay_singles, requests, zipf_requests,
)


def run(blocks, capacity, engine, policy="sieve"):
    return replay_singles(policy, blocks, capacity, engine)


def test_hit_sets_visited_and_the_hand_skips_it(engine):
    # capacity 3. [a] [a]: a* (a hit moves nothing). [b] [c]: Q=[a*, b, c].
    # [d]: hand unset -> tail a*: clear, step toward the head -> b unvisited: evict b;
    #      the hand stays on b's newer neighbour c. Q=[a, ^c, d].
    # [a]: hit. LRU and FIFO both evict a at [d] (oldest admitted, least recent) and miss here.
    r = run("aabcda", 3, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 0, 0, 1]
    assert r.counters == {"admissions": 4, "evictions": 1}
    assert r.final_cache_blocks == 3
    for other in ("lru", "fifo"):
        assert run("aabcda", 3, engine, other).hit_tokens.tolist()[-1] == 0


def test_hand_keeps_its_position_between_evictions(engine):
    # capacity 3. [a] [b] [c]: Q=[a, b, c]. [a]: a*.
    # [d]: tail a*: clear; b: evict; hand -> c. Q=[a, ^c, d]
    # [e]: starts at the hand (c, unvisited): evict c; hand -> d. Q=[a, ^d, e]
    # [a]: hit. Restarting every eviction from the tail would evict a (now unvisited) at [e].
    r = run("abcadea", 3, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 0, 0, 1]
    assert r.counters == {"admissions": 5, "evictions": 2}


def test_hand_wraps_from_the_head_to_the_tail(engine):
    # capacity 3. [a] [b] [c] [a] [b] [c]: Q=[a*, b*, c*].
    # [d]: a*, b*, c* all cleared; past the head (c) the hand wraps to the tail: a is now
    #      unvisited -> evict a; hand -> b. Q=[^b, c, d]
    # [e]: hand on b (unvisited): evict b; hand -> c. Q=[^c, d, e]
    # [c]: hit, c*. [b]: hand on c*: clear; d: evict; hand -> e. Q=[c, ^e, b]
    # [c]: hit (its bit was cleared, the block stayed).
    r = run("abcabcdecbc", 3, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1]
    assert r.counters == {"admissions": 6, "evictions": 3}


def test_evicting_the_head_unsets_the_hand(engine):
    # capacity 2. [a] [b] [a] [b]: Q=[a*, b*].
    # [c]: clear a, clear b, wrap, evict a; hand -> b. Q=[^b, c].
    # [c]: c*. [d]: hand on b (unvisited): evict b; hand -> c. Q=[^c*, d].
    # [e]: c*: clear, step to d (unvisited): evict d, the head -> hand unset. Q=[c, e].
    # [c]: hit, c*. [d]: hand unset -> tail c*: clear; e: evict (the head) -> unset. Q=[c, d]
    # [f]: tail c (unvisited): evict c. [c] misses.
    r = run("ababccdecdfc", 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0]
    assert r.counters == {"admissions": 8, "evictions": 6}


def test_capacity_one(engine):
    # [a] [a]: a*. [b]: clear a, wrap to the tail (a again), evict a. [b] hit. [a] evicts b.
    r = run("aabba", 1, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 1, 0]
    assert r.counters == {"admissions": 3, "evictions": 2}
    assert r.final_cache_blocks == 1


def test_capacity_two(engine):
    # [a] [b] [a]: Q=[a*, b]. [c]: clear a, evict b; b was the head -> hand unset. Q=[a, c]
    # [a] hit (a*). [b]: tail a*: clear; c unvisited: evict c (the head). Q=[a, b].
    # [c]: tail a, unvisited (cleared by the last sweep, not hit since): evict a. [a] misses.
    r = run("abacabca", 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 1, 0, 0, 0]


def test_capacity_beyond_unique_blocks(engine):
    r = run("abcabc", 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1]
    assert r.final_cache_blocks == 3
    assert r.counters == {"admissions": 3, "evictions": 0}


def test_no_parameters(engine):
    with pytest.raises(ConfigError, match="unknown parameter"):
        kvreplay.replay(kvreplay.Trace.from_requests([(["a"], 1)]), "sieve", 2, 1, engine=engine, bits=2)


def test_multi_block_requests_prefix_and_visited(engine):
    # capacity 3. [a b c]: Q=[a, b, c]. [a b d]: prefix a, b hit (2 tokens); a*, b*;
    # d: clear a, clear b, evict c; c was the head -> hand unset. Q=[a, b, d].
    # [a b c]: 2 hits, a*, b* again; c: clear a, clear b, evict d. Q=[a, b, c].
    # [d] misses; it evicts a (unvisited tail), so [a b] hits nothing.
    trace = kvreplay.Trace.from_requests([(list("abc"), 3), (list("abd"), 3), (list("abc"), 3), (["d"], 1), (list("ab"), 2)])
    r = kvreplay.replay(trace, "sieve", 3, 1, engine=engine)
    assert r.hit_tokens.tolist() == [0, 2, 2, 0, 0]
    assert r.counters == {"admissions": 8, "evictions": 5}


# ---- an independent oracle: Algorithm 1 of the paper, literally, over a Python list --------------

class PaperSieve:
    """T is a list, index 0 = head; ``o.prev`` is the element at the index before o's."""

    def __init__(self, capacity):
        self.C, self.T, self.visited, self.p = capacity, [], {}, None
        self.skips = self.wraps = self.restarts = 0

    def resident(self, x):
        return x in self.visited

    def prev(self, o):
        i = self.T.index(o)
        return self.T[i - 1] if i > 0 else None

    def access(self, x):
        if x in self.visited:
            self.visited[x] = 1
            return
        if len(self.T) == self.C:
            o = self.p
            if o is None:
                o = self.T[-1]
                self.restarts += 1
            while self.visited[o] == 1:
                self.visited[o] = 0
                self.skips += 1
                o = self.prev(o)
                if o is None:
                    o = self.T[-1]
                    self.wraps += 1
            self.p = self.prev(o)
            self.T.remove(o)
            del self.visited[o]
        self.T.insert(0, x)
        self.visited[x] = 0


def check_engines(reqs, block_size, capacity):
    ref, _ = engines_agree(kvreplay.Trace.from_requests(reqs), "sieve", capacity, block_size)
    oracle = PaperSieve(capacity)
    assert_matches_oracle(ref, reqs, oracle, block_size, lambda o: len(o.T))
    return ref, oracle


CAPACITIES = st.one_of(st.integers(1, 30), st.sampled_from([45, 4096]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), CAPACITIES)
def test_engines_match_each_other_and_the_paper(trace_and_size, capacity):
    reqs, block_size = trace_and_size
    check_engines(reqs, block_size, capacity)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [7, 50])
def test_long_zipf_trace(seed, capacity):
    # Thousands of requests over a few hundred blocks: the hand wraps many times and skips
    # visited blocks on most evictions.
    reqs = zipf_requests(seed)
    ref, oracle = check_engines(reqs, 16, capacity)
    assert ref.counters["evictions"] > 900
    # skips: visited bits cleared by the hand; wraps: sweeps past the head back to the tail;
    # restarts: evictions that began at the tail because the last one evicted the head.
    assert oracle.skips > 500 and oracle.wraps >= 1 and oracle.restarts > 5
    fifo = kvreplay.replay(kvreplay.Trace.from_requests(reqs), "fifo", capacity, 16)
    assert ref.total_hit_tokens > fifo.total_hit_tokens  # the visited bits matter


@pytest.mark.parametrize("capacity", [1000, 16384])
def test_real_trace_reference_equals_compiled(capacity):
    ref = real_trace_engines_agree("sieve", capacity)
    assert ref.counters["evictions"] > 0


# ---- holds (pin/unpin, policies/base.py): running requests, engine/lifecycle.py ----------------

def test_the_hand_passes_a_held_block_keeping_its_bit_and_refuses_when_all_are_held(engine):
    # capacity 3, one block per request; "k" starts request k, "-k" finishes it (held = 1 each).
    # 0 [a]: Q=[a], a held. 1 [a]: hit, a*; 1 finishes (a still held by 0).
    # 2 [b], 3 [c] (each finishes): Q=[a*, b, c].
    # 4 [d] (runs): tail a* is held: passed over in place, its bit kept; b: evicted, hand -> c.
    #   Q=[a*, ^c, d]. (Without the hold the hand would clear a's bit.) Then 0 finishes.
    # 5 [e] (finishes): c evicted, hand -> d. Q=[a*, ^d, e].
    # 6 [f] (finishes): d held: passed; e evicted (the head): hand unset. Q=[a*, d, f].
    # 7 [g] (runs): tail a*: cleared (kept through its hold, it saves a now); d held: passed;
    #   f evicted. Q=[a, d, g].
    # 8 [a, x]: a hits (a*, held); x: a, d, g all held -> refused, holding a.
    # admissions a..g = 7, evictions b, c, e, f = 4; held at the end: d, g, a.
    trace = kvreplay.Trace.from_requests([(list(ids), len(ids)) for ids in ["a", "a", "b", "c", "d", "e", "f", "g", "ax"]])
    events = [0, 1, -2, 2, -3, 3, -4, 4, -1, 5, -6, 6, -7, 7, 8]
    out = replay_lifecycle(trace, "sieve", 3, events, 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 1]
    assert out.held_blocks.tolist() == [1] * 9
    assert out.refused.tolist() == [False] * 8 + [True]
    assert {b for b, r in zip(trace.original_ids, out.resident) if r} == {"a", "d", "g"}
    assert out.counters == {"admissions": 7, "evictions": 4}
    assert (out.held_at_end, out.refusals) == (3, 1)
