"""LRU-tail: block LRU whose requests refresh their blocks last to first (both engines).

Notation in comments: L=[..] is the recency list, least recent first. block_size=1 and
input_length = len(hash_ids), so hit tokens = hit blocks.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.errors import ConfigError
from conftest import MOONCAKE, shared_path
from strategies import assert_matches_oracle, engines_agree, real_trace_engines_agree, requests, zipf_requests


def run(reqs, capacity, engine, policy="lru-tail"):
    trace = kvreplay.Trace.from_requests([(list(ids), len(ids)) for ids in reqs])
    return kvreplay.replay(trace, policy, capacity, 1, engine=engine)


def test_tail_first_keeps_the_prefix_where_lru_keeps_the_tail(engine):
    # capacity 3. [a b c]
    #   lru:      accessed a, b, c -> L=[a, b, c]    lru-tail: c, b, a -> L=[c, b, a]
    # [x]
    #   lru:      evicts a -> L=[b, c, x]            lru-tail: evicts c -> L=[b, a, x]
    # [a b]
    #   lru:      a is gone: 0 hits; a and b both miss (b, c evicted)
    #   lru-tail: a, b resident: 2 hits; b then a refreshed -> L=[x, b, a]
    reqs = ["abc", "x", "ab"]
    tail, lru = run(reqs, 3, engine), run(reqs, 3, engine, "lru")
    assert lru.hit_tokens.tolist() == [0, 0, 0]
    assert tail.hit_tokens.tolist() == [0, 0, 2]
    assert lru.counters == {"admissions": 6, "evictions": 3}
    assert tail.counters == {"admissions": 4, "evictions": 1}


def test_evicting_tails_first_strands_nothing(engine):
    # After [a b c] [x] at capacity 3: lru holds {b, c, x}: b's chain predecessor a is gone,
    # so b and c behind it can never be a prefix hit: 2 stranded blocks. lru-tail holds
    # {b, a, x}: every resident block's predecessor is resident.
    reqs = ["abc", "x"]
    assert run(reqs, 3, engine, "lru").stranded_blocks == 2
    assert run(reqs, 3, engine).stranded_blocks == 0


def test_a_request_longer_than_capacity_keeps_its_first_blocks(engine):
    # capacity 2. [a b c]: c, b admitted; a admitted evicts c -> L=[b, a]. [a b]: 2 hits.
    # lru keeps the last two blocks {b, c} and [a b] misses.
    reqs = ["abc", "ab"]
    assert run(reqs, 2, engine).hit_tokens.tolist() == [0, 2]
    assert run(reqs, 2, engine, "lru").hit_tokens.tolist() == [0, 0]


def test_capacity_one(engine):
    # [a b]: b then a: a stays. [a]: hit. (lru keeps b: miss.)
    assert run(["ab", "a"], 1, engine).hit_tokens.tolist() == [0, 1]
    assert run(["ab", "a"], 1, engine, "lru").hit_tokens.tolist() == [0, 0]


def test_a_request_may_evict_and_readmit_its_own_prefix(engine):
    # capacity 3. [a b]: L=[b, a]. [x]: L=[b, a, x].
    # [a b c]: prefix a, b -> 2 hits. Then, tail first: c misses and evicts b (least recent);
    # b misses (re-admitted) and evicts a; a misses and evicts x. L=[c, b, a].
    # lru: a, b refreshed, c evicts x: L=[a, b, c]. Same hits, same resident set; the
    # round trips show only in the counters (documented).
    reqs = ["ab", "x", "abc"]
    tail, lru = run(reqs, 3, engine), run(reqs, 3, engine, "lru")
    assert tail.hit_tokens.tolist() == lru.hit_tokens.tolist() == [0, 0, 2]
    assert tail.counters == {"admissions": 6, "evictions": 3}
    assert lru.counters == {"admissions": 4, "evictions": 1}
    assert tail.final_cache_blocks == lru.final_cache_blocks == 3


def test_capacity_beyond_unique_blocks(engine):
    r = run(["abc", "abd", "abc"], 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 2, 3]
    assert r.final_cache_blocks == 4
    assert r.counters == {"admissions": 4, "evictions": 0}


def test_no_parameters(engine):
    with pytest.raises(ConfigError, match="unknown parameter"):
        kvreplay.replay(kvreplay.Trace.from_requests([(["a"], 1)]), "lru-tail", 2, 1, engine=engine, bits=1)


# ---- an independent oracle: a Python list, least recent first, accessed in reverse -----------------

class ReverseLRU:
    def __init__(self, capacity):
        self.capacity, self.order = capacity, []
        self.self_evictions = 0  # evicted a block of the request being accessed

    def resident(self, x):
        return x in self.order

    def access_request(self, ids):
        for x in reversed(ids):
            if x in self.order:
                self.order.remove(x)
            elif len(self.order) >= self.capacity:
                if self.order.pop(0) in ids:
                    self.self_evictions += 1
            self.order.append(x)


def check_engines(reqs, block_size, capacity):
    ref, _ = engines_agree(kvreplay.Trace.from_requests(reqs), "lru-tail", capacity, block_size)
    oracle = ReverseLRU(capacity)
    assert_matches_oracle(ref, reqs, oracle, block_size, lambda o: len(o.order))
    return ref, oracle


CAPACITIES = st.one_of(st.integers(1, 30), st.sampled_from([45, 4096]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), CAPACITIES)
def test_engines_match_each_other_and_a_reversed_list_lru(trace_and_size, capacity):
    reqs, block_size = trace_and_size
    check_engines(reqs, block_size, capacity)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=60), st.integers(1, 10))
def test_single_block_requests_are_plain_lru(blocks, capacity):
    # With one block per request there is no order to reverse.
    trace = kvreplay.Trace.from_requests([([b], 1) for b in blocks])
    tail = kvreplay.replay(trace, "lru-tail", capacity, 1)
    lru = kvreplay.replay(trace, "lru", capacity, 1)
    assert tail.hit_tokens.tolist() == lru.hit_tokens.tolist()
    assert tail.counters == lru.counters


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [7, 50])
def test_long_zipf_trace(seed, capacity):
    reqs = zipf_requests(seed)
    r, oracle = check_engines(reqs, 16, capacity)
    assert r.counters["evictions"] > 900
    assert oracle.self_evictions > 0
    lru = kvreplay.replay(kvreplay.Trace.from_requests(reqs), "lru", capacity, 16)
    assert r.hit_tokens.tolist() != lru.hit_tokens.tolist()


def test_real_trace_strands_fewer_blocks_than_lru():
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    for capacity in (1000, 4096, 16384):
        tail = kvreplay.replay(trace, "lru-tail", capacity, 512)
        lru = kvreplay.replay(trace, "lru", capacity, 512)
        # Measured: lru strands 1 block at each of these capacities, lru-tail none.
        assert tail.stranded_blocks < lru.stranded_blocks, capacity


@pytest.mark.parametrize("capacity", [1000, 16384])
def test_real_trace_reference_equals_compiled(capacity):
    ref = real_trace_engines_agree("lru-tail", capacity)
    assert ref.counters["evictions"] > 0


# ---- holds (pin/unpin, policies/base.py): running requests, engine/lifecycle.py ----------------

def lifecycle(reqs, capacity, events, engine, policy="lru-tail"):
    trace = kvreplay.Trace.from_requests([(list(ids), len(ids)) for ids in reqs])
    out = replay_lifecycle(trace, policy, capacity, events, 1, engine=engine)
    return out, {b for b, r in zip(trace.original_ids, out.resident) if r}


def test_a_running_request_holds_tail_first_and_a_refusal_holds_its_tail(engine):
    # capacity 3; "k" starts request k, "-k" finishes it.
    # 0 [a b] (runs): b, then a: L=[b, a], both held.
    # 1 [c] (finishes): L=[b, a, c].
    # 2 [d] (finishes): head b held -> most recent, L=[a, c, b]; a held -> L=[c, b, a]; c evicted.
    #   L=[b, a, d].
    # 3 [x y]: tail first: y: b, a held (requeued: L=[d, b, a]), d evicted; L=[b, a, y], y held.
    #   x: b, a, y all held -> refused: request 3 holds its tail y (1 block), not its head x.
    # 3 and 0 finish. 4 [x y]: x is not resident, so nothing hits (y is stranded); y is refreshed
    #   and held, x evicts b: L=[a, y, x].
    # admissions a, b, c, d, y, x = 6, evictions c, d, b = 3; 4 still holds x, y.
    reqs = ["ab", "c", "d", "xy", "xy"]
    events = [0, 1, -2, 2, -3, 3, -4, -1, 4]
    out, resident = lifecycle(reqs, 3, events, engine)
    assert out.hit_blocks.tolist() == [0, 0, 0, 0, 0]
    assert out.held_blocks.tolist() == [2, 1, 1, 1, 2]
    assert out.refused.tolist() == [False, False, False, True, False]
    assert resident == {"a", "x", "y"}
    assert out.counters == {"admissions": 6, "evictions": 3}
    assert (out.held_at_end, out.refusals) == (2, 1)
    # lru (first to last) is refused at y instead, holding x: then request 4 hits x.
    # (lru: 0 L=[a, b]; 2 evicts c; 3: x evicts d, L=[a, b, x]; y refused; 4: x hits, y evicts a.)
    out, resident = lifecycle(reqs, 3, events, engine, "lru")
    assert out.hit_blocks.tolist() == [0, 0, 0, 0, 1]
    assert out.refused.tolist() == [False, False, False, True, False]
    assert resident == {"b", "x", "y"}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.integers(1, 30))
def test_one_request_at_a_time_is_the_sequential_replay(trace_and_size, capacity):
    # pin_request accesses in access_request's order, so with one request running at a time
    # nothing changes, as long as no request has more distinct blocks than the capacity.
    reqs, block_size = trace_and_size
    capacity = max([capacity] + [len(set(ids)) for ids, _ in reqs])
    trace = kvreplay.Trace.from_requests(reqs)
    events = [e for i in range(len(reqs)) for e in (i, -i - 1)]
    for engine in ("reference", "compiled"):
        seq = kvreplay.replay(trace, "lru-tail", capacity, block_size, engine=engine)
        life = replay_lifecycle(trace, "lru-tail", capacity, events, block_size, engine=engine)
        assert life.hit_blocks.tolist() == seq.hit_blocks.tolist()
        assert life.counters == seq.counters
        assert life.final_cache_blocks == seq.final_cache_blocks
        assert life.held_blocks.tolist() == [len(ids) for ids, _ in reqs]
        assert not life.refused.any() and life.held_at_end == 0
