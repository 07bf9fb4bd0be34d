"""LFU with LRU tie-breaking and in-cache frequencies, rule by rule on tiny hand-built traces
(both engines), then reference == compiled == a brute-force oracle on random, long and real traces.

Notation in comments: {a:2, b:1} resident blocks with their frequencies. block_size=1 and
input_length = len(hash_ids) unless said otherwise, so hit tokens = hit blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.lifecycle import replay_lifecycle, run_reference
from kvreplay.errors import ConfigError
from kvreplay.policies.base import ReferencePolicy
from conftest import MOONCAKE, shared_path
from strategies import engines_agree, lifecycles, replay_blocks, requests, zipf_trace


def run(reqs, capacity, engine, block_size=1, policy="lfu"):
    return replay_blocks(policy, [(ids, None) for ids in reqs], capacity, engine, block_size)


def singles(text):
    """One single-block request per character."""
    return [[ch] for ch in text]


def test_least_frequent_is_evicted_not_least_recent(engine):
    # capacity 2. [a] {a:1}  [a] hit {a:2}  [b] {a:2, b:1}
    # [c] full: evict the smallest frequency, b (a is older but used twice) -> {a:2, c:1}
    # [a] hit. [b] miss (evicts c, freq 1).
    # LRU would evict a at [c] and miss both a and b afterwards.
    r = run(singles("aabcab"), 2, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 0, 1, 0]
    assert r.counters == {"admissions": 4, "evictions": 2}
    assert r.final_cache_blocks == 2
    assert run(singles("aabcab"), 2, engine, policy="lru").hit_tokens.tolist() == [0, 1, 0, 0, 0, 0]


def test_ties_go_to_the_least_recently_used(engine):
    # capacity 2. [a] {a:1}  [b] {a:1, b:1}  [b] {b:2}  [a] {a:2}: a tie, a accessed last.
    # [c] full, both at freq 2: evict the least recently accessed, b (admitted after a, so
    #     breaking ties by admission order would evict a instead) -> {a:2, c:1}
    # [a] hit. [b] miss.
    r = run(singles("abbacab"), 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 1, 0, 1, 0]


def test_ties_at_frequency_one_evict_the_oldest(engine):
    # capacity 2. [a] [b] {a:1, b:1}  [c] evicts a (least recent)  [b] hit  [a] miss
    r = run(singles("abcba"), 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 0]


def test_frequency_restarts_at_one_on_readmission(engine):
    # capacity 2.
    # [x] [x] {x:2}  [a] [a] [a] {x:2, a:3}
    # [b] evicts x (2 < 3) -> {a:3, b:1}   [b] [b] [b] -> {a:3, b:4}
    # [c] evicts a (3 < 4) -> {b:4, c:1}
    # [a] evicts c -> {b:4, a:1}: a's three earlier accesses are forgotten
    # [d] evicts a (1 < 4) -> {b:4, d:1}
    # [a] miss. An LFU that kept a's count (4 on readmission) would evict b (a tie at 4, b
    #     less recent) at [d] and hit here.
    r = run(singles("xxaaabbbbcada"), 2, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0]
    assert r.counters == {"admissions": 7, "evictions": 5}


def test_every_access_counts_including_repeats_within_a_request(engine):
    # capacity 2. [a, a]: the scan finds nothing resident (k=0); a is admitted by its first
    # access and hit by its second -> {a:2}.
    # [b] {a:2, b:1}  [c] evicts b, not a -> {a:2, c:1}  [a] hit.
    # Counting a block once per request would leave a at 1 and evict it (LRU tie) at [c].
    r = run([["a", "a"], ["b"], ["c"], ["a"]], 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1]


def test_blocks_after_a_miss_are_accessed_too(engine):
    # capacity 3. [a] {a:1}  [x, a]: the prefix stops at x (k=0); x admitted, a still gets
    # its access -> {a:2, x:1}.  [b] {a:2, x:1, b:1}  [c] evicts x (tie at 1, least recent)
    # [d] evicts b  [a] hit.
    r = run([["a"], ["x", "a"], ["b"], ["c"], ["d"], ["a"]], 3, engine)
    assert r.hit_blocks.tolist() == [0, 0, 0, 0, 0, 1]


def test_capacity_one(engine):
    # A single block: only an immediate repeat hits; any new block evicts whatever is there.
    r = run(singles("aabba"), 1, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0, 1, 0]
    assert r.counters == {"admissions": 3, "evictions": 2}


def test_capacity_beyond_unique_blocks(engine):
    # Capacity 10**9 with 3 distinct blocks: nothing is evicted, nothing sized by capacity.
    r = run(singles("abcabc"), 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1]
    assert r.final_cache_blocks == 3
    assert r.counters == {"admissions": 3, "evictions": 0}


# ---- holds (pin/unpin): overlapping requests ----------------------------------------------------

def test_held_blocks_are_skipped_in_place_and_a_full_hold_refuses(engine):
    # capacity 4, block_size 1. H = held; bucket lists are least recent first.
    # R0 [a] starts, runs: {a:1 H}.  R1 [b], R2 [b] start/finish: b:2 (R2 hits).
    # R3 [c, x] start/finish: freq 1: [a H, c, x]  freq 2: [b]                     adm 4
    # R4 [d]: a (least frequent, least recent) is held: skipped in place; c evicted.
    #         freq 1: [a H, x, d]                                                  adm 5, ev 1
    # R0 finishes (a released).
    # R5 [e] starts, runs: a kept its place, so a is evicted, not x (moving a behind the others
    #         would have evicted x). freq 1: [x, d, e H]                           adm 6, ev 2
    # R6 [x]: hit (1 block): x:2. freq 1: [d, e H]  freq 2: [b, x]
    # R7 [f] starts, runs: d evicted. freq 1: [e H, f H]                            adm 7, ev 3
    # R8 [g]: every block at freq 1 is held: the next frequency, 2: b (less recent than x).
    #         freq 1: [e H, f H, g]  freq 2: [x]                                     adm 8, ev 4
    # R9 [h] starts, runs: e, f held, g evicted. freq 1: [e H, f H, h H]             adm 9, ev 5
    # R10 [i, j]: i: freq 1 all held, x (freq 2) evicted, i admitted and held     adm 10, ev 6
    #         j: all 4 residents (e, f, h, i) held: refused. R10 holds 1 block, refused.
    # R10 finishes (i released); R5, R7, R9 never finish: e, f, h stay held.
    trace = kvreplay.Trace.from_requests([(list(ids), len(ids)) for ids in
                                          ("a", "b", "b", "cx", "d", "e", "x", "f", "g", "h", "ij")])
    events = [0, 1, -2, 2, -3, 3, -4, 4, -5, -1, 5, 6, -7, 7, 8, -9, 9, 10, -11]
    out = replay_lifecycle(trace, "lfu", 4, events, 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]
    assert out.held_blocks.tolist() == [1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1]
    assert out.refused.tolist() == [False] * 10 + [True]
    resident = {b for b, r in zip(trace.original_ids, out.resident) if r}
    assert resident == {"e", "f", "h", "i"}
    assert out.counters == {"admissions": 10, "evictions": 6}
    assert (out.held_at_end, out.refusals) == (3, 1)


class BruteLFU(ReferencePolicy):
    """LFU from the definition, holds included: the victim is min (frequency, last access) over
    the resident blocks without a hold (a linear scan); a miss with all of them held is refused."""

    def __init__(self, capacity):
        self.capacity, self.freq, self.last, self.tick = capacity, {}, {}, 0
        self.stats = {"admissions": 0, "evictions": 0}

    def resident(self, b):
        return b in self.freq

    def access(self, b):
        if b not in self.freq:
            if len(self.freq) >= self.capacity:
                unheld = [v for v in self.freq if not self.held(v)]
                if not unheld:
                    self.refuse()
                    return
                victim = min(unheld, key=lambda v: (self.freq[v], self.last[v]))
                del self.freq[victim], self.last[victim]
                self.stats["evictions"] += 1
            self.freq[b] = 0
            self.stats["admissions"] += 1
        self.freq[b] += 1
        self.last[b] = self.tick
        self.tick += 1

    def size(self):
        return len(self.freq)

    def resident_blocks(self):
        return self.freq.keys()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lifecycles(), st.integers(1, 12))
def test_overlapping_requests_match_the_brute_force(case, capacity):
    # Both engines == the definition restricted to unheld blocks, on random overlapping requests.
    reqs, block_size, events = case
    trace = kvreplay.Trace.from_requests(reqs)
    try:
        outs = [replay_lifecycle(trace, "lfu", capacity, events, block_size, engine=e) for e in ("reference", "compiled")]
    except ConfigError:  # (as in test_lifecycle.py: a trace the replay refuses)
        return
    n = len(trace)
    hit_blocks, held = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    refused = np.zeros(n, dtype=np.bool_)
    brute = BruteLFU(outs[0].capacity)
    run_reference(trace.offsets, trace.blocks, trace.input_length, outs[0].block_size, brute,
                  np.asarray(events, dtype=np.int64), hit_blocks, held, refused)
    for out in outs:
        assert out.hit_blocks.tolist() == hit_blocks.tolist()
        assert out.held_blocks.tolist() == held.tolist()
        assert out.refused.tolist() == refused.tolist()
        assert set(np.flatnonzero(out.resident).tolist()) == set(brute.freq)
        assert out.counters == brute.stats
        assert (out.held_at_end, out.refusals) == (brute.held_count(), brute.refusals)


# ---- reference == compiled == brute force -------------------------------------------------------

def brute_force(trace, capacity):
    """Hits straight from the definition: linear scans, min over (frequency, last access)."""
    freq, last, hits = {}, {}, []
    tick = 0
    for i in range(len(trace)):
        blocks = trace.request_blocks(i).tolist()
        k = 0
        while k < len(blocks) and blocks[k] in freq:
            k += 1
        hits.append(k)
        for b in blocks:
            if b not in freq:
                if len(freq) >= capacity:
                    victim = min(freq, key=lambda v: (freq[v], last[v]))
                    del freq[victim], last[victim]
                freq[b] = 0
            freq[b] += 1
            last[b] = tick
            tick += 1
    return hits, len(freq)


def assert_engines_agree(trace, capacity, block_size, oracle=True):
    ref, _ = engines_agree(trace, "lfu", capacity, block_size)
    assert ref.final_cache_blocks == ref.counters["admissions"] - ref.counters["evictions"]
    if oracle:
        hits, final = brute_force(trace, capacity)
        assert ref.hit_blocks.tolist() == hits
        assert ref.final_cache_blocks == final
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
    assert ref.counters["evictions"] > 100
    assert ref.total_hit_tokens > 0


@pytest.mark.parametrize("capacity", [1000, 4096])
def test_engines_agree_on_the_real_trace(capacity):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    ref = assert_engines_agree(trace, capacity, 512, oracle=False)  # brute force is O(capacity) per eviction
    assert ref.counters["evictions"] > 100_000
