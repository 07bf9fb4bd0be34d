"""Data parallelism as vLLM 0.33.0 runs it (serving/dataparallel.py, kernel/batch.c
batch_start_lockstep, kernel/loop.c schedule_lockstep, routing/vllm_dp.c): an MoE's ranks in
lockstep worked by hand (one busy rank, the idle rank's dummy batch, the step the longer of the
two; the experts over the gathered tokens, padded within a CUDA graph), the rank vLLM's API server
picks, a dense model's ranks as independent replicas, and the pool with the experts split."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.serving import dataparallel, routing
from kvreplay.serving.kernel import slots
from kvreplay.serving.simulate import simulate
from kvreplay.serving.timing import (CalibratedRooflineTimeModel, StepBatch, aggregates, kv_capacity, packed,
                                     roofline_window, step_seconds)
from kvreplay.serving.timing.exchange import EXCHANGE, OWN_EXCHANGE, exchange_terms

from sim_cases import ONE_SECOND

VIEW = slots("view")
MOE = "Qwen3-30B-A3B"  # 48 MoE layers of 128 experts (8 a token), each 3 x 2,048 x 768: 28,991,029,248 parameters


def one_request(prompt: int, outputs: int = 2, block_size: int = 16):
    blocks = [(0, b) for b in range(-(-prompt // block_size))]
    return kvreplay.Trace.from_requests([(blocks, prompt, 0.0, outputs)], block_size=block_size)


def run_dp(trace, tm, **kw):
    return simulate(trace, "vllm", 4000, 16, time_model=tm, model=MOE, host="none", band_runs=False,
                    compare_sequential=False, dp=2, **kw)


@pytest.mark.parametrize("prompt, gathered", [(1000, 1001), (300, 600)])
def test_one_busy_rank_the_idle_rank_runs_a_dummy_batch_and_the_step_is_the_longer(prompt, gathered):
    # one request on rank 0 (the first in the API server's scan); rank 1 has nothing and runs vLLM's
    # dummy batch (one token) beside each of its steps. The experts run over both ranks' tokens:
    # above vLLM's largest CUDA graph (512 tokens at max_num_seqs 256) each rank its own (1,000 + the
    # dummy's 1), within it both padded to the larger (2 x 300). Its decode step: 1 token a rank,
    # within a graph: 2 x 1.
    tm = CalibratedRooflineTimeModel(MOE, "H100", 1)
    for ep in (True, False):
        rank = dataparallel.time_model(tm, dataparallel.DataParallel(2, 1, ep, lockstep=True))
        busy = rank.step_time(StepBatch((prompt,), (0,), expert_tokens=gathered))
        dummy = rank.step_time(StepBatch(decode_context=(1,), expert_tokens=gathered))
        decode = rank.step_time(StepBatch(decode_context=(prompt + 1,), expert_tokens=2))
        idle = rank.step_time(StepBatch(decode_context=(1,), expert_tokens=2))
        assert busy > dummy and decode > idle
        r = run_dp(one_request(prompt), tm, enable_expert_parallel=ep)
        assert r.instance.tolist() == [0]
        assert r.first_token_s[0] - r.arrival_s[0] == pytest.approx(max(busy, dummy), rel=1e-9)
        assert r.finish_s[0] - r.first_token_s[0] == pytest.approx(max(decode, idle), rel=1e-9)
        # the experts priced over the gathered tokens: not the step one rank alone would take
        assert busy != pytest.approx(rank.step_time(StepBatch((prompt,), (0,))), rel=1e-6)
        # two steps of rank 0's, each beside a dummy batch of rank 1's
        assert r.counters["steps"] == 2 and r.counters["dummy_steps"] == 2


def test_an_arrival_in_the_waves_tail_waits_for_the_dummy_step():
    # request 0 ends with the wave's third step; the ranks agree whether any holds a request at the
    # wave's steps 1, 16, 32, ... (dp_sync_interval 16), so they step on, dummy batches both, until
    # the 16th. Request 1 arrives in the third of them: it starts when that one ends, not at once
    tm = CalibratedRooflineTimeModel(MOE, "H100", 1)
    rank = dataparallel.time_model(tm, dataparallel.DataParallel(2, 1, True, lockstep=True))
    dummy = rank.step_time(StepBatch(decode_context=(1,), expert_tokens=2))
    prefill = max(rank.step_time(StepBatch((64,), (0,), expert_tokens=128)),
                  rank.step_time(StepBatch(decode_context=(1,), expert_tokens=128)))
    decodes = [max(rank.step_time(StepBatch(decode_context=(c,), expert_tokens=2)), dummy) for c in (65, 66)]
    end = prefill + sum(decodes)
    at = end + 2.5 * dummy
    trace = kvreplay.Trace.from_requests([([(0, b) for b in range(4)], 64, 0.0, 3),
                                          ([(1, b) for b in range(4)], 64, at * 1e3, 1)], block_size=16)
    r = run_dp(trace, tm, enable_expert_parallel=True)
    assert r.first_token_s[0] == pytest.approx(prefill, rel=1e-9)
    assert r.finish_s[0] == pytest.approx(end, rel=1e-9)
    assert r.scheduled_s[1] == pytest.approx(end + 3 * dummy, rel=1e-9)
    # 3 steps of rank 0 beside rank 1's dummies, 3 dummy steps of both, then request 1's step on
    # rank 1 (the scan's start moved on) beside rank 0's dummy
    assert r.instance.tolist() == [0, 1] and r.counters["dummy_steps"] == 3 + 2 * 3 + 1
    # without the tail (a wave ending at once) it would have started at its arrival
    assert r.scheduled_s[1] > at
    # arriving after the tail (13 dummy steps: the wave's steps 4 to 16), it starts at its arrival, and
    # the ranks ran 2 x 13 dummy batches in between
    late = end + 20 * dummy
    trace = kvreplay.Trace.from_requests([([(0, b) for b in range(4)], 64, 0.0, 3),
                                          ([(1, b) for b in range(4)], 64, late * 1e3, 1)], block_size=16)
    r = run_dp(trace, tm, enable_expert_parallel=True)
    assert r.scheduled_s[1] == pytest.approx(late, rel=1e-12)
    assert r.counters["dummy_steps"] == 3 + 2 * 13 + 1


def test_the_rank_vllm_picks_by_hand():
    def pick(rows, depth, fetch=None, capacity=100):
        view = []
        for cols in rows:
            row = [0.0] * len(VIEW)
            for name, value in cols.items():
                row[getattr(VIEW, "V_" + name.upper())] = value
            view.append(row)
        return routing.rule("vllm-dp", view, [0] * len(rows), routing.Prompt(4, 64, 16), depth=depth, fetch=fetch,
                            time_model=packed(ONE_SECOND), capacity=capacity)

    # the fewer requests in flight (routed, not finished)
    assert pick([dict(requests=3, running=2), dict(requests=2, running=2)], [0, 1]) == 1
    # ties: the first in the scan, which starts one rank further each request
    assert pick([dict(requests=2), dict(requests=2)], [0, 1]) == 0
    assert pick([dict(requests=2), dict(requests=2)], [1, 0]) == 1
    # the coordinator's waiting + running counts when above the requests in flight: 4 against 3
    assert pick([dict(requests=1, running=2, waiting=2), dict(requests=3)], [0, 1]) == 1
    # ... raised by the requests routed there since its last snapshot: max(2, 2 + 2) = 4 > 3
    assert pick([dict(requests=2, running=2), dict(requests=3)], [0, 1], fetch=[2.0, 0.0]) == 1
    # waiting requests on a KV-bound rank: + 6 x waiting x (usage - 0.5); 90 of 100 blocks held:
    # max(2, 2) + 6 x 1 x 0.4 = 4.4 > 4; at 40 held no penalty: 2 < 4
    assert pick([dict(requests=2, waiting=1, running=1, held=90), dict(requests=4, held=95)], [0, 1]) == 1
    assert pick([dict(requests=2, waiting=1, running=1, held=40), dict(requests=4, held=95)], [0, 1]) == 0


def test_a_dense_models_ranks_are_replicas_behind_vllms_api_server():
    # Llama is no MoE: its ranks step on their own (EngineCoreProc), exactly the instances the
    # vllm-dp router spreads requests over, on counts 100 ms old
    rng = np.random.default_rng(1)
    reqs = [([(i, b) for b in range(int(n) // 16 + 1)], int(n), float(k) * 40.0, int(o))
            for k, (i, n, o) in enumerate(zip(range(40), rng.integers(50, 900, 40), rng.integers(2, 60, 40)))]
    trace = kvreplay.Trace.from_requests(reqs, block_size=16)
    common = dict(time_model="roofline", model="Llama-3.1-8B", gpu="H100", band_runs=False, compare_sequential=False)
    dp = simulate(trace, "vllm", 300, 16, dp=2, **common)
    replicas = simulate(trace, "vllm", 300, 16, instances=2, router="vllm-dp", router_lag_ms=100, **common)
    assert dp.router == "vllm-dp" and dp.instances == 2 and "dummy_steps" not in dp.counters
    np.testing.assert_array_equal(dp.instance, replicas.instance)
    np.testing.assert_array_equal(dp.first_token_s, replicas.first_token_s)
    np.testing.assert_array_equal(dp.finish_s, replicas.finish_s)
    # with no load the scan's start moving on alternates the ranks (least-loaded would keep rank 0)
    idle = simulate(trace, "vllm", 300, 16, dp=2, time_model="instant", compare_sequential=False)
    assert idle.instance.tolist()[:6] == [0, 1, 0, 1, 0, 1]


def test_the_pool_with_the_experts_split_over_the_ranks():
    # Qwen3-30B-A3B on one H100 a rank: its 28,991,029,248 routed-expert parameters (57,982,058,496
    # bytes at bf16) are split over dp=2 x tp=1 GPUs, whole experts or each one's width alike:
    # each GPU holds 28,991,029,248 bytes less, and its pool takes them
    one = kv_capacity(MOE, "H100", 1, 16)
    assert 3 * 48 * 128 * 2048 * 768 == 28_991_029_248
    for ep in (True, False):
        two = kv_capacity(MOE, "H100", 1, 16, dp=2, expert_parallel=ep)
        assert two.weight_bytes_per_gpu == pytest.approx(one.weight_bytes_per_gpu - 28_991_029_248)
        assert two.expert_bytes_per_gpu == pytest.approx(28_991_029_248)
        assert two.kv_bytes_available == pytest.approx(one.kv_bytes_available + 28_991_029_248)
        assert two.blocks == math.floor(two.kv_bytes_available / (98_304 * 16))
        assert two.to_dict()["dp"] == 2 and "dp" not in one.to_dict()
    # a dense model's ranks each hold all its weights
    assert kv_capacity("Llama-3.1-8B", "H100", 1, 16, dp=2).blocks == kv_capacity("Llama-3.1-8B", "H100", 1, 16).blocks


def test_the_pool_against_vllms_for_llmservingsims_dp2_ep_run():
    # LLMServingSim's meta.json of its Qwen3-30B-A3B-Instruct-2507 run (vLLM 0.28.0, DP 2 + EP on two
    # RTX PRO 6000 Blackwell, utilization 0.92, 2,048 tokens and 128 sequences a step) records one
    # rank's pool: kv_cache_size_tokens 605,104 (benchmarks/data/vllm_kv_pool_points.csv). Before
    # the experts were split over the ranks kvreplay gave 326,400 (-46.1%); now 621,312 (+2.7%)
    opts = dict(max_num_batched_tokens=2048, max_num_seqs=128)
    assert kv_capacity(MOE, "RTX-PRO-6000", 1, 16, 0.92, **opts).tokens == 326_400
    got = kv_capacity(MOE, "RTX-PRO-6000", 1, 16, 0.92, dp=2, expert_parallel=True, **opts).tokens
    assert got == 621_312 and abs(got / 605_104 - 1) < 0.05


def test_what_data_parallelism_refuses_naming_the_flag():
    trace = one_request(64)
    tm = CalibratedRooflineTimeModel(MOE, "H100", 1)
    cases = [(dict(dp=2, engine_style="sglang"), "--dp"), (dict(dp=2, instances=2), "--instances"),
             (dict(dp=2, router="least-loaded"), "--router"), (dict(dp=2, router_lag_ms=50), "--router-lag-ms"),
             (dict(dp=2, prefill_instances=1, decode_instances=1), "--prefill-instances"),
             (dict(dp=0), "--dp"), (dict(enable_expert_parallel=True), "--enable-expert-parallel"),
             (dict(dp=2, time_model=ONE_SECOND), "roofline")]
    for kw, flag in cases:
        options = {**dict(time_model=tm, model=MOE, band_runs=False, compare_sequential=False), **kw}
        with pytest.raises(ConfigError, match=flag.replace("-", r"\-")):
            simulate(trace, "vllm", 4000, 16, **options)
    with pytest.raises(ConfigError, match="not a mixture of experts"):
        simulate(trace, "vllm", 4000, 16, model="Llama-3.1-8B", time_model="instant", dp=2, enable_expert_parallel=True)


def test_the_exchange_is_priced_sequence_parallel_or_not():
    # DP 2 at TP 1 (with or without expert parallelism): the exchange is priced, no warning; with
    # --enable-expert-parallel at TP 2 vLLM runs the MoE sequence-parallel: priced too, and said so
    for ep in (True, False):
        r = simulate(one_request(64), "vllm", 4000, 16, time_model="roofline", model=MOE, gpu="H100", dp=2,
                     enable_expert_parallel=ep, compare_sequential=False)
        assert not any("not priced" in w for w in r.band["warnings"])
        assert r.config()["time_model"]["data_parallel"] == {"data_parallel_size": 2, "enable_expert_parallel": ep,
                                                              "lockstep": True, "router": "vllm-dp",
                                                              "token_exchange": "priced"}
    r = simulate(one_request(64), "vllm", 4000, 16, time_model="roofline", model=MOE, gpu="H100", dp=2, tp=2,
                 enable_expert_parallel=True, compare_sequential=False)
    assert not any("not priced" in w for w in r.band["warnings"])
    dp = r.config()["time_model"]["data_parallel"]
    assert dp["token_exchange"] == "priced" and dp["sequence_parallel_moe"] == {"tp": 2, "expert_group_gpus": 4}
    # without expert parallelism at TP 2 each TP GPU gathers over its own DP group: priced, not sequence-parallel
    r = simulate(one_request(64), "vllm", 4000, 16, time_model="roofline", model=MOE, gpu="H100", dp=2, tp=2,
                 compare_sequential=False)
    assert r.config()["time_model"]["data_parallel"]["token_exchange"] == "priced"
    assert "sequence_parallel_moe" not in r.config()["time_model"]["data_parallel"]
    assert not any("not priced" in w for w in r.band["warnings"])


def test_the_exchange_by_hand():
    # Qwen3-30B-A3B (hidden 2,048, 48 MoE layers, 8 experts a token) over 2 H100 ranks: at each MoE
    # layer an all-gather of 2,048 x 2 + 8 x 8 = 4,160 bytes a gathered token and a reduce-scatter of
    # 2,048 x 2 = 4,096, each latency + (2 - 1) / 2 x bytes / bus at the H100's fitted group-2 terms
    tm = CalibratedRooflineTimeModel(MOE, "H100", 1)
    rank = dataparallel.time_model(tm, dataparallel.DataParallel(2, 1, True, lockstep=True))
    x = rank.dp_exchange
    assert (x.layers, x.group, x.dispatch_bytes, x.combine_bytes) == (48, 2, 4160.0, 4096.0)
    (ag_l, ag_b), (rs_l, rs_b) = EXCHANGE["terms"]["all_gather"][2], EXCHANGE["terms"]["reduce_scatter"][2]
    assert x.gather == (ag_l, ag_b) and x.scatter == (rs_l, rs_b)
    gathered = 600  # (2 ranks padded to 300 tokens)
    by_hand = 48 * (ag_l + 0.5 * 600 * 4160 / ag_b + rs_l + 0.5 * 600 * 4096 / rs_b)
    # with the fitted figures: 48 x (6.024 us + 5.966 us + 6.012 us + 6.071 us) = 1.155 ms
    assert by_hand == pytest.approx(1.1555e-3, rel=1e-3)
    batch = StepBatch((300,), (0,), expert_tokens=gathered)
    assert rank.terms(batch)["exchange"] == pytest.approx(by_hand, rel=1e-12)
    without = copy.copy(rank)
    without.dp_exchange = None
    assert rank.step_time(batch) - without.step_time(batch) == pytest.approx(by_hand, rel=1e-9)
    # the C step model prices the same (timing/step.c dp_exchange)
    assert c_step(rank, batch) == pytest.approx(rank.step_time(batch), rel=1e-12)
    assert c_step(without, batch) == pytest.approx(without.step_time(batch), rel=1e-12)
    # an L40S (PCIe 4 x16, 32 GB/s each way, no NCCL table of its own): the H100's bus x 32 / 450
    l40s = dataparallel.time_model(CalibratedRooflineTimeModel(MOE, "L40S", 1),
                                   dataparallel.DataParallel(2, 1, True, lockstep=True)).dp_exchange
    assert l40s.gather == pytest.approx((ag_l, ag_b * 32 / 450)) and l40s.scatter == pytest.approx((rs_l, rs_b * 32 / 450))
    assert l40s.describe()["terms_from"] == "H100"
    # an RTX PRO 6000 runs its own table's terms: over 4 GPUs its all-gather's bus is 22.6 GB/s, where
    # the H100's scaled to its PCIe 5 (64 / 450) would be 37.4
    pro = dataparallel.time_model(CalibratedRooflineTimeModel(MOE, "RTX-PRO-6000", 1),
                                  dataparallel.DataParallel(4, 1, True, lockstep=True)).dp_exchange
    assert pro.gather == OWN_EXCHANGE["RTX-PRO-6000"]["terms"]["all_gather"][4] == (9.863e-06, 2.261e+10)
    assert EXCHANGE["terms"]["all_gather"][4][1] * 64 / 450 == pytest.approx(3.743e10, rel=1e-3)
    assert pro.describe()["terms_from"] == "RTX-PRO-6000"
    # a group between the sizes fitted: log2-interpolated (3 GPUs: 0.585 of the way from 2 to 4)
    f = math.log2(3) - 1
    (l2, b2), (l4, b4) = EXCHANGE["terms"]["all_gather"][2], EXCHANGE["terms"]["all_gather"][4]
    assert exchange_terms("all_gather", 3, "H100") == pytest.approx((l2 + f * (l4 - l2), b2 + f * (b4 - b2)))
    # an fp8 MoE kernel gathers its inputs quantised: 2,048 x (1 + 4 / 128) + 64 bytes a token
    fp8 = dataparallel.time_model(CalibratedRooflineTimeModel(MOE, "H100", 1, dtype="fp8"),
                                  dataparallel.DataParallel(2, 1, True, lockstep=True)).dp_exchange
    assert fp8.dispatch_bytes == 2048 * (1 + 4 / 128) + 64 and fp8.combine_bytes == 4096


def c_step(model, batch):
    """The C step model's time of `batch` (timing/step.c) under `model`, packed."""
    tm = packed(model)
    return step_seconds(tm, aggregates(batch, roofline_window(tm)))


