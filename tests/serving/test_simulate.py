"""The serving simulator (serving/simulate.py, instance.py): hand-worked runs, its limits, invariants.

Hand-worked cases use a polynomial time model whose every step takes exactly 1 s, so each
timestamp below can be followed step by step (docs/serving.md, "The simulator").
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.errors import ConfigError
from kvreplay.policies.registry import POLICIES
from kvreplay.serving.report import latency_stats, nearest_rank
from kvreplay.serving.run import decode_trace
from kvreplay.serving.simulate import Scheduler, arrivals, load_sweep, simulate

from conftest import MOONCAKE, shared_path
from sim_cases import HOLDS_IN_SEQUENCE, ONE_SECOND, small_traces, trace_of



# ------------------------------------------------------------------------------------------
# Hand-worked runs


def test_two_requests_step_by_step():
    # block size 4. A: 8 tokens [a, b], 3 outputs, at 0 s. B: 8 tokens [a, c], 2 outputs, at 0.5 s.
    # step 1 (0-1 s): A prefills 8 tokens; its first token at 1 s.
    # step 2 (1-2 s): A decodes; B (arrived 0.5 s) is admitted: it hits [a] (vLLM never hits the
    #   block of its last prompt token: at most (8 - 1) // 4 = 1 block), prefills 4; token 1 at 2 s.
    # step 3 (2-3 s): A's 3rd token (it finishes at 3 s), B's 2nd (finishes at 3 s).
    t = trace_of((["a", "b"], 8, 0, 3), (["a", "c"], 8, 500, 2))
    r = simulate(t, "vllm", 100, time_model=ONE_SECOND)
    assert r.scheduled_s.tolist() == [0.0, 1.0]
    assert r.first_token_s.tolist() == [1.0, 2.0]
    assert r.finish_s.tolist() == [3.0, 3.0]
    assert r.hit_tokens.tolist() == [0, 4]
    assert r.ttft_s.tolist() == [1.0, 1.5]
    assert r.tpot_s.tolist() == [1.0, 1.0]
    assert r.latencies()["itl"]["count"] == 3 and r.latencies()["itl"]["mean"] == 1.0
    assert r.counters["steps"] == 3
    # tokens: A computes 8 + 2 (its 2nd and 3rd outputs feed one token each), B 4 + 1
    assert r.counters["prefill_tokens"] + r.counters["decode_tokens"] == 15
    # A's 3 outputs need ceil((8 + 3 - 1) / 4) = 3 blocks, B's 2 ceil((8 + 2 - 1) / 4) = 3: one
    # decode block each beyond their prompts' 2 (their 9th token in KV starts a block)
    assert r.counters["decode_blocks"] == 2
    s = r.summary()
    assert s["hit_rate"] == 4 / 16
    assert s["throughput"]["requests_per_s"] == 2 / 3.0
    assert s["throughput"]["output_tokens_per_s"] == 5 / 3.0
    # nearest rank of 2 values: index round(0.5) = 1 (halves away from zero)
    assert s["latency_s"]["ttft"]["p50"] == 1.5 and s["latency_s"]["ttft"]["max"] == 1.5


def test_the_host_arrival_delay_delays_each_request_at_the_engine():
    # what the API server takes before the engine sees a request (serving/timing/host.py,
    # request_s), one request at a time in arrival order: 0.25 s each, the requests sent at 0 and
    # 0.5 s reach the engine at 0.25 and 0.75 s; the one sent at 0.52 s waits for the server until
    # 0.75 s and reaches the engine at 1.0 s, 0.48 s late. Each request's schedule, first token and
    # finish move by its delay and its TTFT holds it; its arrival (the send) and TPOT do not move
    from kvreplay.serving.timing import CalibratedRooflineTimeModel
    from kvreplay.serving.timing.host import HostTerms

    t = trace_of((["a", "b"], 8, 0, 3), (["a", "c"], 8, 500, 2), (["d"], 4, 520, 4))
    tm = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100")
    runs = [simulate(t, "vllm", 100, time_model=tm, band_runs=False, host=HostTerms(request_s=f)) for f in (0.0, 0.25)]
    assert np.array_equal(runs[0].arrival_s, runs[1].arrival_s)
    assert np.array_equal(runs[0].arrival_s, [0.0, 0.5, 0.52])
    delay = np.array([0.25, 0.25, 0.48])
    for field in ("scheduled_s", "first_token_s", "finish_s"):
        assert getattr(runs[1], field) == pytest.approx(getattr(runs[0], field) + delay, abs=1e-9)
    assert runs[1].ttft_s == pytest.approx(runs[0].ttft_s + delay, abs=1e-9)
    assert runs[1].tpot_s == pytest.approx(runs[0].tpot_s, abs=1e-9)


def test_vllm_preempts_the_newest_request_and_recomputes_it():
    # block size 4, a pool of 4 blocks. A and B: 4 tokens (1 block), 9 outputs, both at 0 s.
    # Each needs ceil((4 + 9 - 1) / 4) = 3 blocks in the end: both cannot finish together.
    # step 1 (0-1 s): both prefill; token 1 at 1 s. steps 2-5: tokens 2-5 (a decode block each at
    #   step 2: 4 blocks held). step 6 (5-6 s): A needs its 3rd block (9 tokens in KV): none is
    #   free, so B (admitted last) is preempted: its 2 blocks are freed (cached, tail first), A
    #   takes the head of the free queue (B's decode block). A: token 6 at 6 s ... token 9 at 9 s.
    # B waits (A holds 3 of 4 blocks and B needs 3) until A finishes at 9 s; then it recomputes
    #   its prompt and its 5 tokens (9 tokens): its prompt block still cached (4 tokens hit), 5
    #   computed; token 6 at 10 s, tokens 7-9 at 11-13 s.
    t = trace_of((["a"], 4, 0, 9), (["b"], 4, 0, 9))
    r = simulate(t, "vllm", 4, time_model=ONE_SECOND)
    assert r.preemptions.tolist() == [0, 1]
    assert r.first_token_s.tolist() == [1.0, 1.0]
    assert r.finish_s.tolist() == [9.0, 13.0]
    assert r.counters["recomputed_tokens"] == 5
    assert r.hit_tokens.tolist() == [0, 0]  # at each request's first schedule
    assert r.counters["peak_held_blocks"] == 4
    assert r.summary()["preempted_requests"] == 1
    # inter-token gaps: A 8 x 1 s; B 4 x 1 s, 5 s (its 5th token at 5 s, its 6th at 10 s), 3 x 1 s
    itl = r.latencies()["itl"]
    assert itl["count"] == 16 and itl["mean"] == 20 / 16 and itl["max"] == 5.0
    assert 1.0 <= itl["p50"] <= 1.001  # from the log histogram: at most 0.1% above the true value
    assert itl["p99"] == 5.0  # nearest rank round(15 x 0.99) = 15: the largest gap


def test_sglang_reserves_decode_room_before_admitting():
    # SGLang admits a request only if its remaining prompt + min(outputs, 4096) + one page fit in
    # the free and evictable tokens minus what running requests reserve (new_token_ratio 0.7 of
    # their remaining outputs). Pool: 8 blocks of 4 = 32 tokens.
    # A: 8 tokens, 10 outputs at 0 s: 8 + 10 + 4 = 22 < 32: admitted; prefill (1 s).
    # B: 8 tokens, 10 outputs at 0 s, in the same prefill batch? after A: 32 - (8 + 4 + 10) = 10
    #   left, B needs 22: it waits. Step 2 is a decode step (no prefill can be formed); then
    #   (new ratio 0.7 - decay) x 9 remaining of A = about 6.3 reserved: 32 - 12 (A's 3 blocks)
    #   - 6.3 = 13.7 < 22: B waits until A has few enough outputs left.
    t = trace_of((["a", "b"], 8, 0, 10), (["c", "d"], 8, 0, 10))
    r = simulate(t, "radix", 8, engine_style="sglang", time_model=ONE_SECOND)
    assert r.scheduled_s[0] == 0.0
    assert r.first_token_s[0] == 1.0
    assert r.finish_s[0] == 10.0  # 9 decode steps after its prefill, nothing else in its way
    # B is admitted once 32 - 4 x blocks(A) - ratio x left(A) > 22: A holds 3 blocks (12 tokens)
    # from its 2nd token on, so B needs ratio x left < 10 - ... check the simulator's own record:
    assert r.scheduled_s[1] > 1.0
    assert r.preemptions.tolist() == [0, 0]
    # while B's prefill runs, A's decode pauses (SGLang runs a prefill batch alone)
    b = r.scheduled_s[1]
    assert r.finish_s[0] == 10.0 + (1.0 if b < 10.0 else 0.0)


def test_sglang_lpm_puts_the_longest_cached_prefix_first():
    # Warm the cache with [x, y, z] (request 0), then two requests arrive while it decodes:
    # 1 shares nothing, 2 shares [x, y]. FCFS admits 1 first; LPM admits 2 first.
    reqs = [(["x", "y", "z"], 12, 0, 4), (["p", "q", "r"], 12, 100, 1), (["x", "y", "w"], 12, 100, 1)]
    t = trace_of(*reqs)
    sched = Scheduler(style="sglang", max_num_seqs=2)
    fcfs = simulate(t, "radix", 100, engine_style="sglang", time_model=ONE_SECOND, scheduler=sched)
    lpm = simulate(t, "radix", 100, engine_style="sglang", time_model=ONE_SECOND,
                   scheduler=Scheduler(style="sglang", max_num_seqs=2, schedule_policy="lpm"))
    assert fcfs.scheduled_s[1] < fcfs.scheduled_s[2]
    assert lpm.scheduled_s[2] < lpm.scheduled_s[1]
    assert lpm.hit_tokens[2] == 8


def test_requests_that_never_fit_are_rejected_and_reported():
    # pool of 2 blocks of 4: a 12-token prompt (3 blocks) never fits; an 4-token prompt with 6
    # outputs needs ceil((4 + 6 - 1) / 4) = 3 blocks: rejected too (it would preempt itself forever).
    t = trace_of((["a", "b", "c"], 12, 0, 1), (["d"], 4, 0, 6), (["e"], 4, 0, 2))
    r = simulate(t, "vllm", 2, time_model=ONE_SECOND)
    assert r.num_rejected == 2 and r.num_finished == 1
    assert r.request_columns()["status"].tolist() == ["rejected", "rejected", "finished"]
    assert r.summary()["rejected"] == 2


def test_output_kv_off_means_prompts_only():
    t = trace_of((["a"], 4, 0, 9), (["b"], 4, 0, 9))
    r = simulate(t, "vllm", 2, time_model=ONE_SECOND, output_kv=False)
    assert r.preemptions.tolist() == [0, 0] and r.counters["decode_blocks"] == 0
    assert r.finish_s.tolist() == [9.0, 9.0]


def test_arrivals_speedup_and_poisson():
    t = trace_of((["a"], 4, 1000, 1), (["b"], 4, 3000, 1), (["c"], 4, 2000, 1))
    assert arrivals(t).tolist() == [0.0, 2.0, 1.0]
    assert arrivals(t, speedup=2).tolist() == [0.0, 1.0, 0.5]
    a = arrivals(t, rate=10, seed=3)
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    assert np.array_equal(a, arrivals(t, rate=10, seed=3)) and not np.array_equal(a, arrivals(t, rate=10, seed=4))
    with pytest.raises(ConfigError, match="not both"):
        arrivals(t, speedup=2, rate=1)
    with pytest.raises(ConfigError, match="positive"):
        arrivals(t, speedup=0)


def test_requests_are_served_in_arrival_order_and_reported_in_trace_order():
    # the file lists C (arrives at 2 s) before B (1 s): B is scheduled first, columns stay in file order
    t = trace_of((["a"], 4, 0, 1), (["c"], 4, 2000, 1), (["b"], 4, 1000, 1))
    r = simulate(t, "lru", 10, time_model=ONE_SECOND)
    assert r.scheduled_s.tolist() == [0.0, 2.0, 1.0]
    assert r.first_token_s.tolist() == [1.0, 3.0, 2.0]


def test_decode_ids_follow_each_prompt():
    t = trace_of((["a", "b"], 8, 0, 5), (["a"], 3, 0, 1), block_size=4)
    ext, P = decode_trace(t, 4, True)
    # request 0: ceil((8 + 5 - 1) / 4) - 2 = 1 decode block; request 1: ceil(3 / 4) - 1 = 0
    assert P.tolist() == [2, 1]
    assert ext.offsets.tolist() == [0, 3, 4]
    assert ext.blocks.tolist() == [0, 1, 2, 0]
    assert ext.num_blocks == 3


def test_nearest_rank_percentiles_match_dynamo():
    v = np.arange(1.0, 11.0)  # 1..10
    assert nearest_rank(v, 50) == 6.0  # index round(9 * 0.5) = round(4.5) = 5 (halves away from zero)
    assert nearest_rank(v, 90) == 9.0  # index round(8.1) = 8
    assert nearest_rank(v, 99) == 10.0
    s = latency_stats(v)
    assert s["mean"] == 5.5 and s["max"] == 10.0 and s["count"] == 10


def test_goodput_counts_requests_within_the_slos():
    t = trace_of((["a", "b"], 8, 0, 3), (["a", "c"], 8, 500, 2))
    r = simulate(t, "vllm", 100, time_model=ONE_SECOND, slo_ttft_ms=1200)
    g = r.summary()["goodput"]
    assert g["good_requests"] == 1 and g["requests_per_s"] == 1 / 3.0
    r = simulate(t, "vllm", 100, time_model=ONE_SECOND, slo_ttft_ms=2000, slo_tpot_ms=999)
    assert r.summary()["goodput"]["good_requests"] == 0


# ------------------------------------------------------------------------------------------
# Limits: with no service time and no output KV, no two requests overlap and every policy's
# per-request hits are the sequential replay's




# every policy under the vLLM-style scheduler; the SGLang-style one (a kernel of its own per policy:
# compile time) with its own policy and two block-level ones
# (deepseek is refused: tests/policies/test_deepseek.py)
LIMIT_CASES = [(p, "vllm") for p in sorted(POLICIES) if not POLICIES[p].not_served and POLICIES[p].style_only is None] + \
    [(p, "sglang") for p in ("radix", "lru", "s3fifo")] + [("trtllm", "trtllm")]  # (trtllm: its own scheduler only)


@pytest.mark.parametrize("policy, style", LIMIT_CASES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), capacity=st.integers(4, 12))
def test_instant_time_is_one_request_at_a_time(policy, style, trace, capacity):
    capacity = max(capacity, 10) if policy == "s3fifo" else capacity  # s3fifo's queues need >= 1 block each
    # arrivals never go back in time here, so the simulator serves requests in trace order, each
    # alone: its hits are those of the policy's lifecycle with each request started and finished
    # before the next (engine/lifecycle.py), for every policy; and the sequential replay's
    # (`kvreplay run`) for the policies that hold a request's blocks while it accesses them
    sim = simulate(trace, policy, capacity, engine_style=style, time_model="instant", output_kv=False,
                   compare_sequential=False)
    # a request that can never fit is rejected by the simulator, while the sequential replay
    # admits what fits of it (oversize): from there on the two caches differ
    rejected = np.flatnonzero(~sim.finished)
    upto = rejected[0] if rejected.size else len(trace)
    bounded = None if POLICIES[policy].capacity == "ignored" else capacity
    events = [e for i in range(upto) for e in (i, -i - 1)]
    one_at_a_time = replay_lifecycle(trace, policy, bounded, events)
    assert np.array_equal(sim.hit_tokens[:upto], one_at_a_time.hit_tokens[:upto])
    if policy in HOLDS_IN_SEQUENCE:
        seq = kvreplay.replay(trace, policy, bounded)
        assert np.array_equal(sim.hit_tokens[:upto], seq.hit_tokens[:upto])
    assert np.all(sim.ttft_s[sim.finished] == 0.0)


@pytest.mark.parametrize("policy", ["vllm", "lru", "radix"])
def test_unbounded_pool_without_overlap_reaches_the_ceiling(policy):
    # every request arrives after the previous one left (instant time): with a pool larger than
    # every block, the hit rate is the infinite cache's (the ceiling), minus what vLLM/SGLang
    # never hit (the block of the last prompt token) — the same cap the sequential replay applies
    t = trace_of((["a", "b", "c"], 12, 0, 2), (["a", "b", "c", "d"], 16, 1000, 3), (["a", "b"], 8, 2000, 1))
    sim = simulate(t, policy, 1000, time_model="instant")
    seq = kvreplay.replay(t, policy, 1000)
    assert sim.hit_tokens.tolist() == seq.hit_tokens.tolist()
    ceiling = kvreplay.replay(t, "infinite", None)
    assert sim.hit_rate <= ceiling.hit_rate
    if policy == "lru":
        assert sim.hit_rate == ceiling.hit_rate


# ------------------------------------------------------------------------------------------
# Invariants, determinism, errors


@settings(max_examples=30, deadline=None)
@given(trace=small_traces(), capacity=st.integers(3, 16), style=st.sampled_from(["vllm", "sglang"]),
       policy=st.sampled_from(["vllm", "radix", "lru", "s3fifo"]))
def test_invariants_hold_under_load(trace, capacity, style, policy):
    # simulate() checks them (check=True): arrival <= scheduled <= first token <= finish, held
    # blocks within the pool, every token computed once per (re)computation
    capacity = max(capacity, 10) if policy == "s3fifo" else capacity  # s3fifo's queues need >= 1 block each
    r = simulate(trace, policy, capacity, engine_style=style, time_model=ONE_SECOND,
                 scheduler=Scheduler(style=style, max_num_batched_tokens=8, chunked_prefill_size=8, max_num_seqs=3),
                 compare_sequential=False)
    assert r.num_finished + r.num_rejected == len(trace)
    assert np.all(r.hit_tokens <= r.prompt_tokens)
    assert r.counters["peak_running"] <= 3


def test_sglang_decode_page_locks_nothing_else():
    # hypothesis found it: 10 pages of 4 tokens. Request 1 ([0]*5, 17 tokens, 9 outputs) decodes
    # alone while request 0's 4 pages sit evictable in the tree; the FCFS refresh had matched the
    # waiting requests, leaving the radix cursor on request 0's path, and pinning a decode page
    # (no hits) locked that path: 6 + 4 pages held, the 7th page refused, the run stalled.
    t = trace_of(([1, 0, 0, 0], 16, 0, 0), ([0] * 5, 17, 0, 9), ([1, 0], 5, 0, 0), *[([0], 1, 0, 0)] * 6)
    r = simulate(t, "radix", 10, engine_style="sglang", time_model=ONE_SECOND,
                 scheduler=Scheduler(style="sglang", max_num_batched_tokens=8, chunked_prefill_size=8, max_num_seqs=3),
                 compare_sequential=False)
    assert r.num_finished == 9 and r.num_rejected == 0
    assert r.hit_tokens.tolist() == [0, 0, 4, 0, 0, 0, 0, 0, 0]  # request 2 hits request 0's first page


def test_same_seed_same_bytes(tmp_path):
    t = trace_of((["a", "b"], 8, 0, 3), (["a", "c"], 8, 500, 2), (["d"], 4, 700, 4))
    a = simulate(t, "vllm", 6, time_model=ONE_SECOND, rate=3.0, seed=7).to_dict()
    b = simulate(t, "vllm", 6, time_model=ONE_SECOND, rate=3.0, seed=7).to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_configuration_errors():
    t = trace_of((["a"], 4, 0, 1))
    with pytest.raises(ConfigError, match="--capacity BLOCKS, or --gpu"):
        simulate(t, "vllm", None, time_model="instant")
    with pytest.raises(ConfigError, match="engine style"):
        simulate(t, "vllm", 4, engine_style="trt", time_model="instant")
    with pytest.raises(ConfigError, match="differs"):
        simulate(t, "vllm", 4, engine_style="vllm", scheduler=Scheduler(style="sglang"), time_model="instant")
    with pytest.raises(ConfigError, match="slo_ttft_ms"):
        simulate(t, "vllm", 4, time_model="instant", slo_ttft_ms=0)
    with pytest.raises(ConfigError, match="lpm"):
        Scheduler(style="sglang", schedule_policy="lifo")


def test_load_sweep_rows():
    t = trace_of((["a", "b"], 8, 0, 3), (["a", "c"], 8, 500, 2), (["d"], 4, 700, 4))
    rows = load_sweep(t, speedups=[1, 4], policies=["vllm", "lru"], capacities=[6], time_model=ONE_SECOND)
    assert [(r["policy"], r["load"]) for r in rows] == [("vllm", 1.0), ("vllm", 4.0), ("lru", 1.0), ("lru", 4.0)]
    assert all(r["capacity_blocks"] == 6 and r["finished"] == 3 for r in rows)
    # a higher load never makes the first request's wait shorter; the sequential rate is per policy
    assert rows[0]["sequential_hit_rate"] == rows[1]["sequential_hit_rate"]


def test_gpu_sizes_the_pool():
    t = trace_of((["a"], 4, 0, 1), block_size=16)
    r = simulate(t, "vllm", None, 16, time_model="roofline", model="Llama-3.1-70B", gpu="H100", tp=8)
    assert r.capacity_blocks == 90510  # docs/timing.md's worked example (tests/serving/test_timing.py)
    assert r.capacity_source["kind"] == "gpu_memory"
    assert r.first_token_s[0] > 0


# ------------------------------------------------------------------------------------------
# The real traces, end to end


def test_conversation_trace_under_load():
    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    trace = kvreplay.load_trace(str(path))
    r = simulate(trace, "vllm", 2000, time_model="roofline", model="Llama-3.1-8B", gpu="H100", speedup=0.25)
    s = r.summary()
    assert s["finished"] == len(trace) and s["rejected"] == 0
    # under concurrency the pool also holds running requests' KV: at most what the sequential
    # replay hits plus what sharing blocks among running requests adds (small here)
    assert abs(s["hit_rate"] - s["sequential_hit_rate"]) < 0.02
    assert s["latency_s"]["ttft"]["p50"] > 0


# ------------------------------------------------------------------------------------------
# Several instances behind a router that does not read their state


def test_routes():
    from kvreplay.serving.simulate import route

    t = trace_of((["a", "b"], 8, 300, 1), (["c"], 4, 100, 1), (["a", "d"], 8, 200, 1), (["c", "e"], 8, 0, 1))
    arr = arrivals(t)
    # round-robin by arrival: request 3 (0 ms), 1 (100), 2 (200), 0 (300) -> instances 0, 1, 0, 1
    assert route(t, arr, 2, "round-robin").tolist() == [1, 1, 0, 0]
    # session without session ids: by the first block (dense ids a=0, c=2): requests sharing it stay together
    assert route(t, arr, 2, "session").tolist() == [0, 0, 0, 0]
    assert route(t, arr, 3, "session").tolist() == [0, 2, 0, 2]
    r1, r2 = route(t, arr, 3, "random", seed=5), route(t, arr, 3, "random", seed=5)
    assert r1.tolist() == r2.tolist() and set(r1.tolist()) <= {0, 1, 2}
    with pytest.raises(ConfigError, match="least-loaded"):
        route(t, arr, 2, "least-loaded")


@pytest.mark.parametrize("policy", ["vllm", "lru", "s3fifo", "radix"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), n=st.integers(2, 4), router=st.sampled_from(["round-robin", "random", "session"]))
def test_n_instances_are_n_sequential_replays(policy, trace, n, router):
    # with instant time and no output KV, each instance serves its requests one at a time: per
    # request, the hits of a sequential replay of the requests that instance received
    capacity = 10 if policy == "s3fifo" else 6
    sim = simulate(trace, policy, capacity, time_model="instant", output_kv=False, instances=n, router=router,
                   engine_style="sglang" if policy == "radix" else "vllm")
    assert sim.instance is not None and sim.instances == n
    for k in range(n):
        idx = np.flatnonzero(sim.instance == k)
        if not idx.size:
            continue
        sub = trace.take(idx)
        seq = kvreplay.replay(sub, policy, capacity)
        served = sim.finished[idx]
        upto = np.flatnonzero(~served)[0] if (~served).any() else idx.size
        if policy in HOLDS_IN_SEQUENCE:
            assert np.array_equal(sim.hit_tokens[idx][:upto], seq.hit_tokens[:upto])
    assert sim.summary()["instances"] == n
    assert sum(r["requests"] for r in sim.per_instance()) == len(trace)


def test_two_instances_step_by_step():
    # round-robin sends A (0 s) to instance 0 and B (0.5 s) to instance 1: B no longer hits A's [a]
    # block, and it starts at once (0.5 s, its own idle instance) instead of at 1 s
    t = trace_of((["a", "b"], 8, 0, 3), (["a", "c"], 8, 500, 2))
    r = simulate(t, "vllm", 100, time_model=ONE_SECOND, instances=2)
    assert r.instance.tolist() == [0, 1]
    assert r.hit_tokens.tolist() == [0, 0]
    assert r.scheduled_s.tolist() == [0.0, 0.5]
    assert r.first_token_s.tolist() == [1.0, 1.5]
    assert r.finish_s.tolist() == [3.0, 2.5]
    assert r.instance_busy_s == [3.0, 2.0]
    assert r.load_balance() == 3.0 / 2.5
    assert r.summary()["sequential_hit_rate"] == 0.0  # each instance's replay alone
