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
    # its 11 requests are fewer than a window's 50: the four 250 s windows are one, the whole span.
    # Its work (11 x (4 + 1) tokens over 1,000 s) fits the measured rate (55 tokens in 11 busy
    # seconds): a burst, so the fix scales by queueing over allowance, 8x
    fix = v["fix"]
    assert v["worst_window_requests"] == 11
    assert fix["basis"] == "queueing" and fix["load_scale"] == 1 / 8 and fix["instances"] == 8
    assert fix["load"] == {"flag": "--speedup", "value": 1 / 8}
    assert fix["busiest_window_utilisation"] == pytest.approx((55 / 1000) / (55 / 11))


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


# ------------------------------------------------------------------------------------------
# A sweep keeps its rows when one run breaks an invariant


def _breaks_on_random(monkeypatch):
    import kvreplay.serving.simulate as sim
    from kvreplay.errors import InvariantError

    real = sim.simulate

    def fake(trace, **options):
        if options.get("router") == "random":
            raise InvariantError("1 requests neither finished nor were rejected")
        return real(trace, **options)

    monkeypatch.setattr(sim, "simulate", fake)


def test_a_failed_run_keeps_the_other_rows(monkeypatch):
    _breaks_on_random(monkeypatch)
    rows = load_sweep(burst_then_quiet(), speedups=[1.0, 2.0], policies=["lru"], capacities=[100], block_size=4,
                      time_model=ONE_SECOND, instances=[2], routers=["round-robin", "random"])
    assert [r["router"] for r in rows] == ["round-robin", "round-robin", "random", "random"]
    assert [r["error"] is None for r in rows] == [True, True, False, False]
    assert rows[2]["error"] == "internal error, please report: 1 requests neither finished nor were rejected"
    assert rows[0]["finished"] == 11 and rows[2]["stable"] is None


def test_cli_writes_every_other_row_and_exits_3(monkeypatch, tmp_path, capsys):
    from kvreplay.cli import main

    from conftest import write

    _breaks_on_random(monkeypatch)
    lines = "\n".join('{"timestamp": %d, "input_length": 4, "output_length": 1, "hash_ids": [%d]}' % (1000 * k, k)
                      for k in range(6))
    trace = write(tmp_path, "t.jsonl", lines + "\n")
    out = tmp_path / "rows.csv"
    code = main(["simulate", str(trace), "--block-size", "4", "--capacity", "100", "--time-model", "instant",
                 "--instances", "2", "--routers", "round-robin,random", "--speedups", "1,2", "-o", str(out)])
    assert code == 3
    text = out.read_text().splitlines()
    assert len(text) == 5
    header = text[0].split(",")
    err = header.index("error")
    import csv

    rows = list(csv.DictReader(out.open()))
    assert [r["router"] for r in rows] == ["round-robin", "round-robin", "random", "random"]
    assert rows[0]["error"] == "" and rows[2]["error"].startswith("internal error, please report")
    assert err > 0
    captured = capsys.readouterr()
    assert "2 of 4 runs failed; the other rows are written" in captured.err
    assert "failed     load 1, lru" not in captured.out and "failed     load 1" in captured.out


def test_cluster_rows_run_their_own_sequential_replay():
    # two instances, least-loaded: which requests share an instance depends on the load, and so
    # does the sequential replay of each instance's share; each row equals its standalone run
    t = trace_of(*[([f"p{k % 3}", f"q{k}"], 8, 1000 * k, 3) for k in range(12)])
    rows = load_sweep(t, speedups=[1.0, 4.0], policies=["lru"], capacities=[3], block_size=4,
                      time_model=ONE_SECOND, instances=[2], routers=["least-loaded"])
    alone = [simulate(t, "lru", 3, block_size=4, time_model=ONE_SECOND, instances=2, router="least-loaded",
                      speedup=r["load"]).sequential_hit_rate for r in rows]
    assert [r["sequential_hit_rate"] for r in rows] == alone
    assert alone[0] != alone[1]  # the old sweep reused the first load's value for both


def test_load_plot_has_one_series_per_router():
    from kvreplay.output.plot import load_figure

    rows = [{"load_kind": "speedup", "load": x, "policy": "vllm", "capacity_blocks": 10, "instances": 5,
             "router": router, "tiers": "none", "ttft_p50_s": 1.0 + x, "ttft_p90_s": 2.0 + x, "hit_rate": 0.1,
             "sequential_hit_rate": 0.1} for router in ("round-robin", "kv-aware") for x in (1.0, 2.0)]
    fig = load_figure(rows, title="t")
    labels = [line.get_label() for line in fig.axes[1].get_lines() if not line.get_label().startswith("_")]
    assert labels == ["router round-robin", "router kv-aware"]
    colours = {line.get_color() for line in fig.axes[1].get_lines() if not line.get_label().startswith("_")}
    assert len(colours) == 2


