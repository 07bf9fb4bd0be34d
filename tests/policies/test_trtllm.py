"""trtllm: TensorRT-LLM's block reuse (policies/trtllm.py and trtllm.c).

Scenarios from TensorRT-LLM's own unit tests, cpp/tests/unit_tests/batch_manager/
kvCacheManagerTest.cpp at 000a01de (T below; "pos" is its getContextCurrentPosition(), the
reused prompt tokens) and evictionPolicyTest.cpp at 2a9abd95 (EPT), as a block-level trace
expresses them: a block of 4 tokens is one id; the expected numbers are the tests' own, where
a scenario keeps them, else hand-worked and said so. The wheel's block manager needs CUDA, so the
C++ tests' numbers stand in for running it.

The compiled engine (trtllm.c) is held equal to the reference here beyond what test_contract,
test_lifecycle and test_eviction_log check for every policy (defaults only): with a host pool,
leaf-only eviction, another offload threshold, retention priorities with durations and
timestamps, and with requests that store their prompt while they run (store events).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.errors import ConfigError
from kvreplay.trace.retention import Retention
from strategies import engines_agree, lifecycles, lifecycles_agree, requests

BS = 4


def trace_of(requests, ranges=None):
    t = kvreplay.Trace.from_requests(requests)
    return t if ranges is None else replace(t, retention=Retention.from_lists(ranges))


def test_per_request_stats_test():
    # T:1504-1561 KVCacheManagerPerRequestStatsTest: 16 blocks, tokens 0..8 (9 tokens, 3 blocks).
    # r0 reuses 0 and misses 3 (T:1542-1545); r1, the same tokens, reuses 9/4 = 2 blocks and
    # misses 1 (T:1555-1560): the last prompt token's block is never reused.
    r = kvreplay.replay(trace_of([(["b0", "b1", "b2"], 9), (["b0", "b1", "b2"], 9)]), "trtllm", 16, BS)
    assert r.hit_tokens.tolist() == [0, 8]
    assert (r.counters["reused_blocks"], r.counters["missed_blocks"]) == (2, 3 + 1)


def test_block_priority_test():
    # T:1563-1662 BlockManagerBlockPriorityTest: 4 blocks. r0 = tokens 0..7 with ranges (0,4,90)
    # and (4,8,10), r1 = 8..15 at the default priority, both running, then released; r2 = 16..23
    # at priority 20. r2 evicts r0's priority-10 tail and r1's tail, so r3 (r1's tokens) reuses
    # pos 4 (T:1638), r4 (r0's) pos 4 (T:1651), r5 (r2's) pos 0 (T:1661).
    reqs = [(["a0", "a1"], 8), (["c0", "c1"], 8), (["e0", "e1"], 8), (["c0", "c1"], 8), (["a0", "a1"], 8),
            (["e0", "e1"], 8)]
    ranges = [[(0, 4, 90, None), (4, 8, 10, None)], [], [(0, None, 20, None)], [], [], []]
    events = [0, 1, -1, -2, 2, -3, 3, -4, 4, -5, 5, -6]
    r = replay_lifecycle(trace_of(reqs, ranges), "trtllm", 4, events, BS)
    assert [BS * k for k in r.hit_blocks.tolist()] == [0, 0, 0, 4, 4, 0]


@pytest.mark.parametrize("duration, expected", [(10.0, 8), (None, 4)])
def test_timed_eviction(duration, expected):
    # After T:1766-1833 KVCacheManagerTimedEvictionTest: 8 blocks. r0 (13 tokens: 3 full blocks
    # and the decode block the test's generated token takes) at priority 80 for 10 ms, r1 the same
    # at 50; 60 ms later r2 (3 blocks) must evict. With the duration, r0's blocks are back at 35
    # by then and go first, so r3 = r1's first 12 tokens reuses 8 (the test's pos 11 adds 3 tokens
    # by partial reuse of a non-full block, which a block-level trace cannot express); without
    # it, r1's priority-50 blocks go first and r3 keeps 4 (hand-worked).
    reqs = [(["a", "b", "c", "d"], 13, 0), (["e", "f", "g", "h"], 13, 1), (["x", "y", "z"], 12, 60),
            (["e", "f", "g"], 12, 61)]
    r = kvreplay.replay(trace_of(reqs, [[(0, None, 80, duration)], [(0, None, 50, None)], [], []]), "trtllm", 8, BS)
    assert r.hit_tokens.tolist() == [0, 0, 0, expected]
    assert r.counters["expired"] == (4 if duration else 0)


@pytest.mark.parametrize("host, priority, expected", [(2, None, 4), (0, None, 0), (2, 5, 0)])
def test_host_offload_and_onboard(host, priority, expected):
    # Hand-worked (EPT:139-167's rule: a victim of priority >= 30 may be offloaded). 2 GPU blocks.
    # r0 = [a] + 1 token; r1 = [b] + 1 evicts a: with 2 host blocks it is offloaded, and r2 = [a]
    # + 1 finds it there and onboards it (4 tokens); without a host pool, or at priority 5 < 30,
    # a is dropped and r2 reuses nothing.
    ranges = [[] if priority is None else [(0, None, priority, None)], [], []]
    reqs = [(["a"], 5), (["b"], 5), (["a"], 5)]
    r = kvreplay.replay(trace_of(reqs, ranges), "trtllm", 2, BS, host_blocks=host)
    assert r.hit_tokens.tolist() == [0, 0, expected]
    assert r.counters["onboarded"] == (1 if expected else 0)
    assert r.counters["offloaded"] == {(2, None): 2, (0, None): 0, (2, 5): 1}[(host, priority)]


@pytest.mark.parametrize("leaf_only, expected", [(1, 4), (0, 0)])
def test_leaf_only_eviction(leaf_only, expected):
    # Hand-worked: 3 blocks; r0 = [a, b] + 1 token with a at priority 10, b at 90. Leaf-only, a
    # waits while its child b is free, so r1 = [c] + 1 takes the spare block and b; a survives
    # and r2 = [a] + 1 reuses 4 tokens. Without it (after PR #7922) a, the lowest priority, goes
    # first, with its subtree (b), and r2 then evicts r1's c: r2 reuses nothing, 3 blocks dropped.
    ranges = [[(0, 4, 10, None), (4, None, 90, None)], [], []]
    r = kvreplay.replay(trace_of([(["a", "b"], 9), (["c"], 5), (["a"], 5)], ranges), "trtllm", 3, BS,
                        leaf_only=leaf_only)
    assert r.hit_tokens.tolist() == [0, 0, expected]
    assert r.counters["dropped"] == (1 if leaf_only else 3)


def test_lru_within_a_priority():
    # EPT:116-137 LRUTest's rule: within a priority, the block released first is reused first.
    # 4 blocks: r0 = [a] + 1 and r1 = [b] + 1 use all four, released in that order; r2 = [c, d] + 1
    # takes 3: r0's two, then r1's spare one; b stays: r3 = [b] + 1 reuses it, r4 = [a] + 1 does not.
    reqs = [(["a"], 5), (["b"], 5), (["c", "d"], 9), (["b"], 5), (["a"], 5)]
    r = kvreplay.replay(trace_of(reqs), "trtllm", 4, BS)
    assert r.hit_tokens.tolist() == [0, 0, 0, 4, 0]


def test_the_spec_rules_with_the_last_token_cap():
    # the prefix from block 0, never a set intersection; at most floor((L - 1) / B) blocks
    run = lambda reqs: kvreplay.replay(trace_of(reqs), "trtllm", 100, BS).hit_tokens.tolist()  # noqa: E731
    assert run([(["a", "b", "c"], 12), (["a", "x", "c"], 12)]) == [0, 4]
    assert run([(["a", "b", "c"], 12), (["y", "b", "c"], 12)]) == [0, 0]
    # [a, b] with 8 tokens stores a and a partial tail of 3 tokens: b is a whole block only for a
    # prompt of at least 9 tokens (TensorRT-LLM would reuse the 3 tokens too, by partial reuse)
    assert run([(["a", "b"], 8), (["a", "b"], 8), (["a", "b"], 9), (["a", "b"], 9)]) == [0, 4, 4, 8]


def test_refused_where_it_is_not_modelled():
    from kvreplay.serving.simulate import simulate

    t = trace_of([(["a"], 4)])
    with pytest.raises(ConfigError, match="served by its scheduler"):  # (--engine-style trtllm serves it)
        simulate(t, "trtllm", 10, BS)
    with pytest.raises(ConfigError, match="host_blocks"):
        kvreplay.replay(t, "trtllm", 10, BS, tiers="dram=100")
    with pytest.raises(ConfigError, match="leaf_only"):
        kvreplay.replay(t, "trtllm", 10, BS, leaf_only=2)
    assert kvreplay.replay(t, "trtllm", 10, BS).engine == "compiled"


# ---- the compiled engine against the reference ------------------------------------------------------

PARAMS = st.fixed_dictionaries({"host_blocks": st.sampled_from([0, 1, 3, 20]), "leaf_only": st.sampled_from([0, 1]),
                                "offload_min_priority": st.sampled_from([0, 30, 90])})
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def with_retention(draw, case):
    """`case`'s requests with timestamps (ms, sometimes going back) and retention ranges drawn
    per request: none, or one to three ranges of any priority, some with durations."""
    reqs, block_size = case
    stamps = draw(st.lists(st.integers(-2, 40), min_size=len(reqs), max_size=len(reqs)))
    ranges = []
    for ids, length in reqs:
        out, start = [], 0
        for _ in range(draw(st.integers(0, 3))):
            end = draw(st.one_of(st.none(), st.integers(start + 1, start + 3 * block_size + 1)))
            out.append((start, end, draw(st.integers(0, 100)), draw(st.one_of(st.none(), st.sampled_from([1.0, 5.0, 30.0])))))
            if end is None:
                break
            start = end + draw(st.integers(0, block_size))
        ranges.append(out)
    t = kvreplay.Trace.from_requests([(ids, length, float(sum(stamps[:i + 1])), 0) for i, (ids, length) in enumerate(reqs)])
    return replace(t, retention=Retention.from_lists(ranges)), block_size


@SETTINGS
@given(data=st.data(), capacity=st.one_of(st.integers(1, 12), st.sampled_from([20, 64])), params=PARAMS)
def test_engines_agree_with_every_parameter(data, capacity, params):
    trace, block_size = data.draw(with_retention(data.draw(requests(max_requests=40))))
    engines_agree(trace, "trtllm", capacity, block_size, **params)


@st.composite
def with_stores(draw, case):
    """`case`'s lifecycle with store events (n + i: request i stores its prompt) of running
    requests drawn between the others."""
    reqs, block_size, events = case
    n, running, out = len(reqs), set(), []
    for e in events:
        if running and draw(st.booleans()):
            out.append(n + draw(st.sampled_from(sorted(running))))
        out.append(e)
        (running.add if e >= 0 else running.discard)(e if e >= 0 else -e - 1)
    return reqs, block_size, out


@SETTINGS
@given(data=st.data(), capacity=st.one_of(st.integers(1, 12), st.sampled_from([20, 64])), params=PARAMS)
def test_engines_agree_on_requests_that_store_while_running(data, capacity, params):
    reqs, block_size, events = data.draw(with_stores(data.draw(lifecycles(max_requests=25))))
    trace = kvreplay.Trace.from_requests(reqs)
    lifecycles_agree(trace, "trtllm", capacity, events, block_size, **params)


def test_a_stored_prompt_is_reused_while_its_request_runs():
    # storeContextBlocks (KVM2:2046-2056): r0 (3 full blocks + 1 token) stores its full blocks
    # once its prompt is computed; r1, started while r0 still runs, reuses them (12 tokens);
    # without the store, only at r0's end, it reuses nothing
    reqs = [(["a", "b", "c", "d"], 13), (["a", "b", "c", "e"], 13)]
    with_store = replay_lifecycle(trace_of(reqs), "trtllm", 20, [0, 2, 1, -1, -2], BS)
    without = replay_lifecycle(trace_of(reqs), "trtllm", 20, [0, 1, -1, -2], BS)
    for engine in ("reference", "compiled"):
        assert replay_lifecycle(trace_of(reqs), "trtllm", 20, [0, 2, 1, -1, -2], BS, engine=engine).hit_tokens.tolist() == [0, 12]
    assert (with_store.hit_tokens.tolist(), without.hit_tokens.tolist()) == ([0, 12], [0, 0])


def test_own_blocks_leave_out_the_shared_ones():
    # what pausing a running request frees under TensorRT-LLM's MAX_UTILIZATION (its
    # schedulingRemoveSequence frees the blocks no other request holds; kernel/trtllm.c asks the
    # policy's own_blocks): r0 (13 tokens: 4 blocks) stores its 3 full blocks, r1 reuses them and
    # adds 1; each then owns 1 block, and r0 all 4 once r1 is gone
    import ctypes

    import numpy as np

    from kvreplay import native
    from kvreplay.engine import lifecycle
    from kvreplay.policies.registry import get_policy
    from kvreplay.policies.trtllm import make_state

    t = trace_of([(["a", "b", "c", "d"], 13), (["a", "b", "c", "e"], 13)])
    spec, state = get_policy("trtllm"), make_state(20, t)
    n = len(t)
    hit, held, refused = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    handles = np.zeros(int(t.offsets[-1]) + n + 8, dtype=np.int64)
    p, i = ctypes.c_void_p, ctypes.c_int64
    own_blocks = native.function("kv_own_blocks", i, p, p, i, i, p, i, i)

    def own(events, r):
        lifecycle.run_state(spec, state, t, BS, events, hit, held, refused, handles)
        table, record = spec.compiled(state)
        start, end = int(t.offsets[r]), int(t.offsets[r + 1])
        return own_blocks(table, native.ptr(record), start, end, native.ptr(handles), start + r, int(held[r]))

    assert own([0, n + 0, 1], 0) == 1 and hit.tolist() == [0, 3] and held.tolist() == [4, 4]
    assert own([], 1) == 1
    assert own([-2], 0) == 4


def test_a_host_block_being_onboarded_is_not_queued_as_a_free_leaf():
    # hypothesis found it: with leaf_only, onboarding matched host block 1 claims host block 2, its
    # child; that claim made block 1 (claimed, not yet held) look like a free leaf and queued it,
    # then the onboarding moved it to the GPU pool while queued (the reference raised KeyError,
    # the compiled engine's queues went stale). Held before it is onboarded, it is never queued.
    reqs = [([0, 0, 0, 0], 4), ([2, 0, 0, 0, 0], 5), ([0, 0, 0, 1], 4)]
    for engine in ("reference", "compiled"):
        r = replay_lifecycle(trace_of(reqs), "trtllm", 5, [0, -1, 1, -2, 2, -3], 1, engine=engine,
                             host_blocks=3, leaf_only=1, offload_min_priority=0)
        assert r.hit_tokens.tolist() == [0, 0, 3], engine
