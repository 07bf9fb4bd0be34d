"""What the host CPU adds (serving/timing/host.py; the kernel's batch.c host_step and host_output,
loop.c hide_late): each term worked by hand, the limit at zero, and Python's formulas against the
kernel's.

The hand-worked runs use a polynomial time model: a step takes 10 ms plus 0.1 ms per prefill token
(a 100-token prefill alone: 20 ms; a decode alone: 10 ms), so each timestamp can be followed step
by step. Requests: A at 0 ms (100 tokens, 3 outputs), B at 15 ms (100 tokens, 2 outputs), block
size 4, no shared blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.serving.simulate import simulate
from kvreplay.serving.timing import PolynomialProfile
from kvreplay.serving.timing.host import NONE, HostTerms, calibrated, resolve

from sim_cases import ONE_SECOND, small_traces, trace_of

STEP = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "unit": "ms",
                                   "terms": [{"coef": 10.0}, {"coef": 0.1, "prefill_tokens": 1}]})
A = ([f"a{k}" for k in range(25)], 100, 0, 3)
B = ([f"b{k}" for k in range(25)], 100, 15, 2)


def run(host, *requests):
    t = trace_of(*(requests or (A, B)))
    return simulate(t, "vllm", 1000, time_model=STEP, host=host)


def ms(x):
    return np.round(np.asarray(x) * 1e3, 9).tolist()


def test_no_host_terms_step_by_step():
    # step 1 (0-20): A prefills 100 tokens, its token 1 at 20. B arrives at 15, mid-step: it joins
    # when the step ends. step 2 (20-40): A decodes (token 2), B prefills (token 1 at 40).
    # step 3 (40-50): A's token 3 (finishes at 50), B's token 2 (finishes at 50).
    r = run("none")
    assert ms(r.first_token_s) == [20.0, 40.0]
    assert ms(r.finish_s) == [50.0, 50.0]


def test_async_scheduling_a_request_arriving_mid_step_waits_a_step_more():
    # vLLM's async scheduling: step 2 was scheduled when step 1 started (0 ms), before B arrived
    # (15 ms): step 2 (20-30) is A's decode alone (token 2 at 30). Step 3 was scheduled when step 2
    # started (20 ms): B is in it. step 3 (30-50): A's token 3 (A finishes at 50), B prefills
    # (token 1 at 50). step 4 (50-60): B's token 2 (finishes at 60). B waits one decode step more.
    r = run(HostTerms(async_scheduling=True))
    assert ms(r.first_token_s) == [20.0, 50.0]
    assert ms(r.finish_s) == [50.0, 60.0]


def test_async_scheduling_does_not_delay_a_request_that_finds_the_engine_idle():
    # A finishes at 40 (prefill 20, decode 10 x 2); B arrives at 45 to an idle engine: scheduled at
    # once, as vLLM's busy loop waits on its input queue when it has no work
    late_b = (B[0], 100, 45, 2)
    for host in (NONE, HostTerms(async_scheduling=True)):
        r = run(host, A, late_b)
        assert ms(r.first_token_s) == [20.0, 65.0]
        assert ms(r.finish_s) == [40.0, 75.0]


def test_async_scheduling_an_empty_step_ahead_lets_the_engine_schedule_at_once():
    # A (1 output) finishes with its prefill step (0-20); B arrives at 15. The step scheduled
    # ahead (at 0 ms) holds nothing (A is done at max_tokens): the engine schedules again at once
    # at 20 and B prefills in 20-40, as without async scheduling
    one = (A[0], 100, 0, 1)
    for host in (NONE, HostTerms(async_scheduling=True)):
        r = run(host, one, B)
        assert ms(r.first_token_s) == [20.0, 40.0]
        assert ms(r.finish_s) == [20.0, 50.0]
        assert r.counters["stalls"] == 0


def test_arrival_delay_per_request_and_per_prompt_token():
    # request_s 1 ms + prompt_token_s 0.05 ms x 100 tokens: each request reaches the engine 6 ms
    # after it arrives. A: 6-26 prefill (token 1 at 26). B reaches the engine at 21, mid-step:
    # joins at 26; 26-46 A's decode and B's prefill; 46-56 the last tokens.
    r = run(HostTerms(request_s=0.001, prompt_token_s=0.00005))
    assert ms(r.arrival_s) == [0.0, 15.0]
    assert ms(r.first_token_s) == [26.0, 46.0]
    assert ms(r.finish_s) == [56.0, 56.0]
    assert ms(r.ttft_s) == [26.0, 31.0]


def test_engine_cpu_per_step_follows_the_gpu_synchronously():
    # step_s 2 ms + step_request_s 1 ms a request, after the GPU's work: step 1 (A alone) 20 + 3 =
    # 23 ms (0-23); B (at 15) joins at 23; step 2 (A, B) 20 + 4 = 24 (23-47); step 3 10 + 4 (47-61)
    r = run(HostTerms(step_s=0.002, step_request_s=0.001))
    assert ms(r.first_token_s) == [23.0, 47.0]
    assert ms(r.finish_s) == [61.0, 61.0]


def test_engine_cpu_per_step_hides_behind_the_gpu_under_async_scheduling():
    # the same CPU beside the GPU's work: a step takes the longer of the two. With 2 + 1 x R ms it
    # hides (the GPU's 10-20 ms is longer): the async run above. With 15 ms + 1 ms a request it
    # shows in decode steps: step 1 (A: max(20, 16)) 0-20; step 2 (A's decode, scheduled at 0:
    # max(10, 16)) 20-36; step 3 (A, B: max(20, 17)) 36-56, A finishes, B's token 1; step 4 (B:
    # max(10, 16)) 56-72.
    hidden = run(HostTerms(step_s=0.002, step_request_s=0.001, async_scheduling=True))
    assert ms(hidden.first_token_s) == [20.0, 50.0] and ms(hidden.finish_s) == [50.0, 60.0]
    shown = run(HostTerms(step_s=0.015, step_request_s=0.001, async_scheduling=True))
    assert ms(shown.first_token_s) == [20.0, 56.0]
    assert ms(shown.finish_s) == [56.0, 72.0]


def test_output_delay_per_request_in_its_step():
    # output_request_s 0.25 ms per request out that step: step 1 (A out) its token at 20 + 0.25;
    # step 2 (A and B out): 40 + 0.5; step 3: 50 + 0.5. The engine's steps do not move; A's gaps
    # are 40.5 - 20.25 = 20.25 and 10 ms.
    r = run(HostTerms(output_request_s=0.00025))
    assert ms(r.first_token_s) == [20.25, 40.5]
    assert ms(r.finish_s) == [50.5, 50.5]
    itl = r.summary()["latency_s"]["itl"]
    assert itl["max"] == pytest.approx(0.02025)


def test_python_formulas_are_the_kernels():
    h = HostTerms(request_s=0.001, prompt_token_s=2e-6, step_s=0.003, step_request_s=5e-5, output_request_s=3e-5)
    assert h.arrival_delay([0, 1000]).tolist() == pytest.approx([0.001, 0.003])
    assert h.step_seconds(0.010, 4) == pytest.approx(0.0132)
    assert h.with_terms(async_scheduling=True).step_seconds(0.010, 4) == pytest.approx(0.010)
    assert h.with_terms(async_scheduling=True).step_seconds(0.002, 4) == pytest.approx(0.0032)
    assert h.output_seconds(10) == pytest.approx(0.0003)
    # the kernel with the same terms, one request alone: its first token at arrival delay + the
    # prefill step (STEP: 20 ms) with the CPU + the output delay of one request
    r = run(h, A)
    step = h.step_seconds(0.020, 1)
    assert float(r.first_token_s[0]) == pytest.approx(float(h.arrival_delay([100])[0]) + step + h.output_seconds(1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_traces())
def test_all_terms_at_zero_give_todays_results(t):
    # the limit: no host terms (and synchronous scheduling) is the simulator before host.py
    base = simulate(t, "vllm", 6, time_model=ONE_SECOND, host="none")
    zero = simulate(t, "vllm", 6, time_model=ONE_SECOND, host=HostTerms())
    for field in ("scheduled_s", "first_token_s", "finish_s", "hit_tokens", "preemptions", "status"):
        assert np.array_equal(getattr(base, field), getattr(zero, field), equal_nan=True)


def test_the_default_follows_the_time_model():
    from kvreplay.serving.timing import CalibratedRooflineTimeModel

    assert resolve(None, ONE_SECOND) is NONE
    assert resolve(None, CalibratedRooflineTimeModel("Llama-3.1-8B", "H100")) == calibrated()
    assert calibrated().async_scheduling and not calibrated(sync=True).async_scheduling
    with pytest.raises(ConfigError, match="instant time model"):
        resolve(HostTerms(request_s=0.01), kvreplay.serving.timing.InstantTimeModel())
    with pytest.raises(ConfigError, match="known: vllm, vllm-sync, none"):
        resolve("fast", ONE_SECOND)
    with pytest.raises(ConfigError, match="step_s"):
        HostTerms(step_s=-1.0)


def test_the_band_of_the_host_terms():
    # the calibrated terms' band (host_calibration.json "band": two refits of the terms on resampled
    # fit runs, benchmarks/calibrate_host.py, no term of an end on the other side of the fitted
    # one); given terms and none have no band
    from kvreplay.serving.timing.host import TERMS, band_end, calibration

    shipped = calibration()["band"]
    for end in ("low", "high"):
        for sync in (False, True):
            h = band_end(calibrated(sync=sync), end)
            assert [getattr(h, k) for k in TERMS] == [shipped[end][k] for k in TERMS]
            assert h.async_scheduling is not sync
        assert band_end(NONE, end) is NONE
        given = HostTerms(request_s=0.002)
        assert band_end(given, end) is given
    assert calibration()["fit"]["band"].startswith("the refits at the 5th and 95th percentile")
    assert all(shipped["low"][k] <= getattr(calibrated(), k) <= shipped["high"][k] for k in TERMS)
    with pytest.raises(ConfigError, match="low or high"):
        band_end(NONE, "middle")


def test_the_api_server_serves_requests_one_at_a_time_in_arrival_order():
    # request_s 10 ms + prompt_token_s 1 ms: services 110, 60 and 210 ms. Three arriving at 0 reach
    # the engine at 110, 170 and 380 ms, in their order (not the shortest prompt first); one
    # arriving at 1 s after the server is idle waits only its own 110 ms.
    h = HostTerms(request_s=0.01, prompt_token_s=0.001)
    at = h.engine_arrivals(np.array([0.0, 0.0, 0.0, 1.0]), np.array([100, 50, 200, 100]))
    assert np.round(at * 1000, 6).tolist() == [110.0, 170.0, 380.0, 1110.0]
    # out of order in the input: served by arrival time, ties in input order
    at = h.engine_arrivals(np.array([0.5, 0.0, 0.0]), np.array([100, 100, 50]))
    assert np.round(at * 1000, 6).tolist() == [610.0, 110.0, 170.0]
    assert NONE.engine_arrivals(np.array([0.0, 2.0]), np.array([5, 5])).tolist() == [0.0, 2.0]


def test_the_fixed_latency_queues_behind_nothing():
    # the same three requests at 0 and one at 1 s, with latency_s 50 ms more: each reaches the
    # engine 50 ms after its turn at the API server ends (160, 220, 430, 1160 ms), not 50 ms x its
    # place in the queue; with no service at all, each arrival plus 50 ms. The least delay
    # (arrival_delay, the floors') is service + latency.
    h = HostTerms(request_s=0.01, prompt_token_s=0.001, latency_s=0.05)
    at = h.engine_arrivals(np.array([0.0, 0.0, 0.0, 1.0]), np.array([100, 50, 200, 100]))
    assert np.round(at * 1000, 6).tolist() == [160.0, 220.0, 430.0, 1160.0]
    assert np.round(h.arrival_delay(np.array([100, 50])) * 1000, 6).tolist() == [160.0, 110.0]
    only = HostTerms(latency_s=0.05)
    assert np.round(only.engine_arrivals(np.array([0.0, 0.0, 0.3]), np.array([9, 9, 9])) * 1000, 6).tolist() == \
        [50.0, 50.0, 350.0]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.floats(0, 10), st.integers(0, 5000)), min_size=1, max_size=40))
def test_the_api_servers_queue_is_lindleys(reqs):
    h = HostTerms(request_s=0.002, prompt_token_s=1e-5)
    a = np.array([x for x, _ in reqs])
    p = np.array([y for _, y in reqs])
    got = h.engine_arrivals(a, p)
    free, want = 0.0, np.empty(len(a))
    for i in np.argsort(a, kind="stable"):
        free = max(a[i], free) + 0.002 + 1e-5 * p[i]
        want[i] = free
    assert np.allclose(got, want, rtol=0, atol=1e-9)
