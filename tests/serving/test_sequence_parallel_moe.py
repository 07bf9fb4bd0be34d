"""vLLM's sequence-parallel MoE (DP > 1, TP > 1, --enable-expert-parallel; serving/dataparallel.py
sequence_parallel, timing/exchange.py) priced by hand: each rank's tokens split over its TP GPUs
(padded to equal chunks), gathered and scattered over the DP x TP expert group, the MoE output
all-gathered over TP in place of the MoE layer's TP all-reduce; the C step model against Python's,
and a lockstep run's steps."""

from __future__ import annotations

import copy

import pytest

import kvreplay
from kvreplay.serving import dataparallel
from kvreplay.serving.simulate import simulate
from kvreplay.serving.timing import CalibratedRooflineTimeModel, StepBatch, aggregates, packed, roofline_window, step_seconds
from kvreplay.serving.timing.exchange import EXCHANGE, sp_padded
from kvreplay.serving.timing.roofline import allreduce_time

MOE = "Qwen3-30B-A3B"  # hidden 2,048, 48 layers, every one MoE, 8 experts a token
SP = dataparallel.DataParallel(2, 2, True, lockstep=True)  # DP 2 x TP 2, expert parallel: 4 GPUs


def rank_model(tp: int = 2, dp: dataparallel.DataParallel = SP):
    return dataparallel.time_model(CalibratedRooflineTimeModel(MOE, "H100", tp), dp)


def c_step(model, batch):
    tm = packed(model)
    return step_seconds(tm, aggregates(batch, roofline_window(tm)))


def test_the_chunks_padding():
    # sequence_parallel_chunk pads a rank's tokens to a multiple of TP (models/utils.py:1144-1150)
    assert [sp_padded(n, 2) for n in (1, 2, 1001)] == [2.0, 2.0, 1002.0]
    assert [sp_padded(n, 4) for n in (1, 5, 8)] == [4.0, 8.0, 8.0] and sp_padded(7, 1) == 7.0


def test_one_step_by_hand():
    # rank 0 prefills 1,001 tokens beside rank 1's dummy token, above a CUDA graph: each rank's chunks
    # padded to TP 2, 1,002 + 2 = 1,004 tokens gathered over the 4 GPUs. A MoE layer: an all-gather
    # of 2,048 x 2 + 8 x 8 = 4,160 bytes a token and a reduce-scatter of 4,096 over 4 GPUs, and the
    # rank's 1,002 padded tokens' output (4,096 bytes each) all-gathered over its 2 TP GPUs
    rank = rank_model()
    x = rank.dp_exchange
    assert (x.layers, x.group, x.sp, x.dispatch_bytes, x.combine_bytes) == (48, 4, 2, 4160.0, 4096.0)
    (ag_l, ag_b), (rs_l, rs_b) = EXCHANGE["terms"]["all_gather"][4], EXCHANGE["terms"]["reduce_scatter"][4]
    tpg_l, tpg_b = EXCHANGE["terms"]["all_gather"][2]
    assert (x.gather, x.scatter, x.tp_gather) == ((ag_l, ag_b), (rs_l, rs_b), (tpg_l, tpg_b))
    dispatch, combine, output = 1004 * 4160, 1004 * 4096, 1002 * 4096
    assert (dispatch, combine, output) == (4_176_640, 4_112_384, 4_104_192)
    by_hand = 48 * (ag_l + 0.75 * dispatch / ag_b + rs_l + 0.75 * combine / rs_b + tpg_l + 0.5 * output / tpg_b)
    # 48 x (20.06 + 19.47 + 15.83 us) = 2.657 ms
    assert by_hand == pytest.approx(2.657e-3, rel=1e-3)
    batch = StepBatch((1001,), (0,), expert_tokens=1004)
    terms = rank.terms(batch)
    assert terms["exchange"] == pytest.approx(by_hand, rel=1e-12)
    # the all-reduces: one a layer (attention's), the MoE's replaced by the all-gather above
    one = float(allreduce_time(2, 1001 * 2048 * 2.0, rank.allreduce_latency_s, rank.c))
    assert terms["allreduce"] == pytest.approx(48 * one, rel=1e-12)
    without = copy.copy(rank)
    without.dp_exchange = None
    assert without.terms(batch)["allreduce"] == pytest.approx(96 * one, rel=1e-12)
    assert rank.step_time(batch) - without.step_time(batch) == pytest.approx(
        (by_hand - 48 * one) * rank.scale["prefill"], rel=1e-9)


@pytest.mark.parametrize("tp, batch", [(2, StepBatch((1001,), (0,), expert_tokens=1004)),
                                       (2, StepBatch(decode_context=(1001,), expert_tokens=4)),
                                       (4, StepBatch((37, 5), (0, 16), decode_context=(90, 7), expert_tokens=48)),
                                       (8, StepBatch(decode_context=(3,), expert_tokens=16))])
def test_the_c_step_model_prices_the_same(tp, batch):
    rank = rank_model(tp, dataparallel.DataParallel(2, tp, True, lockstep=True))
    assert rank.dp_exchange.sp == tp
    assert c_step(rank, batch) == pytest.approx(rank.step_time(batch), rel=1e-12)


def test_a_lockstep_run_pads_each_ranks_chunks():
    # one request of 1,001 tokens on rank 0, rank 1's dummy beside it: its prefill gathers 1,002 + 2
    # (above a CUDA graph, each rank its own); its decode, within a graph, both padded to the
    # larger, 1 token, then to TP 2: 2 x 2
    rank = rank_model()
    trace = kvreplay.Trace.from_requests([([(0, b) for b in range(63)], 1001, 0.0, 2)], block_size=16)
    r = simulate(trace, "vllm", 4000, 16, time_model=CalibratedRooflineTimeModel(MOE, "H100", 2), model=MOE,
                 host="none", band_runs=False, compare_sequential=False, dp=2, tp=2, enable_expert_parallel=True)
    busy = rank.step_time(StepBatch((1001,), (0,), expert_tokens=1004))
    assert r.first_token_s[0] - r.arrival_s[0] == pytest.approx(busy, rel=1e-9)
    decode = rank.step_time(StepBatch(decode_context=(1002,), expert_tokens=4))
    assert r.finish_s[0] - r.first_token_s[0] == pytest.approx(decode, rel=1e-9)
    # not the step without the padding
    assert busy != pytest.approx(rank.step_time(StepBatch((1001,), (0,), expert_tokens=1002)), rel=1e-9)
