"""The simulator's hybrid mode (vLLM's hybrid KV cache manager: serving/kernel/hybrid.c).

Hand-worked cases for its rules, a differential test against the vLLM pool it generalises (one
full-attention group is vLLM's single-group manager: the PAGED mode, which
tests/real_engines/test_vllm_scheduler.py checks against vLLM's scheduler), and the public
paths (simulate's semantics, the CLI). tests/real_engines/test_vllm_scheduler.py checks the mode
against vLLM 0.33.0's own HybridKVCacheCoordinator under its Scheduler, request by request.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.catalog.kv_groups import Group
from kvreplay.errors import ConfigError
from kvreplay.serving.run import run_once
from kvreplay.serving.simulate import Scheduler, simulate
from kvreplay.serving.timing import PolynomialProfile

SW4 = [Group("sliding_window", window=4), Group("full")]


def step(seconds: float) -> PolynomialProfile:
    return PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                       "terms": [{"coef": seconds}]})


def test_a_window_frees_its_blocks_and_the_admission_gate_caps_it():
    # Blocks of 4 tokens, a 4-token window beside full attention, 8 tokens per step (vLLM's
    # max_num_batched_tokens, the admission cap's in-flight tokens), one request of 40 prompt
    # tokens (10 blocks) and one output token, then the same prompt 100 s later.
    #
    # The admission gate asks for its whole sequence: full attention's 10 blocks, and the window's
    # min(10, ceil((4 - 1 + 8) / 4) + 1 = 4): 14 blocks. A pool of 13 rejects it on arrival.
    # With 14 it prefills in 5 steps of 8 tokens (first token at 5 s). Before the last chunk the
    # window frees its blocks below (32 - 4 + 1) // 4 = 7, so it holds blocks 7, 8 and then 9
    # beside full attention's 10: a peak of 13. The window group hashes only the block ending at
    # the prompt's last full boundary, (40 - 1) // 4 = 9 (block 8), so the second request hits
    # 9 blocks (36 tokens) in both groups, recomputes 4 tokens in one step (first token at 101 s),
    # and caches its full block 9 a second time (a duplicate).
    rows = [(list(range(1, 11)), 40, 0.0, 1), (list(range(1, 11)), 40, 100_000.0, 1)]
    trace = kvreplay.Trace.from_requests(rows, block_size=4)
    kw = dict(policy="vllm", block_size=4, time_model=step(1.0), arrival_s=np.array([0.0, 100.0]),
              scheduler=Scheduler(max_num_batched_tokens=8, max_num_seqs=4), kv_groups=SW4, max_model_len=1000)
    tight = run_once(trace, capacity=13, **kw)
    assert tight.counters["rejected"] == 2 and np.isnan(tight.first_token_s).all()
    r = run_once(trace, capacity=14, **kw)
    assert r.hit_tokens.tolist() == [0, 36]
    assert r.first_token_s.tolist() == [5.0, 101.0]
    assert r.counters["peak_held_blocks"] == 13
    assert r.policy_counters == {"admissions": 12, "evictions": 0, "duplicate_blocks": 1, "oversize_requests": 0,
                                 "resident_blocks": 12}
    # full semantics in one group: the same 10 blocks fit a pool of 10, and hit the same 36 tokens
    full = run_once(trace, capacity=10, **{**kw, "kv_groups": None})
    assert full.hit_tokens.tolist() == [0, 36] and full.counters["peak_held_blocks"] == 10


def test_a_window_that_moves_on_keeps_a_long_prompt_from_being_preempted():
    # A 40-token prompt in a pool of 14 under hybrid semantics (the case above) against the same
    # bytes under full semantics: a full-semantics block holds both groups' layers, so 14 hybrid
    # block ids are 7 full-semantics blocks, which cannot hold the request at all.
    rows = [(list(range(1, 11)), 40, 0.0, 1)]
    trace = kvreplay.Trace.from_requests(rows, block_size=4)
    kw = dict(policy="vllm", block_size=4, time_model=step(1.0), arrival_s=np.array([0.0]),
              scheduler=Scheduler(max_num_batched_tokens=8, max_num_seqs=4), max_model_len=1000)
    assert run_once(trace, capacity=14, kv_groups=SW4, **kw).counters["rejected"] == 0
    assert run_once(trace, capacity=7, **kw).counters["rejected"] == 1


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 40))
    rows, t = [], 0.0
    for _ in range(n):
        blocks = draw(st.integers(1, 8))
        base = draw(st.integers(0, 3)) * 100
        ids = [base + k for k in range(blocks)]
        length = blocks * 4 - draw(st.integers(0, 3))
        t += draw(st.floats(0.0, 3000.0))
        rows.append((ids, length, t, draw(st.integers(1, 12))))
    return rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(12, 60), st.sampled_from([4, 8, 16, 64]), st.integers(1, 3),
       st.sampled_from([None, "kv-aware"]))
def test_one_full_group_is_vllms_single_group_pool(rows, capacity, budget, instances, router):
    # vLLM's hybrid manager over one full-attention group is its single-group manager: the hybrid
    # mode (its own pool, reference counts, get_num_blocks_to_allocate) must serve every request
    # exactly as the PAGED mode (policies/vllm.c's BlockPool) does, on one instance or several
    # (routed by the hybrid hit where the router reads the cache)
    trace = kvreplay.Trace.from_requests(rows, block_size=4)
    arrival = np.asarray(trace.timestamp, dtype=np.float64) / 1000.0
    kw = dict(policy="vllm", capacity=capacity, block_size=4, time_model=step(0.5), arrival_s=arrival,
              scheduler=Scheduler(max_num_batched_tokens=budget, max_num_seqs=4), instances=instances,
              router=router if instances > 1 else None,
              assigned=None if router and instances > 1 else np.arange(len(rows)) % instances)
    paged = run_once(trace, **kw)
    hybrid = run_once(trace, kv_groups=[Group("full")], **kw)
    for name in ("scheduled_s", "first_token_s", "finish_s", "hit_tokens", "preemptions", "status", "instance"):
        assert np.array_equal(getattr(paged, name), getattr(hybrid, name), equal_nan=True), name
    for name in ("preemptions", "rejected", "peak_held_blocks", "decode_blocks", "steps"):
        assert paged.counters[name] == hybrid.counters[name], name
    for name in ("admissions", "evictions", "duplicate_blocks"):
        assert paged.policy_counters[name] == hybrid.policy_counters[name], name


def test_simulate_sizes_the_hybrid_pool_by_the_layout():
    # 40 GiB of gpt-oss-120b's KV at 512-token blocks: a full-semantics block holds its 36 KV layers
    # (8 KV heads x 64 x 2 (K, V) x 2 bytes x 36 x 512 = 37,748,736 bytes), a hybrid block id one
    # group's 18 layers (18,874,368): 1,137 blocks against 2,275 block ids
    t = kvreplay.Trace.from_requests([(["a", "b"], 900, 0, 2)], block_size=512)
    r = simulate(t, "vllm", "40GiB", model="gpt-oss-120b", time_model="instant")
    k = r.kv_semantics
    assert r.capacity_blocks == 2275 and k["block_ids"] == 2275 and k["full_semantics_blocks"] == 1137
    assert k["bytes_per_block_id"] == 18_874_368
    full = simulate(t, "vllm", "40GiB", model="gpt-oss-120b", time_model="instant", kv_semantics="full")
    assert full.capacity_blocks == 1137
    # the GPU memory left after the weights, per GPU, in per-rank pages: tp=2 halves a page
    g = simulate(t, "vllm", None, model="gpt-oss-120b", gpu="H100", tp=2, weights_dtype="int4", time_model="instant")
    left = g.kv_semantics
    assert left["bytes_per_block_id"] == 18_874_368 // 2
    # (two floors of the same bytes: a block id is half a full-semantics block, give or take one)
    assert g.capacity_blocks == left["block_ids"] in (2 * left["full_semantics_blocks"],
                                                      2 * left["full_semantics_blocks"] + 1)


MAMBA = [Group("full"), Group("mamba")]


def test_a_mamba_group_hits_only_at_saved_states_and_its_chunks_end_there():
    # Blocks of 4 tokens, full attention beside a Mamba group (vLLM's MambaManager, align mode),
    # 16 tokens per step, 1 s per step.
    #
    # A (17 tokens, ids 1-5) at 0 s: the scheduler's block-aligned split ends its first chunk at
    # its last cacheable boundary, (17 - 1) // 4 * 4 = 16, so
    # it prefills in two steps (16 + 1 tokens): first token at 2 s. The Mamba group saves only the
    # state at the prompt's last full block (block 3, after 16 tokens).
    # B (18 tokens, ids 1, 2, 3, 9, 10) at 10 s: full attention matches blocks 0-2, but no Mamba
    # state is saved there, so its hit is 0 (full semantics: 12). Full attention matched further:
    # a shared-prefix junction at 12 tokens, where its chunks stop: 12, then 4 (to 16, its last
    # cacheable boundary), then 2 tokens: first token at 13 s. Its state at 12 is saved.
    # C (18 tokens, ids 1, 2, 3, 11, 12) at 20 s: hits 12 tokens at B's junction state and
    # prefills 4 + 2 tokens: first token at 22 s.
    rows = [([1, 2, 3, 4, 5], 17, 0.0, 1), ([1, 2, 3, 9, 10], 18, 10_000.0, 1), ([1, 2, 3, 11, 12], 18, 20_000.0, 1)]
    trace = kvreplay.Trace.from_requests(rows, block_size=4)
    kw = dict(policy="vllm", block_size=4, time_model=step(1.0), arrival_s=np.array([0.0, 10.0, 20.0]),
              scheduler=Scheduler(max_num_batched_tokens=16, max_num_seqs=4), max_model_len=1000)
    r = run_once(trace, capacity=40, kv_groups=MAMBA, **kw)
    assert r.hit_tokens.tolist() == [0, 0, 12]
    assert r.first_token_s.tolist() == [2.0, 13.0, 22.0]
    full = run_once(trace, capacity=40, **kw)  # full semantics: one chunk each after the hit
    assert full.hit_tokens.tolist() == [0, 12, 12]
    assert full.first_token_s.tolist() == [2.0, 11.0, 21.0]


def test_a_mamba_state_cached_in_this_step_is_hit_a_step_later():
    # Two identical 17-token prompts at 0 s, 40 tokens per step. A's first chunk (16 tokens, the
    # split above) caches its blocks and its Mamba state at 16 tokens in step 0. The second
    # request would hit them in the same step, but MambaManager refuses a hit on a state cached
    # in this step (its cached_blocks_this_step): it is scheduled at 1 s with a 16-token hit, and
    # both first tokens come at 2 s. Full attention alone hits in the same step (first token 1 s).
    rows = [([1, 2, 3, 4, 5], 17, 0.0, 1), ([1, 2, 3, 4, 5], 17, 0.0, 1)]
    trace = kvreplay.Trace.from_requests(rows, block_size=4)
    kw = dict(policy="vllm", block_size=4, time_model=step(1.0), arrival_s=np.array([0.0, 0.0]),
              scheduler=Scheduler(max_num_batched_tokens=40, max_num_seqs=4), max_model_len=1000)
    r = run_once(trace, capacity=40, kv_groups=MAMBA, **kw)
    assert r.scheduled_s.tolist() == [0.0, 1.0] and r.hit_tokens.tolist() == [0, 16]
    assert r.first_token_s.tolist() == [2.0, 2.0]
    full = run_once(trace, capacity=40, **kw)
    assert full.scheduled_s.tolist() == [0.0, 0.0] and full.first_token_s.tolist() == [1.0, 1.0]


def test_mamba_hybrids_are_simulated_with_their_groups():
    t = kvreplay.Trace.from_requests([(["a", "b"], 900, 0, 2)], block_size=512)
    r = simulate(t, "vllm", 100, model="Qwen3-Next-80B-A3B", time_model="instant")
    assert r.kv_semantics["semantics"] == "hybrid"
    assert [g["kind"] for g in r.kv_semantics["groups"]] == ["mamba", "full"]
    assert "a Mamba group hits only where its state was saved" in r.kv_semantics["text"]
    # vLLM raises Qwen3-Next's block to 544 tokens (a page must hold a state): the run says it counts at 512
    assert r.kv_semantics["vllm_block_size"] == 544
    assert "vLLM 0.33.0 would use 544-token blocks" in r.kv_semantics["text"]
    assert "counted at 512" in r.kv_semantics["text"]
    full = simulate(t, "vllm", 100, model="Qwen3-Next-80B-A3B", time_model="instant", kv_semantics="full")
    assert full.kv_semantics["semantics"] == "full"


def test_cli_simulate_says_hybrid_and_full_semantics(tmp_path, capsys):
    from kvreplay.cli import main

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 1000 * k, "input_length": 1000, "output_length": 3,
                                        "hash_ids": [1, 2]}) + "\n" for k in range(3)))
    assert main(["simulate", str(path), "--model", "gpt-oss-120b", "--capacity", "40GiB", "--time-model", "instant",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["kv_semantics"]["semantics"] == "hybrid" and doc["summary"]["kv_semantics"]["block_ids"] == 2275
    assert main(["simulate", str(path), "--model", "gpt-oss-120b", "--capacity", "40GiB", "--time-model", "instant"]) == 0
    text = capsys.readouterr().out
    assert "pool       2,275 block ids of 512 tokens" in text
    assert "full-attention semantics hold 1,137 blocks in the same bytes" in text
    assert "semantics  gpt-oss-120b's layer groups under vLLM 0.33.0's hybrid KV cache manager" in text
    assert main(["simulate", str(path), "--model", "gpt-oss-120b", "--capacity", "40GiB", "--time-model", "instant",
                 "--kv-semantics", "full"]) == 0
    text = capsys.readouterr().out
    assert "pool       1,137 blocks of 512 tokens" in text and "warning    KV semantics:" in text
    # the SGLang style: its UnifiedRadixCache, 40 GiB at 33,973,862 bytes a full-attention page
    # (18 full layers and 0.8 x 18 sliding ones)
    assert main(["simulate", str(path), "--model", "gpt-oss-120b", "--capacity", "40GiB", "--time-model", "instant",
                 "--kv-semantics", "hybrid", "--engine-style", "sglang"]) == 0
    text = capsys.readouterr().out
    assert "pool       1,264 full-attention pages of 512 tokens" in text
    assert "with its sliding-window pool of 1,011 pages" in text
    assert "semantics  gpt-oss-120b's layer groups under SGLang 0.5.23's UnifiedRadixCache" in text
    assert main(["simulate", str(path), "--model", "gpt-oss-120b", "--capacity", "40GiB", "--time-model", "instant",
                 "--kv-semantics", "hybrid", "--engine-style", "sglang", "--policy", "lru"]) == 2
    assert "a policy other than radix (lru) under the sglang style" in capsys.readouterr().err


def test_a_sweep_serves_every_run_under_one_semantics(tmp_path):
    # A load sweep of a hybrid model: every row under hybrid semantics (and the table says so); with
    # a tiered configuration in the grid, every row under full semantics, saying why
    from kvreplay.output.serving import load_table
    from kvreplay.serving.simulate import load_sweep

    t = kvreplay.Trace.from_requests([(["a", "b"], 900, 0, 2), (["a", "c"], 900, 500, 2)], block_size=512)
    opts = dict(model="gpt-oss-120b", capacity="10GiB", time_model="instant")
    rows = load_sweep(t, speedups=[1, 2], **opts)
    assert [r["kv_semantics"] for r in rows] == ["hybrid", "hybrid"] and rows[0]["capacity_blocks"] == 568
    assert "\nsemantics  gpt-oss-120b's layer groups under vLLM 0.33.0's hybrid" in load_table(t, rows)
    mixed = load_sweep(t, speedups=[1], tiers=[None, "dram=20GiB"], **opts)
    assert [r["kv_semantics"] for r in mixed] == ["full", "full"] and mixed[0]["capacity_blocks"] == 284
    assert "so that they compare under one semantics" in load_table(t, mixed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(12, 40), st.sampled_from([8, 16]),
       st.sampled_from([SW4, MAMBA, [Group("full"), Group("sliding_window", window=4), Group("mamba")]]))
def test_instances_behind_a_fixed_router_are_independent_pools(rows, capacity, budget, groups):
    # Two instances with requests routed alternately (fixed before the run): each has its own
    # hybrid pool over its own compact ids, so each serves its share exactly as one instance serving
    # that share alone does (a window's frees, the shared pool, the hits, a Mamba state cached in
    # this step: nothing crosses over)
    trace = kvreplay.Trace.from_requests(rows, block_size=4)
    arrival = np.asarray(trace.timestamp, dtype=np.float64) / 1000.0
    kw = dict(policy="vllm", capacity=capacity, block_size=4, time_model=step(0.5), kv_groups=groups,
              scheduler=Scheduler(max_num_batched_tokens=budget, max_num_seqs=4), max_model_len=1000)
    which = np.arange(len(rows)) % 2
    both = run_once(trace, arrival_s=arrival, instances=2, assigned=which, **kw)
    for k in (0, 1):
        mine = np.flatnonzero(which == k)
        if not mine.size:
            continue
        alone = run_once(trace.take(mine), arrival_s=arrival[mine], **kw)
        for name in ("first_token_s", "finish_s", "hit_tokens", "preemptions", "status"):
            assert np.array_equal(getattr(both, name)[mine], getattr(alone, name), equal_nan=True), (k, name)


def test_a_pool_beyond_the_hybrid_engine_is_refused_naming_it():
    t = kvreplay.Trace.from_requests([([1, 2], 8, 0, 1)], block_size=4)
    with pytest.raises(ConfigError, match="refuses a capacity of 2,147,483,648 block ids"):
        run_once(t, policy="vllm", capacity=2**31, block_size=4, time_model=step(1.0), scheduler=Scheduler(),
                 arrival_s=np.zeros(1), kv_groups=SW4)


@st.composite
def layouts(draw):
    kind = draw(st.sampled_from(["sliding", "3sliding", "chunked", "two", "mamba", "sliding+mamba"]))
    w = draw(st.integers(1, 20))
    if kind == "sliding":
        return [Group("sliding_window", window=w), Group("full")]
    if kind == "3sliding":
        return [Group("sliding_window", 3, window=w), Group("full")]
    if kind == "chunked":
        return [Group("chunked_local", chunk=draw(st.integers(1, 24))), Group("full")]
    if kind == "mamba":
        return [Group("full"), Group("mamba", draw(st.integers(1, 3)))]
    if kind == "sliding+mamba":
        return [Group("full"), Group("sliding_window", window=w), Group("mamba")]
    return [Group("full"), Group("sliding_window", window=w), Group("chunked_local", chunk=draw(st.integers(1, 24)))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), layouts(), st.integers(0, 40), st.sampled_from([2, 3, 4, 8, 64]))
def test_requests_one_at_a_time_hit_as_the_sequential_hybrid_replay(rows, groups, extra, budget):
    # Requests 1,000 s apart with one output token each run alone and finish after their prefill:
    # the simulator's hybrid mode must give each the hit of kvreplay.replay(kv_groups=...), the
    # sequential engine that tests/real_engines/test_vllm_hybrid.py checks against vLLM's own
    # KVCacheManager, with the same prefill chunk (max_num_batched_tokens)
    rows = [(ids, length, 1e6 * k, 1) for k, (ids, length, _, _) in enumerate(rows)]
    trace = kvreplay.Trace.from_requests(rows, block_size=4)
    blocks = max(-(-length // 4) for _, length, _, _ in rows)
    capacity = sum(g.copies for g in groups) * blocks + extra  # every request fits its pool alone
    sim = run_once(trace, policy="vllm", capacity=capacity, block_size=4, time_model=step(0.5),
                   arrival_s=np.asarray(trace.timestamp, dtype=np.float64) / 1000.0, kv_groups=groups,
                   scheduler=Scheduler(max_num_batched_tokens=budget, max_num_seqs=4), max_model_len=1000)
    seq = kvreplay.replay(trace, "vllm", capacity, 4, kv_groups=groups, prefill_chunk=budget)
    assert seq.counters["oversize_requests"] == 0 and sim.counters["rejected"] == 0
    assert sim.hit_tokens.tolist() == np.asarray(seq.hit_tokens).tolist()


@st.composite
def crowds(draw):
    """Up to 30 requests arriving within 5 s, with up to 200 output tokens each: they overlap."""
    n = draw(st.integers(1, 30))
    rows = []
    for _ in range(n):
        blocks = draw(st.integers(1, 10))
        base = draw(st.integers(0, 3)) * 100
        rows.append(([base + k for k in range(blocks)], blocks * 4 - draw(st.integers(0, 3)),
                     draw(st.floats(0.0, 5000.0)), draw(st.integers(1, 200))))
    return rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(crowds(), layouts(), st.integers(4, 120), st.sampled_from([4, 8, 16, 64]), st.integers(1, 8),
       st.integers(1, 2))
def test_overlapping_requests_on_small_hybrid_pools_all_end(rows, groups, capacity, budget, seqs, instances):
    # many requests at once on pools that preempt, in every layout: each ends finished or rejected
    # on arrival (a request that could never fit), none is left running or waiting, and every hit
    # is whole blocks below the prompt (else run_once raises: a stall or a pool out of balance)
    trace = kvreplay.Trace.from_requests(rows, block_size=4)
    sim = run_once(trace, policy="vllm", capacity=capacity, block_size=4, time_model=step(0.01),
                   arrival_s=np.asarray(trace.timestamp, dtype=np.float64) / 1000.0, kv_groups=groups,
                   scheduler=Scheduler(max_num_batched_tokens=budget, max_num_seqs=seqs), max_model_len=1000,
                   instances=instances, router="kv-aware" if instances > 1 else None)
    assert set(sim.status.tolist()) <= {3, 4}  # FINISHED, REJECTED
    finished = sim.status == 3
    assert (sim.hit_tokens[finished] % 4 == 0).all()
    assert (sim.hit_tokens[finished] < np.asarray(trace.input_length)[finished]).all()
