"""Hybrid models' KV cache groups in the catalog and vLLM 0.33.0's layout of them in one pool
(catalog/kv_groups.py), by hand from each config.json."""

from __future__ import annotations

import pytest

from kvreplay.catalog.kv_groups import layout, resolve_semantics
from kvreplay.analysis.models import get_model, kv_bytes_per_token
from kvreplay.errors import ConfigError
from kvreplay.hybrid.coordinator import Group


def test_gpt_oss_120b_two_groups_of_18_layers():
    # 18 sliding (window 128) + 18 full layers, 8 KV heads x head dim 64, bf16: a page of 16 tokens
    # is 16 x 2 x 8 x 64 x 2 = 32,768 B; a block id is one page in each of 18 layers = 589,824 B,
    # so 40 GiB holds 72,817 block ids (vLLM's own get_kv_cache_groups gives the same, spec 6.3)
    L = layout("gpt-oss-120b", 16)
    assert L.groups == (Group("sliding_window", 1, window=128), Group("full"))
    assert (L.group_size, L.page_bytes, L.bytes_per_block) == (18, 32_768, 589_824)
    assert 40 * 2**30 // L.bytes_per_block == 72_817
    # full semantics: one group of all 36 layers, as kvreplay's budgets count it
    full = layout("gpt-oss-120b", 16, semantics="full")
    assert full.groups == (Group("full"),) and full.bytes_per_block == 36 * 32_768


def test_gemma3_splits_its_52_sliding_layers_into_6_groups():
    # 52 local (1024) and 10 global: group size 10 (52 >= 1.5 x 10), so ceil(52 / 10) = 6 sliding groups
    L = layout("gemma-3-27b-it", 16)
    assert L.groups == (Group("sliding_window", 6, window=1024), Group("full"))
    assert L.bytes_per_block == 10 * 16 * 2 * 16 * 128 * 2


def test_mamba_hybrids_pad_the_state_page():
    # Qwen3-Next: 12 full-attention layers (2 KV heads x 256) and 36 Gated DeltaNet layers of
    # 1,097,728 state bytes; attention is 2,048 B per token per layer, so vLLM raises its block to
    # 16 x ceil(1,097,728 / (16 x 2,048)) = 544 tokens; at the trace's 512 the page is the state's
    L = layout("Qwen3-Next-80B-A3B", 512)
    assert L.groups == (Group("mamba", 3), Group("full")) and L.group_size == 12
    assert L.page_bytes == 1_097_728 and L.bytes_per_block == 12 * 1_097_728 and L.vllm_block_size == 544
    assert kv_bytes_per_token("Qwen3-Next-80B-A3B") == 2 * 12 * 2 * 256 * 2  # only attention layers keep KV
    # Nemotron-H-8B: 24 Mamba-2 layers (fp32 SSM state: 4,255,744 B) and 4 attention layers
    nemo = layout("Nemotron-H-8B", 512)
    assert nemo.groups == (Group("mamba", 6), Group("full")) and nemo.group_size == 4
    assert get_model("Nemotron-H-8B").kv_layers == 4


def test_semantics_default_to_what_vllm_does():
    assert resolve_semantics("gpt-oss-120b", "auto") == "hybrid"
    assert resolve_semantics("Qwen3-Next-80B-A3B", None) == "hybrid"
    assert resolve_semantics("Llama-3.1-8B", "auto") == "full"
    # vLLM 0.33.0 disables the hybrid manager for chunked-local attention unless an env var is set
    assert resolve_semantics("Llama-4-Scout", "auto") == "full"
    assert resolve_semantics("Llama-4-Scout", "hybrid") == "hybrid"
    with pytest.raises(ConfigError, match="--kv-semantics"):
        resolve_semantics("gpt-oss-120b", "sparse")
