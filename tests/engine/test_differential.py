"""Differential tests: spec oracle (tests/spec_model.py) == reference engine == compiled engine,
per request, on random traces, over tiny, odd and round-half-even capacities and every parameter."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.errors import ConfigError
from spec_model import spec_replay
from strategies import requests, zipf_requests


CAPACITIES = st.one_of(st.integers(1, 30), st.sampled_from([15, 25, 45, 4096]))
S3FIFO_PARAMS = st.fixed_dictionaries({
    "small_ratio": st.sampled_from([0.1, 0.25, 0.5, 0.05, 0.9]),
    "max_freq": st.integers(0, 4),
}).flatmap(lambda p: st.fixed_dictionaries({**{k: st.just(v) for k, v in p.items()}, "ghost_freq": st.integers(0, p["max_freq"])}))


def check_all_engines(reqs, block_size, policy, capacity, params):
    try:
        expected_tokens, expected_blocks, expected_final = spec_replay(reqs, policy, capacity, block_size, **params)
        spec_ok = True
    except (IndexError, ZeroDivisionError):
        spec_ok = False  # the literal spec cannot run with an empty queue
    trace = kvreplay.Trace.from_requests(reqs)
    results = []
    for engine in ("reference", "compiled"):
        try:
            results.append(kvreplay.replay(trace, policy, capacity, block_size, engine=engine, **params))
        except ConfigError:
            results.append(None)
    ref, comp = results
    if ref is None or comp is None:
        assert ref is None and comp is None, "engines disagree on whether the configuration is valid"
        return
    assert spec_ok
    assert ref.hit_tokens.tolist() == expected_tokens
    assert ref.hit_blocks.tolist() == expected_blocks
    assert ref.final_cache_blocks == expected_final
    assert comp.hit_tokens.tolist() == expected_tokens
    assert comp.hit_blocks.tolist() == expected_blocks
    assert comp.final_cache_blocks == expected_final
    assert comp.counters == ref.counters
    assert comp.stranded_blocks == ref.stranded_blocks


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), CAPACITIES, S3FIFO_PARAMS)
def test_s3fifo_engines_match_spec(trace_and_size, capacity, params):
    reqs, block_size = trace_and_size
    check_all_engines(reqs, block_size, "s3fifo", capacity, params)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), CAPACITIES, st.sampled_from(["lru", "fifo"]))
def test_lru_fifo_engines_match_spec(trace_and_size, capacity, policy):
    reqs, block_size = trace_and_size
    check_all_engines(reqs, block_size, policy, capacity, {})


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy,capacity,params", [
    ("s3fifo", 20, {}), ("s3fifo", 64, {"small_ratio": 0.25, "max_freq": 1}),
    ("s3fifo", 33, {"ghost_freq": 1}), ("s3fifo", 7, {"small_ratio": 0.5, "max_freq": 2}),
    ("lru", 50, {}), ("fifo", 50, {}),
])
def test_long_traces_with_many_ghost_hits(seed, policy, capacity, params):
    # Thousands of requests over a few hundred blocks with Zipf-like reuse: queues wrap their
    # ring buffers many times and blocks cycle S -> G -> M -> G over and over.
    reqs = zipf_requests(seed)
    check_all_engines(reqs, 16, policy, capacity, params)
    if policy == "s3fifo":
        r = kvreplay.replay(kvreplay.Trace.from_requests(reqs), policy, capacity, 16, **params)
        assert r.counters["ghost_hits"] > 100 and r.counters["requeues"] + r.counters["promotions"] > 0
