"""An MoE's token exchange over more than one server (timing/exchange.py across_servers): a group
beyond the 8 GPUs fitted, on a GPU whose network the catalog holds, priced as NCCL's ring over the
servers, worked by hand for one step; the C step model against Python's at 16 GPUs; the groups
within a server unchanged; a GPU without a network still at the 8-GPU terms, warned as short."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvreplay.catalog.gpus import get_gpu
from kvreplay.serving import dataparallel
from kvreplay.serving.timing import (CalibratedRooflineTimeModel, StepBatch, aggregates, packed, roofline_window,
                                     step_seconds)
from kvreplay.serving.timing.exchange import EXCHANGE, SERVER_HOP_LATENCY, across_servers, exchange_terms, spans_nodes

MOE = "Qwen3-30B-A3B"  # hidden 2,048, 48 layers, every one MoE, 8 experts a token


def rank(dp: int, tp: int):
    """One rank's time model at DP `dp` x TP `tp`, expert parallel, on H100s."""
    return dataparallel.time_model(CalibratedRooflineTimeModel(MOE, "H100", tp),
                                   dataparallel.DataParallel(dp, tp, True, lockstep=True))


def test_sixteen_gpus_by_hand():
    # DP 2 x TP 8, sequence-parallel: 16 H100s on 2 servers of 8. NCCL's ring takes 15 steps, 1 over
    # the network (10 us), 14 within a server: 7 more than the 8-GPU group's, each the slope of the
    # fitted latencies, (l8 - l2) / 6; the bus the lesser of the 8-GPU bus and 8 NICs x 50 GB/s
    x = rank(2, 8).dp_exchange
    assert (x.group, x.sp, x.layers, x.dispatch_bytes, x.combine_bytes) == (16, 8, 48, 4160.0, 4096.0)
    terms = {}
    for op in ("all_gather", "reduce_scatter"):
        (l2, _), (l8, b8) = EXCHANGE["terms"][op][2], EXCHANGE["terms"][op][8]
        terms[op] = (l8 + 7 * (l8 - l2) / 6 + SERVER_HOP_LATENCY, min(b8, 8 * 50e9))
    assert x.gather == pytest.approx(terms["all_gather"], rel=1e-12)
    assert x.scatter == pytest.approx(terms["reduce_scatter"], rel=1e-12)
    # all-gather 11.78 + 6.716 + 10 = 28.50 us, reduce-scatter 11.01 + 5.831 + 10 = 26.84 us, NVLink's
    # bus both (289 and 300 GB/s under 400): 1,024 gathered tokens move 15 / 16 x 1,024 x 4,160 bytes
    # and 15 / 16 x 1,024 x 4,096, 13.82 and 13.12 us, so 48 x 82.28 us = 3.949 ms a step
    assert x.gather[0] == pytest.approx(28.495e-6, rel=1e-4) and x.scatter[0] == pytest.approx(26.841e-6, rel=1e-4)
    (ag_l, ag_b), (rs_l, rs_b) = terms["all_gather"], terms["reduce_scatter"]
    by_hand = 48 * (ag_l + 15 / 16 * 1024 * 4160 / ag_b + rs_l + 15 / 16 * 1024 * 4096 / rs_b)
    assert by_hand == pytest.approx(3.949e-3, rel=1e-3)
    assert x.seconds(1024) == pytest.approx(by_hand, rel=1e-12)


def test_the_run_states_the_assumption():
    dp = dataparallel.DataParallel(2, 8, True, lockstep=True)
    note = dataparallel.warning(dp, "H100")
    assert "2 servers of 8" in note and "8 NICs of 50 GB/s" in note and "an assumption" in note
    assert "read them as short" not in note
    assert rank(2, 8).dp_exchange.describe()["assumption"] == spans_nodes(16, "H100")


@pytest.mark.parametrize("dp, tp, batch", [(16, 1, StepBatch((300,), (0,), expert_tokens=316)),
                                           (2, 8, StepBatch((1001,), (0,), expert_tokens=1008)),
                                           (4, 8, StepBatch(decode_context=(90, 7), expert_tokens=32))])
def test_the_c_step_model_prices_the_same(dp, tp, batch):
    model = rank(dp, tp)
    assert model.dp_exchange.group == dp * (tp if tp > 1 else 1) > 8
    assert model.dp_exchange.gather != EXCHANGE["terms"]["all_gather"][8]
    tm = packed(model)
    assert step_seconds(tm, aggregates(batch, roofline_window(tm))) == pytest.approx(model.step_time(batch), rel=1e-12)


@pytest.mark.parametrize("dp, tp", [(8, 1), (2, 4), (4, 2)])
def test_a_group_within_a_server_is_unchanged(dp, tp):
    x = rank(dp, tp).dp_exchange
    assert x.group == 8 and x.assumption is None
    assert x.gather == EXCHANGE["terms"]["all_gather"][8] and x.scatter == EXCHANGE["terms"]["reduce_scatter"][8]
    assert dataparallel.warning(dataparallel.DataParallel(dp, tp, True, lockstep=True), "H100") is None


def test_more_servers_more_network_steps():
    # 32 GPUs on 4 servers: 31 steps, 3 over the network, 28 within a server (21 more than at 8)
    (l2, _), (l8, b8) = EXCHANGE["terms"]["all_gather"][2], EXCHANGE["terms"]["all_gather"][8]
    assert exchange_terms("all_gather", 32, "H100") == pytest.approx(
        (l8 + 21 * (l8 - l2) / 6 + 3 * SERVER_HOP_LATENCY, b8), rel=1e-12)


def test_a_slow_network_binds_the_bus():
    # the A100 (a 200 Gb/s NIC a GPU, 8 a server: 200 GB/s) scaled from the H100's NVLink bus (289 x 300 / 450
    # = 193 GB/s) stays NVLink-bound; a GPU whose servers' NICs add up to less is bound by them
    assert exchange_terms("all_gather", 16, "A100-80GB")[1] == pytest.approx(2.889e11 * 300 / 450)
    g = get_gpu("A100-80GB")
    assert g.node_gpus * g.scale_out_gbps * 1e9 == 2e11
    slow = replace(g, scale_out_gbps=12.5)
    assert across_servers(EXCHANGE["terms"]["all_gather"], 16, slow, 1e-5, 1.926e11)[1] == 1e11


def test_a_gpu_without_a_network_stays_at_the_eight_gpu_terms():
    # the H20's catalog entry gives no network between servers: the 8-GPU terms, warned as short
    assert get_gpu("H20").scale_out_gbps is None
    assert exchange_terms("all_gather", 16, "H20") == exchange_terms("all_gather", 8, "H20")
    assert "read them as short" in spans_nodes(16, "H20")
