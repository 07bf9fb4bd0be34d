"""TTL (sliding expiry in trace time, optional LRU capacity), rule by rule on tiny hand-built
traces (both engines), then reference == compiled == a brute-force oracle on random, long and
real traces.

Requests are (blocks, timestamp in ms); ttl is in seconds (ttl=1 -> 1000 ms). block_size=1
and input_length = len(hash_ids), so hit tokens = hit blocks. {a@t} = a resident, last
accessed at t.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine import driver
from conftest import MOONCAKE, shared_path
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.errors import ConfigError
from kvreplay.policies import ttl as ttl_module
from strategies import engines_agree, lifecycles_agree, overlapping_events, requests


def make_trace(timed):
    return kvreplay.Trace.from_requests([(ids, len(ids), float(t)) for ids, t in timed])


def run(timed, capacity, engine, **params):
    return kvreplay.replay(make_trace(timed), "ttl", capacity, 1, engine=engine, **params)


def test_resident_at_exactly_ttl_gone_one_ms_later(engine):
    # ttl 1 s. [a]@0 admitted {a@0}.
    # [a]@1000: 1000 - 0 <= 1000 -> still resident: hit {a@1000}.
    # [a]@2001: 1001 > 1000 -> expired: miss; purged (expiration 1), re-admitted {a@2001}.
    # [a]@2001: hit.
    r = run([(["a"], 0), (["a"], 1000), (["a"], 2001), (["a"], 2001)], None, engine, ttl=1)
    assert r.hit_tokens.tolist() == [0, 1, 0, 1]
    assert r.counters == {"admissions": 2, "evictions": 0, "expirations": 1}


def test_expiry_counts_from_the_last_access_not_admission(engine):
    # ttl 1 s. [a]@0; [a]@900 hit, refreshed {a@900}; [a]@1800 hit (900 ms since the last
    # access; 1800 since admission would have expired it); [a]@2801 miss (1001 ms).
    r = run([(["a"], 0), (["a"], 900), (["a"], 1800), (["a"], 2801)], None, engine, ttl=1)
    assert r.hit_tokens.tolist() == [0, 1, 1, 0]


def test_default_ttl_is_300_seconds(engine):
    # [a]@0; [a]@300000 hit (exactly 300 s); [a]@600001 miss.
    r = run([(["a"], 0), (["a"], 300_000), (["a"], 600_001)], None, engine)
    assert r.hit_tokens.tolist() == [0, 1, 0]
    assert r.params == {"ttl": 300.0}


def test_time_is_a_running_maximum_when_the_file_is_unsorted(engine):
    # ttl 1 s. [a]@0 {a@0}; [b]@5000 {b@5000}, now = 5000.
    # [a]@500: served at max(5000, 500) = 5000: a expired (5000 > 1000) -> miss, {a@5000}.
    #   (With the raw stamp, 500 - 0 <= 1000 would be a hit.)
    # [b]@0: now stays 5000: b (0 ms old) hit.
    # [a]@5900: 900 ms since a's refresh at 5000 (not at 500) -> hit.
    r = run([(["a"], 0), (["b"], 5000), (["a"], 500), (["b"], 0), (["a"], 5900)], None, engine, ttl=1)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1]
    assert r.counters["expirations"] == 1


def test_an_expired_block_stops_the_prefix(engine):
    # ttl 1 s. [x]@0, [y]@600.
    # [y, x]@1100: y (500 ms) resident, x (1100 ms) expired -> 1 hit block. x is purged and
    #   re-admitted: {y@1100, x@1100}.
    # [x, y]@1100: both resident -> 2.
    # [z]@1500, [y, z]@2101: y expired (1001 ms) first -> 0, although z is resident.
    timed = [(["x"], 0), (["y"], 600), (["y", "x"], 1100), (["x", "y"], 1100), (["z"], 1500), (["y", "z"], 2101)]
    r = run(timed, None, engine, ttl=1)
    assert r.hit_blocks.tolist() == [0, 0, 1, 2, 0, 0]


def test_capacity_evicts_the_least_recently_accessed(engine):
    # capacity 2, ttl 300 s, all at time 0: plain LRU.
    # [a] [b] [a] hit (a most recent) [c] evicts b [a] hit [b] miss (evicts c)
    timed = [([x], 0) for x in "abacab"]
    r = run(timed, 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 1, 0]
    assert r.counters == {"admissions": 4, "evictions": 2, "expirations": 0}


def test_expired_blocks_go_before_any_eviction(engine):
    # capacity 2, ttl 1 s. [a]@0, [b]@600 full.
    # [c]@1200: a expired (1200 ms): purged (expiration), so c needs no eviction: {b@600, c@1200}.
    # [d]@1300: b is 700 ms old, unexpired; full -> evict the LRU b: {c, d}.
    # [d]@1400: hit.
    timed = [(["a"], 0), (["b"], 600), (["c"], 1200), (["d"], 1300), (["d"], 1400)]
    r = run(timed, 2, engine, ttl=1)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 1]
    assert r.counters == {"admissions": 4, "evictions": 1, "expirations": 1}
    assert r.final_cache_blocks == 2


def test_capacity_one(engine):
    # capacity 1, ttl 1 s: [a]@0 [a]@1 hit [b]@2 evicts a [b]@3000 expired: miss [b]@3001 hit
    timed = [(["a"], 0), (["a"], 1), (["b"], 2), (["b"], 3000), (["b"], 3001)]
    r = run(timed, 1, engine, ttl=1)
    assert r.hit_tokens.tolist() == [0, 1, 0, 0, 1]
    assert r.counters == {"admissions": 3, "evictions": 1, "expirations": 1}


def test_unbounded_replay_with_capacity_none(engine):
    # replay(trace, "ttl", None, ttl=...) is unbounded: capacity = the trace's distinct blocks,
    # no evictions. ttl 1 s: [a]@0 [b]@800 [c]@1500 (a expired and purged) [b]@1500 hit.
    # The final cache is the blocks unexpired at the last request's time: {b, c}.
    trace = make_trace([(["a"], 0), (["b"], 800), (["c"], 1500), (["b"], 1500)])
    r = kvreplay.replay(trace, "ttl", None, 1, engine=engine, ttl=1)
    assert r.cache_capacity_blocks == trace.num_blocks == 3
    assert r.hit_tokens.tolist() == [0, 0, 0, 1]
    assert r.counters == {"admissions": 3, "evictions": 0, "expirations": 1}
    assert r.final_cache_blocks == 2


def test_capacity_beyond_unique_blocks(engine):
    # Capacity 10**9 with 3 distinct blocks at one instant: nothing is evicted or expires.
    r = run([([x], 0) for x in "abcabc"], 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1]
    assert r.final_cache_blocks == 3


@pytest.mark.parametrize("bad", [0, -1.5, float("nan"), float("inf"), "5"])
def test_ttl_must_be_positive(bad, engine):
    with pytest.raises(ConfigError, match="ttl"):
        run([(["a"], 0)], None, engine, ttl=bad)


def test_the_residency_probe_changes_nothing():
    # ttl 1 s. After [a]@0 the clock moves to the next request's time, 2000: a is expired,
    # but only the access phase removes it.
    trace = make_trace([(["a"], 0), (["b"], 2000)])
    ref = ttl_module.TTL(10, trace, ttl=1)
    ref.access_request(0, [0], 0, 1, 1)
    assert not ref.resident(0) and not ref.resident(0)
    assert list(ref.last) == [0] and ref.counters()["expirations"] == 0
    ref.access_request(1, [1], 0, 1, 1)
    assert list(ref.last) == [1] and ref.counters()["expirations"] == 1

    state = ttl_module.make_state(10, trace, ttl=1)
    state.cached[0], state.meta[ttl_module.SIZE], state.clock[ttl_module.NOW] = 1, 1, 2000.0
    before = [a.copy() for a in state]
    assert not driver.resident(ttl_module.POLICY, state, 0)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(state, before))


# ---- reference == compiled == brute force -------------------------------------------------------

def brute_force(trace, capacity, ttl):
    """Hits from the definition, without the expired-blocks-are-a-prefix argument: a block is
    resident iff it was accessed and now - last_time <= ttl; a full cache evicts the unexpired
    block accessed longest ago (ties in time broken by access order)."""
    ttl_ms = ttl * 1000.0
    last_time, last_tick, hits = {}, {}, []
    now, tick = -math.inf, 0
    for i in range(len(trace)):
        now = max(now, float(trace.timestamp[i]))
        alive = lambda b: b in last_time and now - last_time[b] <= ttl_ms  # noqa: E731
        blocks = trace.request_blocks(i).tolist()
        k = 0
        while k < len(blocks) and alive(blocks[k]):
            k += 1
        hits.append(k)
        for b in blocks:
            if not alive(b):
                unexpired = [v for v in last_time if alive(v)]
                if len(unexpired) >= capacity:
                    victim = min(unexpired, key=last_tick.get)
                    del last_time[victim], last_tick[victim]
            last_time[b], last_tick[b] = now, tick
            tick += 1
    final = sum(1 for v in last_time if now - last_time[v] <= ttl_ms)
    return hits, final


def assert_engines_agree(trace, capacity, block_size, ttl, oracle=True):
    ref, _ = engines_agree(trace, "ttl", capacity, block_size, ttl=ttl)
    c = ref.counters
    assert ref.final_cache_blocks == c["admissions"] - c["evictions"] - c["expirations"]
    if capacity is None:
        assert c["evictions"] == 0
    if oracle:
        hits, final = brute_force(trace, ref.cache_capacity_blocks, ttl)
        assert ref.hit_blocks.tolist() == hits
        assert ref.final_cache_blocks == final
    return ref


@st.composite
def timed_requests(draw):
    """The shared random requests, stamped with times that often land exactly on a ttl
    boundary and sometimes go backwards (an unsorted file)."""
    reqs, block_size = draw(requests())
    steps = draw(st.lists(st.sampled_from([0, 0, 250, 500, 999, 1000, 1001, 2000, 2500, -700]),
                          min_size=len(reqs), max_size=len(reqs)))
    t = draw(st.integers(0, 1000))
    timed = []
    for (ids, length), step in zip(reqs, steps):
        t += step
        timed.append((ids, length, float(t)))
    return timed, block_size


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_requests(), st.one_of(st.none(), st.integers(1, 30), st.just(4096)),
       st.sampled_from([0.25, 0.5, 1.0, 2.0, 1e-3, 300.0, 1e9]))
def test_engines_agree_on_random_traces(trace_and_size, capacity, ttl):
    timed, block_size = trace_and_size
    trace = kvreplay.Trace.from_requests(timed)
    ref = assert_engines_agree(trace, capacity, block_size, ttl)
    if ttl == 1e9 and capacity is not None:  # nothing expires within these traces: exactly LRU
        lru = kvreplay.replay(trace, "lru", capacity, block_size, engine="reference")
        assert ref.hit_blocks.tolist() == lru.hit_blocks.tolist()


def zipf_trace(seed, num_requests=3000, num_blocks=300):
    # Thousands of requests over a few hundred blocks with Zipf-like reuse, ~100 ms apart on
    # average, one request in ten stamped up to 2 s in the past.
    rng = np.random.default_rng(seed)
    popular = (rng.zipf(1.3, size=6000) % num_blocks).tolist()
    reqs, t = [], 0.0
    for i in range(num_requests):
        k = int(rng.integers(1, 6))
        ids = [popular[(i * 3 + j) % len(popular)] for j in range(k)]
        t += float(np.round(rng.exponential(100.0)))
        stamp = t - float(rng.integers(0, 2000)) if rng.random() < 0.1 else t
        reqs.append((ids, k * 16 - int(rng.integers(0, 16)), stamp))
    return kvreplay.Trace.from_requests(reqs)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [None, 20, 30])
def test_engines_agree_on_long_zipf_traces(seed, capacity):
    ref = assert_engines_agree(zipf_trace(seed), capacity, 16, ttl=2.0)
    assert ref.counters["expirations"] > 100
    if capacity is not None:
        assert ref.counters["evictions"] > 100
    assert ref.total_hit_tokens > 0


@pytest.mark.parametrize("capacity,ttl", [(None, 300.0), (4096, 60.0)])
def test_engines_agree_on_the_real_trace(capacity, ttl):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    ref = assert_engines_agree(trace, capacity, 512, ttl, oracle=False)  # brute force is quadratic
    assert ref.counters["expirations"] > 10_000
    if capacity is not None:
        assert ref.counters["evictions"] > 10_000


# ---- holds (pin/unpin, policies/base.py): running requests, engine/lifecycle.py ----------------

def test_a_held_block_neither_expires_nor_is_evicted_and_all_held_is_refused(engine):
    # ttl 1 s, capacity 3; "k" starts request k, "-k" finishes it. Each start runs at its
    # request's time; the clock then moves to the next request's time.
    # 0 [a]@0 (runs): {a@0}, held.   1 [b]@100 (finishes): {a@0 b@100}.
    # 2 [c]@200 (runs): {a@0 b@100 c@200}.
    # 3 [d]@300 (finishes): full; the least recent a is held: skipped in place; b evicted.
    #   {a@0 c@200 d@300}. Then 2 finishes.
    # 4 [e]@1250 (runs): expiry: a@0 is past its time but held: kept; c@200 expires (1050 ms);
    #   d@300 is not due (950 ms). {a@0 d@300 e@1250}.
    # 5 [x y]@1300: expiry: a held; d at exactly 1000 ms is not due. x: a held, skipped; d
    #   evicted: {a@0 e@1250 x@1300}, x held. y: a, e, x all held -> refused, holding x.
    #   The clock moves to 1400: a (1400 ms old) is still resident, as it is held.
    # 0 finishes. 6 [a]@1400: a is no longer held and 1400 ms old: a miss; expiry drops it; then
    #   re-admitted (room: {e@1250 x@1300}). {e x a@1400}.
    # admissions a, b, c, d, e, x, a = 7; evictions b, d = 2; expirations c, a = 2.
    trace = make_trace([(["a"], 0), (["b"], 100), (["c"], 200), (["d"], 300), (["e"], 1250), (["x", "y"], 1300), (["a"], 1400)])
    events = [0, 1, -2, 2, 3, -4, -3, 4, 5, -1, 6]
    upto_5 = events.index(5) + 1
    out = replay_lifecycle(trace, "ttl", 3, events[:upto_5], 1, engine=engine, ttl=1)
    assert {b for b, r in zip(trace.original_ids, out.resident) if r} == {"a", "e", "x"}
    assert out.counters == {"admissions": 6, "evictions": 2, "expirations": 1}
    out = replay_lifecycle(trace, "ttl", 3, events, 1, engine=engine, ttl=1)
    assert out.hit_blocks.tolist() == [0] * 7
    assert out.held_blocks.tolist() == [1] * 7
    assert out.refused.tolist() == [False] * 5 + [True, False]
    assert {b for b, r in zip(trace.original_ids, out.resident) if r} == {"e", "x", "a"}
    assert out.counters == {"admissions": 7, "evictions": 2, "expirations": 2}
    assert (out.held_at_end, out.refusals) == (3, 1)  # e (request 4), x (5), a (6)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), timed_requests(), st.integers(1, 12), st.sampled_from([0.25, 1.0, 2.0, 1e-3]))
def test_overlapping_timed_requests(data, trace_and_size, capacity, ttl):
    # The registry-wide lifecycle tests run untimed traces, where nothing expires: here blocks
    # expire while others are held. Both engines agree; after every event a held block is
    # resident (never expired nor evicted), and a start is refused only when all are held.
    timed, block_size = trace_and_size
    trace = kvreplay.Trace.from_requests(timed)
    events = data.draw(overlapping_events(len(timed)))

    def check(k, cache):
        assert cache.size() <= capacity
        assert set(cache.pins) <= set(cache.resident_blocks())
        if events[k] >= 0 and cache.refusals != seen[0]:
            assert len(cache.pins) >= len(cache.last)  # every listed block held
        seen[0] = cache.refusals

    seen = [0]
    lifecycles_agree(trace, "ttl", capacity, events, block_size, check=check, ttl=ttl)
