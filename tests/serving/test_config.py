"""serving/config.py: one resolve() for every size of a configuration (block size, KV dtype, the
GPU pool, the tiers), so that the pool and every tier below it are sized at the same KV dtype."""

from __future__ import annotations

import json

import pytest

import kvreplay
from kvreplay.cli import main as cli_main
from kvreplay.errors import ConfigError
from kvreplay.serving.config import resolve
from kvreplay.serving.timing import kv_capacity

from conftest import jsonl, write

# Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K and V) = 65,536 elements per token:
# 131,072 bytes at bf16, 65,536 at fp8; a 512-token block is 64 MiB at bf16, 32 MiB at fp8.
TRACE = kvreplay.Trace.from_requests([([1, 2], 1000)], block_size=512)


def test_an_fp8_pool_and_its_dram_tier_are_sized_alike():
    # 1 GiB holds 32 blocks of 32 MiB (fp8) and 16 of 64 MiB (bf16), for the pool and the tier alike
    fp8 = resolve(TRACE, capacity="1GiB", model="Llama-3.1-8B", kv_dtype="fp8", tiers="dram=1GiB")
    assert (fp8.capacity, fp8.tiers[0].blocks, fp8.block_bytes) == (32, 32, 512 * 65536)
    bf16 = resolve(TRACE, capacity="1GiB", model="Llama-3.1-8B", tiers="dram=1GiB")
    assert (bf16.capacity, bf16.tiers[0].blocks, bf16.block_bytes) == (16, 16, 512 * 131072)
    # the GPU pool after the weights doubles at fp8 too (vLLM's sizing, at the KV dtype)
    gpu8 = resolve(TRACE, model="Llama-3.1-8B", gpu="H100", kv_dtype="fp8")
    assert gpu8.capacity == kv_capacity("Llama-3.1-8B", "H100", 1, 512, kv_dtype="fp8").blocks
    # ceil(85,061,827,297 x 0.92, vLLM 0.33.0's default) = 78,256,881,114 - weights 16,094,076,928 - the
    # profile's peak (the forward pass: 8,192 x (2 x 4,096 + 3 x 14,336) x 2 = 838,860,800 > the
    # sampler's 526,778,368) - 86 CUDA graphs 631,242,752 - non-torch 42,949,672 = 60,649,750,962 B
    # left for KV: 903 blocks of 64 MiB (bf16), 1,807 of 32 MiB (fp8) (878 and 1,756 at 0.9)
    assert resolve(TRACE, model="Llama-3.1-8B", gpu="H100").capacity == 903 and gpu8.capacity == 1807
    assert resolve(TRACE, model="Llama-3.1-8B", gpu="H100", gpu_memory_utilization=0.9).capacity == 878


def test_the_fp8_case_from_the_command_line(tmp_path, capsys):
    # The bug this guards against: the CLI sized the pool at fp8 but the tier at bf16 (32 vs 16).
    path = write(tmp_path, "t.jsonl", jsonl({"timestamp": 0, "input_length": 600, "output_length": 2,
                                             "hash_ids": [1, 2]}))
    code = cli_main(["simulate", str(path), "--model", "Llama-3.1-8B", "--gpu", "H100", "--kv-dtype", "fp8",
                              "--capacity", "1GiB", "--tiers", "dram=1GiB", "--json", "--summary-only"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["capacity_blocks"] == 32
    assert doc["config"]["time_model"]["kv_dtype"] == "fp8"  # the roofline reads KV at fp8 too
    dram = next(t for t in doc["summary"]["tiers"]["tiers"] if t["name"] == "dram")
    assert dram["blocks"] == 32


def test_sizes_and_their_errors():
    assert resolve(TRACE, capacity=100).capacity == 100
    with pytest.raises(ConfigError, match=r"capacity \(--capacity\) '100' is text: give a block count as a number"):
        resolve(TRACE, capacity="100")  # (the API takes a number, or a size with its unit)
    assert resolve(TRACE, tiers="hbm=50,dram=200").capacity == 50
    assert resolve(TRACE, capacity=7, unbounded_ids=1234).capacity == 1234
    with pytest.raises(ConfigError, match="the pool is given twice"):
        resolve(TRACE, capacity=40, tiers="hbm=50,dram=200")
    with pytest.raises(ConfigError, match="kv_dtype .* needs a model"):
        resolve(TRACE, capacity=10, kv_dtype="fp8")
    with pytest.raises(ConfigError, match="give the KV pool"):
        resolve(TRACE)
    with pytest.raises(ConfigError, match="size in bytes"):
        resolve(TRACE, capacity="1GiB")
    with pytest.raises(ConfigError, match="bandwidth needs the model"):
        resolve(TRACE, capacity=10, tiers="dram=100@64GB/s")
