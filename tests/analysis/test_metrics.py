"""Metrics beyond the hit rate, on hand-worked replays."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kvreplay
from kvreplay.analysis import metrics
from kvreplay.errors import ConfigError


def small_report(warmup_fraction: float = 0.0):
    # block_size 4, lru, capacity 10 (nothing is evicted):
    #   r1 [a b] L=8 (t=0 s)    -> 0 hits            rate 0
    #   r2 [a b] L=8 (t=1 s)    -> 2 blocks = 8      rate 1
    #   r3 [a c] L=6 (t=2.5 s)  -> 1 block  = 4      rate 4/6
    #   r4 [d]   L=4 (t=3 s)    -> 0                 rate 0
    #   r5 [a b] L=7 (t=4 s)    -> min(8, 7) = 7     rate 1
    # whole trace: 19 of 33 prompt tokens.
    trace = kvreplay.Trace.from_requests([
        (["a", "b"], 8, 0.0), (["a", "b"], 8, 1000.0), (["a", "c"], 6, 2500.0), (["d"], 4, 3000.0), (["a", "b"], 7, 4000.0),
    ])
    return trace, kvreplay.replay(trace, "lru", 10, 4, warmup_fraction=warmup_fraction)


def test_hand_worked_summary():
    trace, r = small_report()
    assert (r.total_hit_tokens, r.total_prompt_tokens) == (19, 33)
    m = metrics.summarize(r, active_params=8_000_000_000, price_hit=0.1, price_miss=1.0)
    assert m["hit_rate"] == pytest.approx(19 / 33)
    assert m["ideal_prefill_speedup"] == pytest.approx(33 / 14)  # 1 / (1 - 19/33)
    assert m["prefill_flops_saved"] == 2 * 8_000_000_000 * 19
    # without the cache 33 tokens at 1.0/M; with it 19 at 0.1/M + 14 at 1.0/M.
    assert m["money"]["cost_without_cache"] == pytest.approx(33e-6)
    assert m["money"]["cost_with_cache"] == pytest.approx((1.9 + 14) * 1e-6)
    assert m["money"]["saved"] == pytest.approx(19 * 0.9e-6)
    # request rates sorted: 0, 0, 2/3, 1, 1; "lower" rule: p50 -> index 2, p90 and p99 -> index 3.
    assert m["request_hit_rate_percentiles"] == pytest.approx({"p50": 2 / 3, "p90": 1.0, "p99": 1.0})
    assert m["window"] == "whole trace (5 requests)"


def test_metrics_follow_the_warmup_window():
    # warm-up 0.4 of 5 -> the first 2 requests are not counted: 11 hit tokens of 17 (4 + 0 + 7).
    trace, r = small_report(0.4)
    m = metrics.summarize(r)
    assert m["hit_rate"] == pytest.approx(11 / 17)
    assert m["request_hit_rate_percentiles"]["p50"] == pytest.approx(2 / 3)  # 0, 2/3, 1 -> middle
    assert "after warm-up" in m["window"]
    windows = metrics.over_time(r, requests=2)
    assert [(w["first_request"], w["last_request"]) for w in windows] == [(3, 4), (5, 5)]
    assert [(w["hit_tokens"], w["prompt_tokens"]) for w in windows] == [(4, 10), (7, 7)]


def test_over_time_by_requests_and_by_seconds():
    trace, r = small_report()
    by_requests = metrics.over_time(r, requests=2)
    # windows [r1 r2], [r3 r4], [r5]: 8/16, 4/10, 7/7.
    assert [(w["hit_tokens"], w["prompt_tokens"], w["requests"]) for w in by_requests] == [(8, 16, 2), (4, 10, 2), (7, 7, 1)]
    assert by_requests[0]["hit_rate"] == 0.5
    by_time = metrics.over_time(r, trace.timestamp, seconds=2)
    # 2-second windows from t=0: [0,2) r1 r2; [2,4) r3 r4; [4,6) r5.
    assert [(w["start_s"], w["end_s"]) for w in by_time] == [(0, 2), (2, 4), (4, 6)]
    assert [(w["hit_tokens"], w["prompt_tokens"]) for w in by_time] == [(8, 16), (4, 10), (7, 7)]
    # Window totals add up to the report's totals.
    assert sum(w["hit_tokens"] for w in by_time) == r.total_hit_tokens


def test_empty_time_windows_are_kept_with_zero_tokens():
    trace = kvreplay.Trace.from_requests([(["a"], 4, 0.0), (["a"], 4, 5000.0)])
    r = kvreplay.replay(trace, "lru", 4, 4)
    windows = metrics.over_time(r, trace.timestamp, seconds=2)
    assert [(w["requests"], w["hit_tokens"], w["hit_rate"]) for w in windows] == [(1, 0, 0.0), (0, 0, 0.0), (1, 4, 1.0)]


def test_speedup_edges():
    assert metrics.ideal_speedup(0.0) == 1.0
    assert metrics.ideal_speedup(0.75) == 4.0
    assert math.isinf(metrics.ideal_speedup(1.0))
    trace = kvreplay.Trace.from_requests([(["a"], 0), (["a"], 0)])
    m = metrics.summarize(kvreplay.replay(trace, "lru", 4, 4))
    assert m["hit_rate"] == 0.0 and m["request_hit_rate_percentiles"] == {"p50": 0.0, "p90": 0.0, "p99": 0.0}


def test_bad_arguments():
    trace, r = small_report()
    with pytest.raises(ConfigError):
        metrics.over_time(r, requests=2, seconds=1)
    with pytest.raises(ConfigError):
        metrics.over_time(r, requests=0)
    with pytest.raises(ConfigError):
        metrics.over_time(r, seconds=1)  # no timestamps
    with pytest.raises(ConfigError):
        metrics.money(1, 2, price_hit=-1)


def test_percentiles_are_real_request_values():
    rates = np.array([0.1, 0.2, 0.3, 0.4])
    # "lower": p50 of 4 values -> the 2nd smallest, never an interpolated 0.25.
    assert metrics.percentiles(rates) == {"p50": 0.2, "p90": 0.3, "p99": 0.3}


def test_cli_run_prints_and_writes_the_metrics(tmp_path, capsys):
    from kvreplay.cli import main

    # The same five requests as small_report(), as a Mooncake file (timestamps in ms).
    lines = [
        '{"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}',
        '{"timestamp": 1000, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}',
        '{"timestamp": 2500, "input_length": 6, "output_length": 1, "hash_ids": [1, 3]}',
        '{"timestamp": 3000, "input_length": 4, "output_length": 1, "hash_ids": [4]}',
        '{"timestamp": 4000, "input_length": 7, "output_length": 1, "hash_ids": [1, 2]}',
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "r.json"
    args = ["run", str(path), "--policy", "lru", "--capacity", "10", "--block-size", "4", "--price-hit", "0.1",
            "--price-miss", "1", "--over-time", "2s", "-o", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "ideal prefill speedup 2.36x" in text  # 33/14
    assert "p50 66.7%, p90 100.0%, p99 100.0%" in text
    import json

    doc = json.loads(out.read_text())
    assert doc["metrics"]["money"]["saved"] == pytest.approx(19 * 0.9e-6)
    assert [(w["hit_tokens"], w["prompt_tokens"]) for w in doc["over_time"]] == [(8, 16), (4, 10), (7, 7)]
    for bad in (["--over-time", "0"], ["--over-time", "x"], ["--price-hit", "-1"]):
        with pytest.raises(SystemExit) as exit_:  # argparse's usage error: exit 2
            main(args[:-2] + bad)
        assert exit_.value.code == 2
