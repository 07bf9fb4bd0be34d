"""Hostile values, round four: every value is checked where it is resolved (checks.py,
serving/plan_args.py and the modules that resolve each value), so the CLI exits 2 with one line
naming the flag, and the Python API raises a kvreplay error naming the argument; none runs a
simulation first, hangs, or allocates what no machine has. Run in-process: the whole table takes
seconds."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

import kvreplay
from conftest import jsonl, write
from kvreplay.cli import main
from kvreplay.errors import KvreplayError
from kvreplay.serving.plan import plan
from kvreplay.catalog.prices import Prices
from kvreplay.serving.simulate import Scheduler, load_sweep, simulate
from kvreplay.serving.slo import SLO

TWO = jsonl({"timestamp": 0, "input_length": 8, "output_length": 3, "hash_ids": [1, 2]},
            {"timestamp": 500, "input_length": 8, "output_length": 2, "hash_ids": [1, 3]})
ONE_SECOND = {"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0}]}


def refused(capsys, *argv) -> str:
    """Exit 2, no traceback, one line on stderr (argparse's own refusals: that line, then one usage line)."""
    usage = False
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code, usage = e.code, True
    captured = capsys.readouterr()
    assert code == 2, (code, captured.err)
    lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err, captured.err
    assert captured.out == ""
    if usage:  # argparse's refusals lead with the message, then one usage line
        assert len(lines) == 2 and lines[1].startswith("usage: kvreplay"), captured.err
        return lines[0]
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "two.jsonl", TWO)
    write(tmp_path, "one.json", json.dumps(ONE_SECOND))
    write(tmp_path, "big.json", json.dumps({**ONE_SECOND, "terms": [{"coef": 1e308}, {"coef": 1e308}]}))
    write(tmp_path, "steps.csv", "prefill_tokens,decode_batch,step_ms\n" +
          "".join(f"{p},{b},{5 + 0.01 * p + 0.3 * b}\n" for p, b in ((100, 1), (2000, 4), (50, 9), (900, 2), (10, 30),
                                                                         (3000, 0), (400, 12), (1200, 7))))
    return tmp_path


PLAN = ("plan", "two.jsonl", "--model", "Llama-3.1-8B", "--block-size", "4", "--time-model", "one.json", "--tp", "1")
SLO2 = ("--slo-ttft-p90", "2s")


@pytest.mark.parametrize("args, message", [
    (("--slo-ttft-p90", "1e400s"), "kvreplay plan: --slo-ttft-p90: 1e400s is not finite"),
    (("--slo-tpot-p90", "1e400s"), "kvreplay plan: --slo-tpot-p90: 1e400s is not finite"),
    (("--slo-e2e-p99", "1e400s"), "kvreplay plan: --slo-e2e-p99: 1e400s is not finite"),
    (("--slo-ttft-p90", "1e12s"), "slo.ttft_p90_s (--slo-ttft-p90) must be above 0 and at most 1e+11 seconds"),
    (SLO2 + ("--window", "1e400s"), "kvreplay plan: --window: 1e400s is not finite"),
    (SLO2 + ("--price", "H100=1e400/h"), "--price H100=1e400/h: a price must be a positive finite number"),
    (SLO2 + ("--price", "H100=0/h"), "--price H100=0/h: a price must be a positive finite number"),
    (SLO2 + ("--price", "H100=nan/h"), "--price wants GPU=USD/h"),
    (SLO2 + ("--price", "H10=2/h"), "--price H10=2/h: unknown GPU 'H10'; did you mean H100"),
    (SLO2 + ("--loads", "2", "--rates", "3"), "give loads (--loads) or rates (--rates), not both"),
    (SLO2 + ("--loads", "1e-300"), "loads (--loads): speedup 1e-300 puts the last arrival at 5e+299 s"),
    (SLO2 + ("--rates", "1e-300"), "rates (--rates): rate 1e-300"),
    (SLO2 + ("--loads", "-1"), "--loads: every load must be a positive finite number"),
    (SLO2 + ("--loads", "nan"), "--loads: every load must be a positive finite number"),
    (SLO2 + ("--rates", "inf"), "--rates: every load must be a positive finite number"),
    (SLO2 + ("--loads", "x"), "--loads: "),
    (SLO2 + ("--tp", "0"), "--tp: "),
    (SLO2 + ("--tp", "1000000"), "tps (--tp) must be a whole number from 1 to 1,024, got 1000000"),
    (SLO2 + ("--gpus", "H10"), "gpus (--gpus): unknown GPU 'H10'; did you mean H100"),
    (SLO2 + ("--gpus", ","), "gpus (--gpus) is empty"),
    (SLO2 + ("--routers", ","), "routers (--routers) is empty"),
    (SLO2 + ("--policies", ","), "policies (--policies) is empty"),
    (SLO2 + ("--max-instances", "1000000"), "max_instances (--max-instances) must be a whole number from 1 to 4,096"),
    (SLO2 + ("--jobs", "100000"), "jobs (--jobs) must be a whole number from 1 to 1,024"),
])
def test_plan_refuses_before_any_run(files, capsys, args, message):
    assert message in refused(capsys, *PLAN, *args)


