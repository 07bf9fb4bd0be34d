"""Floors (serving/floors.py) are lower bounds, and plan never prunes a configuration that passes.

Hypothesis draws small conversation-like traces (requests resending a session's history plus new
blocks, so the best cache hits matter) and serves them for real: every finished request's TTFT,
TPOT and end to end are at least its floors, at each end of the calibrated roofline's band, on any
instance count, router, policy and pool (preemptions included). Then it plans them, and runs every
configuration the plan did not search to the end, at every instance count it could have chosen:
none passes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreplay.serving.floors import prefill_alone, request_floors
from kvreplay.serving.plan import plan
from kvreplay.catalog.prices import Prices
from kvreplay.serving.simulate import arrival_times, simulate
from kvreplay.serving.slo import SLO, judge
from kvreplay.serving.timing import load_time_model
from kvreplay.serving.timing.host import HostTerms, band_end
from kvreplay.serving.timing.host import resolve as resolve_host
from kvreplay.serving.timing.models import StepBatch
from kvreplay.serving.warmup import earlier_prefix

from sim_cases import trace_of

BLOCK = 512


@st.composite
def conversations(draw, max_requests=12):
    """Requests of a few sessions: each resends a prefix of its session's history and adds blocks."""
    sessions = [[] for _ in range(draw(st.integers(1, 3)))]
    out, t, fresh = [], 0, 0
    for _ in range(draw(st.integers(2, max_requests))):
        s = draw(st.integers(0, len(sessions) - 1))
        keep = draw(st.integers(0, len(sessions[s])))
        new = draw(st.integers(1, 12))
        ids = sessions[s][:keep] + [f"b{fresh + j}" for j in range(new)]
        fresh += new
        sessions[s] = ids
        length = len(ids) * BLOCK - draw(st.integers(0, BLOCK - 1))
        t += draw(st.integers(0, 1500))
        out.append((ids, length, t, draw(st.integers(1, 40))))
    return trace_of(*out, block_size=BLOCK)


def test_floors_by_hand():
    # one request of 20,000 tokens, alone: three chunks of 8,192, 8,192 and 3,616 new tokens;
    # a second resends its first 16 blocks (8,192 tokens hit) and adds 4,000: 4,000 new after 8,192
    tm = load_time_model("roofline-raw", model="Llama-3.1-8B", gpu="H100", tp=1)
    t = trace_of((list(range(40)), 20_000, 0, 3), (list(range(16)) + ["x"], 8_192 + 4_000, 5_000, 1),
                 block_size=BLOCK)
    arrival, _ = arrival_times(t)
    f = request_floors(t, arrival, tm, tm, block_size=BLOCK, chunk=8192)
    first = sum(tm.step_time(StepBatch(prefill_new=(n,), prefill_cached=(c,)))
                for n, c in ((8192, 0), (8192, 8192), (3616, 16384)))
    second = tm.step_time(StepBatch(prefill_new=(4000,), prefill_cached=(8192,)))
    assert f.ttft_s.tolist() == pytest.approx([first, second])
    decode = tm.step_time(StepBatch(decode_context=(20_001,)))
    assert f.tpot_s[0] == pytest.approx(decode) and np.isnan(f.tpot_s[1])
    assert f.e2e_s.tolist() == pytest.approx([first + 2 * decode, second])
    assert prefill_alone(tm, 20_000, 0, None) == pytest.approx(tm.step_time(StepBatch(prefill_new=(20_000,),
                                                                                      prefill_cached=(0,))))
    # the calibrated roofline's pessimistic end: a prefill chunk's factor is the smaller of the
    # prefill and mixed steps' (a chunk may run in a mixed step), and what the host CPU adds:
    # 2 ms + 1 us a prompt token before the engine, 50 us a request's token out; the output
    # delays of up to 4 requests a step can take 3 x 50 us off the 2 gaps of the first's TPOT
    cal = load_time_model("roofline", model="Llama-3.1-8B", gpu="H100", tp=1)
    high = cal.at_band("high")
    host = HostTerms(request_s=2e-3, prompt_token_s=1e-6, step_request_s=4e-5, output_request_s=5e-5)
    g = request_floors(t, arrival, high, cal, block_size=BLOCK, chunk=8192, host=host, max_seqs=4)
    factor = min(high.scale["prefill"], high.scale["mixed"])
    alone = sum(cal.step_time(StepBatch(prefill_new=(n,), prefill_cached=(c,)))
                for n, c in ((8192, 0), (8192, 8192), (3616, 16384)))
    assert g.ttft_s[0] == pytest.approx(2e-3 + 20_000e-6 + factor * alone + 5e-5)
    # the decode alone, with its KV read split as in a step of 4 decodes (8 KV heads: 8 pairs alone,
    # 32 with company), which reads faster: only that term changes, by (1 + s/32) / (1 + s/8)
    lone, floor = (cal.terms(StepBatch(decode_context=(20_001,)), floor_decodes=k) for k in (None, 4))
    assert {k for k in lone if lone[k] != floor[k]} == {"attn_decode"}
    fixed, split = 32 * (cal.c["attn_floor_decode_s"] + cal.c["attn_per_request_decode_s"]), cal.c["attn_split_decode"]
    assert (floor["attn_decode"] - fixed) / (lone["attn_decode"] - fixed) == pytest.approx((1 + split / 32) / (1 + split / 8))
    d = min(high.scale["decode"], high.scale["mixed"]) * sum(floor.values())
    assert g.tpot_s[0] == pytest.approx(d - 3 * 5e-5 / 2)
    assert g.e2e_s[0] == pytest.approx(2e-3 + 20_000e-6 + factor * alone + 2 * d + 5e-5)