def test_a_lockstep_run_pays_the_exchange_each_step():
    # one request on rank 0, rank 1's dummy beside it: the steps the first test works by hand, each
    # with the exchange over the gathered tokens (1,001 above a CUDA graph, 2 x 1 decoding)
    tm = CalibratedRooflineTimeModel(MOE, "H100", 1)
    rank = dataparallel.time_model(tm, dataparallel.DataParallel(2, 1, True, lockstep=True))
    r = run_dp(one_request(1000), tm, enable_expert_parallel=True)
    busy = rank.step_time(StepBatch((1000,), (0,), expert_tokens=1001))
    assert r.first_token_s[0] - r.arrival_s[0] == pytest.approx(busy, rel=1e-9)
    assert rank.terms(StepBatch((1000,), (0,), expert_tokens=1001))["exchange"] == pytest.approx(
        rank.dp_exchange.seconds(1001), rel=1e-12)
    decode = rank.step_time(StepBatch(decode_context=(1001,), expert_tokens=2))
    assert r.finish_s[0] - r.first_token_s[0] == pytest.approx(decode, rel=1e-9)


def test_the_printed_pool_and_cluster_lines(capsys):
    from pathlib import Path

    from kvreplay.cli import main

    walk = str(Path(__file__).resolve().parents[1] / "data" / "walk.jsonl")
    assert main(["simulate", walk, "--model", MOE, "--gpu", "H100", "--dp", "2", "--enable-expert-parallel"]) == 0
    out = capsys.readouterr().out
    assert "28,581 blocks of 16 tokens" in out and "in each of the 2 data-parallel ranks (a pool each)" in out
    # the budget, line by line: the weights with the experts' half out, and that half's own line
    assert "- weights, Qwen3-30B-A3B at bf16 over tp=1" in out and "29.82 GiB" in out
    assert "of which the routed experts, 1/2 of them (whole experts over dp=2 x tp=1 GPUs)" in out and "27.00 GiB" in out
    assert "2 data-parallel ranks (--dp, each with the pool above)" in out and "in lockstep" in out
    assert "their exchange at each MoE layer priced, an all-gather and a reduce-scatter timed from NCCL" in out
    assert "not priced" not in out


