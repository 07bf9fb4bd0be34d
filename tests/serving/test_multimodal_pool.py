"""Multimodal pools (the vision tower's weights and encoder profile), Llama 4's bf16 attention in its
quantized checkpoints, and SGLang 0.5.23's pool: every figure worked by hand in the comments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import jsonl, write
from kvreplay.analysis.models import get_model
from kvreplay.errors import ConfigError
from kvreplay.serving.timing import memory
from kvreplay.serving.timing.capacity import kv_capacity
from kvreplay.serving.timing.sglang_memory import PRE_LOAD_OVERHEAD_BYTES, default_mem_fraction_static, \
    sglang_capacity
from test_cli import fails, ok

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def test_llama4_vision_tower_from_its_vision_config():
    v = get_model("Llama-4-Scout").vision
    # a layer: q, k, v, o 4 x 1408^2 + 4 biases of 1408; fc1 and fc2 2 x 1408 x 5632 + biases 5632 + 1408;
    # two layer norms (weight and bias) 4 x 1408 = 23,807,872 (the published module table's layer 0);
    # x 34 = 809,467,648; patch embedding 3 x 14 x 14 x 1408 = 827,904, class embedding 1408, positions
    # 577 x 1408 = 812,416, pre/post norms 5,632, adapter 5632 x 4096 + 4096 x 4096 = 39,845,888,
    # projector 4096 x 5120 = 20,971,520: 871,932,416
    assert v["params"] == 871_932_416
    # 16 tiles + the global one; 336 / 14 = 24, 576 patches + CLS per tile; pixel shuffle 0.5: 144 tokens
    assert (v["encoder_tokens_per_item"], v["tokens_per_item"]) == (17 * 577, 17 * 144)
    g = get_model("gemma-3-27b-it").vision
    assert (g["encoder_tokens_per_item"], g["tokens_per_item"]) == (64 * 64, 256)


def test_scout_encoder_profile_by_hand():
    spec = get_model("Llama-4-Scout")
    # encoder budget max(8192, 2448) // 2448 = 3 images; 3 x 9809 = 29,427 tower tokens; widest layer at
    # tp 2: max(4 x 1408 / 2, 2 x 5632 / 2) = 5632; (2 x 1408 + 5632) x 2 B x 29,427 = 497,198,592 B;
    # outputs 3 x 2448 x 5120 x 2 B = 75,202,560 B
    assert memory.encoder_bytes(spec, 2, 8192, 1024) == (3, 497_198_592.0, 75_202_560.0)
    assert memory.encoder_bytes(spec, 2, 8192, 1024, language_model_only=True) == (0, 0.0, 0.0)
    # gemma-3: 8192 // 256 = 32 images of 4,096 tower tokens
    assert memory.encoder_items(get_model("gemma-3-27b-it"), 8192, 256) == 32


def test_scout_fp8_weights_keep_attention_and_vision_bf16():
    spec = get_model("Llama-4-Scout")
    parts = memory.weight_parts(spec, "fp8", 2)
    assert parts["vision"] == 871_932_416.0  # 2 B x 871,932,416 / 2 ranks
    assert memory.weight_parts(spec, "fp8", 2, language_model_only=True)["vision"] == 0.0
    # attention 48 x 5120 x (2 x 40 x 128 + 2 x 8 x 128) = 3,019,898,880 weights at 2 B rather than 1:
    # + 1,509,949,440 B a rank at tp 2; with bf16 weights nothing changes
    assert memory.attention_params(spec) == 3_019_898_880
    bare = memory.weight_parts(spec.__class__(**{**spec.__dict__, "quantized_keeps_bf16": ()}), "fp8", 2)
    assert parts["dense"] - bare["dense"] == pytest.approx(1_509_949_440.0)
    assert memory.weight_parts(spec, "bf16", 2)["dense"] == \
        memory.weight_parts(spec.__class__(**{**spec.__dict__, "quantized_keeps_bf16": ()}), "bf16", 2)["dense"]


def test_scout_pool_on_h100_tp2_fp8():
    with_mm = kv_capacity("Llama-4-Scout", "H100", 2, 16, dtype="fp8", max_num_seqs=1024)
    text = kv_capacity("Llama-4-Scout", "H100", 2, 16, dtype="fp8", max_num_seqs=1024, language_model_only=True)
    # the sampler (1024 rows x 202,048 logits x 14 B + hidden states) stays the peak; with the encoder
    # outputs held the peak grows by 75,202,560 B; the vision weights 871,932,416 B
    assert with_mm.peak_bytes - text.peak_bytes == pytest.approx(75_202_560.0)
    assert text.kv_bytes_available - with_mm.kv_bytes_available == pytest.approx(871_932_416 + 75_202_560)
    assert with_mm.encoder_items == 3 and text.encoder_items == 0
    with pytest.raises(ConfigError, match="language_model_only"):
        kv_capacity("Llama-3.1-8B", "H100", language_model_only=True)


def test_sglang_default_fraction_and_pool_by_hand():
    spec = get_model("Llama-3.1-8B")
    # H100: 79.22 GiB = 81,121.28 MiB; chunked prefill 8192, decode graphs to 256; 58 prefill graph sizes up
    # to 8192; reserved 512 + 8192 x 1.5 + 1 / 8 x 1024 + 256 x 2 + 58 x 8 = 13,904 MiB (> 10 GiB);
    # (81,121.28 - 13,904) / 81,121.28 = 0.8286 -> 0.829
    assert default_mem_fraction_static(spec, 79.22 * 1024, 1) == 0.829
    c = sglang_capacity("Llama-3.1-8B", "H100", 1, 16)
    free = int(79.22 * GiB) - PRE_LOAD_OVERHEAD_BYTES
    weights = sum(memory.weight_parts(spec, "bf16", 1).values())
    assert c.kv_bytes_available == pytest.approx(free - weights - free * (1 - 0.829))
    assert c.max_total_num_tokens == int(c.kv_bytes_available // 131072)  # 32 x 2 x 8 x 128 x 2 B a token
    # the issue's own SGLang log: Qwen3-235B-A22B-FP8, 4 x H100, 0.93: 16.46 GiB measured, 17.88 predicted
    assert sglang_capacity("Qwen3-235B-A22B", "H100", 4, 1, 0.93, dtype="fp8").kv_bytes_available / GiB == \
        pytest.approx(17.88, abs=0.01)


@pytest.fixture
def trace_file(tmp_path):
    return write(tmp_path, "t.jsonl", jsonl({"timestamp": 0, "input_length": 40, "output_length": 2,
                                             "hash_ids": [1, 2, 3]}))


def test_cli_flags(trace_file):
    base = ("simulate", trace_file, "--gpu", "H100", "--time-model", "instant", "--block-size", "16")
    out = ok(*base, "--model", "Llama-3.1-8B", "--engine-style", "sglang", "--mem-fraction-static", "0.85")
    assert "what SGLang 0.5.23 leaves for KV" in out and "1 - mem_fraction_static 0.85 (--mem-fraction-static)" in out
    assert "--engine-style sglang" in fails(*base, "--model", "Llama-3.1-8B", "--mem-fraction-static", "0.85")
    out = ok(*base, "--model", "Llama-4-Scout", "--tp", "4", "--language-model-only")
    assert "vision encoder" not in out
    assert "vision encoder on 3 dummy images" in ok(*base, "--model", "Llama-4-Scout", "--tp", "4")
    assert "language_model_only" in fails(*base, "--model", "Llama-3.1-8B", "--language-model-only")


def test_the_sglang_benchmark_runs():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sglang_pool.py")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "| qwq32b-4xl4-sglang | L4 | 4 | Qwen2.5-32B |" in r.stdout and "+9.1%" in r.stdout
