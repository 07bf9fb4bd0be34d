"""Inputs that would overflow the simulated clock or its counters are refused, naming what to
change (issue 21); counts a summary prints are never negative."""

from __future__ import annotations

import pytest

from kvreplay.errors import ConfigError
from kvreplay.serving.kernel import MAX_STEP_S, MAX_TIME_S
from kvreplay.serving.simulate import simulate
from kvreplay.serving.timing import PolynomialProfile

from sim_cases import ONE_SECOND, trace_of


def constant(seconds: float) -> PolynomialProfile:
    return PolynomialProfile(document={"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": seconds}]})


TWO = trace_of((["a", "b"], 8, 0, 3), (["a", "c"], 8, 500, 2))


def test_step_time_limit_both_sides():
    r = simulate(TWO, "vllm", 100, time_model=constant(MAX_STEP_S / 2), compare_sequential=False)
    assert r.finished.all() and r.finish_s.max() == 3 * MAX_STEP_S / 2
    for huge in (MAX_STEP_S * 2, 1e308):
        with pytest.raises(ConfigError, match="--step-overhead-ms"):
            simulate(TWO, "vllm", 100, time_model=constant(huge), compare_sequential=False)


def test_clock_limit_both_sides():
    # 5e6 s steps, one per output token: 19,000 of them end at 9.5e10 s, within MAX_TIME_S (1e11);
    # 20,001 would pass it
    step = MAX_STEP_S / 2
    r = simulate(trace_of((["a"], 4, 0, 19_000)), "vllm", 10_000, time_model=constant(step), compare_sequential=False)
    assert r.finish_s[0] == pytest.approx(19_000 * step) and r.finish_s[0] < MAX_TIME_S
    with pytest.raises(ConfigError, match="simulated clock pass 1e\\+11 s"):
        simulate(trace_of((["a"], 4, 0, 20_001)), "vllm", 10_000, time_model=constant(step), compare_sequential=False)


@pytest.mark.parametrize("load", [{"speedup": 1e-308}, {"speedup": 1e-20}, {"rate": 1e-300}])
def test_arrivals_beyond_the_clock_are_refused(load):
    with pytest.raises(ConfigError, match="beyond the 1e\\+10 s a run may span"):
        simulate(TWO, "vllm", 100, time_model=ONE_SECOND, **load)


def test_zero_duration_has_no_rates():
    s = simulate(trace_of((["a"], 4, 0, 1), (["b"], 4, 0, 1)), "vllm", 100, time_model="instant").summary()
    assert s["duration_s"] == 0.0 and s["throughput"]["requests_per_s"] is None
    assert s["goodput"]["requests_per_s"] is None


def test_eviction_difference_is_split_into_two_counts():
    t = trace_of(*[([f"p{k % 4}", f"q{k}"], 8, 300 * k, 4) for k in range(20)])
    s = simulate(t, "vllm", 5, time_model=ONE_SECOND).summary()
    assert s["extra_evictions"] >= 0 and s["fewer_evictions"] >= 0
    assert s["extra_evictions"] - s["fewer_evictions"] == s["evictions"] - s["sequential_evictions"]
    assert 0 in (s["extra_evictions"], s["fewer_evictions"])