def test_the_shipped_exchange_terms_are_the_fit_on_the_h100s_nccl_table():
    # benchmarks/fit_dp_exchange.py on aiconfigurator's H100 table (the wheel calibrate.py reads;
    # skipped where it is not downloaded): the shipped EXCHANGE is its fit, to the 4 digits printed
    from conftest import BENCHMARKS, benchmark_module

    if not sorted((BENCHMARKS / ".cache" / "aiconfigurator").glob("aiconfigurator_core-*.whl")):
        pytest.skip("aiconfigurator's wheel not downloaded (benchmarks/.cache/aiconfigurator)")
    pytest.importorskip("pyarrow")
    fit = benchmark_module("fit_dp_exchange")
    for (gpu, gpu_dir, version), shipped in ((fit.FIT, EXCHANGE), *((o, OWN_EXCHANGE[o[0]]) for o in fit.OWN)):
        op, n, nbytes, seconds = fit.table(gpu_dir, version)
        for o in fit.OPS:
            for g in (2, 4, 8):
                keep = (op == o) & (n == g)
                assert keep.sum() == 21, gpu
                latency, bus = fit.fit(g, nbytes[keep], seconds[keep])
                assert shipped["terms"][o][g] == (float(f"{latency:.4g}"), float(f"{bus:.4g}")), gpu
