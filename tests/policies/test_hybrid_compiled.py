"""The compiled hybrid replay (hybrid/coordinator.c, replay_hybrid_compiled) against the reference
(hybrid/coordinator.py, replay_hybrid): per-request hit blocks, the counters and the resident count
equal, on random chained traces over every group layout vLLM's hybrid manager mixes, both
retention modes, pools small enough to evict and to refuse, and small prefill chunks; then the
Mooncake conversation trace with gpt-oss-120b's layout. tests/real_engines/test_vllm_hybrid.py
checks the same replay (kvreplay.replay's default engine) against vLLM 0.33.0 itself."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.hybrid.coordinator import Group, replay_hybrid, replay_hybrid_compiled
from conftest import MOONCAKE, shared_path
from strategies import chained_requests


@st.composite
def layouts(draw, block_size):
    """One of vLLM's mixes, spec groups in a random order (the order is vLLM's group order)."""
    bs = block_size
    window = lambda: draw(st.integers(1, 6 * bs))  # noqa: E731
    chunk = lambda: draw(st.one_of(st.integers(1, 6).map(lambda k: k * bs), st.integers(1, 6 * bs)))  # noqa: E731
    shape = draw(st.sampled_from(["sliding", "k_sliding", "chunked", "mamba", "sliding_mamba", "two_full_kinds"]))
    if shape == "sliding":
        groups = [Group("full"), Group("sliding_window", window=window())]
    elif shape == "k_sliding":
        groups = [Group("full", draw(st.integers(1, 2))),
                  Group("sliding_window", draw(st.integers(2, 4)), window=window())]
    elif shape == "chunked":
        groups = [Group("full"), Group("chunked_local", draw(st.integers(1, 2)), chunk=chunk())]
    elif shape == "mamba":
        groups = [Group("full"), Group("mamba", draw(st.integers(1, 3)))]
    elif shape == "sliding_mamba":
        groups = [Group("full"), Group("sliding_window", window=window()), Group("mamba", draw(st.integers(1, 2)))]
    else:  # more than two spec groups without mamba: the passes repeat until the bound settles
        groups = [Group("full"), Group("sliding_window", window=window()), Group("sliding_window", window=window()),
                  Group("chunked_local", chunk=chunk())]
    return draw(st.permutations(groups))


def assert_equal(trace, capacity, groups, block_size, retention, chunk_tokens):
    hits, pool = replay_hybrid(trace, capacity, groups, block_size, retention=retention, chunk_tokens=chunk_tokens)
    c_hits, counters, resident = replay_hybrid_compiled(trace, capacity, groups, block_size, retention=retention,
                                                        chunk_tokens=chunk_tokens)
    assert c_hits.tolist() == hits.tolist()
    assert counters == pool.stats
    assert resident == pool.resident_count()
    return pool


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_compiled_equals_reference_on_random_traces(data):
    reqs, bs = data.draw(chained_requests())
    groups = data.draw(layouts(bs))
    retention = data.draw(st.sampled_from([0, None]))
    capacity = data.draw(st.one_of(st.integers(1, 24), st.integers(25, 200)))
    chunk_tokens = data.draw(st.one_of(st.integers(1, 3 * bs), st.sampled_from([8192])))
    assert_equal(kvreplay.Trace.from_requests(reqs), capacity, groups, bs, retention, chunk_tokens)


def test_small_pools_evict_and_refuse_alike():
    # a multi-turn shape at a pool of a few block ids: evictions, duplicates and oversize requests
    # all happen, and the two engines count them alike
    turns, conv = [], []
    for k in range(60):
        conv = (conv if k % 7 else []) + [1000 * k + j for j in range(3)]
        turns.append((list(conv), len(conv) * 4 - k % 4))
    trace = kvreplay.Trace.from_requests(turns)
    for groups in ([Group("sliding_window", window=9), Group("full")], [Group("mamba", 3), Group("full")]):
        for retention in (0, None):
            for capacity in (6, 20, 60):
                pool = assert_equal(trace, capacity, groups, 4, retention, 8)
                if capacity == 6:
                    assert pool.stats["oversize_requests"] > 0 and pool.stats["evictions"] > 0


def test_replay_uses_the_compiled_engine_by_default():
    trace = kvreplay.Trace.from_requests([(["a", "b", "c", "d"], 16), (["a", "b", "c", "d", "e"], 20)])
    groups = [Group("sliding_window", window=9), Group("full")]
    comp = kvreplay.replay(trace, "vllm", 100, 4, kv_groups=groups)
    ref = kvreplay.replay(trace, "vllm", 100, 4, kv_groups=groups, engine="reference")
    assert comp.engine == "compiled" and ref.engine == "reference"
    assert comp.hit_tokens.tolist() == ref.hit_tokens.tolist() == [0, 12]
    assert comp.counters == ref.counters and comp.final_cache_blocks == ref.final_cache_blocks


def test_bad_input_is_refused():
    trace = kvreplay.Trace.from_requests([(["a", "a"], 8), (["a", "a"], 12)])
    # a hash id repeated within a request's hit touches one block twice (the reference fails too)
    with pytest.raises(KeyError):
        replay_hybrid(trace, 10, [Group("full")], 4)
    with pytest.raises(ConfigError, match="request 1 repeats a hash id"):
        replay_hybrid_compiled(trace, 10, [Group("full")], 4)
    ok = kvreplay.Trace.from_requests([(["a"], 4)])
    for groups, kw in (([], {}), ([Group("sliding_window")], {}), ([Group("chunked_local", chunk=0)], {}),
                       ([Group("attention")], {}), ([Group("full", 0)], {}), ([Group("full")], {"retention": -1}),
                       ([Group("full")], {"chunk_tokens": 0})):
        with pytest.raises(ConfigError):
            replay_hybrid_compiled(ok, 10, groups, 4, **kw)
    # a retention interval > 0 keeps a state per segment too, which neither engine models: refused,
    # not replayed as the default 0
    with pytest.raises(ConfigError, match="prefix_cache_retention_interval 64 is not modelled"):
        replay_hybrid_compiled(ok, 10, [Group("full"), Group("mamba")], 4, retention=64)
    with pytest.raises(ConfigError, match="prefix_cache_retention_interval 64 is not modelled"):
        kvreplay.replay(ok, "vllm", 10, 4, kv_groups=[Group("full"), Group("mamba")], kv_retention=64)


def test_mooncake_conversation_with_gpt_oss_layout():
    from kvreplay.catalog.kv_groups import layout

    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    groups = list(layout("gpt-oss-120b", 512).groups)
    pool = assert_equal(trace, 2275, groups, 512, 0, 8192)
    assert pool.stats["evictions"] > 0
