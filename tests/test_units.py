"""Durations need their unit (units.py); the Python API takes numbers in the unit its parameter
names, and strings with their unit, refusing strings without one as the command line does."""

from __future__ import annotations

import pytest

import kvreplay
from conftest import DATA
from kvreplay.errors import ConfigError
from kvreplay.trace.synth import synth
from kvreplay.units import ms_arg, parse_duration, seconds_arg

WALK = DATA / "walk.jsonl"


@pytest.mark.parametrize("text, seconds", [
    ("2s", 2.0), ("2000ms", 2.0), ("1.5h", 5400.0), ("5m", 300.0), ("5min", 300.0), ("250us", 250e-6),
    ("250µs", 250e-6), ("1d", 86400.0), ("30 s", 30.0), ("2MS", 0.002), ("0", 0.0), ("0.5s", 0.5),
])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("text, message", [
    ("2000", "--window: 2000 what? write 2000s or 2000ms"),
    ("1.5", "--window: 1.5 what? write 1.5s or 1.5ms"),
    ("2x", "--window: unknown unit 'x' in '2x' (units: ns, us, ms, s, m, h, d)"),
    ("-2s", "--window: expected a duration such as 2s, 50ms or 5m, got '-2s'"),
    ("fast", "--window: expected a duration such as 2s, 50ms or 5m, got 'fast'"),
])
def test_durations_refused(text, message):
    with pytest.raises(ConfigError) as e:
        parse_duration(text, "--window")
    assert str(e.value) == message


def test_the_api_takes_numbers_in_its_unit_and_strings_with_theirs():
    assert seconds_arg(2, "window_s") == 2.0 and seconds_arg("2000ms", "window_s") == 2.0
    assert ms_arg(50, "slo_tpot_ms") == 50.0 and ms_arg("2s", "slo_ttft_ms") == 2000.0
    for bad in ("2000", True, None, [2]):
        with pytest.raises(ConfigError, match="window_s"):
            seconds_arg(bad, "window_s")


def test_slo_limits():
    assert kvreplay.SLO(ttft_p90_s="2s", tpot_p90_s="50ms", e2e_p99_s=60).limits() == {
        "ttft_p90_s": 2.0, "tpot_p90_s": 0.05, "e2e_p99_s": 60.0}
    with pytest.raises(ConfigError, match="SLO ttft_p90_s: 2000 what\\? write 2000s or 2000ms"):
        kvreplay.SLO(ttft_p90_s="2000")
    with pytest.raises(ConfigError, match=r"slo.ttft_p90_s \(--slo-ttft-p90\) must be above 0 "):
        kvreplay.SLO(ttft_p90_s=0)


def test_policy_durations():
    trace = kvreplay.load_trace(WALK)
    # ttl: seconds of trace time; 5s as a number or with its unit, the same replay
    as_number = kvreplay.replay(trace, "ttl", None, ttl=5)
    assert kvreplay.replay(trace, "ttl", None, ttl="5000ms").hit_tokens.tolist() == as_number.hit_tokens.tolist()
    assert kvreplay.sweep(trace, [8], ["ttl:ttl=5s"])["results"][0]["total_hit_tokens"] == \
        kvreplay.replay(trace, "ttl", 8, ttl=5).total_hit_tokens
    with pytest.raises(ConfigError, match="ttl: ttl: 5 what\\? write 5s or 5ms"):
        kvreplay.replay(trace, "ttl", None, ttl="5")
    with pytest.raises(ConfigError, match="5 what\\?"):
        kvreplay.sweep(trace, [8], ["ttl:ttl=5"])


def test_session_spacing():
    two = [str(DATA / "claude_a.json"), str(DATA / "claude_b.json")]
    assert kvreplay.load_trace(two, session_spacing="90s").timestamp.max() == \
        kvreplay.load_trace(two, session_spacing=90).timestamp.max() == 90_000 + 30_000
    with pytest.raises(ConfigError, match="session spacing: 90 what"):
        kvreplay.load_trace(two, session_spacing="90")


def test_simulate_and_synth_durations():
    trace = kvreplay.load_trace(WALK)
    a = kvreplay.simulate(trace, "vllm", 40, time_model="instant", slo_ttft_ms="2s", compare_sequential=False)
    b = kvreplay.simulate(trace, "vllm", 40, time_model="instant", slo_ttft_ms=2000, compare_sequential=False)
    assert a.slo_ttft_s == b.slo_ttft_s == 2.0
    with pytest.raises(ConfigError, match="slo_ttft_ms: 2000 what"):
        kvreplay.simulate(trace, "vllm", 40, time_model="instant", slo_ttft_ms="2000")
    assert synth(50, think_time="30s").timestamp.tolist() == synth(50, think_time=30).timestamp.tolist()
