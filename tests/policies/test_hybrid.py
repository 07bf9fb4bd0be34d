"""vLLM's hybrid manager (hybrid/coordinator.py) by hand: a hit is the longest prefix every layer
group can serve; sliding-window and Mamba groups cache sparsely under vLLM's default retention.
tests/real_engines/test_vllm_hybrid.py checks the same code against vLLM 0.33.0's own."""

from __future__ import annotations

import pytest

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.hybrid.coordinator import Group, HybridPool

SWA = [Group("sliding_window", window=9), Group("full")]  # block size 4: need = ceil(8 / 4) = 2 blocks


def test_a_window_needs_its_last_blocks_and_retention_0_keeps_only_those():
    pool = HybridPool(100, SWA, 4)
    # A: 16 tokens, 4 full blocks; full attention caches all four, the window (retention 0) only the
    # 2 blocks ending at floor((16 - 1) / 4) = 3: b and c
    assert pool.serve(["a", "b", "c", "d"], 16) == 0
    assert {h for (g, h) in pool.hashed if g == 0} == {"b", "c"}
    assert {h for (g, h) in pool.hashed if g == 1} == {"a", "b", "c", "d"}
    # B (20 tokens, cap 4 blocks): full attention matches a..d; the window scans from block 3: d is
    # not cached there, c and b are, 2 blocks: the hit ends after c, at 3 blocks. The junction (4)
    # is where full attention matched to
    assert pool.find_hit(["a", "b", "c", "d", "e"], 20) == (3, 4)
    assert pool.serve(["a", "b", "c", "d", "e"], 20) == 3
    # B cached the window's blocks ending at its own end (4) and at the junction (4): c and d, so the
    # same prompt again hits all 4 blocks
    assert pool.serve(["a", "b", "c", "d", "e"], 20) == 4


def test_dense_retention_caches_every_window_block():
    pool = HybridPool(100, SWA, 4, retention=None)
    pool.serve(["a", "b", "c", "d"], 16)
    assert pool.serve(["a", "b", "c", "d", "e"], 20) == 4


def test_a_hit_shorter_than_the_window_must_start_at_block_0():
    pool = HybridPool(100, [Group("sliding_window", window=40), Group("full")], 4, retention=None)
    pool.serve(["a", "b", "c"], 12)  # need = ceil(39 / 4) = 10 blocks, more than any prompt here
    # the run of window blocks from block 0 (a, b, c) counts; the cap is floor(15 / 4) = 3
    assert pool.serve(["a", "b", "c", "x"], 16) == 3


def test_mamba_hits_the_rightmost_state_alone():
    pool = HybridPool(100, [Group("full"), Group("mamba")], 4)
    # one prompt of 5 blocks (20 tokens): chunks end at floor(19 / 4) x 4 = 16 and 20; the state at 16
    # (block 3, the mask's (19 // 4) - 1) is the only one cached
    pool.serve(["a", "b", "c", "d", "e"], 20)
    assert {h for (g, h) in pool.hashed if g == 1} == {"d"}
    # a sibling sharing 3 blocks: full attention matches a, b, c, but no state ends there: 0
    assert pool.serve(["a", "b", "c", "y", "z"], 20) == 0
    # that miss's junction (3 blocks) was checkpointed, so the next sibling hits 3
    assert pool.serve(["a", "b", "c", "w", "v"], 20) == 3


def test_a_request_that_does_not_fit_the_pool_is_counted():
    # 3 block ids: A's 2 full + 2 window blocks do not fit at once; A is truncated and counted
    pool = HybridPool(3, SWA, 4)
    assert pool.serve(["a", "b"], 8) == 0
    assert pool.stats["oversize_requests"] == 1


def test_replay_runs_hybrid_semantics_for_vllm_only():
    trace = kvreplay.Trace.from_requests([(["a", "b", "c", "d"], 16), (["a", "b", "c", "d", "e"], 20)])
    r = kvreplay.replay(trace, "vllm", 100, 4, kv_groups=SWA)
    assert r.hit_tokens.tolist() == [0, 12] and r.kv_semantics["semantics"] == "hybrid"
    assert r.to_dict(per_request=False)["kv_semantics"]["retention"] == 0
    assert kvreplay.replay(trace, "vllm", 100, 4).hit_tokens.tolist() == [0, 16]  # full semantics
    with pytest.raises(ConfigError, match="policy vllm"):
        kvreplay.replay(trace, "lru", 100, 4, kv_groups=SWA)
