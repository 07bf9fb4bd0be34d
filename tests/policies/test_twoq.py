"""2Q (full version), rule by rule, on tiny hand-built traces (both engines), plus differential tests.

Notation in comments: A1in=[..] head (oldest) first, Am=[..] least recent first,
A1out=[..] oldest id first. Unless said otherwise capacity 4 with the defaults:
kin_cap = round(4 * 0.25) = 1, kout_cap = round(4 * 0.5) = 2. block_size=1 and
input_length = len(hash_ids), so hit tokens = hit blocks.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.policies.twoq import queue_sizes
from conftest import ENGINES
from strategies import (
    assert_matches_oracle, engines_agree, real_trace_engines_agree, replay_singles, requests, zipf_requests,
)


def run(blocks, capacity, engine, policy="2q", **params):
    return replay_singles(policy, blocks, capacity, engine, **params)


def test_queue_sizes_round_half_to_even_and_at_least_one():
    assert queue_sizes(4) == (1, 2)
    assert queue_sizes(3) == (1, 2)  # round(0.75) = 1, round(1.5) = 2
    assert queue_sizes(6) == (2, 3)  # round(1.5) = 2
    assert queue_sizes(10) == (2, 5)  # round(2.5) = 2 (int() would agree; ceil would not)
    assert queue_sizes(14) == (4, 7)  # round(3.5) = 4
    assert queue_sizes(2) == (1, 1)  # round(0.5) = 0 -> at least 1
    assert queue_sizes(4, kout=0.1) == (1, 1)  # round(0.4) = 0 -> at least 1
    assert queue_sizes(4096) == (1024, 2048)
    assert queue_sizes(10, kin=0.9) == (9, 5)


@pytest.mark.parametrize("capacity,params", [(1, {}), (10, {"kin": 0.95}), (4, {"kin": 0.9})])
def test_no_slot_left_for_am_is_a_clear_error(capacity, params, engine):
    # capacity 1: kin_cap is at least 1 = capacity. capacity 10, kin 0.95: round(9.5) = 10.
    # capacity 4, kin 0.9: round(3.6) = 4. Either way Am could never hold a block.
    with pytest.raises(ConfigError, match="leaves Am no slot"):
        run("a", capacity, engine, **params)


@pytest.mark.parametrize("params", [{"kin": 0}, {"kin": 1}, {"kin": math.nan}, {"kout": 0}, {"kout": -1}, {"kout": math.nan}])
def test_bad_parameters_are_clear_errors(params, engine):
    with pytest.raises(ConfigError, match=next(iter(params))):
        run("a", 8, engine, **params)


def test_new_blocks_enter_a1in_and_a_hit_there_does_nothing(engine):
    # [a] [b]: A1in=[a, b]. [a]: hit, nothing moves. [c] [d]: A1in=[a, b, c, d], full.
    # [e]: |A1in| = 4 > 1: evict the head a into A1out=[a]. A1in=[b, c, d, e].
    # [a]: a is only in A1out: NOT resident -> miss. Ghost hit: reclaim evicts b into
    #      A1out=[b]; a enters Am=[a]. A1in=[c, d, e].
    # [a]: hit in Am.
    r = run("abacdeaa", 4, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 0, 0, 0, 1]
    assert r.counters == {"admissions": 5, "ghost_hits": 1, "evictions": 2, "am_evictions": 0}
    assert r.final_cache_blocks == 4
    assert r.sizes == {"kin_cap": 1, "kout_cap": 2}
    # LRU: the hit on a makes b least recent; [e] evicts b and the 7th request hits.
    assert run("abacdeaa", 4, engine, "lru").hit_tokens.tolist()[6] == 1


# [a] [b] [c] [d]: A1in=[a, b, c, d]
# [e]: evict a -> A1out=[a]          [f]: evict b -> A1out=[a, b]; A1in=[c, d, e, f]
# [a]: ghost: A1out=[b]; reclaim evicts c -> A1out=[b, c]; Am=[a]; A1in=[d, e, f]
# [b]: ghost: A1out=[c]; reclaim evicts d -> A1out=[c, d]; Am=[a, b]; A1in=[e, f]
# [c]: ghost: A1out=[d]; reclaim evicts e -> A1out=[d, e]; Am=[a, b, c]; A1in=[f]
# [a]: hit, Am=[b, c, a]
# [g]: new; |A1in| = 1 is not > kin_cap 1: evict Am's least recent, b (not remembered).
#      A1in=[f, g]; Am=[c, a]
# [a]: hit
# [b]: not in A1out: a plain admission. Reclaim: |A1in| = 2 > 1: evict f; A1out is full:
#      drop its oldest id d -> A1out=[e, f]. A1in=[g, b]
# [e]: ghost: A1out=[f]; reclaim evicts g -> A1out=[f, g]; Am=[c, a, e]; A1in=[b]
# [d]: dropped from A1out: a plain admission; reclaim evicts Am's least recent, c.
#      A1in=[b, d]; Am=[a, e]
AM_TRACE = "abcdefabcagabed"


def test_am_is_lru_and_its_evictions_are_not_remembered(engine):
    # Am as a FIFO would evict a (not b) at [g] and miss the 12th request; remembering Am
    # evictions in A1out would make [b] a ghost hit; an unbounded A1out would make [d] one.
    r = run(AM_TRACE, 4, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0]
    assert r.counters == {"admissions": 9, "ghost_hits": 4, "evictions": 9, "am_evictions": 2}
    assert r.final_cache_blocks == 4


def test_a_ghost_leaves_a1out_before_its_slot_is_reclaimed(engine):
    # [a]..[f]: A1out=[a, b], A1in=[c, d, e, f] (as above).
    # [b]: ghost: A1out=[a]; reclaim evicts c -> A1out=[a, c] (room: b already left).
    # [a]: ghost hit again: A1out=[c]; reclaim evicts d -> A1out=[c, d]; Am=[b, a]. [a]: hit.
    # Had b stayed in A1out during its reclaim, the full A1out would have dropped a, and
    # [a] would be a plain admission (ghost_hits 1).
    r = run("abcdefbaa", 4, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert r.counters == {"admissions": 6, "ghost_hits": 2, "evictions": 4, "am_evictions": 0}


def test_kin_sets_how_far_a1in_is_drained(engine):
    # kin 0.5: kin_cap 2. [a]..[f]: A1out=[a, b], A1in=[c, d, e, f].
    # [a]: ghost; reclaim: 4 > 2 evicts c. Am=[a]; A1in=[d, e, f]; A1out=[b, c]
    # [b]: ghost; reclaim: 3 > 2 evicts d. Am=[a, b]; A1in=[e, f]
    # [g]: 2 is not > 2: evict Am's a. A1in=[e, f, g]. [e]: hit in A1in.
    # kin 0.25 (kin_cap 1): [g] evicts e from A1in instead, and [e] misses.
    r = run("abcdefabge", 4, engine, kin=0.5)
    assert r.hit_tokens.tolist()[-1] == 1
    assert r.counters["am_evictions"] == 1
    r = run("abcdefabge", 4, engine, kin=0.25)
    assert r.hit_tokens.tolist()[-1] == 0
    assert r.counters["am_evictions"] == 0


def test_kout_sets_how_many_ids_a1out_remembers(engine):
    # kout 0.25: kout_cap 1. [e] evicts a -> A1out=[a]; [f] evicts b, dropping a -> A1out=[b].
    # [a]: a plain admission. With kout 0.5 (kout_cap 2) A1out=[a, b] and [a] is a ghost hit.
    assert run("abcdefa", 4, engine, kout=0.25).counters["ghost_hits"] == 0
    assert run("abcdefa", 4, engine, kout=0.5).counters["ghost_hits"] == 1


def test_capacity_two(engine):
    # kin_cap = max(1, round(0.5)) = 1, kout_cap = 1.
    # [a] [b]: A1in=[a, b]. [c]: evict a -> A1out=[a]; A1in=[b, c].
    # [a]: ghost; reclaim evicts b -> A1out=[b]; Am=[a]; A1in=[c]. [a]: hit.
    # [d]: |A1in| = 1: evict Am's a. A1in=[c, d].
    # [a]: not remembered: admission; reclaim evicts c, A1out=[b] full drops b -> A1out=[c].
    r = run("abcaada", 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 1, 0, 0]
    assert r.counters == {"admissions": 5, "ghost_hits": 1, "evictions": 4, "am_evictions": 1}
    assert r.final_cache_blocks == 2


def test_capacity_beyond_unique_blocks(engine):
    r = run("abcabc", 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1]
    assert r.final_cache_blocks == 3
    assert r.counters == {"admissions": 3, "ghost_hits": 0, "evictions": 0, "am_evictions": 0}


def test_a_prefix_stops_at_a_ghost_block(engine):
    # [a b c d]: A1in=[a, b, c, d]. [e f]: evict a, b -> A1out=[a, b]; A1in=[c, d, e, f].
    # [c d]: 2 hits. [a c]: a is a ghost: prefix 0 although c is resident. Accessing a
    # (ghost hit) reclaims c into A1out=[b, c]; then c is itself a ghost hit: A1out=[b],
    # reclaim evicts d -> A1out=[b, d]; Am=[a, c]; A1in=[e, f]. [a c]: 2 hits.
    trace = kvreplay.Trace.from_requests([(list("abcd"), 4), (list("ef"), 2), (list("cd"), 2), (list("ac"), 2), (list("ac"), 2)])
    r = kvreplay.replay(trace, "2q", 4, 1, engine=engine)
    assert r.hit_tokens.tolist() == [0, 0, 2, 0, 2]
    assert r.counters == {"admissions": 6, "ghost_hits": 2, "evictions": 4, "am_evictions": 0}


# ---- an independent oracle: the paper's pseudo-code over Python lists --------------------------

class Paper2Q:
    """Lists with index 0 = the end the paper pages out from (A1in's and A1out's tail, Am's LRU end)."""

    def __init__(self, capacity, kin=0.25, kout=0.5):
        self.slots = capacity
        self.Kin = max(1, round(capacity * kin))
        self.Kout = max(1, round(capacity * kout))
        self.A1in, self.A1out, self.Am = [], [], []

    def resident(self, x):
        return x in self.A1in or x in self.Am

    def reclaimfor(self):
        if len(self.A1in) + len(self.Am) < self.slots:
            return
        if len(self.A1in) > self.Kin:
            y = self.A1in.pop(0)
            self.A1out.append(y)
            if len(self.A1out) > self.Kout:
                self.A1out.pop(0)
        else:
            self.Am.pop(0)

    def access(self, x):
        if x in self.Am:
            self.Am.remove(x)
            self.Am.append(x)
        elif x in self.A1out:
            self.A1out.remove(x)
            self.reclaimfor()
            self.Am.append(x)
        elif x in self.A1in:
            pass
        else:
            self.reclaimfor()
            self.A1in.append(x)


def check_engines(reqs, block_size, capacity, params):
    trace = kvreplay.Trace.from_requests(reqs)
    try:
        ref, _ = engines_agree(trace, "2q", capacity, block_size, **params)
    except ConfigError:
        for engine in ENGINES:  # both engines must refuse the configuration
            with pytest.raises(ConfigError):
                kvreplay.replay(trace, "2q", capacity, block_size, engine=engine, **params)
        assert max(1, round(capacity * params.get("kin", 0.25))) >= capacity
        return None
    oracle = Paper2Q(capacity, **params)
    assert_matches_oracle(ref, reqs, oracle, block_size, lambda o: len(o.A1in) + len(o.Am))
    return ref


CAPACITIES = st.one_of(st.integers(1, 30), st.sampled_from([45, 4096]))
PARAMS = st.fixed_dictionaries({}, optional={
    "kin": st.sampled_from([0.25, 0.1, 0.5, 0.75, 0.9]),
    "kout": st.sampled_from([0.5, 0.1, 0.25, 1.0, 2.0]),
})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), CAPACITIES, PARAMS)
def test_engines_match_each_other_and_the_paper(trace_and_size, capacity, params):
    reqs, block_size = trace_and_size
    check_engines(reqs, block_size, capacity, params)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity,params", [(20, {}), (64, {"kin": 0.5}), (7, {"kout": 1.0}), (33, {"kin": 0.1, "kout": 0.25})])
