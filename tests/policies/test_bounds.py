"""infinite and belady: hand-worked cases, a brute-force MIN oracle, both engines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvreplay
from conftest import MOONCAKE, shared_path
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.policies import belady
from strategies import hold_checks, lifecycles_agree, overlapping_events, requests


def trace_of(blocks_per_request):
    return kvreplay.Trace.from_requests([(ids, len(ids)) for ids in blocks_per_request])


def brute_force_min(reqs, capacity, admit_bypass=0):
    """MIN by scanning the future at every eviction (quadratic; for small traces only)."""
    flat = [b for ids, _ in reqs for b in ids]
    n = len(flat)

    def next_use(p):
        for q in range(p + 1, n):
            if flat[q] == flat[p]:
                return q
        return n + p

    cache: dict = {}  # block -> next use
    hits, p = [], 0
    for ids, length in reqs:
        k = 0
        while k < len(ids) and ids[k] in cache:
            k += 1
        hits.append(min(k, length))
        for b in ids:
            key = next_use(p)
            p += 1
            if b not in cache and len(cache) >= capacity:
                victim = max(cache, key=cache.get)
                if admit_bypass and key > cache[victim]:
                    continue
                del cache[victim]
            cache[b] = key
    return hits, len(cache)


def test_infinite_is_every_earlier_block(engine):
    # [a b] [a c] [a b c]: request 2 hits a; request 3 hits a and b, then c (seen in request 2).
    r = kvreplay.replay(trace_of([["a", "b"], ["a", "c"], ["a", "b", "c"]]), "infinite", 1, 1, engine=engine)
    assert r.hit_tokens.tolist() == [0, 1, 3]
    assert r.cache_capacity_blocks == 3  # capacity is ignored: reported as the unique blocks
    assert r.final_cache_blocks == 3 and r.counters == {"admissions": 3, "evictions": 0}


def test_belady_evicts_the_farthest_next_use(engine):
    # capacity 2, single-block requests a b c a b: positions 0..4.
    # At c (p=2): a's next use is 3, b's is 4 -> evict b. Then a hits (p=3); b misses (p=4).
    # LRU would evict a at c and miss both.
    r = kvreplay.replay(trace_of([["a"], ["b"], ["c"], ["a"], ["b"]]), "belady", 2, 1, engine=engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 0]
    lru = kvreplay.replay(trace_of([["a"], ["b"], ["c"], ["a"], ["b"]]), "lru", 2, 1, engine=engine)
    assert lru.hit_tokens.tolist() == [0, 0, 0, 0, 0]


def test_belady_admit_bypass(engine):
    # capacity 1: a, then x (never used again), then a. Without bypass x evicts a; with bypass
    # x's next use (never: 3+1=4) is farther than a's (2), so x is not admitted and a hits.
    reqs = [["a"], ["x"], ["a"]]
    assert kvreplay.replay(trace_of(reqs), "belady", 1, 1, engine=engine).hit_tokens.tolist() == [0, 0, 0]
    r = kvreplay.replay(trace_of(reqs), "belady", 1, 1, engine=engine, admit_bypass=1)
    assert r.hit_tokens.tolist() == [0, 0, 1]
    assert r.counters["bypasses"] == 1


def test_belady_evicts_a_prefix_from_its_tail(engine):
    # capacity 3: [a b c] then [d], then [a b]. At d all of a, b, c are resident; next uses:
    # a -> 4, b -> 5, c -> never. c goes; then [a b] hits both.
    r = kvreplay.replay(trace_of([["a", "b", "c"], ["d"], ["a", "b"]]), "belady", 3, 1, engine=engine)
    assert r.hit_tokens.tolist() == [0, 0, 2]


@settings(max_examples=200, deadline=None)
@given(requests(max_requests=30), st.integers(1, 12), st.integers(0, 1))
def test_belady_matches_brute_force_and_engines_agree(trace_and_size, capacity, bypass):
    reqs, _ = trace_and_size
    reqs = [(ids, len(ids)) for ids, _ in reqs]
    expected, final = brute_force_min(reqs, capacity, bypass)
    trace = kvreplay.Trace.from_requests(reqs)
    for engine in ("reference", "compiled"):
        r = kvreplay.replay(trace, "belady", capacity, 1, engine=engine, admit_bypass=bypass)
        assert r.hit_tokens.tolist() == expected
        assert r.final_cache_blocks == final



@settings(max_examples=200, deadline=None)
@given(requests(max_requests=30), st.integers(1, 5))
def test_next_use_numpy_and_compiled_agree_with_the_definition(trace_and_size, chunk):
    """Belady's next uses (uint32): the reference's numpy sort, scattered in chunks of `chunk`
    positions, and the core's one pass from the end, against a scan of the future."""
    reqs, _ = trace_and_size
    flat = [b for ids, _ in reqs for b in ids]
    n = len(flat)
    expected = [next((q for q in range(p + 1, n) if flat[q] == flat[p]), n + p) for p in range(n)]
    trace = trace_of([ids for ids, _ in reqs])
    saved, belady._CHUNK = belady._CHUNK, chunk
    try:
        ours = belady.next_use(trace)
    finally:
        belady._CHUNK = saved
    compiled = belady.compiled_next_use(trace)
    assert ours.dtype == compiled.dtype == np.uint32
    assert ours.tolist() == compiled.tolist() == expected


