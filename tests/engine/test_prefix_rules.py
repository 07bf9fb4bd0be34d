"""The spec's policy-independent rules, for every policy and both engines."""

from __future__ import annotations

import numpy as np
import pytest

import kvreplay
from kvreplay.errors import InvariantError

from kvreplay.policies.registry import POLICIES as REGISTRY

# The spec's rules hold for every policy; vllm and radix also cap hits at (L-1)//block_size
# blocks (the engines always recompute the last prompt token; trtllm and llamacpp too, whose hits are also
# one slot's), and deepseek hits whole 64-token
# prefix units only, ready a delay after they are persisted: tested in their own modules
# (tests/policies/test_deepseek.py states these rules for its units).
POLICIES = [name for name in REGISTRY if name not in ("vllm", "radix", "trtllm", "llamacpp", "deepseek")]
BIG = 1000  # capacity large enough that nothing is evicted in these tiny traces


def trace_of(requests, block_size=None):
    return kvreplay.Trace.from_requests(requests, block_size=block_size)


@pytest.mark.parametrize("policy", POLICIES)
def test_longest_prefix_not_set_intersection(policy, engine):
    # [a b c] then [a x c]: a and c are resident but x is not, so only a counts: k = 1.
    # |set ∩ resident| would give 2.
    r = kvreplay.replay(trace_of([(["a", "b", "c"], 12), (["a", "x", "c"], 12)]), policy, BIG, 4, engine=engine)
    assert r.hit_blocks.tolist() == [0, 1]
    assert r.hit_tokens.tolist() == [0, 4]


@pytest.mark.parametrize("policy", POLICIES)
def test_prefix_must_start_at_block_zero(policy, engine):
    # [a b c] then [y b c]: b and c are resident but the first block misses -> 0.
    r = kvreplay.replay(trace_of([(["a", "b", "c"], 12), (["y", "b", "c"], 12)]), policy, BIG, 4, engine=engine)
    assert r.hit_tokens.tolist() == [0, 0]


@pytest.mark.parametrize("policy", POLICIES)
def test_hit_tokens_capped_at_input_length(policy, engine):
    # block_size 4. [a b] with L=7: the second block is partial (3 tokens).
    # The resend hits both blocks: min(2*4, 7) = 7, not 8. A longer request [a b c] (L=10)
    # hits k=2 blocks: min(8, 10) = 8.
    reqs = [(["a", "b"], 7), (["a", "b"], 7), (["a", "b", "c"], 10)]
    r = kvreplay.replay(trace_of(reqs), policy, BIG, 4, engine=engine)
    assert r.hit_blocks.tolist() == [0, 2, 2]
    assert r.hit_tokens.tolist() == [0, 7, 8]
    assert r.total_hit_tokens == 15
    assert r.total_prompt_tokens == 24


@pytest.mark.parametrize("policy", POLICIES)
def test_every_block_is_accessed_even_after_a_miss(policy, engine):
    # [a] then [x a b]: the prefix stops at x, but x, a and b are all accessed, so
    # [x a b] resent afterwards hits all three blocks.
    reqs = [(["a"], 4), (["x", "a", "b"], 12), (["x", "a", "b"], 12)]
    r = kvreplay.replay(trace_of(reqs), policy, BIG, 4, engine=engine)
    assert r.hit_blocks.tolist() == [0, 0, 3]


@pytest.mark.parametrize("policy", POLICIES)
def test_request_with_new_first_block_never_hits(policy, engine):
    reqs = [(["a", "b"], 8), (["c", "a", "b"], 12), (["a", "b"], 8)]
    r = kvreplay.replay(trace_of(reqs), policy, BIG, 4, engine=engine)
    assert r.hit_tokens.tolist() == [0, 0, 8]


@pytest.mark.parametrize("policy", POLICIES)
def test_empty_requests_and_zero_length(policy, engine):
    # A request with no full block (hash_ids == []) and a zero-length prompt: both hit 0.
    reqs = [([], 3), (["a"], 4), (["a"], 0)]
    r = kvreplay.replay(trace_of(reqs), policy, BIG, 4, engine=engine)
    assert r.hit_tokens.tolist() == [0, 0, 0]
    assert r.hit_blocks.tolist() == [0, 0, 1]