def test_long_zipf_trace(seed, capacity, params):
    # Thousands of requests over a few hundred blocks: A1in's ring wraps, blocks cycle
    # A1in -> A1out -> Am and out again, and A1out overflows.
    reqs = zipf_requests(seed)
    r = check_engines(reqs, 16, capacity, params)
    c = r.counters
    assert c["ghost_hits"] > 40 and c["am_evictions"] > 20 and c["evictions"] - c["am_evictions"] > 500


@pytest.mark.parametrize("capacity", [1000, 16384])
def test_real_trace_reference_equals_compiled(capacity):
    ref = real_trace_engines_agree("2q", capacity)
    assert ref.counters["ghost_hits"] > 0


def test_holds_requeue_a_held_victim_fall_back_to_the_other_queue_and_refuse(engine):
    # Overlapping requests (engine/lifecycle.py). Capacity 3: kin_cap 1, kout_cap 2. R<i> =
    # request i; each runs and finishes unless said otherwise.
    # R0..R2=[a] [b] [c]: A1in=[a, b, c]. R3=[d]: a -> A1out; R4=[e]: b -> A1out=[a, b];
    # A1in=[c, d, e]. R5=[a]: ghost hit, c -> A1out=[b, c], Am=[a]. R6=[b]: ghost hit,
    # d -> A1out=[c, d], Am=[a, b], A1in=[e].
    # R7=[a, b] starts and runs: 2 hits, Am=[a, b] (least recent first), both held.
    # R8=[f]: the reclaim picks Am (|A1in| = kin_cap), whose blocks are all held (each moves to
    #   the recent end: one pass, order unchanged), so A1in gives up e -> A1out=[d, e]; A1in=[f].
    # R9=[g] starts and runs: the same, f -> A1out=[e, f]; A1in=[g].
    # R10=[h] starts: a, b, g are held and the cache is full: refused, nothing moves.
    # R7 finishes. R11=[a] starts and runs: hit, Am=[b, a]. R12=[b]: hit, Am=[a, b].
    # R13=[i]: Am's least recent a is held: it moves to the recent end, b (unheld) is evicted
    #   (not remembered): Am=[a], A1in=[g, i].
    from kvreplay.engine.lifecycle import replay_lifecycle

    requests = [["a"], ["b"], ["c"], ["d"], ["e"], ["a"], ["b"], ["a", "b"], ["f"], ["g"], ["h"], ["a"], ["b"], ["i"]]
    trace = kvreplay.Trace.from_requests([(ids, len(ids)) for ids in requests])
    events = [0, -1, 1, -2, 2, -3, 3, -4, 4, -5, 5, -6, 6, -7, 7, 8, -9, 9, 10, -11, -8, 11, 12, -13, 13, -14, -10, -12]
    out = replay_lifecycle(trace, "2q", 3, events, 1, engine=engine)
    assert out.hit_blocks.tolist() == [0] * 7 + [2, 0, 0, 0, 1, 1, 0]
    assert out.held_blocks.tolist() == [1] * 7 + [2, 1, 1, 0, 1, 1, 1]
    assert out.refused.tolist() == [False] * 10 + [True, False, False, False]
    assert {b for b, r in zip(trace.original_ids, out.resident) if r} == {"a", "g", "i"}
    # admissions a b c d e f g i (h refused; the second a and b are ghost hits); evictions:
    # a b c d (A1in, R3-R6), e f (A1in, for Am), b (Am, R13)
    assert out.counters == {"admissions": 8, "ghost_hits": 2, "evictions": 7, "am_evictions": 1}
    assert (out.final_cache_blocks, out.held_at_end, out.refusals) == (3, 0, 1)
