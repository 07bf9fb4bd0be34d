"""The compiled SGLang hybrid cache (hybrid/unified_radix.c, replay_radix_hybrid_compiled) against
the reference (hybrid/unified_radix.py, replay_radix_hybrid): per-request hit pages, the
counters, the tree's pages, its live SWA pages and its Mamba states equal, on random traces that
share prefixes, over SWA, Mamba (both strategies) and SWA + Mamba trees, pools small enough to
evict in every component and to refuse, and small prefill chunks; then the Mooncake conversation
trace with gpt-oss-120b's and Qwen3-Next's layouts. tests/real_engines/test_sglang_hybrid.py checks
the reference against SGLang 0.5.23's own UnifiedRadixCache."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.hybrid.coordinator import Group
from kvreplay.hybrid.unified_radix import replay_radix_hybrid, replay_radix_hybrid_compiled
from conftest import MOONCAKE, shared_path
from strategies import chained_requests


def layout(data, page):
    """An SWA, Mamba or SWA + Mamba tree (a window up to 6 pages), a Mamba strategy it allows."""
    shape = data.draw(st.sampled_from(["swa", "chunked", "mamba", "swa_mamba"]))
    window = data.draw(st.integers(1, 6 * page))
    groups = {"swa": [Group("full"), Group("sliding_window", window=window)],
              "chunked": [Group("full"), Group("chunked_local", chunk=window)],
              "mamba": [Group("full"), Group("mamba", data.draw(st.integers(1, 3)))],
              "swa_mamba": [Group("full"), Group("sliding_window", window=window), Group("mamba")]}[shape]
    strategy = "extra_buffer"
    if "mamba" in shape and page == 1:
        strategy = data.draw(st.sampled_from(["extra_buffer", "no_buffer"]))
    return groups, strategy


def assert_equal(trace, groups, page, **kwargs):
    hits, cache = replay_radix_hybrid(trace, groups, page, **kwargs)
    c_hits, stats, pages, swa_pages, states = replay_radix_hybrid_compiled(trace, groups, page, **kwargs)
    assert c_hits.tolist() == hits.tolist()
    assert stats == cache.stats
    assert (pages, swa_pages, states) == (cache.resident_count(), cache.swa_resident_count(), cache.mamba_state_count())
    return cache


def pools(data, page, longest, strategy):
    """Pools from small (evicting in every component, refusing) to roomy, and a prefill chunk."""
    least = 5 if strategy == "extra_buffer" else 3
    return dict(full_pages=data.draw(st.integers(max(1, longest // 2), 3 * longest + 4)),
                swa_pages=data.draw(st.one_of(st.none(), st.integers(0, 2 * longest + 2))),
                mamba_slots=data.draw(st.one_of(st.none(), st.integers(least, least + 6))),
                chunk_tokens=data.draw(st.one_of(st.none(), st.integers(1, 8).map(lambda k: k * page))),
                mamba_strategy=strategy)


def assert_equal_or_both_stop(trace, groups, page, **kwargs):
    try:
        assert_equal(trace, groups, page, **kwargs)
    except RuntimeError as e:  # both engines stop where SGLang asserts (no state slot can be freed)
        assert "no Mamba state slot" in str(e)
        with pytest.raises(RuntimeError, match="no Mamba state slot"):
            replay_radix_hybrid_compiled(trace, groups, page, **kwargs)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_compiled_equals_reference_on_random_traces(data):
    reqs, page = data.draw(chained_requests(max_requests=50, max_fresh=10))
    trace = kvreplay.Trace.from_requests([(ids, length) for ids, length in reqs], block_size=page)
    groups, strategy = layout(data, page)
    longest = max(1, max(-(-length // page) for _, length in reqs))
    assert_equal_or_both_stop(trace, groups, page, **pools(data, page, longest, strategy))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_compiled_equals_reference_with_decode(data):
    # requests that decode (up to 600 outputs: past SGLang's 128-token SWA eviction interval and its
    # 256-token decode-time Mamba checkpoints), so their outputs are cached too
    reqs, page = data.draw(chained_requests(max_requests=20, max_fresh=10))
    trace = kvreplay.Trace.from_requests([(ids, length) for ids, length in reqs], block_size=page)
    groups, strategy = layout(data, page)
    outputs = data.draw(st.lists(st.one_of(st.integers(1, 4), st.integers(100, 600)), min_size=len(reqs),
                                 max_size=len(reqs)))
    longest = max(1, max(-(-(length + o) // page) for (_, length), o in zip(reqs, outputs)))
    assert_equal_or_both_stop(trace, groups, page, **pools(data, page, longest, strategy), outputs=outputs)


def test_decode_caches_outputs_and_frees_the_window():
    # one request of 64 prompt tokens and 400 outputs at page 16, window 32, by hand:
    # - after its prefill it goes on decoding, so its 4 pages are inserted (cache_unfinished_req),
    #   first freeing its SWA left of the window: floorP(63 - 32) = 16, so page 0 is a tombstone and
    #   pages 1-3 are live; the tree protects 64 tokens;
    # - decode frees its SWA out of window when committed - 32 >= cursor + 128 (from the second decode
    #   step): at 176 (cursor max(16, 64) -> 144), 304 (-> 272) and 432 (-> 400);
    # - it finishes with 463 tokens: 28 full pages, of which 25-27 are live (past the cursor) and
    #   4-24 tombstones. The tree: 28 full pages, 3 + 3 live SWA pages.
    trace = kvreplay.Trace.from_requests([([0, 1, 2, 3], 64)], block_size=16)
    groups = [Group("full"), Group("sliding_window", window=32)]
    cache = assert_equal(trace, groups, 16, full_pages=100, outputs=[400])
    assert (cache.resident_count(), cache.swa_resident_count()) == (28, 6)
    assert (cache.pools.full_free, cache.pools.swa_free) == (100 - 28, 80 - 6)  # (SWA pool: 0.8 of the full one)


def test_small_pools_evict_in_every_component_and_agree():
    # conversations over a shared system prompt in 20 full pages, 12 SWA pages and 8 state slots:
    # full leaves deleted, SWA tombstones, state evictions and node splits all happen
    rng = random.Random(3)
    fresh = iter(range(10**6))
    convs, reqs = [], []
    for _ in range(60):
        if convs and rng.random() < 0.6:
            c = rng.choice(convs)
            c.extend(next(fresh) for _ in range(rng.randrange(1, 5)))
        else:
            c = [1000, 1001, 1002] + [next(fresh) for _ in range(rng.randrange(2, 6))]
            convs.append(c)
        del c[16:]
        reqs.append((list(c), 16 * len(c) - rng.randrange(16)))
    trace = kvreplay.Trace.from_requests(reqs, block_size=16)
    groups = [Group("full"), Group("sliding_window", window=32), Group("mamba")]
    cache = assert_equal(trace, groups, 16, full_pages=20, swa_pages=12, mamba_slots=8, chunk_tokens=64)
    for counter in ("admissions", "evictions", "swa_evictions", "mamba_evictions", "evicted_nodes", "node_splits"):
        assert cache.stats[counter] > 0, counter


def test_refusals_agree():
    # a prompt larger than the whole full pool is refused by both, and counted
    trace = kvreplay.Trace.from_requests([([0, 1, 2], 48), ([0, 1, 2, 3, 4, 5, 6], 112), ([0, 1], 30)], block_size=16)
    cache = assert_equal(trace, [Group("full"), Group("sliding_window", window=16)], 16, full_pages=5)
    assert cache.stats["rejected"] == 1


@pytest.mark.parametrize("model, groups", [
    ("gpt-oss-120b", [Group("full", 18), Group("sliding_window", 18, window=128)]),
    ("Qwen3-Next-80B-A3B", [Group("full", 12), Group("mamba", 36)]),
])
@pytest.mark.parametrize("full_pages", [300, 2_000])
def test_the_conversation_trace_agrees(model, groups, full_pages):
    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    trace = kvreplay.load_trace(path)
    cache = assert_equal(trace, groups, 512, full_pages=full_pages)
    assert cache.stats["admissions"] > 0 and cache.stats["evictions"] > 0