def test_busy_axis_compresses_idle_gaps():
    from kvreplay.output.plot import _busy_axis, _clock

    # busy 0-10 s and 1,000-1,010 s: the 990 s gap (over 5% of the span) is drawn 3% of the 20 s busy
    t = [0.0, 5.0, 10.0, 1000.0, 1005.0, 1010.0]
    to_axis, from_axis, gaps = _busy_axis(t)
    assert gaps == [(10.0, 1000.0)]
    assert to_axis([0.0, 10.0, 1000.0, 1010.0]).tolist() == pytest.approx([0.0, 10.0, 10.6, 20.6])
    assert from_axis(15.6) == pytest.approx(1005.0)
    assert _clock(3600 * 100 + 26) == "100:00:26"
    # no long gap: the identity
    to_axis, _, gaps = _busy_axis([0.0, 1.0, 2.0])
    assert gaps == [] and to_axis([1.5]).tolist() == [1.5]


def test_balance_by_requests_prefill_and_hit_rate():
    # two instances, round-robin: instance 0 gets requests 0 and 2 (the second hits [a]), instance 1
    # gets 1 and 3 (no hits); 4-token blocks, 8-token prompts
    t = trace_of((["a", "b"], 8, 0, 1), (["c", "d"], 8, 10_000, 1), (["a", "e"], 8, 20_000, 1),
                 (["f", "g"], 8, 30_000, 1))
    r = simulate(t, "lru", 100, block_size=4, time_model=ONE_SECOND, instances=2, router="round-robin")
    b = r.balance()
    assert b["requests_max_over_mean"] == 1.0
    # prefill tokens computed: instance 0 8 + 4 = 12, instance 1 16; mean 14
    assert b["prefill_tokens_max_over_mean"] == pytest.approx(16 / 14)
    assert (b["hit_rate_min"], b["hit_rate_max"]) == (0.0, 4 / 16)


@pytest.mark.parametrize("seed", range(5))
def test_worst_window_p90_matches_nearest_rank_per_window(seed):
    import numpy as np

    from kvreplay.serving.stats import nearest_rank
    from kvreplay.serving.verdict import _worst_window_p90

    rng = np.random.default_rng(seed)
    index = rng.integers(0, 7, size=200)
    queue = rng.exponential(3.0, size=200)
    per = {int(k): nearest_rank(np.sort(queue[index == k]), 90) for k in np.unique(index)}
    want = max(per.values())
    got, k = _worst_window_p90(index, queue)
    assert got == want and per[k] == want


def test_keeps_up_only_when_the_pessimistic_end_does():
    # the rule, on two runs: the centre keeps up (one request every 10 s), the "pessimistic" run
    # (the burst) does not: the verdict is no, only at the centre, with both ends' figures
    from kvreplay.serving.verdict import banded

    t = trace_of(*[([f"r{k}"], 4, 10_000 * k, 1) for k in range(5)])
    calm = simulate(t, "lru", 100, block_size=4, time_model=ONE_SECOND, compare_sequential=False)
    busy = simulate(burst_then_quiet(), "lru", 100, block_size=4, time_model=ONE_SECOND,
                    scheduler=Scheduler(max_num_seqs=1), compare_sequential=False)
    assert banded(calm)["keeps_up"] and banded(calm)["judged_at"] == "centre (no band)"
    calm.band = {"runs": {"high": busy}}
    v = banded(calm)
    assert v["keeps_up"] is False and v["centre_keeps_up"] is True and v["only_at_centre"] is True
    assert v["high"]["worst_queue_p90_s"] == 8.0 and v["reason"].startswith("only at the band's centre")
    from kvreplay.output.serving import verdict_text

    assert verdict_text(v, instances=1).startswith("keeps up   ONLY AT THE BAND'S CENTRE (10.00 s windows)")


def test_the_estimates_are_checked_by_the_runs_they_suggest():
    # the burst of ten at 0 s: slowing the trace to x1/8 leaves the burst as it is (all ten still
    # arrive at 0 s), so the load estimate does not hold; 8 instances share it, and that one does
    from kvreplay.output.serving import verdict_text
    from kvreplay.serving.fixcheck import check_fix

    options = dict(policy="lru", capacity=100, block_size=4, time_model=ONE_SECOND,
                   scheduler=Scheduler(max_num_seqs=1), compare_sequential=False)
    r = simulate(burst_then_quiet(), **options)
    checked = check_fix(burst_then_quiet(), options, r)
    assert checked["load"]["value"] == 1 / 8 and checked["load"]["keeps_up"] is False
    assert checked["instances"]["value"] == 8 and checked["instances"]["keeps_up"] is True
    text = verdict_text(r.summary()["keeps_up"], instances=1, checked=checked)
    assert "--speedup 0.125: checked, it does NOT keep up" in text and "the estimate did not hold" in text
    assert "--instances 8 (now 1): checked, it keeps up" in text
