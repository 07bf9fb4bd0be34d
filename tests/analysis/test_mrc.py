"""The one-pass LRU curve equals separate lru replays at every capacity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvreplay
from conftest import MOONCAKE, shared_path
from strategies import requests


def test_hand_worked_curve():
    # block_size 4; requests [a b] (L=7), [a b] (L=7), [c] (L=4), [a b] (L=8).
    # Request 2: d(a)=2, d(b)=1 -> running max 2, 2: capacity >= 2 hits 7 tokens (min(8, 7)).
    # Request 4: after [a b] [c], d(a)=3, d(b)=2 -> running max 3, 3: capacity >= 3 hits 8.
    trace = kvreplay.Trace.from_requests([(["a", "b"], 7), (["a", "b"], 7), (["c"], 4), (["a", "b"], 8)])
    points = kvreplay.mrc(trace, [1, 2, 3, 10], 4)["points"]
    assert [p["total_hit_tokens"] for p in points] == [0, 7, 15, 15]
    assert [p["admissions"] for p in points] == [7, 5, 3, 3]


@settings(max_examples=150, deadline=None)
@given(requests(), st.lists(st.integers(1, 40), min_size=1, max_size=6), st.sampled_from([0.0, 0.3]))
def test_curve_equals_lru_replays(trace_and_size, capacities, warmup):
    reqs, block_size = trace_and_size
    trace = kvreplay.Trace.from_requests(reqs)
    curve = kvreplay.mrc(trace, capacities, block_size, warmup_fraction=warmup)
    for c, point in zip(capacities, curve["points"]):
        r = kvreplay.replay(trace, "lru", c, block_size, warmup_fraction=warmup)
        assert point["total_hit_tokens"] == r.total_hit_tokens
        assert point["total_prompt_tokens"] == r.total_prompt_tokens
        assert point["final_cache_blocks"] == r.final_cache_blocks
        assert (point["admissions"], point["evictions"]) == (r.counters["admissions"], r.counters["evictions"])


def test_curve_on_a_real_trace_matches_golden_lru():
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    points = kvreplay.mrc(trace, [1000, 4096, 16384, 10**9], 512)["points"]
    # Golden totals from an independent implementation (shared/golden/mooncake_totals.json).
    assert [p["total_hit_tokens"] for p in points] == [6567267, 12923638, 39206322, 54098411]
    assert points[-1]["final_cache_blocks"] == 182790


def test_bad_capacities():
    trace = kvreplay.Trace.from_requests([(["a"], 4)])
    with pytest.raises(kvreplay.ConfigError):
        kvreplay.mrc(trace, [0])
    with pytest.raises(kvreplay.ConfigError):
        kvreplay.mrc(trace, "many")


# --- the compiled pass (mrc.c) against its plain-Python reference --------------------------------

def both_passes(trace, block_size, warmup):
    """(hit_tokens_at, accesses_at) of the reference pass and of the compiled one."""
    from kvreplay.analysis.mrc import _histograms_compiled, _histograms_reference

    out = []
    for one_pass in (_histograms_reference, _histograms_compiled):
        hits, accesses = np.zeros(trace.num_blocks + 2, np.int64), np.zeros(trace.num_blocks + 2, np.int64)
        one_pass(trace.offsets, trace.blocks, trace.input_length, block_size, warmup, hits, accesses)
        out.append((hits.tolist(), accesses.tolist()))
    return out


@settings(max_examples=200, deadline=None)
@given(requests(), st.floats(0.0, 0.99))
def test_compiled_pass_equals_the_reference(trace_and_size, warmup_fraction):
    reqs, block_size = trace_and_size
    trace = kvreplay.Trace.from_requests(reqs)
    reference, compiled = both_passes(trace, block_size, int(warmup_fraction * len(trace)))
    assert compiled == reference


@pytest.mark.parametrize("name", ["synthetic_trace.jsonl", "conversation_trace.jsonl"])
def test_compiled_pass_equals_the_reference_on_real_traces(name):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / name))
    reference, compiled = both_passes(trace, 512, len(trace) // 4)
    assert compiled == reference
    assert sum(reference[0]) > 0 and reference[1][-1] == trace.num_blocks  # hits, and one first access per block
