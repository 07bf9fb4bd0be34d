"""The KV-size catalog, bytes per token, sizes and budgets (analysis/models.py). Values hand-computed."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from kvreplay.analysis import models
from kvreplay.analysis.models import (
    KV_DTYPES, ModelSpec, blocks_for_budget, budget_document, catalog, describe, format_bytes, get_model,
    kv_bytes_per_token, parse_size, resolve_capacities,
)
from kvreplay.errors import ConfigError
from kvreplay.units import parse_bandwidth

GiB = 2**30


def spec(**overrides) -> ModelSpec:
    """A made-up model for cases the catalog does not have (MHA, every layer sliding)."""
    fields = dict(name="Tiny-MHA", hf_id="example/tiny-mha", attention="mha", num_layers=2, num_attention_heads=4,
                  num_kv_heads=4, head_dim=8, total_params=1000, active_params=1000,
                  source="https://huggingface.co/example/tiny-mha/blob/main/config.json", params_source="made up")
    fields.update(overrides)
    return ModelSpec(**fields)


# ---------------------------------------------------------------- bytes per token

def test_gqa_llama_3_1_8b():
    # 2 (K, V) x 32 layers x 8 kv heads x 128 head dim x 2 bytes = 131,072 B = 128 KiB
    assert kv_bytes_per_token("Llama-3.1-8B") == 131_072
    assert kv_bytes_per_token("Llama-3.1-8B", "fp8") == 65_536      # x 1 byte
    assert kv_bytes_per_token("Llama-3.1-8B", "fp32") == 262_144    # x 4 bytes
    assert kv_bytes_per_token("Llama-3.1-8B", "fp4") == 32_768      # x 1/2 byte
    assert kv_bytes_per_token("Llama-3.1-8B", "BF16") == 131_072    # dtype names are case-insensitive


def test_gqa_qwen3_235b():
    # 2 x 94 layers x 4 kv heads x 128 x 2 bytes = 192,512
    assert kv_bytes_per_token("Qwen/Qwen3-235B-A22B") == 192_512


def test_mla_deepseek_v3_and_kimi_k2():
    # one latent per token and layer, no separate V: 61 layers x (512 + 64) x 2 bytes = 70,272
    assert kv_bytes_per_token("DeepSeek-V3") == 70_272
    assert kv_bytes_per_token("deepseek-ai/DeepSeek-R1", "fp8") == 35_136   # 61 x 576 x 1
    assert kv_bytes_per_token("Kimi-K2-Instruct") == 70_272


def test_mha_made_up_model():
    # 2 x 2 layers x 4 kv heads x 8 x 2 bytes = 256
    assert kv_bytes_per_token(spec()) == 256


def test_sliding_window_both_modes():
    # gpt-oss-120b: 36 layers, 18 of them sliding (even-indexed), 8 kv heads x 64.
    # every layer:             2 x 36 x 8 x 64 x 2 = 73,728
    # full-attention layers:   2 x 18 x 8 x 64 x 2 = 36,864
    assert kv_bytes_per_token("gpt-oss-120b") == 73_728
    assert kv_bytes_per_token("gpt-oss-120b", layers="full") == 36_864
    # gemma-3-27b: 62 layers, full iff (i + 1) % 6 == 0 -> 10 full, 52 sliding; 16 kv heads x 128.
    # every layer: 2 x 62 x 16 x 128 x 2 = 507,904;  full only: 2 x 10 x 16 x 128 x 2 = 81,920
    assert kv_bytes_per_token("gemma-3-27b-it") == 507_904
    assert kv_bytes_per_token("gemma-3-27b-it", "bf16", "full") == 81_920
    # gemma-2-9b: 42 layers, 21 sliding; 8 kv heads x 256. all: 2x42x8x256x2 = 344,064; full: 172,032
    assert kv_bytes_per_token("gemma-2-9b") == 344_064
    assert kv_bytes_per_token("gemma-2-9b", layers="full") == 172_032
    # without sliding layers the two modes agree
    assert kv_bytes_per_token("Llama-3.1-70B", layers="full") == kv_bytes_per_token("Llama-3.1-70B") == 327_680


def test_layers_mode_errors():
    with pytest.raises(ConfigError, match="layers must be one of all, full"):
        kv_bytes_per_token("Llama-3.1-8B", layers="sliding")
    every_layer_sliding = spec(sliding_window=4096, sliding_window_layers=2)
    with pytest.raises(ConfigError, match="no full-attention layers"):
        kv_bytes_per_token(every_layer_sliding, layers="full")
    assert kv_bytes_per_token(every_layer_sliding) == 256


def test_unknown_dtype():
    with pytest.raises(ConfigError, match=r"unknown KV dtype 'fp7' \(known: fp32, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2, int8, fp4\)"):
        kv_bytes_per_token("Llama-3.1-8B", "fp7")


def test_dtype_table():
    assert KV_DTYPES["bf16"] == KV_DTYPES["fp16"] == 2
    assert KV_DTYPES["fp8"] == KV_DTYPES["fp8_e4m3"] == KV_DTYPES["fp8_e5m2"] == KV_DTYPES["int8"] == 1
    assert KV_DTYPES["fp32"] == 4 and KV_DTYPES["fp4"] == Fraction(1, 2)


def test_fraction_of_a_byte_per_token_is_an_error():
    odd = spec(num_layers=1, num_attention_heads=1, num_kv_heads=1, head_dim=1)  # 2 x 1 x 1 x 1 = 2 values
    assert kv_bytes_per_token(odd, "fp4") == 1                                    # 2 x 1/2 = 1 byte
    with pytest.raises(ConfigError, match="not a whole number"):
        kv_bytes_per_token(spec(attention="mla", num_layers=1, num_kv_heads=1, head_dim=3, kv_lora_rank=2,
                                qk_rope_head_dim=1), "fp4")                        # 1 x 3 x 1/2 = 1.5


# ---------------------------------------------------------------- sizes and budgets

@pytest.mark.parametrize("text, expected", [
    ("80GiB", 80 * GiB),                       # 85,899,345,920
    ("80giB", 80 * GiB),                       # the prefix in any case; the B says bytes
    ("1.5TiB", 3 * 2**39),                     # 1.5 x 2^40 = 1,649,267,441,664
    ("500MB", 500_000_000),
    ("16 GB", 16_000_000_000),
    ("2KiB", 2048),
    ("1kB", 1000),
    ("1KB", 1000),
    ("4096", 4096),                            # no unit: bytes
    ("4096B", 4096),
    ("2.5B", 2),                               # a fraction of a byte is dropped
    (".5KiB", 512),
    (7, 7),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "80XB", "-1GiB", "1e3GB", "80 Gi B", "eighty", "1.2.3MB", None, True])
def test_parse_size_rejects_garbage(text):
    with pytest.raises(ConfigError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize("text, message", [
    ("80Gb", "80Gb is in bits; write 80GB or 80GiB"),      # a lower-case b is a bit, never read as a byte
    ("80gb", "80gb is in bits; write 80GB or 80GiB"),
    ("64Gbit", "64Gbit is in bits; write 64GB or 64GiB"),
    ("80Gib", "80Gib is in bits; write 80GB or 80GiB"),    # gibibits
    ("1kb", "1kb is in bits; write 1KB or 1KiB"),
    ("512b", "512b is in bits; a size is in bytes"),
])
def test_sizes_in_bits_are_refused(text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_size(text)


@pytest.mark.parametrize("text, message", [
    ("64Gb/s", "64Gb/s is in bits per second; write 8GB/s"),
    ("100Gbps", "100Gbps is in bits per second; write 12.5GB/s"),
    ("64Gbit/s", "64Gbit/s is in bits per second; write 8GB/s"),
])
def test_bandwidths_in_bits_are_refused(text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_bandwidth(text)


def test_bandwidths():
    assert parse_bandwidth("64GB/s") == 64e9
    assert parse_bandwidth("25 GiB/s") == 25 * 2**30
    assert parse_bandwidth("inf") == float("inf")


@pytest.mark.parametrize("text", ["0B", "0", "0.1B", 0])
def test_parse_size_rejects_below_one_byte(text):
    with pytest.raises(ConfigError, match="at least 1 byte"):
        parse_size(text)


def test_blocks_for_budget():
    # 80 GiB / (131,072 B/token x 512 tokens = 64 MiB per block) = 1280 blocks
    assert blocks_for_budget(80 * GiB, 131_072, 512) == 1280
    # floor: 100 / (3 x 4 = 12) = 8.33 -> 8
    assert blocks_for_budget(100, 3, 4) == 8
    assert blocks_for_budget(12, 3, 4) == 1


def test_blocks_for_budget_errors():
    with pytest.raises(ConfigError, match=r"a budget of 11 B holds no block of 4 tokens \(12 B each at 3 bytes per token\)"):
        blocks_for_budget(11, 3, 4)
    for args in ((0, 3, 4), (100, 0, 4), (100, 3, 0), (100.0, 3, 4)):
        with pytest.raises(ConfigError, match="must be a positive whole number"):
            blocks_for_budget(*args)


def test_format_bytes():
    assert format_bytes(80 * GiB) == "80 GiB"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 2**39) == "1.5 TiB"


def test_resolve_capacities_with_a_model():
    # Llama-3.1-8B bf16 at block size 512: 64 MiB per block; 80 GiB -> 1280 blocks, 100 stays 100 blocks
    blocks, budget = resolve_capacities(["80GiB", 100], 512, model="llama-3.1-8b")
    assert blocks == [1280, 100]
    assert budget == {
        "model": "Llama-3.1-8B", "hf_id": "meta-llama/Llama-3.1-8B", "kv_dtype": "bf16", "kv_layers": "all",
        "bytes_per_token": 131_072, "block_size": 512, "bytes_per_block": 67_108_864,
        "capacities": [
            {"cache_capacity_blocks": 1280, "cache_bytes": 80 * GiB, "requested": "80GiB", "budget_bytes": 80 * GiB},
            {"cache_capacity_blocks": 100, "cache_bytes": 100 * 67_108_864},
        ],
    }


def test_resolve_capacities_with_bytes_per_token_and_fp8():
    # 1000 B/token x 16 tokens = 16,000 B per block; 1 MB = 1,000,000 B -> 62.5 -> 62 blocks (992,000 B used)
    blocks, budget = resolve_capacities(["1MB"], 16, bytes_per_token=1000)
    assert blocks == [62]
    assert budget["model"] is None and budget["kv_dtype"] is None
    assert budget["capacities"] == [{"cache_capacity_blocks": 62, "cache_bytes": 992_000, "requested": "1MB",
                                     "budget_bytes": 1_000_000}]
    # DeepSeek-V3 fp8: 35,136 B/token x 512 = 17,989,632 B per block; 16 GiB = 17,179,869,184 B -> 954.99 -> 954
    blocks, budget = resolve_capacities(["16GiB"], 512, model="DeepSeek-V3", kv_dtype="FP8")
    assert blocks == [954] and budget["kv_dtype"] == "fp8"


def test_resolve_capacities_errors():
    assert resolve_capacities([4, "8"], 512) == ([4, 8], None)
    with pytest.raises(ConfigError, match="'80GiB' is a size in bytes"):
        resolve_capacities([4, "80GiB"], 512)
    with pytest.raises(ConfigError, match="not both"):
        resolve_capacities(["80GiB"], 512, model="Llama-3.1-8B", bytes_per_token=10)
    with pytest.raises(ConfigError, match="need a model"):
        resolve_capacities(["80GiB"], 512, bytes_per_token=10, kv_dtype="fp8")


def test_budget_document_without_sizes():
    doc = budget_document(10, 4, [3], model="gpt-oss-20b", kv_dtype="bf16", layers="full")
    assert doc["capacities"] == [{"cache_capacity_blocks": 3, "cache_bytes": 120}]   # 3 x 4 x 10
    assert doc["kv_layers"] == "full" and doc["hf_id"] == "openai/gpt-oss-20b"


# ---------------------------------------------------------------- names

def test_get_model_names():
    llama = get_model("Llama-3.1-8B")
    assert get_model("meta-llama/Llama-3.1-8B") is llama
    assert get_model("META-LLAMA/LLAMA-3.1-8B-INSTRUCT") is llama       # alias, any case
    assert get_model("  llama-3.1-8b ") is llama
    assert get_model(llama) is llama
    assert get_model("Qwen3-30B-A3B").active_params == 3_300_000_000
    assert get_model("gemma-3-27b").hf_id == "google/gemma-3-27b-it"


def test_get_model_unknown_suggests():
    with pytest.raises(ConfigError, match=r"unknown model 'lama-3.1-8b'; did you mean Llama-3\.1-8B, "):
        get_model("lama-3.1-8b")
    with pytest.raises(ConfigError, match=r"did you mean DeepSeek-V3, DeepSeek-R1, DeepSeek-V2-Lite\?"):
        get_model("deepseek")
    with pytest.raises(ConfigError, match=r"^unknown model 'zzzz' \(see `kvreplay models`, or give a path to a config.json\)$"):
        get_model("zzzz")


def test_describe():
    d = describe("gpt-oss-20b")
    # 24 layers, 12 sliding; 2 x 24 x 8 x 64 = 24,576 values -> bf16 49,152, fp8 24,576; full only halves them
    assert d["kv_bytes_per_token"] == {"all": {"bf16": 49_152, "fp8": 24_576}, "full": {"bf16": 24_576, "fp8": 12_288}}
    assert d["full_attention_layers"] == 12 and d["active_params"] == 3_600_000_000


# ---------------------------------------------------------------- catalog sanity

REQUIRED = ["Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B", "Qwen2.5-7B", "Qwen2.5-72B", "Qwen3-8B", "Qwen3-32B",
            "Qwen3-30B-A3B", "Qwen3-235B-A22B", "MiniMax-M2.5", "DeepSeek-V3", "DeepSeek-R1", "Mistral-7B-Instruct-v0.3",
            "Mixtral-8x7B-v0.1", "gemma-2-9b", "gemma-2-27b", "gemma-3-27b-it", "gpt-oss-20b", "gpt-oss-120b",
            "Kimi-K2-Instruct", "Llama-4-Scout-17B-16E-Instruct", "Qwen3-Next-80B-A3B-Instruct", "Nemotron-H-8B-Base-8K",
            "granite-4.0-h-small"]


def test_catalog_has_the_required_models():
    assert len(catalog()) >= 15
    assert [m.name for m in catalog()][:len(REQUIRED)] == REQUIRED  # the former catalog first, new models after


def test_every_name_points_to_one_model():
    owner = {}
    for m in catalog():
        for name in m.names():
            assert owner.setdefault(name.lower(), m.name) == m.name, name


def is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@pytest.mark.parametrize("m", catalog(), ids=lambda m: m.name)
def test_catalog_entry_is_sane(m):
    assert m.attention in models.ATTENTION_KINDS
    for field in ("num_layers", "num_attention_heads", "num_kv_heads", "head_dim", "total_params", "active_params"):
        assert is_count(getattr(m, field)), field
    assert m.active_params <= m.total_params
    assert re.fullmatch(r"https://huggingface\.co/[\w.-]+/[\w.-]+/blob/main/config\.json", m.source)
    assert m.hf_id in m.source and m.params_source
    if m.attention == "mla":
        assert is_count(m.kv_lora_rank) and is_count(m.qk_rope_head_dim)
        assert m.num_kv_heads == 1 and m.head_dim == m.kv_lora_rank + m.qk_rope_head_dim
    else:
        assert m.kv_lora_rank is None and m.qk_rope_head_dim is None
        assert m.num_attention_heads % m.num_kv_heads == 0
        assert (m.attention == "mha") == (m.num_kv_heads == m.num_attention_heads)
    if m.sliding_window is None:
        assert m.sliding_window_layers == 0 and m.sliding_window_pattern is None
    else:
        assert is_count(m.sliding_window) and 0 < m.sliding_window_layers < m.num_layers and m.sliding_window_pattern
    for layers in models.KV_LAYER_MODES:
        assert is_count(kv_bytes_per_token(m, "fp8", layers))
