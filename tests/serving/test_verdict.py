"""Keeps up or not (serving/verdict.py): judged per window from the queue, hand-worked with 1 s steps."""

from __future__ import annotations

import pytest

from kvreplay.serving.simulate import Scheduler, load_sweep, simulate
from kvreplay.serving.verdict import default_window_s, keeps_up

from sim_cases import ONE_SECOND, trace_of


def burst_then_quiet():
    """Ten 1-block prompts (1 output each) at 0 s, one more at 1,000 s; one request per step."""
    return trace_of(*[([f"b{k}"], 4, 0, 1) for k in range(10)], (["late"], 4, 1_000_000, 1))


def test_a_burst_that_drains_does_not_keep_up():
    # Each request takes one 1 s step (prefill + its only token); one runs at a time, so the burst's
    # requests are scheduled at 0, 1, ..., 9 s: queueing 0..9 s, nearest-rank p90 (index
    # round(9 x 0.9) = 8) is 8 s. Service (schedule -> finish) is 1 s, so 1 s is allowed. The last
    # request finishes at 1,001 s, 1 s after its arrival: the old whole-trace rule said "keeps up".
    r = simulate(burst_then_quiet(), "lru", 100, block_size=4, time_model=ONE_SECOND,
                 scheduler=Scheduler(max_num_seqs=1), compare_sequential=False)
    v = keeps_up(r)
    assert v["window_s"] == 250.0  # a quarter of the 1,000 s span (under 20 minutes)
    assert v["backlog_s"] == 1.0 and v["backlog_limit_s"] == 100.0
    assert v["worst_queue_p90_s"] == 8.0 and v["allowed_queue_s"] == 1.0 and v["worst_window_start_s"] == 0.0
    assert v["keeps_up"] is False and v["reason"] == "queueing"
    # the window's work (10 x (4 + 1) tokens over 250 s) fits the measured rate (55 tokens in 11
    # busy seconds): a burst, so the fix scales by queueing over allowance, 8x
    fix = v["fix"]
    assert fix["basis"] == "queueing" and fix["load_scale"] == 1 / 8 and fix["instances"] == 8
    assert fix["load"] == {"flag": "--speedup", "value": 1 / 8}
    assert fix["busiest_window_utilisation"] == pytest.approx((50 / 250) / (55 / 11))


def test_light_load_keeps_up():
    # one request every 10 s, each served in 1 s: no queueing at all
    t = trace_of(*[([f"r{k}"], 4, 10_000 * k, 1) for k in range(5)])
    r = simulate(t, "lru", 100, block_size=4, time_model=ONE_SECOND, compare_sequential=False)
    v = keeps_up(r)
    assert v["keeps_up"] is True and v["worst_queue_p90_s"] == 0.0 and v["fix"] is None
    assert r.summary()["keeps_up"]["keeps_up"] is True


def test_overload_fix_scales_by_the_work():
    # a request (4 prompt tokens, 1 output) every 0.5 s for 400 s but one 1 s step serves one: twice
    # the capacity. 801 requests over a 400 s span: window 100 s; the backlog grows to 400 s.
    t = trace_of(*[([f"r{k}"], 4, 500 * k, 1) for k in range(801)])
    r = simulate(t, "lru", 10_000, block_size=4, time_model=ONE_SECOND,
                 scheduler=Scheduler(max_num_seqs=1), compare_sequential=False)
    v = keeps_up(r)
    assert v["window_s"] == 100.0 and v["keeps_up"] is False and v["reason"] == "queueing and backlog"
    assert v["backlog_s"] == pytest.approx(401.0)
    fix = v["fix"]
    # rate: 5 tokens per busy second; a 100 s window gets 200 requests, the last one 201 (it closes at
    # the last arrival, 400 s): 1,005 tokens = 10.05 tokens/s, 2.01x the rate
    assert fix["basis"] == "work" and fix["busiest_window_utilisation"] == pytest.approx(2.01)
    assert fix["load_scale"] == pytest.approx(0.9 / 2.01) and fix["instances"] == 3


def test_default_window():
    assert default_window_s(3600) == 300.0 and default_window_s(1200) == 300.0
    assert default_window_s(100) == 25.0 and default_window_s(0) == 1.0


def test_sweep_rows_carry_the_verdict():
    rows = load_sweep(burst_then_quiet(), speedups=[1.0], policies=["lru"], capacities=[100], block_size=4,
                      time_model=ONE_SECOND, scheduler=Scheduler(max_num_seqs=1))
    assert rows[0]["stable"] is False and rows[0]["worst_queue_p90_s"] == 8.0
    assert rows[0]["verdict_window_s"] == 250.0 and rows[0]["worst_window_start_s"] == 0.0
