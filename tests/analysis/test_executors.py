"""Executors: a sweep gives the same rows, in the same order, wherever its replays run."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

import pytest

import kvreplay
from kvreplay.analysis import executors
from kvreplay.trace.synth import chat_workload

POLICIES = ["s3fifo", "lru", "fifo", "sieve", ("s3fifo", [{"small_ratio": 0.25}, {"ghost_freq": 1}])]
CAPACITIES = [40, 150, 600]


@pytest.fixture(scope="module")
def traces():
    return {"a": chat_workload(num_conversations=60, seed=3), "b": chat_workload(num_conversations=40, seed=4)}


@pytest.fixture(scope="module")
def in_process(traces):
    return kvreplay.sweep(traces, CAPACITIES, POLICIES, jobs=1)


def test_in_process_rows_equal_single_replays(traces, in_process):
    rows = in_process["results"]
    assert len(rows) == 2 * 6 * 3
    for row in rows:
        single = kvreplay.replay(traces[row["trace"]], row["policy"], row["cache_capacity_blocks"], **row["params"])
        assert (row["total_hit_tokens"], row["final_cache_blocks"]) == (single.total_hit_tokens, single.final_cache_blocks)


@pytest.mark.parametrize("executor", ["local", "threads"])
def test_pools_give_identical_results(traces, in_process, executor):
    assert kvreplay.sweep(traces, CAPACITIES, POLICIES, jobs=2, executor=executor) == in_process


def test_spawned_workers_get_the_traces_through_the_initializer(traces, in_process, monkeypatch):
    # Where fork is not available the pool spawns; the traces reach each worker once, pickled.
    monkeypatch.setattr(executors, "_context", lambda: multiprocessing.get_context("spawn"))
    assert kvreplay.sweep(traces, CAPACITIES, POLICIES, jobs=2) == in_process


def test_forked_workers_share_the_parent_traces(traces):
    # Under fork the initializer's argument is the parent's list itself: nothing is pickled.
    if not sys.platform.startswith("linux"):
        pytest.skip("the pool forks on Linux only")
    assert executors._context().get_start_method() == "fork"
    shipped = [executors.lean(t) for t in traces.values()]
    assert all(t.original_ids is None for t in shipped)
    assert all(s.blocks is t.blocks for s, t in zip(shipped, traces.values()))  # the same arrays, not copies


@pytest.mark.parametrize("executor,jobs", [("local", 1), ("local", 2), ("threads", 2)])
def test_progress_is_called_from_the_calling_thread(traces, executor, jobs):
    calls, threads = [], set()

    def progress(done, total, what):
        assert what == "replays"
        calls.append((done, total))
        threads.add(threading.get_ident())

    out = kvreplay.sweep(traces, CAPACITIES, POLICIES, jobs=jobs, executor=executor, progress=progress)
    total = len(out["results"])
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert all(t == total for _, t in calls)
    done = [d for d, _ in calls]
    assert done == sorted(done) and len(set(done)) == len(done)
    # Each trace's lru column is one pass: its 3 rows arrive at once.
    assert len(calls) == 1 + (total - 2 * 3) + 2
    assert threads == {threading.get_ident()}


def test_a_failing_progress_hook_stops_the_sweep(traces):
    def progress(done, total, what):
        if done >= 3:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        kvreplay.sweep(traces, CAPACITIES, POLICIES, jobs=2, progress=progress)


def test_bad_executor_options(traces):
    with pytest.raises(kvreplay.ConfigError, match="unknown executor 'dask'"):
        kvreplay.sweep(traces, [10], ["lru"], executor="dask")
    with pytest.raises(kvreplay.ConfigError, match="only applies to the ray executor"):
        kvreplay.sweep(traces, [10], ["lru"], ray_address="auto")
    with pytest.raises(kvreplay.ConfigError, match="jobs"):
        kvreplay.sweep(traces, [10], ["lru"], jobs=0)


def test_ray_missing_names_the_extra(traces, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(kvreplay.ConfigError, match=r"pip install 'kvreplay\[ray\]'"):
        kvreplay.sweep(traces, [10], ["fifo"], executor="ray")


def test_ray_gives_identical_results(traces, in_process):
    # .ci/run installs kvreplay[test], which brings Ray, and sets KVREPLAY_REQUIRE_OPTIONAL: a skip there would hide a break.
    if os.environ.get("CI") or os.environ.get("KVREPLAY_REQUIRE_OPTIONAL") == "1":
        import ray
    else:
        ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    calls = []
    started = time.perf_counter()
    # A local instance of 2 CPUs, no dashboard, started and shut down by the sweep.
    out = kvreplay.sweep(traces, CAPACITIES, POLICIES, jobs=2, executor="ray", progress=lambda d, t, what: calls.append(d))
    elapsed = time.perf_counter() - started
    assert out == in_process
    assert calls[0] == 0 and calls[-1] == len(out["results"])
    assert not ray.is_initialized()  # the sweep started Ray, so it stopped it
    assert elapsed < 120, f"the Ray sweep took {elapsed:.0f} s"


# ---------------------------------------------------------------- command line

LVF = Path(__file__).resolve().parents[1] / "data" / "prefix_lru_vs_fifo.jsonl"
SWEEP_ARGS = ["sweep", str(LVF), "--capacities", "2,6", "--policies", "lru,fifo,sieve", "--block-size", "4", "--json"]


def _cli(capsys, *args):
    from kvreplay.cli import main

    code = main([*SWEEP_ARGS, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("options", [["--jobs", "2"], ["--executor", "threads", "--jobs", "2"]])
def test_cli_executor_options_change_nothing_in_the_output(capsys, options):
    code, serial, _ = _cli(capsys)
    assert code == 0
    code, parallel, err = _cli(capsys, *options)
    assert (code, err) == (0, "")
    assert parallel == serial
    assert [(r["policy"], r["total_hit_tokens"]) for r in json.loads(parallel)["results"]][:4] == [
        ("lru", 6), ("lru", 6), ("fifo", 4), ("fifo", 6)]


def test_cli_ray_address_needs_the_ray_executor(capsys):
    code, out, err = _cli(capsys, "--ray-address", "auto")
    assert code == 2 and out == ""
    assert err == "kvreplay: --ray-address applies with --executor ray\n"