@pytest.mark.parametrize("policy", POLICIES)
def test_totals_and_per_request_agree(policy, engine):
    rng = np.random.default_rng(3)
    reqs = [([int(x) for x in rng.integers(0, 30, size=rng.integers(0, 8))], int(rng.integers(0, 40))) for _ in range(200)]
    r = kvreplay.replay(trace_of(reqs), policy, 12, 4, engine=engine)
    d = r.to_dict()
    assert sum(p["hit_tokens"] for p in d["per_request"]) == d["total_hit_tokens"]
    assert sum(p["prompt_tokens"] for p in d["per_request"]) == d["total_prompt_tokens"]
    assert d["final_cache_blocks"] <= d["cache_capacity_blocks"]
    assert d["hit_rate"] == pytest.approx(d["total_hit_tokens"] / d["total_prompt_tokens"])


def test_block_size_defaults_to_trace_declared_then_512():
    t = trace_of([(["a"], 100), (["a"], 100)], block_size=64)
    assert kvreplay.replay(t, "lru", 10).hit_tokens.tolist() == [0, 64]
    t = trace_of([(["a"], 1000), (["a"], 1000)])
    assert kvreplay.replay(t, "lru", 10).hit_tokens.tolist() == [0, 512]
    assert kvreplay.replay(t, "lru", 10, 128).hit_tokens.tolist() == [0, 128]


def test_warmup_window_counts_only_the_rest():
    # 4 requests; warmup 0.5 -> the first floor(0.5*4) = 2 only warm the cache.
    reqs = [(["a"], 4), (["a"], 4), (["a", "b"], 8), (["a", "b"], 8)]
    r = kvreplay.replay(trace_of(reqs), "lru", 10, 4, warmup_fraction=0.5)
    assert r.hit_tokens.tolist() == [0, 4, 4, 8]
    assert (r.total_hit_tokens, r.total_prompt_tokens) == (12, 16)
    assert r.to_dict()["window"]["warmup_requests"] == 2
    assert "after warm-up" in r.window


def test_policy_names_are_case_insensitive():
    t = trace_of([(["a"], 4), (["a"], 4)])
    assert kvreplay.replay(t, "S3FIFO", 10, 4).policy == "s3fifo"
    assert kvreplay.replay(t, "Lru", 10, 4).policy == "lru"


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10", True])
def test_bad_capacity_is_rejected(bad):
    with pytest.raises(kvreplay.ConfigError):
        kvreplay.replay(trace_of([(["a"], 4)]), "lru", bad, 4)


def test_unknown_policy_and_parameter():
    t = trace_of([(["a"], 4)])
    with pytest.raises(kvreplay.ConfigError, match="unknown policy"):
        kvreplay.replay(t, "lfu2", 10, 4)
    with pytest.raises(kvreplay.ConfigError, match="unknown parameter"):
        kvreplay.replay(t, "lru", 10, 4, small_ratio=0.2)


def test_invariant_check_catches_a_broken_result():
    t = trace_of([(["a"], 4), (["a"], 4)])
    r = kvreplay.replay(t, "lru", 10, 4)
    r.hit_tokens[1] = 3  # not min(1*4, 4)
    with pytest.raises(InvariantError):
        r.check_invariants(t)
    r = kvreplay.replay(t, "lru", 10, 4)
    r.hit_blocks[0], r.hit_tokens[0] = 1, 4  # the first request's block was never seen
    with pytest.raises(InvariantError, match="never seen"):
        r.check_invariants(t)
    r = kvreplay.replay(t, "lru", 10, 4)
    r.final_cache_blocks = 11
    with pytest.raises(InvariantError, match="final_cache_blocks"):
        r.check_invariants(t)


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_stranded_blocks(policy, engine):
    # capacity 2, one request [a b c]: admitting c evicts a, leaving b and c. b's chain
    # predecessor a is gone, so neither b nor c (behind b) can be part of a prefix hit: 2 stranded blocks.
    r = kvreplay.replay(trace_of([(["a", "b", "c"], 12)]), policy, 2, 4, engine=engine)
    assert r.final_cache_blocks == 2
    assert r.stranded_blocks == 2
    assert r.to_dict()["stranded_blocks"] == 2
