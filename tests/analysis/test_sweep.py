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


# ---------------------------------------------------------------- several traces, several parameter sets

def test_several_traces_run_the_whole_grid(trace):
    other = chat_workload(num_conversations=30, seed=2)
    out = kvreplay.sweep([trace, other], [50, 200], ["s3fifo", "lru"])
    assert out["trace"] == [trace.source, other.source] == ["synthetic chat workload (seed 1)", "synthetic chat workload (seed 2)"]
    assert [(r["trace"], r["policy"], r["cache_capacity_blocks"]) for r in out["results"]] == [
        (name, p, c) for name in out["trace"] for p in ("s3fifo", "lru") for c in (50, 200)]
    for t, name in zip((trace, other), out["trace"]):
        alone = kvreplay.sweep(t, [50, 200], ["s3fifo", "lru"])["results"]
        assert [{k: v for k, v in r.items() if k != "trace"} for r in out["results"] if r["trace"] == name] == alone
    assert [info["num_requests"] for info in out["traces"]] == [len(trace), len(other)]
    assert out["block_size"] == 512 and out["traces"][0]["window"].startswith("whole trace")


def test_a_dict_names_the_traces_and_auto_capacities_are_per_trace(trace):
    small = chat_workload(num_conversations=10, seed=5)
    out = kvreplay.sweep({"big": trace, "small": small}, "auto", ["fifo"])
    caps = {name: [r["cache_capacity_blocks"] for r in out["results"] if r["trace"] == name] for name in ("big", "small")}
    assert caps == {"big": auto_capacities(trace.num_blocks), "small": auto_capacities(small.num_blocks)}
    assert out["trace"] == ["big", "small"]
    assert list(out["results"][0])[0] == "trace"


def test_one_trace_in_a_list_keeps_the_single_trace_shape(trace):
    assert kvreplay.sweep([trace], [100], ["lru", "fifo"]) == kvreplay.sweep(trace, [100], ["lru", "fifo"])


def test_several_parameter_sets_of_one_policy(trace):
    out = kvreplay.sweep(trace, [100, 300], [("s3fifo", [{}, {"small_ratio": 0.25}, {"ghost_freq": 1}])])
    params = [(r["params"]["small_ratio"], r["params"]["ghost_freq"], r["cache_capacity_blocks"]) for r in out["results"]]
    assert params == [(0.1, 0, 100), (0.1, 0, 300), (0.25, 0, 100), (0.25, 0, 300), (0.1, 1, 100), (0.1, 1, 300)]
    for r in out["results"]:
        assert r["total_hit_tokens"] == kvreplay.replay(trace, "s3fifo", r["cache_capacity_blocks"], **r["params"]).total_hit_tokens


def test_lru_listed_twice_shares_one_pass(trace):
    out = kvreplay.sweep(trace, [60], ["lru", "fifo", "lru"])
    assert [r["policy"] for r in out["results"]] == ["lru", "fifo", "lru"]
    assert out["results"][0] == out["results"][2]
    assert out["results"][0]["total_hit_tokens"] == kvreplay.replay(trace, "lru", 60).total_hit_tokens


def test_same_names_are_told_apart(trace):
    out = kvreplay.sweep([trace, trace], [100], ["fifo"])
    assert out["trace"] == [f"{trace.source}#1", f"{trace.source}#2"]
    assert out["results"][0]["total_hit_tokens"] == out["results"][1]["total_hit_tokens"]


def test_no_traces():
    with pytest.raises(kvreplay.ConfigError, match="no traces"):
        kvreplay.sweep([], [10], ["lru"])
