"""CLOCK, rule by rule, on tiny hand-built traces (both engines), plus differential tests.

Notation in comments: F=[a1, b0, ^c0] lists the frames in order with each block's counter;
^ marks the frame under the hand. block_size=1 and input_length = len(hash_ids), so hit
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
    assert_matches_oracle, engines_agree, hold_checks, lifecycles_agree, overlapping_events, real_trace_engines_agree,
    replay_singles, requests, zipf_requests,
)


def run(blocks, capacity, engine, policy="clock", **params):
    return replay_singles(policy, blocks, capacity, engine, **params)


def test_a_hit_earns_a_second_chance(engine):
    # capacity 2. [a] [b]: F=[^a0, b0]. [a]: hit, F=[^a1, b0].
    # [c]: a1 -> a0 (second chance), hand to b0: evicted, c takes its frame, the hand
    #      advances (wrapping to frame 0): F=[^a0, c0].
    # [a]: hit. FIFO evicts a at [c] and misses here.
    r = run("abaca", 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 1]
    assert r.counters == {"admissions": 3, "evictions": 1, "second_chances": 1}
    assert run("abaca", 2, engine, "fifo").hit_tokens.tolist()[-1] == 0


def test_a_new_block_starts_with_its_bit_clear(engine):
    # capacity 2. As above up to [c]: F=[^a0, c0] (c entered with count 0).
    # [b]: a0 under the hand: evicted. F=[b0, ^c0]. b misses.
    # Had c entered with its bit set, [c] would have cleared a and b, wrapped, evicted a
    # (F=[c1, ^b0]) and b would hit.
    r = run("abacb", 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 0]
    assert r.counters == {"admissions": 4, "evictions": 2, "second_chances": 1}


def test_the_hand_advances_past_the_replaced_frame(engine):
    # capacity 3. [a] [b] [c]: F=[^a0, b0, c0]. [a]: a1.
    # [d]: a1 -> a0, b0 evicted; d in frame 1; hand to frame 2: F=[a0, d0, ^c0].
    # [e]: c0 evicted; F=[^a0, d0, e0]. [d]: hit.
    # A hand left on the replaced frame would evict d at [e].
    r = run("abcaded", 3, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 0, 0, 1]


def test_frames_fill_before_anything_is_evicted(engine):
    # capacity 3. [a] [b] [c] fill frames 0..2, the hand stays on frame 0.
    # [d]: a0 evicted (first admitted): F=[d0, ^b0, c0]. [b] [c]: hits, b1, c1.
    # [a]: b1 -> b0, c1 -> c0, wrap, d0 evicted: F=[a0, ^b0, c0].
    r = run("abcdbca", 3, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 1, 1, 0]
    assert r.counters == {"admissions": 5, "evictions": 2, "second_chances": 2}


def test_a_full_sweep_clears_every_bit_and_wraps(engine):
    # capacity 3. [a] [b] [c] [a] [b] [c]: F=[^a1, b1, c1].
    # [d]: clears a, b, c (3 second chances), wraps, evicts a: F=[d0, ^b0, c0].
    # [e]: b0 evicted: F=[d0, e0, ^c0]. [c]: hit, c1.
    # [a]: c1 -> c0, wrap, d0 evicted: F=[a0, ^e0, c0]. [d]: miss.
    r = run("abcabcdecad", 3, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0]
    assert r.counters == {"admissions": 7, "evictions": 4, "second_chances": 4}


def test_one_bit_saturates(engine):
    # capacity 2, bits 1. [a] [a] [a]: a1 (two hits, the bit saturates at 1).
    # [b]; [c]: a1 -> a0, b0 evicted: F=[^a0, c0]. [d]: a0 evicted. [a]: miss.
    # An unclamped counter (a2) would survive [d] and hit.
    r = run("aaabcda", 2, engine, bits=1)
    assert r.hit_tokens.tolist() == [0, 1, 1, 0, 0, 0, 0]
    assert r.counters == {"admissions": 5, "evictions": 3, "second_chances": 1}


def test_two_bit_counter(engine):
    # capacity 2, bits 2 (max count 3). [a] [a] [a]: a2. [b]: F=[^a2, b0].
    # [c]: a2 -> a1, b0 evicted: F=[^a1, c0]. [d]: a1 -> a0, c0 evicted: F=[^a0, d0].
    # [a]: hit.
    r = run("aaabcda", 2, engine, bits=2)
    assert r.hit_tokens.tolist() == [0, 1, 1, 0, 0, 0, 1]
    assert r.counters == {"admissions": 4, "evictions": 2, "second_chances": 2}


def test_two_bit_counter_saturates_at_three(engine):
    # capacity 2, bits 2. [a] x5: a3 (four hits, clamped at 3). [b]: F=[^a3, b0].
    # [c] [d] [e]: each spends one of a's credits and evicts the other frame: a3->a2 (b out),
    # a2->a1 (c out), a1->a0 (d out). [f]: a0 evicted. [a]: miss.
    # An unclamped counter (a4) would survive [f].
    r = run("aaaaabcdefa", 2, engine, bits=2)
    assert r.hit_tokens.tolist() == [0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    assert r.counters["second_chances"] == 3


@pytest.mark.parametrize("bits", [0, 8, 1.5])
def test_bits_out_of_range_is_a_clear_error(bits, engine):
    with pytest.raises(ConfigError, match="bits"):
        run("a", 2, engine, bits=bits)


def test_capacity_one(engine):
    # [a] [a]: a1. [b]: a1 -> a0, the hand wraps onto the same frame, a evicted. [b] hit: b1.
    # [a]: b1 -> b0, b evicted.
    r = run("aabba", 1, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 1, 0]
    assert r.counters == {"admissions": 3, "evictions": 2, "second_chances": 2}
    assert r.final_cache_blocks == 1


def test_capacity_beyond_unique_blocks(engine):
    r = run("abcabc", 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1]
    assert r.final_cache_blocks == 3
    assert r.counters == {"admissions": 3, "evictions": 0, "second_chances": 0}


def test_multi_block_requests(engine):
    # capacity 3. [a b c]: F=[^a0, b0, c0]. [a b x]: a, b hit (2) -> a1, b1; x: clears a, b,
    # evicts c: F=[a0, b0, x0] with the hand on frame 0. [a b c]: 2 hits; c: a1 -> a0, b1 -> b0,
    # x0 evicted. [x]: miss.
    trace = kvreplay.Trace.from_requests([(list("abc"), 3), (list("abx"), 3), (list("abc"), 3), (["x"], 1)])
    r = kvreplay.replay(trace, "clock", 3, 1, engine=engine)
    assert r.hit_tokens.tolist() == [0, 2, 2, 0]
    assert r.counters == {"admissions": 6, "evictions": 3, "second_chances": 4}


# ---- an independent oracle: libCacheSim's Clock, a FIFO queue with reinsertion ---------------------

class QueueClock:
    """q[0] is the tail (next eviction candidate); new objects and reinserted ones go to the end."""

    def __init__(self, capacity, bits=1):
        self.capacity, self.max_freq = capacity, (1 << bits) - 1
        self.q, self.freq = [], {}
        self.rewritten = 0

    def resident(self, x):
        return x in self.freq

    def access(self, x):
        if x in self.freq:
            self.freq[x] = min(self.freq[x] + 1, self.max_freq)
            return
        if len(self.q) >= self.capacity:
            while self.freq[self.q[0]] >= 1:
                self.freq[self.q[0]] -= 1
                self.rewritten += 1
                self.q.append(self.q.pop(0))
            del self.freq[self.q.pop(0)]
        self.q.append(x)
        self.freq[x] = 0


def check_engines(reqs, block_size, capacity, bits):
    ref, _ = engines_agree(kvreplay.Trace.from_requests(reqs), "clock", capacity, block_size, bits=bits)
    oracle = QueueClock(capacity, bits)
    assert_matches_oracle(ref, reqs, oracle, block_size, lambda o: len(o.q))
    assert ref.counters["second_chances"] == oracle.rewritten
    return ref


CAPACITIES = st.one_of(st.integers(1, 30), st.sampled_from([45, 4096]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), CAPACITIES, st.sampled_from([1, 1, 2, 3]))
def test_engines_match_each_other_and_libcachesim_queue_form(trace_and_size, capacity, bits):
    reqs, block_size = trace_and_size
    check_engines(reqs, block_size, capacity, bits)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity,bits", [(7, 1), (50, 1), (33, 2), (20, 3)])
def test_long_zipf_trace(seed, capacity, bits):
    # Thousands of requests over a few hundred blocks: the ring wraps many times.
    reqs = zipf_requests(seed)
    r = check_engines(reqs, 16, capacity, bits)
    assert r.counters["evictions"] > 900 and r.counters["second_chances"] > 300


@pytest.mark.parametrize("capacity", [1000, 16384])
def test_real_trace_reference_equals_compiled(capacity):
    ref = real_trace_engines_agree("clock", capacity)
    assert ref.counters["second_chances"] > 0


# ---- holds (pin/unpin, policies/base.py): running requests, engine/lifecycle.py ----------------

def test_the_hand_skips_a_held_frame_keeping_its_counter_and_refuses_when_all_are_held(engine):
    # capacity 3, bits 1, one block per request; "k" starts request k, "-k" finishes it.
    # 0 [a]: F=[^a0], a held. 1 [a]: hit, a1; 1 finishes (a still held by 0).
    # 2 [b], 3 [c] (each finishes): F=[^a1, b0, c0].
    # 4 [d] (runs): a is held: skipped, its counter kept at 1 (no second chance spent or
    #   counted); b0 evicted. F=[a1, d0, ^c0]. Then 0 finishes.
    # 5 [e] (finishes): c0 evicted. F=[^a1, d0, e0].
    # 6 [f] (runs): a1 -> a0 (second chance 1); d held: skipped; e0 evicted. F=[^a0, d0, f0].
    #   (Had the hand decremented a while it was held, a would have gone here.)
    # 7 [a, x]: a hits (a1, held); x: a, d, f all held -> refused, holding a.
    # admissions a..f = 6, evictions b, c, e = 3; held at the end: d, f, a.
    trace = kvreplay.Trace.from_requests([(list(ids), len(ids)) for ids in ["a", "a", "b", "c", "d", "e", "f", "ax"]])
    events = [0, 1, -2, 2, -3, 3, -4, 4, -1, 5, -6, 6, 7]
    out = replay_lifecycle(trace, "clock", 3, events, 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 1, 0, 0, 0, 0, 0, 1]
    assert out.held_blocks.tolist() == [1] * 8
    assert out.refused.tolist() == [False] * 7 + [True]
    assert {b for b, r in zip(trace.original_ids, out.resident) if r} == {"a", "d", "f"}
    assert out.counters == {"admissions": 6, "evictions": 3, "second_chances": 1}
    assert (out.held_at_end, out.refusals) == (3, 1)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), requests(max_requests=30), st.integers(1, 12), st.sampled_from([2, 3]))
def test_wider_counters_with_overlapping_requests(data, trace_and_size, capacity, bits):
    # The registry-wide lifecycle tests run clock with bits=1: with wider counters too, both
    # engines agree, every held block stays resident and a refusal needs all of them held.
    reqs, block_size = trace_and_size
    trace = kvreplay.Trace.from_requests(reqs)
    events = data.draw(overlapping_events(len(reqs)))
    lifecycles_agree(trace, "clock", capacity, events, block_size, check=hold_checks(capacity), bits=bits)