def test_plan_names_are_matched_ignoring_case(files, capsys):
    # --gpus h100-sxm (an alias, lower case) and --price h100=1/h both mean the catalog's H100
    assert main([*PLAN, *SLO2, "--gpus", "h100-sxm", "--price", "h100=1/h", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    best = doc["loads"][0]["best"]
    assert best["gpu"] == "H100" and best["price_sources"] == {"gpu": "--price"}
    assert best["cost_per_hour"] == 1.0 * best["gpus"]


SIM = ("simulate", "two.jsonl", "--block-size", "4")
INSTANT = SIM + ("--time-model", "instant", "--capacity", "10")
ROOF = SIM + ("--model", "Llama-3.1-8B", "--gpu", "H100")


@pytest.mark.parametrize("args, message", [
    (INSTANT + ("--prefill-instances", "1000000000000", "--decode-instances", "1"),
     "prefill_instances (--prefill-instances) must be a whole number from 1 to 4,096"),
    (INSTANT + ("--prefill-instances", "1", "--decode-instances", "1000000000000"),
     "decode_instances (--decode-instances) must be a whole number from 1 to 4,096"),
    (INSTANT + ("--prefill-instances", "3000", "--decode-instances", "3000"),
     "prefill_instances + decode_instances (--prefill-instances, --decode-instances) must be a whole number from 1 "
     "to 4,096, got 6000"),
    (ROOF + ("--prefill-instances", "1", "--decode-instances", "1", "--kv-link", "1e300GB/s"),
     "kv_link (--kv-link): a bandwidth must be from 1KB/s to 1PB/s"),
    (ROOF + ("--prefill-instances", "1", "--decode-instances", "1", "--kv-link", "1e-300GB/s"),
     "kv_link (--kv-link): a bandwidth must be from 1KB/s to 1PB/s"),
    (ROOF + ("--prefill-instances", "1", "--decode-instances", "1", "--kv-link", "1e300"),
     "kv_link (--kv-link): not a bandwidth: '1e300'"),
    (ROOF + ("--tiers", "dram=1e300"), "--tiers dram: not a size: '1e300'"),
    (ROOF + ("--tiers", "dram=64GiB@1e300GB/s"), "--tiers dram: a bandwidth must be from 1KB/s to 1PB/s"),
    (ROOF + ("--tiers", "dram=64GiB@1e-300GB/s"), "--tiers dram: a bandwidth must be from 1KB/s to 1PB/s"),
    (ROOF + ("--instances", "2", "--global-store", "1e300"), "--global-store: not a size: '1e300'"),
    (ROOF + ("--instances", "2", "--global-store", "64GiB@1e-300GB/s"),
     "--global-store: a bandwidth must be from 1KB/s to 1PB/s"),
    (ROOF + ("--mfu", "1e300"), "--mfu"),
    (ROOF + ("--mfu", "1e-300"), "mfu (--mfu) must be from 0.0001 to 1, got 1e-300"),
    (ROOF + ("--mbu", "1e-300"), "mbu (--mbu) must be from 0.0001 to 1, got 1e-300"),
    (ROOF + ("--tiers", "dram=99999999999999999999999TiB"), "--tiers dram: '99999999999999999999999TiB' is "),
    (ROOF + ("--instances", "2", "--global-store", "99999999999999999999999"), "--global-store: '9999"),
    (ROOF + ("--speedups", "1", "--tier-list", "none;dram=64GiB@1e-300GB/s"), "--tiers dram: a bandwidth must be"),
    (INSTANT + ("--policies", "vllm,lru", "--speedups", "1,2", "--small-ratio", "0.2"),
     "--small-ratio applies to s3fifo, not vllm"),
    (INSTANT + ("--policies", "s3fifo,lru", "--speedups", "1,2", "--small-ratio", "0.2"),
     "--small-ratio applies to s3fifo, not lru"),
    (INSTANT + ("--policies", "vllm,lru", "--speedups", "1", "--ttl", "5s"), "--ttl applies to ttl, deepseek, not vllm"),
    (INSTANT + ("--small-ratio", "0.2"), "--small-ratio applies to s3fifo, not vllm"),
    (INSTANT + ("--engine-style", "sglang", "--ttl", "3s"), "--ttl applies to ttl, deepseek, not radix"),
    (INSTANT + ("--policy", "s3fifo", "--small-ratio", "1.5"), "small_ratio (--small-ratio) must be < 1, got 1.5"),
    (INSTANT + ("--speedups", "1", "--instances-list", ",".join(str(i) for i in range(1, 2001))),
     "instances (--instances-list): 2,000 cluster sizes; at most 64"),
    (INSTANT + ("--speedups", "1", "--instances-list", "1,5000"),
     "instances (--instances-list) must be a whole number from 1 to 4,096, got 5000"),
    (SIM + ("--time-model", "big.json", "--capacity", "10"), "big.json: a step would take more than 1e+07 s"),
    (INSTANT + ("--max-num-batched-tokens", str(2 ** 40)), "--max-num-batched-tokens"),
])
def test_simulate_refuses(files, capsys, args, message):
    assert message in refused(capsys, *args)


RUN = ("run", "two.jsonl", "--block-size", "4", "--capacity", "10")


@pytest.mark.parametrize("args, message", [
    (("--policy", "trtllm", "--host-blocks", "1000000000000"),
     "trtllm: host_blocks (--host-blocks) must be <= 2147483647, got 1000000000000"),
    (("--policy", "trtllm", "--host-blocks", "-1"), "trtllm: host_blocks (--host-blocks) must be >= 0, got -1"),
    (("--policy", "llamacpp", "--slots", "1000000000"), "llamacpp: slots (--slots) must be <= 256, got 1000000000"),
    (("--over-time", "0"), "--over-time"),
    (("--over-time", "1e300"), "--over-time"),
])
def test_run_refuses(files, capsys, args, message):
    assert message in refused(capsys, *RUN, *args)


@pytest.mark.parametrize("size", ["99999999999999999999req", "1e300s", "99999999999999999999s"])
def test_a_window_longer_than_the_trace_is_the_whole_trace(files, capsys, size):
    assert main([*RUN, "--over-time", size, "--json", "--summary-only"]) == 0
    windows = json.loads(capsys.readouterr().out)["over_time"]
    assert len(windows) == 1 and windows[0]["requests"] == 2 and windows[0]["prompt_tokens"] == 16


def test_a_host_pool_past_the_traces_blocks_replays_as_that_many(monkeypatch):
    # a host pool holds at most every distinct block: 10^6 host blocks replay as the trace's
    # blocks, with a warning, and give the hits of a pool that large built block by block
    from kvreplay.policies import trtllm
    from kvreplay.trace.synth import synth

    trace = synth(200, seed=0, block_size=16)
    with pytest.warns(UserWarning, match=rf"host_blocks \(--host-blocks\) 1,000,000 is more than the trace's "
                                         rf"{trace.num_blocks:,} distinct blocks"):
        clamped = kvreplay.replay(trace, "trtllm", 80, 16, host_blocks=10 ** 6)
    monkeypatch.setattr(trtllm, "host_pool", lambda host_blocks, trace: host_blocks)
    built = kvreplay.replay(trace, "trtllm", 80, 16, host_blocks=2 * trace.num_blocks + 50)
    without = kvreplay.replay(trace, "trtllm", 80, 16, host_blocks=0)
    assert np.array_equal(clamped.hit_tokens, built.hit_tokens)
    assert clamped.total_hit_tokens > without.total_hit_tokens  # (the host pool is used)


def test_a_gpu_pool_of_a_trillion_blocks_with_a_tier_runs(files, capsys):
    # the tier replay's eviction log was sized by the capacity (7 TiB for 10^12 blocks)
    assert main(["sweep", "two.jsonl", "--block-size", "4", "--hbm", "1000000000000", "--dram-sizes", "1,2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"]


@pytest.mark.parametrize("args, message", [
    (("--system-priority", "-1"), "system_priority (--system-priority): a priority must be a whole number from 0 to 100"),
    (("--system-priority", "101"), "system_priority (--system-priority): a priority must be"),
    (("--system-priority", "5", "--system-priority-ms", "-1"),
     "kvreplay synth: --system-priority-ms: must be a finite duration >= 0, got '-1'"),
    (("--system-priority", "5", "--system-priority-ms", "1e400"),
     "kvreplay synth: --system-priority-ms: must be a finite duration >= 0, got '1e400'"),
    (("--system-priority-ms", "5"), "system_priority_ms (--system-priority-ms) needs system_priority (--system-priority)"),
])
def test_synth_refuses(files, capsys, args, message):
    assert message in refused(capsys, "synth", "--requests", "3", "-o", "s.jsonl", *args)
    assert not (files / "s.jsonl").exists()


@pytest.mark.parametrize("terms, message", [
    ("prefill_tokens^99999999999999999999", "the exponent of prefill_tokens must be a whole number from 1 to 8"),
    ("prefill_tokens^100", "the exponent of prefill_tokens must be a whole number from 1 to 8, got '100'"),
    ("prefill_tokens^", "the exponent of prefill_tokens must be a whole number from 1 to 8, got ''"),
    ("prefill_tokens^5*prefill_tokens^5", "prefill_tokens's power 10 is more than 8"),
    ("1e300", "--terms: '1e300': unknown variable"),
    (",", "--terms: none given"),
])
def test_calibrate_profile_refuses(files, capsys, terms, message):
    assert message in refused(capsys, "calibrate-profile", "steps.csv", "-o", "p.json", "--terms", terms)
    assert not (files / "p.json").exists()


T = kvreplay.Trace.from_requests([([1, 2], 8), ([1, 3], 8)])
PLAN_KW = dict(model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), block_size=4, time_model="instant", tps=(1,))


@pytest.mark.parametrize("call, message", [
    (lambda: plan(T, **{**PLAN_KW, "slo": None}), "slo must be an SLO"),
    (lambda: plan(T, **{**PLAN_KW, "slo": {"ttft": 2}}), "slo: unknown objective 'ttft'"),
    (lambda: plan(T, **{**PLAN_KW, "slo": SLO(ttft_p90_s=-1.0)}), "slo.ttft_p90_s (--slo-ttft-p90) must be above 0"),
    (lambda: plan(T, **{**PLAN_KW, "slo": SLO(ttft_p90_s=math.nan)}), "slo.ttft_p90_s (--slo-ttft-p90) must be a finite"),
    (lambda: plan(T, **{**PLAN_KW, "slo": SLO(e2e_p99_s=math.inf)}), "slo.e2e_p99_s (--slo-e2e-p99) must be a finite"),
    (lambda: plan(T, **PLAN_KW, window_s=0), "window_s (--window) must be above 0"),
    (lambda: plan(T, **PLAN_KW, window_s=math.inf), "window_s (--window) must be a finite"),
    (lambda: plan(T, **PLAN_KW, jobs=0), "jobs (--jobs) must be a whole number from 1"),
    (lambda: plan(T, **PLAN_KW, jobs="2"), "jobs (--jobs) must be a whole number from 1"),
    (lambda: plan(T, **PLAN_KW, max_instances=2.5), "max_instances (--max-instances) must be a whole number"),
    (lambda: plan(T, **PLAN_KW, max_instances=10 ** 6), "max_instances (--max-instances) must be a whole number"),
    (lambda: plan(T, **{**PLAN_KW, "tps": "1"}), "tps (--tp) must be a whole number"),
    (lambda: plan(T, **PLAN_KW, gpus=5), "gpus (--gpus) must name GPUs"),
    (lambda: plan(T, **PLAN_KW, gpus=[]), "gpus (--gpus) is empty"),
    (lambda: plan(T, **PLAN_KW, gpus=["h10"]), "gpus (--gpus): unknown GPU 'h10'; did you mean H100"),
    (lambda: plan(T, **PLAN_KW, loads="2"), "loads (--loads) must be a finite number"),
    (lambda: plan(T, **PLAN_KW, loads=[-1]), "loads (--loads) must be above 0"),
    (lambda: plan(T, **PLAN_KW, loads=[2], rates=[3]), "give loads (--loads) or rates (--rates), not both"),
    (lambda: plan(T, **PLAN_KW, rates=[1e-300]), "rates (--rates): rate 1e-300"),
    (lambda: plan(T, **PLAN_KW, cache_dir=5), "cache_dir (--cache) must be a directory's path"),
    (lambda: plan(T, **PLAN_KW, prices={"H100": -1}), "prices (--price) H100 must be above 0"),
    (lambda: plan(T, **PLAN_KW, prices={"H100": math.nan}), "prices (--price) H100 must be a finite number"),
    (lambda: plan(T, **PLAN_KW, prices={"H10": 2.0}), "prices (--price) H10: unknown GPU 'H10'; did you mean H100"),
    (lambda: plan(T, **PLAN_KW, prices="cheap"), "prices must be a Prices"),
    (lambda: Prices({"H100": math.inf}), "prices (--price) H100 must be a finite number"),
    (lambda: simulate(T, capacity="10", block_size=4, time_model="instant"),
     "capacity (--capacity) '10' is text: give a block count as a number (10)"),
    (lambda: kvreplay.replay(T, "lru", "10", 4), "capacity must be a positive whole number of blocks, got '10'"),
    (lambda: simulate(T, capacity=10, block_size=4, time_model="instant",
                      scheduler=Scheduler(max_num_batched_tokens=10 ** 30)),
     "max_num_batched_tokens (--max-num-batched-tokens) must be a whole number from 1 to 2,147,483,647"),
    (lambda: Scheduler(max_num_seqs=10 ** 30), "max_num_seqs (--max-num-seqs) must be a whole number from 1"),
    (lambda: simulate(T, capacity=10, block_size=4, time_model={}), "unknown time model {}"),
    (lambda: simulate(T, capacity=10, block_size=4, time_model="instant", rate=1, seed=-1),
     "seed (--seed) must be a whole number from 0"),
    (lambda: load_sweep(T, speedups=[], capacity=10, block_size=4, time_model="instant"),
     "speedups (--speedups) is empty"),
    (lambda: load_sweep(T, speedups="12", capacity=10, block_size=4, time_model="instant"),
     "speedups (--speedups) must be a list of numbers, got '12'"),
    (lambda: load_sweep(T, speedups=["fast"], capacity=10, block_size=4, time_model="instant"),
     "speedups (--speedups) must be a finite number, got 'fast'"),
    (lambda: load_sweep(T, rates=[math.nan], capacity=10, block_size=4, time_model="instant"),
     "rates (--rates) must be a finite number, got nan"),
    (lambda: load_sweep(T, speedups=[1], capacity=10, block_size=4, time_model="instant", instances=list(range(1, 100))),
     "instances (--instances-list): 99 cluster sizes; at most 64"),
    (lambda: kvreplay.replay(T, "trtllm", 4, 4, host_blocks=2 ** 40), "host_blocks (--host-blocks) must be <= "),
    (lambda: kvreplay.replay(T, "llamacpp", 4, 4, slots=1000), "slots (--slots) must be <= 256"),
    (lambda: kvreplay.engine.tiers.Tier("dram", 10, bandwidth=1e-300), "bandwidth must be from 1000 to 1e+15"),
])
def test_the_api_raises_kvreplay_errors_naming_the_argument(call, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(KvreplayError) as e:
            call()
    assert message in str(e.value)
