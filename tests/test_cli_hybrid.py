"""The CLI under hybrid semantics: a hybrid --model picks vLLM's hybrid manager, sizes count vLLM's
block ids, every output says which semantics ran, and contradictory flags exit 2 naming the flag."""

from __future__ import annotations

import json

from conftest import jsonl, write
from test_cli import fails, ok

GIB = 2**30


def _trace(tmp_path):
    # block size 512, chained ids: a 3-block prompt and its 4-block continuation
    lines = jsonl({"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]},
                  {"timestamp": 1, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 3, 4]})
    return write(tmp_path, "two.jsonl", lines)


def test_run_defaults_to_hybrid_for_a_hybrid_model(tmp_path):
    trace = _trace(tmp_path)
    # gpt-oss-120b at 512-token blocks: a block id is 18 layers x 512 x 2 x 8 x 64 x 2 B = 18 MiB,
    # so 1 GiB holds 56 of them (full semantics: 36 layers, 28 blocks)
    doc = json.loads(ok("run", trace, "--model", "gpt-oss-120b", "--capacity", "1GiB", "--json"))
    assert doc["policy"] == "vllm" and doc["cache_capacity_blocks"] == GIB // (18 * 512 * 2048)
    assert doc["kv_semantics"]["semantics"] == "hybrid" and doc["budget"]["kv_semantics"] == "hybrid"
    # the continuation: full attention matches blocks 1-3 (cap (2048 - 1) // 512 = 3); the window
    # (128 tokens: 1 block) has the block ending at floor((1536 - 1) / 512) = 2 cached, not block 3
    # (retention 0 caches only the block before the prompt's end), so the hit ends after block 2
    assert doc["total_hit_tokens"] == 1024
    text = ok("run", trace, "--model", "gpt-oss-120b", "--capacity", "1GiB")
    assert "kv        hybrid semantics: vLLM 0.33.0's hybrid manager" in text
    full = json.loads(ok("run", trace, "--model", "gpt-oss-120b", "--capacity", "1GiB", "--policy", "vllm",
                         "--kv-semantics", "full", "--json"))
    assert full["cache_capacity_blocks"] == GIB // (36 * 512 * 2048) and full["total_hit_tokens"] == 1536
    assert "kv_semantics" not in full
    assert "full semantics: every layer of gpt-oss-120b" in ok("run", trace, "--model", "gpt-oss-120b",
                                                               "--capacity", "1GiB", "--policy", "lru")


def test_sweep_hybrid_and_the_flags_that_contradict_it(tmp_path):
    trace = _trace(tmp_path)
    text = ok("sweep", trace, "--model", "gpt-oss-120b", "--policies", "vllm", "--capacities", "1GiB")
    assert "kv semantics: hybrid" in text and "56" in text
    assert "kv semantics: full" in ok("sweep", trace, "--model", "gpt-oss-120b", "--policies", "vllm,lru",
                                      "--capacities", "1GiB")
    assert "one of them" in fails("sweep", trace, "--model", "gpt-oss-120b", "--policies", "lru",
                                                 "--capacities", "1GiB", "--kv-semantics", "hybrid")
    assert "(--policy radix), not lru" in fails("run", trace, "--model", "gpt-oss-120b", "--policy", "lru",
                                             "--kv-semantics", "hybrid")
    assert "--kv-semantics needs --model" in fails("run", trace, "--kv-semantics", "hybrid")
    assert "one kind of layer" in fails("run", trace, "--model", "Llama-3.1-8B", "--kv-semantics", "hybrid")
    assert "--kv-layers counts bytes" in fails("run", trace, "--model", "gpt-oss-120b", "--kv-layers", "full",
                                               "--kv-semantics", "hybrid")
    # --kv-layers alone asks for bytes per token: full semantics (s3fifo, the usual default policy)
    assert "policy    s3fifo" in ok("run", trace, "--model", "gpt-oss-120b", "--kv-layers", "full")
    assert "mrc replays every layer as full attention" in fails("mrc", trace, "--model", "gpt-oss-120b", "--kv-semantics", "hybrid",
                                         "--capacities", "1GiB")


def test_simulate_prices_mamba_layers_and_says_the_band_does_not_cover_them(tmp_path):
    # the calibrated roofline prices Qwen3-Next's 36 Gated DeltaNet layers with the GDN kernels fitted on
    # H100's and H200's tables; on A100 (no GDN table) with its (unmeasured) state term, and says so;
    # the raw roofline has no such term and refuses rather than time them as attention
    trace = _trace(tmp_path)
    out = ok("simulate", trace, "--model", "Qwen3-Next-80B-A3B", "--gpu", "H100", "--tp", "4")
    assert "36 Gated DeltaNet layers run vLLM's GDN kernels as fitted on measured ones" in out
    out = ok("simulate", trace, "--model", "Qwen3-Next-80B-A3B", "--gpu", "A100", "--tp", "4")
    assert "36 Mamba / linear-attention layers are priced by the roofline's state term" in out
    assert "semantics  Qwen3-Next-80B-A3B-Instruct's layer groups under vLLM 0.33.0's hybrid KV cache manager" in out
    assert "no Mamba or linear-attention layers" in fails("simulate", trace, "--model", "Qwen3-Next-80B-A3B",
                                                          "--gpu", "H100", "--tp", "4", "--time-model", "roofline-raw")


def test_run_radix_is_sglangs_hybrid_cache(tmp_path):
    import kvreplay
    from kvreplay.catalog.kv_groups import sglang_layout

    trace = _trace(tmp_path)
    # SGLang's pools for gpt-oss-120b at 512-token pages: 18 full layers + 0.8 x 18 sliding layers
    # = 18,874,368 + 15,099,494 = 33,973,862 B per full-pool page, so 1 GiB is 31 pages
    doc = json.loads(ok("run", trace, "--model", "gpt-oss-120b", "--capacity", "1GiB", "--policy", "radix", "--json"))
    assert doc["cache_capacity_blocks"] == GIB // 33_973_862 == 31
    assert doc["kv_semantics"]["source"].startswith("SGLang 0.5.23 UnifiedRadixCache")
    same = kvreplay.replay(str(trace), "radix", 31, 512, kv_groups=sglang_layout("gpt-oss-120b", 512).groups)
    assert doc["total_hit_tokens"] == same.total_hit_tokens
    # sweep --policies radix: the same pools, and the heading says hybrid
    text = ok("sweep", trace, "--model", "gpt-oss-120b", "--policies", "radix", "--capacities", "1GiB")
    assert "kv semantics: hybrid" in text and "SGLang pools" in text and " 31 " in text