def test_company_can_make_a_step_faster_and_the_floor_holds():
    # a long decode's step gets faster when a short one joins it (its KV read splits less), and an
    # MoE's 4-token prefill on 2 GPUs when one more token joins it (under served routing its experts'
    # time falls with the tokens at small counts: fewer experts active, roofline.SERVED_ROUTING);
    # step_floor is below both larger steps
    cal = load_time_model("roofline", model="Llama-3.1-8B", gpu="H100", tp=1)
    lone, both = StepBatch(decode_context=(3073,)), StepBatch(decode_context=(3073, 23))
    assert cal.step_time(both) < cal.step_time(lone)
    assert cal.step_floor(lone, 2) <= cal.step_time(both)
    tp2 = load_time_model("roofline", model="Mixtral-8x7B", gpu="H100", tp=2)
    chunk, more = (StepBatch(prefill_new=(n,), prefill_cached=(0,)) for n in (4, 5))
    assert tp2.step_time(more) < tp2.step_time(chunk)
    assert tp2.step_floor(chunk) <= tp2.step_time(more)


def test_earlier_prefix_is_the_infinite_caches_hit():
    import kvreplay

    t = trace_of((["a", "b"], 8, 0, 1), (["a", "c"], 8, 10, 1), (["a", "b", "d"], 12, 20, 1), (["c"], 4, 30, 1),
                 block_size=4)
    k, oldest = earlier_prefix(t, np.array([0.0, 0.01, 0.02, 0.03]))
    # a, then a and b, were touched before; the fourth's first block c by the second request
    assert k.tolist() == [0, 1, 2, 1]
    # the infinite cache agrees request by request
    r = kvreplay.replay(t, "infinite", None, 4)
    assert (np.minimum(k * 4, t.input_length)).tolist() == r.hit_tokens.tolist()
    # the oldest last use of the hit blocks: a's, by the first request (the second's a at 0.01 s is
    # later than the first's, but for the third the last use of a is the second's and of b the first's)
    assert oldest[1] == 0.0 and oldest[2] == 0.0 and oldest[3] == 0.01


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=conversations(), instances=st.integers(1, 4), router=st.sampled_from(["round-robin", "kv-aware",
                                                                                      "least-loaded"]),
       policy=st.sampled_from(["vllm", "lru", "s3fifo"]), end=st.sampled_from(["low", "centre", "high"]),
       capacity=st.sampled_from([None, 40, 80]), speedup=st.sampled_from([1.0, 20.0]))
