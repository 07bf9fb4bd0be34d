"""kvreplay.sweep: the grid, warm-up, threads, parameters, auto capacities."""

from __future__ import annotations

import pytest

import kvreplay
from kvreplay.analysis.sweep import auto_capacities
from kvreplay.trace.synth import chat_workload


@pytest.fixture(scope="module")
def trace():
    return chat_workload(num_conversations=80, seed=1)


def test_sweep_equals_individual_replays(trace):
    out = kvreplay.sweep(trace, [50, 200], ["s3fifo", "lru:", "fifo"][::2] + ["lru"], 512)
    assert [(r["policy"], r["cache_capacity_blocks"]) for r in out["results"]] == [
        ("s3fifo", 50), ("s3fifo", 200), ("fifo", 50), ("fifo", 200), ("lru", 50), ("lru", 200)]
    for row in out["results"]:
        single = kvreplay.replay(trace, row["policy"], row["cache_capacity_blocks"], 512)
        assert row["total_hit_tokens"] == single.total_hit_tokens
        assert row["final_cache_blocks"] == single.final_cache_blocks
        assert row["hit_rate"] == single.hit_rate
    assert out["window"].startswith("whole trace")


def test_threads_give_the_same_results(trace):
    one = kvreplay.sweep(trace, [30, 100, 300], ["s3fifo", "lru", "fifo"], jobs=1)
    two = kvreplay.sweep(trace, [30, 100, 300], ["s3fifo", "lru", "fifo"], jobs=2)
    assert one == two


def test_parameters_in_policy_strings(trace):
    out = kvreplay.sweep(trace, [100], ["s3fifo:small_ratio=0.25:max_freq=1", ("s3fifo", {"ghost_freq": 1})])
    assert out["results"][0]["params"] == {"small_ratio": 0.25, "max_freq": 1, "ghost_freq": 0}
    assert out["results"][1]["params"] == {"small_ratio": 0.1, "max_freq": 3, "ghost_freq": 1}
    direct = kvreplay.replay(trace, "s3fifo", 100, small_ratio=0.25, max_freq=1)
    assert out["results"][0]["total_hit_tokens"] == direct.total_hit_tokens


def test_warmup_fraction(trace):
    out = kvreplay.sweep(trace, [100], ["lru"], warmup_fraction=0.5)
    w = len(trace) // 2
    assert out["results"][0]["total_prompt_tokens"] == int(trace.input_length[w:].sum())
    assert "after warm-up" in out["window"]


def test_bad_grid_fails_before_running(trace):
    with pytest.raises(kvreplay.ConfigError, match="small_cap 0"):
        kvreplay.sweep(trace, [1000, 5], ["s3fifo"])
    with pytest.raises(kvreplay.ConfigError):
        kvreplay.sweep(trace, [], ["lru"])
    with pytest.raises(kvreplay.ConfigError, match="unknown policy"):
        kvreplay.sweep(trace, [10], ["nope"])


def test_infinite_runs_once(trace):
    out = kvreplay.sweep(trace, [10, 100], ["infinite", "lru"])
    assert [r["policy"] for r in out["results"]] == ["infinite", "lru", "lru"]


def test_auto_capacities():
    caps = auto_capacities(182790)
    assert caps[0] == 16 and caps[-1] == 182790 and len(caps) == 12
    assert caps == sorted(set(caps))
    assert auto_capacities(5) == [16]
