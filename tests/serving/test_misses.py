"""The served miss account (serving/misses.py): every finished request's prompt tokens = its
served hit tokens + its missed tokens by cause; with instant time (one request at a time) there
is nothing for concurrency; two identical requests at once: the second one's hit in the
sequential replay is still being computed when it is scheduled; on the real trace it adds up."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.misses import CAUSES
from kvreplay.serving.simulate import simulate
from conftest import MOONCAKE, shared_path
from sim_cases import ONE_SECOND, small_traces, trace_of


def adds_up(sim):
    if not sim.finished.any():  # nothing finished: no sequential replay, no account
        assert sim.misses is None
        return
    account = sim.misses["account"]
    ok = sim.finished
    assert np.array_equal(sim.hit_tokens[ok] + account.tokens[ok].sum(axis=1), sim.prompt_tokens[ok])
    assert (account.tokens[~ok] == 0).all()


@pytest.mark.parametrize("policy", ["vllm", "lru", "radix"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), capacity=st.integers(4, 12))
def test_one_request_at_a_time_has_no_concurrency(policy, trace, capacity):
    # instant time, prompts only: each request alone, so served = sequential, block by block
    sim = simulate(trace, policy, capacity, time_model="instant", output_kv=False)
    adds_up(sim)
    if sim.finished.all():
        seq = kvreplay.replay(trace, policy, capacity, stranded_samples=0)
        assert sim.misses["account"].tokens.tolist() == seq.misses.tokens.tolist()
        assert sim.summary()["misses"]["tokens"]["concurrency"] == 0


def test_a_prefix_still_computing():
    # two identical prompts of 4 blocks (16 tokens) arrive together; every step takes 1 s. SGLang's
    # scheduler batches both into the first prefill and inserts a prompt into its tree after its
    # forward pass, so the second finds nothing cached, while one at a time it hits 3 blocks (the
    # last page, holding the last token, is recomputed): 12 tokens of concurrency, still being
    # computed by the first request (its first token comes at 1 s). (vLLM caches a block when it is
    # scheduled, so its second request hits in the same step: no concurrency there.)
    t = trace_of((["a", "b", "c", "d"], 16, 0, 2), (["a", "b", "c", "d"], 16, 0, 2))
    sim = simulate(t, "radix", 100, engine_style="sglang", time_model=ONE_SECOND)
    adds_up(sim)
    assert sim.hit_tokens.tolist() == [0, 0]
    s = sim.summary()["misses"]
    assert s["tokens"]["concurrency"] == 12 and s["concurrency"] == {"still_computing": 12, "evicted_under_load": 0}
    assert sim.request_columns()["miss_concurrency_tokens"].tolist() == [0, 12]
    assert s["tokens"]["first_use"] == 12 and s["tokens"]["partial_block"] == 8
    assert simulate(t, "vllm", 100, time_model=ONE_SECOND).hit_tokens.tolist() == [0, 12]
    # arriving after the first one's prefill, the second hits as one at a time does
    later = simulate(trace_of((["a", "b", "c", "d"], 16, 0, 2), (["a", "b", "c", "d"], 16, 5000, 2)), "radix", 100,
                     engine_style="sglang", time_model=ONE_SECOND)
    assert later.hit_tokens.tolist() == [0, 12] and later.summary()["misses"]["tokens"]["concurrency"] == 0


def test_evicted_under_load():
    # a pool of 4 blocks: request 0 (a b) runs with its 2 blocks and decodes 6 tokens (2 more
    # blocks); request 1 (x y) arrives at once and holds the other 2. Request 2 (a b) arrives later:
    # one at a time a and b are still there (capacity 4, 4 blocks used in all), served they were
    # evicted to make room for the running requests' decode blocks.
    t = trace_of((["a", "b"], 8, 0, 6), (["x", "y"], 8, 0, 6), (["a", "b"], 8, 20_000, 1))
    sim = simulate(t, "lru", 4, time_model=ONE_SECOND)
    adds_up(sim)
    seq = kvreplay.replay(t, "lru", 4)
    s = sim.summary()["misses"]
    lost = int(seq.hit_tokens[2] - sim.hit_tokens[2])
    assert s["tokens"]["concurrency"] == lost
    assert s["concurrency"]["evicted_under_load"] == lost


@pytest.mark.parametrize("policy", ["vllm", "lru", "s3fifo", "radix"])
def test_real_trace_adds_up(policy):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    sim = simulate(trace, policy, 4096, model="Llama-3.1-8B", gpu="H100", time_model="roofline", speedup=4,
                   band_runs=False)
    adds_up(sim)
    s = sim.summary()
    assert s["hit_tokens"] + sum(s["misses"]["tokens"].values()) == s["prompt_tokens"]
    assert set(s["misses"]["not_measured"]) == {"namespace", "layer_groups"}
    assert set(s["misses"]["tokens"]) == set(CAUSES)