def test_belady_refuses_two_to_the_31_accesses():
    """Next uses run to 2 * num_accesses - 1, under the uint32 ABSENT key until 2**31 accesses."""
    assert 2 * belady.MAX_ACCESSES - 1 < belady.ABSENT
    too_many = type("Huge", (), {"num_accesses": 2**31, "num_blocks": 1})()
    for make in (belady.next_use, belady.compiled_next_use, lambda t: belady.make_state(1, t)):
        with pytest.raises(kvreplay.ConfigError, match="2,147,483,648 block accesses"):
            make(too_many)

@settings(max_examples=100, deadline=None)
@given(requests(max_requests=40), st.integers(1, 30))
def test_bounds_order(trace_and_size, capacity):
    # Hit tokens: lru <= infinite and belady <= infinite on every trace.
    reqs, block_size = trace_and_size
    trace = kvreplay.Trace.from_requests(reqs)
    inf = kvreplay.replay(trace, "infinite", None, block_size).total_hit_tokens
    for policy in ("lru", "fifo", "belady"):
        assert kvreplay.replay(trace, policy, capacity, block_size).total_hit_tokens <= inf


@pytest.mark.parametrize("capacity", [1000, 4096])
def test_bounds_on_a_real_trace(capacity):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    inf = kvreplay.replay(trace, "infinite", None, 512)
    # The infinite ceiling equals LRU with room for every block: 54,098,411 tokens (golden).
    assert inf.total_hit_tokens == 54_098_411
    bel = kvreplay.replay(trace, "belady", capacity, 512)
    ref = kvreplay.replay(trace, "belady", capacity, 512, engine="reference")
    assert np.array_equal(bel.hit_tokens, ref.hit_tokens)
    lru = kvreplay.replay(trace, "lru", capacity, 512)
    assert lru.total_hit_tokens < bel.total_hit_tokens < inf.total_hit_tokens


# ---- holds (pin/unpin, policies/base.py): running requests, engine/lifecycle.py ----------------

def test_infinite_holds_change_nothing(engine):
    # Nothing is evicted, so nothing is refused: three overlapping requests, none finished, hit
    # exactly as in the sequential replay ([0, 1, 3]) and hold every block they have.
    trace = trace_of([["a", "b"], ["a", "c"], ["a", "b", "c"]])
    out = replay_lifecycle(trace, "infinite", None, [0, 1, 2], 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 1, 3]
    assert out.held_blocks.tolist() == [2, 2, 3]
    assert not out.refused.any()
    assert out.counters == {"admissions": 3, "evictions": 0}
    assert (out.held_at_end, out.refusals) == (3, 0)


@pytest.mark.parametrize("admit_bypass", [0, 1])
def test_belady_never_evicts_a_held_block(admit_bypass, engine):
    # capacity 2, single-block requests a b c b a d: positions 0..5 (6 accesses), next uses:
    # a@0 -> 4, b@1 -> 3, c@2 -> 8 (none: 6 + 2), b@3 -> 9, a@4 -> 10, d@5 -> 11.
    # Events: 0 (runs), 1 (finishes), 2 (runs), 3, 0 finishes, 2 finishes, 4 (runs), 5.
    # admit_bypass 0:
    #   2 [c]: {a:4 b:3}: the farthest, a, is held: set aside; b evicted, a back on the heap.
    #   3 [b]: a and c both held -> refused.
    #   4 [a]: hits (key 10). 5 [d]: a (10) held; c (8) evicted. Resident {a, d}.
    #   admissions a, b, c, d; evictions b, c.
    # admit_bypass 1:
    #   2 [c]: the farthest unheld block is b (3): c's next use 8 is farther -> bypassed (not
    #     admitted, not held, not refused).
    #   3 [b]: hits (key 9), held. 4 [a]: hits (key 10), held.
    #   5 [d]: a and b both held -> refused (before any bypass test). Resident {a, b}.
    trace = trace_of([["a"], ["b"], ["c"], ["b"], ["a"], ["d"]])
    events = [0, 1, -2, 2, 3, -1, -3, 4, 5]
    out = replay_lifecycle(trace, "belady", 2, events, 1, engine=engine, admit_bypass=admit_bypass)
    resident = {b for b, r in zip(trace.original_ids, out.resident) if r}
    if admit_bypass == 0:
        assert out.hit_blocks.tolist() == [0, 0, 0, 0, 1, 0]
        assert out.held_blocks.tolist() == [1, 1, 1, 0, 1, 1]
        assert out.refused.tolist() == [False, False, False, True, False, False]
        assert resident == {"a", "d"}
        assert out.counters == {"admissions": 4, "evictions": 2, "bypasses": 0}
    else:
        assert out.hit_blocks.tolist() == [0, 0, 0, 1, 1, 0]
        assert out.held_blocks.tolist() == [1, 1, 0, 1, 1, 0]
        assert out.refused.tolist() == [False, False, False, False, False, True]
        assert resident == {"a", "b"}
        assert out.counters == {"admissions": 2, "evictions": 0, "bypasses": 1}
    assert (out.held_at_end, out.refusals) == (2, 1)


@settings(max_examples=100, deadline=None)
@given(st.data(), requests(max_requests=30), st.integers(1, 12))
def test_belady_bypass_with_overlapping_requests(data, trace_and_size, capacity):
    # The registry-wide lifecycle tests run belady with its default admit_bypass=0: with 1, both
    # engines agree too, every held block stays resident and a refusal needs all of them held.
    reqs, block_size = trace_and_size
    trace = kvreplay.Trace.from_requests(reqs)
    events = data.draw(overlapping_events(len(reqs)))
    lifecycles_agree(trace, "belady", capacity, events, block_size, check=hold_checks(capacity), admit_bypass=1)
