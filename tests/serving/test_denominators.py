"""Who counts (issue 21): requests refused for their context and requests rejected by the pool
are counted apart and left out of the concurrent hit rate, its sequential counterpart and the
token totals alike, so the concurrent rate can never pass the ceiling over the same requests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreplay.errors import ConfigError
from kvreplay.serving.simulate import simulate

from sim_cases import ONE_SECOND, small_traces, trace_of


def test_context_limit_refuses_at_arrival():
    # block size 4; max_model_len 10: A (8 + 2 = 10 tokens) is served, B (8 + 3 = 11) refused at
    # arrival, C (8 + 1) served and hits A's first block [a] (vLLM never hits its last one)
    t = trace_of((["a", "b"], 8, 0, 2), (["a", "c"], 8, 100, 3), (["a", "d"], 8, 5000, 1))
    r = simulate(t, "vllm", 100, time_model=ONE_SECOND, max_model_len=10)
    assert r.request_columns()["status"].tolist() == ["finished", "refused", "finished"]
    s = r.summary()
    assert s["refused_context"] == 1 and s["rejected"] == 0 and s["finished"] == 2
    assert s["max_model_len"] == 10 and s["max_model_len_source"] == "given"
    # over A and C only: 4 hit tokens of 16
    assert s["prompt_tokens"] == 16 and s["hit_rate"] == 4 / 16
    # the sequential replay runs A and C only: the same 4 of 16 (with B it would be 8 of 24)
    assert r.sequential_hit_rate == 4 / 16
    assert np.isnan(r.first_token_s[1]) and r.instance is None


def test_catalog_limit_and_override():
    t = trace_of((["a"], 4, 0, 1))
    assert simulate(t, "vllm", 100, model="Qwen3-8B").max_model_len == 40960
    assert simulate(t, "vllm", 100, model="Llama-3.1-8B", max_model_len=1000).max_model_len == 1000
    assert simulate(t, "vllm", 100).max_model_len is None
    for bad in (0, -1, 1.5, True, 2 ** 41):
        with pytest.raises(ConfigError, match="max_model_len"):
            simulate(t, "vllm", 100, max_model_len=bad)


def test_a_cluster_refuses_before_routing():
    t = trace_of(*[([f"p{k % 2}", f"q{k}"], 8, 100 * k, 1 + 4 * (k % 3 == 0)) for k in range(9)])
    r = simulate(t, "vllm", 100, time_model=ONE_SECOND, instances=2, router="round-robin", max_model_len=12)
    refused = r.request_columns()["status"] == "refused"
    assert refused.tolist() == [k % 3 == 0 for k in range(9)]  # 8 + 5 > 12
    assert (r.instance[refused] == -1).all() and sum(p["requests"] for p in r.per_instance()) == 6


@pytest.mark.parametrize("style", ["vllm", "sglang"])
@pytest.mark.parametrize("instances, router", [(1, "round-robin"), (2, "session"), (3, "kv-aware")])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=small_traces(), capacity=st.integers(3, 8), limit=st.integers(4, 24))
def test_concurrent_hit_rate_never_passes_the_ceiling(style, instances, router, trace, capacity, limit):
    # the ceiling: an infinite cache, each instance's finished requests one at a time; the
    # concurrent run: a bounded pool (some requests rejected) and a context limit (some refused)
    policy = "vllm" if style == "vllm" else "radix"
    r = simulate(trace, policy, capacity, engine_style=style, time_model=ONE_SECOND, instances=instances,
                 router=router, max_model_len=limit, compare_sequential=False)
    ok = r.finished
    ceiling = simulate(trace, "infinite", None, engine_style=style, time_model=ONE_SECOND, instances=instances,
                       router=router, max_model_len=limit)
    # the same requests finish under the ceiling's run wherever the bounded one finished them
    assert ceiling.finished[ok].all()
    hit, prompt = int(r.hit_tokens[ok].sum()), int(r.prompt_tokens[ok].sum())
    assert r.summary()["prompt_tokens"] == prompt and r.summary()["refused_context"] == int(
        ((r.prompt_tokens + r.output_tokens) > limit).sum())
    if prompt and instances == 1:
        # one instance: its sequential infinite replay over the same finished requests bounds it
        seq = simulate(trace, "infinite", None, engine_style=style, time_model=ONE_SECOND, max_model_len=limit)
        same = seq.finished & ok
        assert same.sum() == ok.sum()
        bound = simulate(trace.take(np.flatnonzero(ok)), "infinite", None, engine_style=style,
                         time_model=ONE_SECOND).sequential_hit_rate
        assert hit / prompt <= bound + 1e-12


def test_hybrid_model_says_its_semantics():
    # gpt-oss-120b interleaves sliding-window layers: by default the simulator serves them with vLLM's
    # hybrid manager and says so; asked for full semantics (or where the hybrid manager is not
    # modelled: tiers) it serves every layer as full attention and says that, with the block-id
    # ratio the hybrid layout would have; a dense model says nothing
    t = trace_of((["a", "b"], 8, 0, 2), (["a", "c"], 8, 100, 3))
    s = simulate(t, "vllm", 100, model="gpt-oss-120b").summary()
    assert s["kv_semantics"]["semantics"] == "hybrid" and s["kv_semantics"]["block_ids"] == 100
    assert [g["kind"] for g in s["kv_semantics"]["groups"]] == ["sliding_window", "full"]
    assert "(block ids as given," in s["kv_semantics"]["text"]
    full = simulate(t, "vllm", 100, model="gpt-oss-120b", kv_semantics="full").summary()["kv_semantics"]
    assert full["semantics"] == "full" and full["model_groups"] == ["full", "sliding_window"]
    assert "as asked (kv_semantics='full')" in full["text"]
    # its 36 KV layers are 18 sliding + 18 full: a full-semantics block costs 36 layers' bytes, a
    # vLLM block id one group's 18, so the same bytes hold 2x the ids; gemma-3-27b-it's 62 layers
    # are 6 sliding groups of 10 (52 layers, padded to 60) and one full group of 10: 62 / 10
    assert full["hybrid_block_ids_ratio"] == 2.0 and "2.0x the block ids" in full["text"]
    gemma = simulate(t, "vllm", 100, model="gemma-3-27b-it", kv_semantics="full").summary()["kv_semantics"]
    assert gemma["hybrid_block_ids_ratio"] == 6.2
    tiered = simulate(t, "vllm", 100, model="gpt-oss-120b", tiers="dram=4").summary()["kv_semantics"]
    assert tiered["semantics"] == "full" and "does not model tiers below HBM" in tiered["text"]
    with pytest.raises(ConfigError, match="does not model tiers below HBM"):
        simulate(t, "vllm", 100, model="gpt-oss-120b", tiers="dram=4", kv_semantics="hybrid")
    sgl = simulate(t, None, 100, model="gpt-oss-120b", engine_style="sglang").summary()["kv_semantics"]
    assert sgl["semantics"] == "hybrid" and sgl["engine"] == "sglang" and sgl["full_pages"] == 100
    with pytest.raises(ConfigError, match="a policy other than radix"):
        simulate(t, "lru", 100, model="gpt-oss-120b", engine_style="sglang", kv_semantics="hybrid")
    with pytest.raises(ConfigError, match="Qwen3-8B has one kind of layer"):
        simulate(t, "vllm", 100, model="Qwen3-8B", kv_semantics="hybrid")
    assert simulate(t, "vllm", 100, model="Qwen3-8B").summary()["kv_semantics"] is None
