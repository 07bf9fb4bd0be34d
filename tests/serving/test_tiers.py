"""Memory tiers below HBM (engine/tiers.py): parsing, hand-worked demotions and promotions, the
compiled engine against the reference, and the limits: an exclusive LRU + LRU chain is one LRU
of their combined size, sequentially, in the simulator, and with a global store."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.policies.registry import POLICIES
from kvreplay.serving.simulate import simulate
from kvreplay.engine.tiers import Tier, global_store, parse_bandwidth, parse_tiers

from conftest import MOONCAKE, shared_path
from sim_cases import HOLDS_IN_SEQUENCE, small_traces, trace_of


def test_parse_tiers():
    hbm, tiers = parse_tiers("hbm=4096,dram=64GiB@64GB/s,ssd=2TiB@7GB/s:fifo", block_size=512, block_bytes=2 ** 20)
    assert hbm == 4096
    assert [t.name for t in tiers] == ["dram", "ssd"]
    assert tiers[0].blocks == 64 * 1024 and tiers[0].bandwidth == 64e9 and tiers[0].policy == "lru"
    assert tiers[1].blocks == 2 * 1024 * 1024 and tiers[1].bandwidth == 7e9 and tiers[1].policy == "fifo"
    assert parse_tiers("dram=100", block_size=16) == (None, [Tier("dram", 100, size_text="100")])
    assert parse_bandwidth("12.5GiB/s") == 12.5 * 2 ** 30
    g = global_store("3000@25GB/s", block_size=16)
    assert g.shared and g.blocks == 3000 and g.bandwidth == 25e9
    for bad, match in (("dram=64GiB", "give --model"), ("dram=10:arc", "unknown tier policy"),
                       ("dram=10,hbm=5", "hbm comes first"), ("dram=10,dram=20", "given twice"),
                       ("global=10,dram=5", "last tier"), ("dram=10@fast", "not a bandwidth"), ("dram", "NAME=SIZE"),
                       ("dram=0", "holds no block")):
        with pytest.raises(ConfigError, match=match):
            parse_tiers(bad, block_size=16)


def test_demote_and_promote_by_hand():
    # LRU cache of 2 blocks, a DRAM tier of 2 (copies moved), block size 4, prompts of whole blocks.
    # r0 [a b]: misses. r1 [c d]: evicts a then b from HBM: DRAM [a b].
    # r2 [a b]: both found in DRAM (8 tokens hit, from DRAM), loaded into HBM, which evicts c, d:
    #   DRAM [c d] (a, b left it when they went up).
    # r3 [c d]: both from DRAM again.  r4 [a e]: a from DRAM (HBM holds c d): 4 tokens.
    t = trace_of((["a", "b"], 8, 0, 1), (["c", "d"], 8, 1, 1), (["a", "b"], 8, 2, 1), (["c", "d"], 8, 3, 1),
                 (["a", "e"], 8, 4, 1))
    r = kvreplay.replay(t, "lru", 2, tiers="dram=2")
    assert r.hit_tokens.tolist() == [0, 0, 8, 8, 4]
    per = r.tiers["tokens_per_tier"]
    assert per["hbm"].tolist() == [0, 0, 0, 0, 0]
    assert per["dram"].tolist() == [0, 0, 8, 8, 4]
    dram = r.tiers["tiers"][1]
    assert dram["demoted"] == 8 and dram["promoted"] == 5 and dram["resident"] == 2
    # without the tier, nothing of this hits
    assert kvreplay.replay(t, "lru", 2).hit_tokens.tolist() == [0, 0, 0, 0, 0]


def test_the_cap_comes_off_the_last_blocks_tier():
    # a 7-token prompt over 2 blocks of 4 hits min(2 x 4, 7) = 7 tokens: the 1 token the cap takes
    # comes off the tier that held its last block
    t = trace_of((["a", "b"], 7, 0, 1), (["c", "d"], 8, 1, 1), (["a", "b"], 7, 2, 1))
    r = kvreplay.replay(t, "lru", 2, tiers="dram=2")
    assert r.hit_tokens.tolist() == [0, 0, 7]
    assert r.tiers["tokens_per_tier"]["dram"].tolist() == [0, 0, 7]
    assert r.tiers["tiers"][1]["hit_tokens"] == 7 and r.tiers["tiers"][0]["hit_tokens"] == 0


def test_keep_copies_take_room_twice():
    # the first case with a DRAM tier of 4: after r2 loads [a b], the moved chain's DRAM holds
    # only c, d (a, b went up); with copies kept it holds a, b as well
    t = trace_of((["a", "b"], 8, 0, 1), (["c", "d"], 8, 1, 1), (["a", "b"], 8, 2, 1))
    move = kvreplay.replay(t, "lru", 2, tiers="dram=4")
    keep = kvreplay.replay(t, "lru", 2, tiers="dram=4", tier_copies="keep")
    assert move.hit_tokens.tolist() == keep.hit_tokens.tolist() == [0, 0, 8]
    assert move.tiers["tiers"][1]["resident"] == 2
    assert keep.tiers["tiers"][1]["resident"] == 4
    assert keep.tiers["copies"] == "keep"


# (tiers need the compiled core; trtllm, which caches at release, has its own host pool instead)
TIERED = [name for name, spec in POLICIES.items() if spec.native and not spec.caches_at_release]


@pytest.mark.parametrize("policy", TIERED)
@pytest.mark.parametrize("copies", ["move", "keep"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), capacity=st.integers(2, 8), dram=st.integers(1, 6), ssd=st.integers(1, 6))
def test_compiled_equals_reference(policy, copies, trace, capacity, dram, ssd):
    tiers = f"dram={dram},ssd={ssd}:fifo"
    cap = capacity + 4 if policy in ("s3fifo", "twoq", "2q") else capacity
    c = kvreplay.replay(trace, policy, cap, tiers=tiers, tier_copies=copies)
    r = kvreplay.replay(trace, policy, cap, tiers=tiers, tier_copies=copies, engine="reference")
    assert np.array_equal(c.hit_blocks, r.hit_blocks)
    for name in ("hbm", "dram", "ssd"):
        assert np.array_equal(c.tiers["tokens_per_tier"][name], r.tiers["tokens_per_tier"][name])
    assert [row["resident"] for row in c.tiers["tiers"][1:]] == [row["resident"] for row in r.tiers["tiers"][1:]]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), hbm=st.integers(1, 6), dram=st.integers(1, 8))
def test_exclusive_lru_chain_is_one_lru(trace, hbm, dram):
    # HBM LRU of H blocks + an LRU tier of D, copies moved: one LRU stack cut at H, so the same hits
    # as one LRU cache of H + D blocks, request by request; and HBM's share is the LRU of H
    chain = kvreplay.replay(trace, "lru", hbm, tiers=f"dram={dram}")
    one = kvreplay.replay(trace, "lru", hbm + dram)
    assert np.array_equal(chain.hit_tokens, one.hit_tokens)


@pytest.mark.parametrize("policy", ["lru", "vllm", "radix"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), dram=st.integers(1, 8))
def test_simulator_instant_limit_with_tiers(policy, trace, dram):
    # instant time, no output KV: the simulator's hits per tier are the sequential tiered replay's
    assert policy in HOLDS_IN_SEQUENCE
    capacity = 8
    sim = simulate(trace, policy, capacity, time_model="instant", output_kv=False, tiers=f"dram={dram}",
                   engine_style="sglang" if policy == "radix" else "vllm")
    seq = kvreplay.replay(trace, policy, capacity, tiers=f"dram={dram}")
    ok = sim.finished
    upto = np.flatnonzero(~ok)[0] if (~ok).any() else len(trace)
    assert np.array_equal(sim.hit_tokens[:upto], seq.hit_tokens[:upto])
    for name in ("hbm", "dram"):
        assert np.array_equal(sim.tiers["tokens_per_tier"][name][:upto], seq.tiers["tokens_per_tier"][name][:upto])


def test_simulator_demotes_a_full_step_once_like_the_sequential_replay():
    # hypothesis found it: HBM holds 8 blocks (vllm), DRAM 3. The simulator drained HBM's
    # evictions to DRAM after allocating a step's blocks as well as after caching them, so a block
    # evicted and re-cached within request 4's step ([5,1,1,3,1]) was demoted too and pushed
    # block 0 out of DRAM. Drained once, after the step's caching (as the sequential replay does),
    # block 0 is still in DRAM when request 5 ([0, 1]) arrives: 4 tokens from DRAM, none from HBM.
    reqs = [([0], 4), ([2], 4), ([3, 4], 8), ([1, 1, 1], 12), ([5, 1, 1, 3, 1], 17), ([0, 1], 5)]
    trace = trace_of(*[(ids, length, 1000 * i, 0) for i, (ids, length) in enumerate(reqs)])
    sim = simulate(trace, "vllm", 8, time_model="instant", output_kv=False, tiers="dram=3", engine_style="vllm")
    seq = kvreplay.replay(trace, "vllm", 8, tiers="dram=3")
    assert sim.hit_tokens.tolist() == seq.hit_tokens.tolist() == [0, 0, 0, 0, 0, 4]
    assert sim.tiers["tokens_per_tier"]["dram"].tolist() == [0, 0, 0, 0, 0, 4]
    assert sim.tiers["tokens_per_tier"]["hbm"].tolist() == [0] * 6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), store=st.integers(1, 10))
def test_one_instance_with_a_global_store_is_one_bigger_cache(trace, store):
    # unbounded bandwidth (no load time), instant time: the store adds its size to the cache
    with_store = simulate(trace, "lru", 8, time_model="instant", output_kv=False, global_store=str(store))
    one = simulate(trace, "lru", 8 + store, time_model="instant", output_kv=False)
    both = with_store.finished & one.finished
    upto = np.flatnonzero(~both)[0] if (~both).any() else len(trace)
    assert np.array_equal(with_store.hit_tokens[:upto], one.hit_tokens[:upto])


def test_load_time_by_hand():
    # Llama-3.1-8B: 131,072 KV bytes per token; 16-token blocks of 2 MiB. r2 finds both of its
    # blocks in DRAM at 1 GB/s: 2 x 2,097,152 / 1e9 s of loading, and with instant compute its
    # TTFT is exactly that (the load comes before the step's compute, or beside it: the same here)
    t = trace_of((["a", "b"], 32, 0, 1), (["c", "d"], 32, 1, 1), (["a", "b"], 32, 2, 1), block_size=16)
    load = 2 * 2 * 2 ** 20 / 1e9
    for overlap in (False, True):
        r = simulate(t, "lru", 2, 16, time_model="instant", output_kv=False, tiers="dram=4@1GB/s",
                     model="Llama-3.1-8B", tier_overlap=overlap)
        assert r.hit_tokens.tolist() == [0, 0, 32]
        assert r.ttft_s[:2].tolist() == [0.0, 0.0]
        assert r.ttft_s[2] == pytest.approx(load, rel=1e-9)
        assert r.tiers["load_s"] == pytest.approx(load, abs=1e-6)
        assert r.tiers["tiers"][1]["load_ms_per_block"] == pytest.approx(2 * 2 ** 20 / 1e6)
    with pytest.raises(ConfigError, match="needs the model"):
        simulate(t, "lru", 2, 16, time_model="instant", tiers="dram=4@1GB/s")


def test_conversation_trace_dram_tier_is_a_bigger_lru():
    trace = kvreplay.load_trace(str(shared_path(MOONCAKE / "conversation_trace.jsonl")))
    one = kvreplay.replay(trace, "lru", 20000, 512)
    chain = kvreplay.replay(trace, "lru", 2000, 512, tiers="dram=18000")
    assert np.array_equal(one.hit_blocks, chain.hit_blocks)
    hbm_only = kvreplay.replay(trace, "lru", 2000, 512)
    rows = {row["name"]: row for row in chain.tiers["tiers"]}
    # HBM holds the same blocks as HBM alone (LRU's inclusion), and its share also counts the HBM
    # blocks that come after a stretch loaded from DRAM: more than HBM alone's leading prefixes
    assert rows["hbm"]["hit_tokens"] > hbm_only.total_hit_tokens
    assert rows["hbm"]["hit_tokens"] + rows["dram"]["hit_tokens"] == one.total_hit_tokens


def test_cli_run_and_simulate_with_tiers(tmp_path, capsys):
    t = trace_of((["a", "b"], 8, 0, 1), (["c", "d"], 8, 1, 1), (["a", "b"], 8, 2, 1))
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": r, "input_length": 8, "output_length": 1, "hash_ids": ids}) + "\n"
                            for r, ids in ((0, [1, 2]), (1, [3, 4]), (2, [1, 2]))))
    assert main(["run", str(path), "--policy", "lru", "--capacity", "2", "--block-size", "4", "--tiers", "dram=2"]) == 0
    out = capsys.readouterr().out
    assert "dram" in out and "33.33% of prompt tokens (8)" in out
    out_json = tmp_path / "sim.json"
    assert main(["simulate", str(path), "--policy", "lru", "--capacity", "2", "--block-size", "4", "--time-model",
                 "instant", "--tiers", "dram=2", "--no-output-kv", "--output", str(out_json)]) == 0
    doc = json.loads(out_json.read_text())
    assert [row["name"] for row in doc["summary"]["tiers"]["tiers"]] == ["hbm", "dram"]
    assert doc["summary"]["tiers"]["tiers"][1]["hit_tokens"] == 8
    capsys.readouterr()
    assert main(["run", str(path), "--policy", "lru", "--capacity", "2", "--block-size", "4", "--tiers",
                 "dram=1GiB"]) == 2
    assert "--model" in capsys.readouterr().err
    assert len(t) == 3


def test_sweep_over_dram_sizes(capsys):
    trace = kvreplay.load_trace(str(shared_path(MOONCAKE / "conversation_trace.jsonl"))).take(np.arange(3000))
    result = kvreplay.sweep(trace, [0, 1000, 4000], ["lru", "s3fifo"], hbm=500)
    rows = result["results"]
    assert [(r["policy"], r["cache_capacity_blocks"], r["dram_blocks"]) for r in rows] == [
        ("lru", 500, 0), ("lru", 500, 1000), ("lru", 500, 4000), ("s3fifo", 500, 0), ("s3fifo", 500, 1000),
        ("s3fifo", 500, 4000)]
    for r in rows:
        assert r["hit_rate"] == pytest.approx(r["hbm_hit_rate"] + r["dram_hit_rate"])
    # lru over an exclusive LRU tier: one LRU of the combined size
    for r in rows[:3]:
        assert r["total_hit_tokens"] == kvreplay.replay(trace, "lru", 500 + r["dram_blocks"]).total_hit_tokens
    one = kvreplay.replay(trace, "s3fifo", 500, tiers="dram=4000")
    assert rows[5]["total_hit_tokens"] == one.total_hit_tokens
    assert rows[3]["dram_hit_rate"] == 0.0 and rows[3]["hit_rate"] == kvreplay.replay(trace, "s3fifo", 500).hit_rate
    path = str(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    assert main(["sweep", path, "--hbm", "2000", "--policies", "lru"]) == 2
    assert "--dram-sizes" in capsys.readouterr().err


def test_a_reference_only_policy_is_refused_with_tiers():
    import kvreplay
    from kvreplay.errors import ConfigError

    t = kvreplay.Trace.from_requests([(["a"], 4)])
    for name, spec in POLICIES.items():
        if not spec.native:
            with pytest.raises(ConfigError, match="no compiled operations for tiers"):
                kvreplay.replay(t, name, 10, 4, tiers="dram=100")