def test_no_run_beats_its_floors(trace, instances, router, policy, end, capacity, speedup):
    # (the host CPU's terms at the same end of their band, as simulate's band and plan run them)
    cal = load_time_model("roofline", model="Llama-3.1-8B", gpu="H100", tp=1)
    tm = cal if end == "centre" else cal.at_band(end)
    host = resolve_host(None, cal)
    host = host if end == "centre" else band_end(host, end)
    r = simulate(trace, policy, capacity, BLOCK, model="Llama-3.1-8B", gpu="H100", time_model=tm, instances=instances,
                 router=router, speedup=speedup, compare_sequential=False, band_runs=False, host=host)
    arrival, _ = arrival_times(trace, speedup=speedup)
    f = request_floors(trace, arrival, tm, cal, block_size=BLOCK, chunk=8192, host=host, max_seqs=256)
    assert np.all(f.ttft_s >= host.request_s)
    ok = r.finished
    assert np.all(r.ttft_s[ok] >= f.ttft_s[ok] * (1 - 1e-9))
    tpot = r.tpot_s[ok]
    has = ~np.isnan(tpot)
    assert np.all(tpot[has] >= f.tpot_s[ok][has] * (1 - 1e-9))
    assert np.all(r.e2e_s[ok] >= f.e2e_s[ok] * (1 - 1e-9))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=conversations(max_requests=16), factor=st.floats(0.5, 3.0), h200=st.floats(2.0, 8.0),
       warmup=st.sampled_from([0, "auto"]), load=st.sampled_from([1.0, 30.0, 100.0]))
def test_no_pruned_configuration_passes(trace, factor, h200, warmup, load):
    # the limit is drawn around the median prompt's prefill alone, so floors bind in some draws
    # and not in others; H200's price is drawn, so it is pruned on cost in some and not others;
    # at 30 and 100 times the trace's rate the requests queue, so more instances help
    cal = load_time_model("roofline", model="Llama-3.1-8B", gpu="H100", tp=1)
    median = int(np.median(trace.input_length))
    limit = factor * prefill_alone(cal, median, 0, 8192)
    slo = SLO(ttft_p90_s=limit)
    kw = dict(model="Llama-3.1-8B", slo=slo, gpus=["H100", "H200"], tps=(1, 2), max_instances=4,
              prices=Prices({"H100": 2.0, "H200": h200}), block_size=BLOCK, warmup=warmup, min_window_requests=3,
              loads=[load])
    out = plan(trace, **kw)
    block = out["loads"][0]
    best = block["best"]
    for row in block["tried"]:
        if row["verdict"] not in ("pruned", "unreachable"):
            continue
        per_instance = 2.0 * row["tp"] if row["gpu"] == "H100" else h200 * row["tp"]
        # floors: no count passes; cost: none that costs less than the best
        counts = range(1, 5) if row["verdict"] == "unreachable" else [
            n for n in range(1, 5) if per_instance * n < best["cost_per_hour"]]
        for n in counts:
            tm = load_time_model("roofline", model="Llama-3.1-8B", gpu=row["gpu"], tp=row["tp"]).at_band("high")
            r = simulate(trace, None, None, BLOCK, model="Llama-3.1-8B", gpu=row["gpu"], tp=row["tp"], time_model=tm,
                         instances=n, compare_sequential=False, band_runs=False, warmup=warmup, speedup=load,
                         host=band_end(resolve_host(None, tm), "high"))
            v = judge(r, slo, None, 3)
            assert not v["meets"], (row["config"], row["verdict"], n, v["binding"])
