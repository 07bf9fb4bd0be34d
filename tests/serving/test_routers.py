"""Routers that read the instances' state (serving/routing/): each preset's rule worked by hand,
the router's lag, and the limit every router must keep (instant time: each instance's requests
replay sequentially)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.serving import routing
from kvreplay.serving.kernel import slots
from kvreplay.serving.simulate import simulate
from kvreplay.serving.timing import PolynomialProfile, packed

from conftest import MOONCAKE, shared_path
from sim_cases import HOLDS_IN_SEQUENCE, ONE_SECOND, small_traces, trace_of

TM = packed(ONE_SECOND)
VIEW = slots("view")  # the columns of what a router sees of an instance (serving/kernel/sim.h)
ROUTER_DYNAMO, ROUTER_SGLANG, ROUTER_LLMD, ROUTER_MOONCAKE = "kv-aware", "sglang", "llm-d", "mooncake"


def pick(router, view, overlap, depth=None, prompt_blocks=4, prompt_tokens=64, block_size=16, fetch=None,
         time_model=TM, **options):
    return routing.rule(router, view, overlap, routing.Prompt(prompt_blocks, prompt_tokens, block_size), depth=depth,
                        fetch=fetch, time_model=time_model, capacity=100, options=options)


def row(**cols):
    names = {"requests": VIEW.V_REQUESTS, "prefill": VIEW.V_PREFILL_TOKENS, "blocks": VIEW.V_BLOCKS,
             "queue_s": VIEW.V_QUEUE_S, "waiting": VIEW.V_WAITING, "held": VIEW.V_HELD}
    out = [0.0] * len(VIEW)
    for k, v in cols.items():
        out[names[k]] = v
    return out


def test_dynamo_cost_by_hand():
    # 64-token prompt, 16-token blocks: 4 full blocks. cost = scale x max(0, (prefill in flight +
    # 64) / 16 - overlap) + blocks in flight + 4 - depth.
    # instance 0: 160 tokens to prefill, 10 blocks in flight, all 4 blocks cached:
    #   (160 + 64) / 16 - 4 + 10 + 4 = 24;  instance 1: idle, nothing cached: 64 / 16 + 4 = 8
    assert pick(ROUTER_DYNAMO, [row(prefill=160, blocks=10), row()], [4, 0]) == 1
    # instance 0 idle with the prefix cached: 4 - 4 + 4 = 4 beats instance 1's 8
    assert pick(ROUTER_DYNAMO, [row(), row()], [4, 0]) == 0
    # its prefix already in flight there (depth 4) lowers the decode term: 8 - 4 = 4 < 8 - 0 ...
    # ... against an instance holding 1 block more in flight: 4 + 1 = 5 vs 4
    assert pick(ROUTER_DYNAMO, [row(blocks=1), row(blocks=4)], [0, 0], depth=[0, 4]) == 1
    # blocks past the GPU prefix found in the tiers earn a credit (0.75 each in DRAM): instance 1
    # with 4 of them in DRAM costs 4 - 3 + 4 = 5 against instance 0's 4 - 1 + 4 = 7
    assert pick(ROUTER_DYNAMO, [row(), row()], [1, 0], fetch=[0.0, 3.0]) == 1
    # prefill_load_scale 0: only the blocks in flight count
    assert pick(ROUTER_DYNAMO, [row(prefill=0, blocks=3), row(prefill=1000, blocks=2)], [4, 0],
                prefill_load_scale=0.0) == 1


def test_sglang_cache_aware_by_hand():
    # imbalanced (70 - 2 > 64 and 70 > 1.5 x 2): the least loaded, whatever is cached
    assert pick(ROUTER_SGLANG, [row(requests=70), row(requests=2)], [4, 0]) == 1
    # balanced: the best match, 3 of 4 blocks = 0.75 > 0.3
    assert pick(ROUTER_SGLANG, [row(requests=3), row(requests=2)], [3, 0]) == 0
    # balanced, a match of 1 of 4 = 0.25 <= 0.3: the least loaded
    assert pick(ROUTER_SGLANG, [row(requests=3), row(requests=2)], [1, 0]) == 1
    assert pick(ROUTER_SGLANG, [row(requests=3), row(requests=2)], [1, 0], cache_threshold=0.2) == 0


def test_llmd_scorers_by_hand():
    # prefix (min-max over instances holding any): [1, 0]; queue (waiting 5 vs 0): [0, 1];
    # KV: 1 - held / 100 = [0.9, 0.5]. 3 x 1 + 2 x 0 + 2 x 0.9 = 4.8 against 0 + 2 + 1 = 3
    assert pick(ROUTER_LLMD, [row(waiting=5, held=10), row(waiting=0, held=50)], [4, 2]) == 0
    # without the prefix weight the queue and the free KV win
    assert pick(ROUTER_LLMD, [row(waiting=5, held=10), row(waiting=0, held=50)], [4, 2], prefix_weight=0.0) == 1


def test_mooncake_least_estimated_ttft_by_hand():
    # every prefill takes 1 s in this time model: queue 5 s + 1 s against 0 + 1 s
    assert pick(ROUTER_MOONCAKE, [row(queue_s=5.0), row(queue_s=0.0)], [4, 0]) == 1
    assert pick(ROUTER_MOONCAKE, [row(queue_s=0.5), row(queue_s=0.0)], [4, 0]) == 1
    # a prompt fully cached still computes its last token, so the estimate never drops to zero
    per_token = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "unit": "s",
                                            "terms": [{"coef": 0.01, "prefill_tokens": 1}]})
    view = [row(queue_s=0.2), row()]
    # instance 0: 0.2 s queued + (64 - 48) x 0.01 = 0.36 s; instance 1: 64 x 0.01 = 0.64 s
    assert pick(ROUTER_MOONCAKE, view, [3, 0], time_model=packed(per_token)) == 0
    # ... unless loading those 48 tokens from a tier takes longer than computing them: 0.5 s
    assert pick(ROUTER_MOONCAKE, view, [3, 0], fetch=[0.5, 0.0], time_model=packed(per_token)) == 1


def test_least_loaded_counts_requests_in_flight():
    # A (10 outputs, 0 s) keeps instance 0 busy to 10 s; B (0.5 s, 1 output) goes to the idle
    # instance 1 and finishes at 1.5 s; C (3 s) finds instance 1 empty again. Round-robin would
    # send C back to instance 0.
    t = trace_of((["a"], 4, 0, 10), (["b"], 4, 500, 1), (["c"], 4, 3000, 1))
    ll = simulate(t, "vllm", 100, time_model=ONE_SECOND, instances=2, router="least-loaded")
    assert ll.instance.tolist() == [0, 1, 1]
    assert ll.first_token_s.tolist() == [1.0, 1.5, 4.0]
    rr = simulate(t, "vllm", 100, time_model=ONE_SECOND, instances=2, router="round-robin")
    assert rr.instance.tolist() == [0, 1, 0]
    assert rr.first_token_s[2] == 4.0  # instance 0 batches C with A's decode


def test_kv_aware_follows_the_cached_prefix():
    # A [a, b] on one instance (a random tie: both idle); B [a, b, c] at 2 s, after A finished,
    # goes where [a, b] is cached: cost 12 / 4 - 2 + 3 = 4 against 12 / 4 + 3 = 6
    t = trace_of((["a", "b"], 8, 0, 1), (["a", "b", "c"], 12, 2000, 1))
    for seed in range(4):
        r = simulate(t, "vllm", 100, time_model=ONE_SECOND, instances=2, router="kv-aware", seed=seed)
        assert r.instance[1] == r.instance[0]
        assert r.hit_tokens.tolist() == [0, 8]


def test_kv_aware_credits_a_prefix_in_dram():
    # pools of 3 blocks over a DRAM tier each. A [a b x] lands on one instance; when B [c d y] lands
    # there too it pushes A's blocks into that instance's DRAM. C [a b z] then goes after them: the
    # 2 blocks in DRAM earn 2 x 0.75 credit (cost 12 / 4 - 1.5 + 3 = 4.5 against 6), and it hits
    # 8 tokens from DRAM
    t = trace_of((["a", "b", "x"], 12, 0, 1), (["c", "d", "y"], 12, 2000, 1), (["a", "b", "z"], 12, 4000, 1))
    pushed = 0
    for seed in range(8):
        r = simulate(t, "vllm", 3, time_model=ONE_SECOND, instances=2, router="kv-aware", seed=seed, tiers="dram=4")
        assert r.instance[2] == r.instance[0] and r.hit_tokens[2] == 8
        if r.instance[1] == r.instance[0]:
            pushed += 1
            assert r.tiers["tokens_per_tier"]["dram"][2] == 8
    assert pushed > 0


def test_router_lag_reads_an_old_snapshot():
    # llm-d scoring only free KV (1 - blocks held by running requests / pool), which instances
    # report: fresh, B (0.5 s) sees A's blocks held and goes to the other instance; reading the
    # state of 10 s ago both look empty, a tie broken at random, so some seeds send B to A's
    t = trace_of((["a", "b"], 8, 0, 5), (["c", "d"], 8, 500, 5))
    only_kv = {"prefix_weight": 0.0, "queue_weight": 0.0}
    stale_same = 0
    for seed in range(8):
        fresh = simulate(t, "vllm", 100, time_model=ONE_SECOND, instances=2, router="llm-d", seed=seed,
                         router_options=only_kv)
        assert fresh.instance[1] != fresh.instance[0]
        stale = simulate(t, "vllm", 100, time_model=ONE_SECOND, instances=2, router="llm-d", seed=seed,
                         router_options=only_kv, router_lag_ms=10000)
        stale_same += int(stale.instance[1] == stale.instance[0])
    assert 0 < stale_same < 8
    # the router's own counts are never stale: least-loaded spreads A and B whatever the lag
    lagged = simulate(t, "vllm", 100, time_model=ONE_SECOND, instances=2, router="least-loaded", router_lag_ms=10000)
    assert lagged.instance.tolist() == [0, 1] and lagged.router_lag_ms == 10000


def test_router_configuration_errors():
    with pytest.raises(ConfigError, match="unknown router"):
        routing.parameters("nearest")
    with pytest.raises(ConfigError, match="unknown option"):
        routing.parameters("kv-aware", {"temperature": 1.0})
    t = trace_of((["a"], 4, 0, 1))
    with pytest.raises(ConfigError, match="lag"):
        simulate(t, "vllm", 10, time_model=ONE_SECOND, instances=2, router="kv-aware", router_lag_ms=-1)
    # the registry is the core's (serving/routing/registry.c), aliases included
    assert set(routing.state_aware()) == {"least-loaded", "kv-aware", "dynamo", "sglang", "llm-d", "mooncake", "vllm-dp"}
    assert routing.state_aware()["dynamo"] == routing.state_aware()["kv-aware"]
    assert routing.names()[:3] == ("round-robin", "random", "session")


@pytest.mark.parametrize("router", ["least-loaded", "kv-aware", "sglang", "llm-d", "mooncake"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), n=st.integers(2, 4), seed=st.integers(0, 3))
def test_instant_time_each_instance_replays_sequentially(router, trace, n, seed):
    # whatever a router decides, with instant time and no output KV each instance serves its
    # requests one at a time: per request, the hits of a sequential replay of that instance's requests
    sim = simulate(trace, "lru", 6, time_model="instant", output_kv=False, instances=n, router=router, seed=seed)
    assert "lru" in HOLDS_IN_SEQUENCE
    assert sim.num_finished + sim.num_rejected == len(trace)
    for k in range(n):
        idx = np.flatnonzero(sim.instance == k)
        if idx.size:
            seq = kvreplay.replay(trace.take(idx), "lru", 6)
            ok = sim.finished[idx]
            assert np.array_equal(sim.hit_tokens[idx][ok], seq.hit_tokens[ok])


def test_cache_aware_routing_on_the_conversation_trace():
    # 4 instances of 2,000 blocks, each step timed by a 1 ms + 0.05 ms/token polynomial: routing
    # on the cached prefix keeps conversations together, round-robin scatters them
    trace = kvreplay.load_trace(str(shared_path(MOONCAKE / "conversation_trace.jsonl")))
    tm = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "unit": "s",
                                     "terms": [{"coef": 0.001}, {"coef": 5e-5, "prefill_tokens": 1}]})
    rates = {}
    for router in ("round-robin", "kv-aware", "mooncake"):
        r = simulate(trace, "lru", 2000, 512, time_model=tm, instances=4, router=router, compare_sequential=False)
        assert r.num_finished == len(trace)
        rates[router] = r.hit_rate
    assert rates["kv-aware"] > rates["round-robin"] + 0.05
    assert rates["mooncake"] > rates["round-robin"] + 0.05


def test_cluster_sweep_is_the_same_wherever_it_runs():
    # instances x routers x tiers x loads: the rows in grid order, equal to single runs, and the
    # same from a process pool and from Ray
    import os

    from kvreplay.serving.simulate import load_sweep
    from kvreplay.trace.synth import chat_workload

    trace = chat_workload(num_conversations=40, seed=7)
    grid = dict(speedups=[0.5, 2.0], policies=["lru"], capacities=[60], instances=[1, 3],
                routers=["round-robin", "kv-aware"], tiers=[None, "dram=100"], time_model=ONE_SECOND)
    here = load_sweep(trace, **grid)
    # every row of the grid is written; one instance has no routing: it is run once, and its rows
    # are written under each router
    assert len(here) == 2 * 2 * 2 * 2
    assert [(r["instances"], r["router"], r["tiers"], r["load"]) for r in here[:8]] == [
        (1, router, tiers, load) for router in ("round-robin", "kv-aware") for tiers in ("none", "dram=100")
        for load in (0.5, 2.0)]
    assert [dict(r, router="-") for r in here[:4]] == [dict(r, router="-") for r in here[4:8]]
    one = simulate(trace, "lru", 60, time_model=ONE_SECOND, instances=3, router="kv-aware", tiers="dram=100",
                   speedup=2.0)
    row = here[-1]
    assert (row["instances"], row["router"], row["tiers"], row["load"]) == (3, "kv-aware", "dram=100", 2.0)
    assert row["hit_rate"] == one.hit_rate and row["ttft_p90_s"] == one.latencies()["ttft"]["p90"]
    assert row["hbm_hit_rate"] == one.tiers["tiers"][0]["hit_rate"]
    assert load_sweep(trace, jobs=2, **grid) == here
    if os.environ.get("KVREPLAY_REQUIRE_OPTIONAL") == "1":
        import ray
    else:
        ray = pytest.importorskip("ray")
    assert load_sweep(trace, jobs=2, executor="ray", **grid) == here
    assert not ray.is_initialized()


def test_prefill_decode_disaggregation_by_hand():
    # 1 prefill + 2 decode instances, every step 1 s; Llama-3.1-8B: 131,072 KV bytes per token, so
    # an 8-token prompt's KV (1 MiB) crosses a 2.097152 MB/s link in 0.5 s.
    # A (0 s, 3 outputs): prefill 0-1 s (first token at 1 s), KV at decode instance 1 at 1.5 s, its
    #   2nd token at 2.5 s, 3rd at 3.5 s.
    # B (0.2 s, 2 outputs, shares [a]) and C (0.4 s, 1 output) wait for A's step, then prefill
    #   together 1-2 s (B hits [a]: 4 tokens; C 8): first tokens at 2 s. C is done (it never moves);
    #   B's KV reaches decode instance 2 (instance 1 holds A) at 2.5 s, its 2nd token at 3.5 s.
    t = trace_of((["a", "b"], 8, 0, 3), (["a", "c"], 8, 200, 2), (["d", "e"], 8, 400, 1))
    r = simulate(t, "vllm", 100, 4, time_model=ONE_SECOND, prefill_instances=1, decode_instances=2,
                 kv_link="2.097152MB/s", model="Llama-3.1-8B")
    assert r.instance.tolist() == [0, 0, 0]
    assert r.decode_instance.tolist() == [1, 2, -1]
    assert r.first_token_s.tolist() == [1.0, 2.0, 2.0]
    assert r.finish_s.tolist() == [3.5, 3.5, 2.0]
    assert r.hit_tokens.tolist() == [0, 4, 0]
    assert r.instance_busy_s == [2.0, 2.0, 1.0]
    d = r.summary()["disaggregation"]
    assert d == {"prefill_instances": 1, "decode_instances": 2, "handoffs": 2, "transfer_s": 1.0}
    assert [row["role"] for row in r.per_instance()] == ["prefill", "decode", "decode"]
    # without a link the KV moves at once: A decodes 1-3 s, B 2-3 s
    at_once = simulate(t, "vllm", 100, 4, time_model=ONE_SECOND, prefill_instances=1, decode_instances=2)
    assert at_once.finish_s.tolist() == [3.0, 3.0, 2.0]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), p=st.integers(1, 3), d=st.integers(1, 3))
def test_disaggregated_prefill_hits_are_the_prefill_instances_replays(trace, p, d):
    # instant time, no output KV: each prefill instance's requests hit what a sequential replay of
    # them does (decode instances hold the KV they receive, never a prefix hit)
    sim = simulate(trace, "lru", 6, time_model="instant", output_kv=False, prefill_instances=p, decode_instances=d)
    assert sim.num_finished + sim.num_rejected == len(trace)
    assert set(sim.instance.tolist()) <= set(range(p))
    moved = sim.decode_instance[sim.finished & (sim.output_tokens > 1)]
    assert np.all((moved >= p) & (moved < p + d))
    for k in range(p):
        idx = np.flatnonzero(sim.instance == k)
        if idx.size:
            seq = kvreplay.replay(trace.take(idx), "lru", 6)
            ok = sim.finished[idx]
            assert np.array_equal(sim.hit_tokens[idx][ok], seq.hit_tokens[ok])


def test_disaggregation_errors():
    t = trace_of((["a"], 4, 0, 2))
    with pytest.raises(ConfigError, match=r"decode_instances \(--decode-instances\) must be a whole number >= 1 "
                                          r"\(disaggregation needs both --prefill-instances and --decode-instances\), "
                                          "got None"):
        simulate(t, "vllm", 10, prefill_instances=2)
    with pytest.raises(ConfigError, match="vLLM-style"):
        simulate(t, "radix", 10, engine_style="sglang", prefill_instances=1, decode_instances=1)
    with pytest.raises(ConfigError, match="--model"):
        simulate(t, "vllm", 10, prefill_instances=1, decode_instances=1, kv_link="25GB/s")
    with pytest.raises(ConfigError, match="disaggregation"):
        simulate(t, "vllm", 10, kv_link="25GB/s")
