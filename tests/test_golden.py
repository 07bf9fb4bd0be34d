"""End to end on the real Mooncake traces against totals from an independent implementation
of the spec (shared/golden/mooncake_totals.json). Skipped when ../shared is absent."""

from __future__ import annotations

from functools import lru_cache

import pytest

import kvreplay
from conftest import SHARED, golden_cases, shared_path

CASES = golden_cases()


@lru_cache(maxsize=None)
def load(rel: str):
    return kvreplay.load_trace(shared_path(SHARED / rel))


def case_id(c):
    params = ",".join(f"{k}={v}" for k, v in c["params"].items())
    return f"{c['trace'].rsplit('/', 1)[-1]}-{c['policy']}-{c['capacity_blocks']}" + (f"-{params}" if params else "")


@pytest.mark.skipif(not CASES, reason="../shared/golden not available")
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_golden_totals_compiled(case):
    trace = load(case["trace"])
    r = kvreplay.replay(trace, case["policy"], case["capacity_blocks"], 512, **case["params"])
    assert r.num_requests == case["num_requests"]
    assert r.total_prompt_tokens == case["total_prompt_tokens"]
    assert r.total_hit_tokens == case["total_hit_tokens"]
    assert r.final_cache_blocks == case["final_cache_blocks"]


SMALL = [c for c in CASES if c["capacity_blocks"] <= 4096][::3]


@pytest.mark.skipif(not SMALL, reason="../shared/golden not available")
@pytest.mark.parametrize("case", SMALL, ids=[case_id(c) for c in SMALL])
def test_golden_totals_reference(case):
    trace = load(case["trace"])
    r = kvreplay.replay(trace, case["policy"], case["capacity_blocks"], 512, engine="reference", **case["params"])
    assert (r.total_hit_tokens, r.final_cache_blocks) == (case["total_hit_tokens"], case["final_cache_blocks"])


@pytest.mark.parametrize("name", ["conversation_trace.jsonl", "synthetic_trace.jsonl"])
@pytest.mark.parametrize("policy,capacity", [("s3fifo", 1000), ("s3fifo", 45), ("lru", 2000), ("fifo", 3000)])
def test_engines_agree_per_request_on_real_traces(name, policy, capacity):
    trace = load(f"traces/mooncake/{name}")
    ref = kvreplay.replay(trace, policy, capacity, 512, engine="reference")
    comp = kvreplay.replay(trace, policy, capacity, 512)
    assert (ref.hit_tokens == comp.hit_tokens).all()
    assert ref.final_cache_blocks == comp.final_cache_blocks
    assert ref.counters == comp.counters


def test_s3fifo_and_lru_differ_materially_on_a_real_trace():
    trace = load("traces/mooncake/conversation_trace.jsonl")
    s3 = kvreplay.replay(trace, "s3fifo", 1000, 512)
    lru = kvreplay.replay(trace, "lru", 1000, 512)
    # 7,689,987 vs 6,567,267 hit tokens; 752 vs 1000 final blocks (S3FIFO does not fill up).
    assert s3.total_hit_tokens - lru.total_hit_tokens > 1_000_000
    assert s3.final_cache_blocks < lru.final_cache_blocks == 1000


def test_uncapped_hits_would_overcount_on_a_real_trace():
    # Without min(k*block_size, L) the total would be larger by the partial last blocks.
    trace = load("traces/mooncake/conversation_trace.jsonl")
    r = kvreplay.replay(trace, "s3fifo", 4096, 512)
    uncapped = int((r.hit_blocks * 512).sum())
    assert uncapped - r.total_hit_tokens > 1000
