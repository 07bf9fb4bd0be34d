"""Time models (serving/timing.py) and the GPU catalog, checked against numbers worked by hand."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from kvreplay.errors import ConfigError, KvreplayError
from kvreplay.serving.timing import get_gpu, gpu_catalog
from kvreplay.serving.timing.models import _sum_min
from kvreplay.serving.timing import (
    DynamoNpzProfile,
    InstantTimeModel,
    PolynomialProfile,
    ProfileError,
    RooflineTimeModel,
    CalibratedRooflineTimeModel,
    StepBatch,
    TimeModel,
    kv_capacity,
    kv_capacity_blocks,
    load_time_model,
)

# ------------------------------------------------------------------------------------------
# GPU catalog


def test_catalog_has_the_required_gpus_with_sources():
    names = {g.name for g in gpu_catalog()}
    assert {"A100-80GB", "H100", "H200", "B200", "L40S", "MI300X"} <= names
    for g in gpu_catalog():
        assert g.source.startswith(("NVIDIA ", "AMD ")) and "http" in g.source
        assert g.bf16_tflops > 0 and g.bandwidth_gbps > 0 and g.memory_gb > 0
        # dense FP8 is about twice dense BF16 on every part that has it (L40S: 733 vs 2 x 362.05,
        # as its datasheet prints them)
        if g.fp8_tflops is not None:
            assert g.fp8_tflops == pytest.approx(2 * g.bf16_tflops, rel=0.02)


@pytest.mark.parametrize("name, bf16, fp8, bw, mem", [
    ("A100-80GB", 312, None, 2039, 80),   # datasheet: 312 (624 sparse); no FP8
    ("H100", 989.5, 1979, 3350, 80),      # datasheet: 1,979* / 3,958* with sparsity, halved
    ("H200", 989.5, 1979, 4800, 141),
    ("B200", 2250, 4500, 7700, 180),      # HGX B200: 4.5 / 9 PFLOPS with sparsity, halved
    ("L40S", 362.05, 733, 864, 48),
    ("MI300X", 1307.4, 2614.9, 5300, 192),
])
def test_catalog_values(name, bf16, fp8, bw, mem):
    g = get_gpu(name)
    assert (g.bf16_tflops, g.fp8_tflops, g.bandwidth_gbps, g.memory_gb) == (bf16, fp8, bw, mem)


def test_gpu_names_are_case_insensitive_with_aliases():
    assert get_gpu("h100-sxm").name == "H100"
    assert get_gpu("a100").name == "A100-80GB"
    assert get_gpu(get_gpu("L40S")) is get_gpu("l40s")


def test_unknown_gpu_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown GPU 'H900'.*did you mean.*H100"):
        get_gpu("H900")
    with pytest.raises(ConfigError, match="unknown GPU"):
        RooflineTimeModel("Llama-3.1-8B", "TPU-v5", 1)


def test_fp8_on_a100_is_refused():
    with pytest.raises(ConfigError, match="A100-80GB has no fp8"):
        RooflineTimeModel("Llama-3.1-8B", "A100", 1, dtype="fp8")


# ------------------------------------------------------------------------------------------
# StepBatch and instant


def test_instant_is_always_zero():
    m = InstantTimeModel()
    assert isinstance(m, TimeModel)
    assert m.step_time(StepBatch()) == 0.0
    assert m.step_time(StepBatch([8192], [0], [1000] * 256)) == 0.0
    assert load_time_model("instant").name == "instant"


def test_step_batch_needs_one_cached_count_per_prefill():
    with pytest.raises(ConfigError, match="prefill_new has 2 entries but prefill_cached 1"):
        StepBatch(prefill_new=[1, 2], prefill_cached=[0])
    b = StepBatch([100, 50], [0, 10], [7, 8, 9])
    assert b.num_tokens == 153 and not b.is_empty and StepBatch().is_empty


# ------------------------------------------------------------------------------------------
# Roofline, worked by hand from the catalogs.
# Llama-3.1-8B: 8,030,261,248 params (dense), 32 layers, 32 heads x 128 = attention width 4096,
# 8 KV heads: KV 2 x 32 x 8 x 128 x 2 B = 131,072 B/token at bf16; weights 16,060,522,496 B.
# H100: 989.5e12 FLOP/s dense bf16, 3.35e12 B/s. Defaults mfu 0.5, mbu 0.6:
# compute roof 494.75e12 FLOP/s, memory roof 2.01e12 B/s.


def test_roofline_compute_bound_prefill():
    m = RooflineTimeModel("Llama-3.1-8B", "H100", 1)
    b = StepBatch(prefill_new=[8192], prefill_cached=[0])
    # matmuls: 2 x 8,030,261,248 x 8192                      = 131,567,800,287,232
    # attention: 4 x 4096 x 32 layers x (8192 x 8193 / 2 = 33,558,528 causal pairs)
    #                                                         =  17,594,333,528,064
    flops = 131_567_800_287_232 + 17_594_333_528_064           # 149,162,133,815,296
    # bytes: weights 16,060,522,496 + KV touched 8192 x 131,072 = 1,073,741,824
    nbytes = 16_060_522_496 + 1_073_741_824                     # 17,134,264,320
    assert m.work(b) == (flops, nbytes)
    compute_s = flops / 494.75e12                                # 0.301490 s
    memory_s = nbytes / 2.01e12                                  # 0.008525 s
    assert compute_s == pytest.approx(0.3014899, rel=1e-6)
    assert memory_s == pytest.approx(0.0085245, rel=1e-4)
    assert m.step_time(b) == pytest.approx(compute_s, rel=1e-12)
    assert m.breakdown(b)["bound"] == "compute"


def test_roofline_memory_bound_decode():
    m = RooflineTimeModel("Llama-3.1-8B", "H100", 1)
    b = StepBatch(decode_context=[1000])
    # bytes: weights 16,060,522,496 + KV 1000 x 131,072 = 131,072,000 -> 16,191,594,496 B
    # flops: 2 x 8,030,261,248 + 4 x 4096 x 32 x 1000 = 524,288,000 -> 16,584,810,496
    assert m.work(b) == (16_584_810_496, 16_191_594_496)
    assert m.step_time(b) == pytest.approx(16_191_594_496 / 2.01e12, rel=1e-12)   # 8.0555 ms
    assert m.step_time(b) == pytest.approx(0.0080555, rel=1e-4)
    assert m.breakdown(b)["bound"] == "memory"
    # a fixed per-step overhead is added on top, an empty step costs nothing
    m2 = RooflineTimeModel("Llama-3.1-8B", "H100", 1, overhead_s=0.002)
    assert m2.step_time(b) == pytest.approx(16_191_594_496 / 2.01e12 + 0.002, rel=1e-12)
    assert m2.step_time(StepBatch()) == 0.0


def test_roofline_tensor_parallel_splits_weights_and_kv_heads():
    # Llama-3.1-70B at TP 8 on H100: weights 70,553,706,496 x 2 / 8 = 17,638,426,624 B per GPU;
    # 8 KV heads / 8 ranks = 1 head per GPU: 2 x 80 x 1 x 128 x 2 = 40,960 B/token per GPU.
    m = RooflineTimeModel("Llama-3.1-70B", "H100", 8)
    b = StepBatch(decode_context=[1000])
    flops, nbytes = m.work(b)
    assert nbytes == 17_638_426_624 + 40_960 * 1000              # 17,679,386,624
    assert m.step_time(b) == pytest.approx(17_679_386_624 / 2.01e12, rel=1e-12)   # 8.7957 ms
    # flops per GPU: (2 x 70,553,706,496 + 4 x (64 x 128) x 80 x 1000) / 8
    assert flops == (2 * 70_553_706_496 + 4 * 8192 * 80 * 1000) / 8


def test_roofline_cached_context_costs_attention_only():
    m = RooflineTimeModel("Llama-3.1-8B", "H100", 1)
    cold = m.work(StepBatch([3], [0]))
    warm = m.work(StepBatch([3], [2]))
    # 3 new tokens after 2 cached: keys 3 + 4 + 5 = 12 = 3 x 2 + 3 x 4 / 2 (cold: 1 + 2 + 3 = 6)
    assert warm[0] - cold[0] == 4 * 4096 * 32 * (12 - 6)
    assert warm[1] - cold[1] == 131_072 * 2                     # the 2 cached tokens' KV is read


def test_roofline_moe_reads_only_routed_weights_at_small_batch():
    # Qwen3-30B-A3B: 30.5e9 total, 3.3e9 active params; 48 layers x 4 KV heads x 128:
    # KV 2 x 48 x 4 x 128 x 2 = 98,304 B/token. One decode token reads 3.3e9 x 2 B of weights.
    m = RooflineTimeModel("Qwen3-30B-A3B", "H100", 1)
    assert m.work(StepBatch(decode_context=[1]))[1] == 6_600_000_000 + 98_304
    # 10 tokens could route to 10 x 6.6e9 B > 61e9 B: capped at every expert
    assert m.work(StepBatch(decode_context=[1] * 10))[1] == 61_000_000_000 + 98_304 * 10


def test_roofline_sliding_window_layers_clip_attention():
    assert _sum_min(1, 5, 3) == 1 + 2 + 3 + 3 + 3
    assert _sum_min(4, 6, 3) == 9 and _sum_min(1, 3, 5) == 6 and _sum_min(2, 4, 3) == 2 + 3 + 3
    # gpt-oss-20b: 24 layers, 12 sliding (window 128), 64 heads x 64 = width 4096, 3.6e9 active.
    # One decode at context 1000: keys 12 x 1000 (full) + 12 x 128 (sliding).
    m = RooflineTimeModel("gpt-oss-20b", "H100", 1)
    flops, nbytes = m.work(StepBatch(decode_context=[1000]))
    assert flops == 2 * 3_600_000_000 + 4 * 4096 * (12 * 1000 + 12 * 128)
    # KV per layer-token: 2 x 8 x 64 x 2 = 2048 B; touched 12 x 1000 + 12 x 128
    assert nbytes == 3_600_000_000 * 2 + 2048 * (12 * 1000 + 12 * 128)


def test_roofline_bad_inputs():
    for tp in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="tp"):
            RooflineTimeModel("Llama-3.1-8B", "H100", tp)
    with pytest.raises(ConfigError, match="not divisible by tp=3"):
        RooflineTimeModel("Llama-3.1-8B", "H100", 3)
    with pytest.raises(ConfigError, match="mfu"):
        RooflineTimeModel("Llama-3.1-8B", "H100", 1, mfu=0)
    with pytest.raises(ConfigError, match="mbu"):
        RooflineTimeModel("Llama-3.1-8B", "H100", 1, mbu=1.5)
    with pytest.raises(ConfigError, match="overhead_s"):
        RooflineTimeModel("Llama-3.1-8B", "H100", 1, overhead_s=-1)
    with pytest.raises(ConfigError, match="unknown model"):
        RooflineTimeModel("Llama-9-8B", "H100", 1)
    with pytest.raises(ConfigError, match="needs gpu"):
        load_time_model("roofline", model="Llama-3.1-8B")
    assert load_time_model("roofline", model="Llama-3.1-8B", gpu="H100", tp=1).describe()["gpu"] == "H100"


# ------------------------------------------------------------------------------------------
# KV capacity after weights (vLLM's rule)


def test_kv_capacity_llama70b_on_8x_h100_tp8():
    # per GPU (timing/memory.py; vLLM 0.33.0's budget):
    #   total 79.22 GiB = 85,061,827,297 B (as the device reports it) x 0.92 (vLLM 0.33.0's default)
    #     -> ceil 78,256,881,114 B
    #   weights 17,671,981,056 B: embedding and LM head 128,256 x 8,192 x 2 / 8 = 262,668,288 each,
    #     the rest (70,553,706,496 - 2 x 1,050,673,152) x 2 / 8 = 17,113,090,048, rotary cache
    #     131,072 x 128 x 2 = 33,554,432
    #   forward 8,192 tokens x (2 x 8,192 + the MLP's 3 x 28,672 / 8 = 10,752) x 2 = 444,596,224
    #   sampler 256 rows x 128,256 x 14 B = 459,669,504 + the hidden states 8,192 x 8,192 x 2 =
    #     134,217,728 -> 593,887,232: the larger of the two is the profile's peak
    #   CUDA graphs 86 (51 PIECEWISE + 35 FULL) x 7 MiB = 631,242,752
    #   non-torch int(0.04 GiB) = 42,949,672
    #   left 78,256,881,114 - 17,671,981,056 - 593,887,232 - 631,242,752 - 42,949,672
    #     = 59,316,820,402 B; 40,960 B/token (1 of 8 KV heads), 655,360 B a block -> 90,510 blocks
    #   (at 0.9, vLLM's default before 0.20: ceil 76,555,644,568 B, 57,615,583,856 B left, 87,914
    #   blocks; there 85,374 under the fitted non-torch constant, 1.59 GiB, and 84,342 under the
    #   former fitted activation + sampler 0.42 GiB and non-torch 2.38 GiB)
    c = kv_capacity("Llama-3.1-70B", "H100", tp=8, block_size=16)
    assert c.total_memory_bytes == 85_061_827_297 and c.usable_bytes == 78_256_881_114
    assert c.gpu_memory_utilization == 0.92
    assert c.weight_bytes_per_gpu == 17_671_981_056
    assert (c.activation_peak_bytes, c.sampler_peak_bytes) == (444_596_224, 593_887_232)
    assert (c.cudagraph_graphs, c.cudagraph_bytes, c.non_torch_bytes) == (86, 631_242_752, 42_949_672)
    assert c.kv_bytes_available == 59_316_820_402
    assert c.kv_bytes_per_token_per_gpu == 40_960
    assert c.blocks == 90_510 and c.tokens == 90_510 * 16
    assert kv_capacity_blocks("Llama-3.1-70B", "H100", 8, 16, 0.92) == 90_510
    assert kv_capacity_blocks("Llama-3.1-70B", "H100", 8, 16, 0.9) == 87_914
    # with the 81,559 MiB nvidia-smi shows: 85,520,809,984 x 0.92 -> 78,679,145,186; minus the same
    # 18,940,060,712 B of terms = 59,739,084,474 -> // 655,360 = 91,154
    assert kv_capacity_blocks("Llama-3.1-70B", "H100", 8, 16, total_memory_bytes=81_559 * 2**20) == 91_154
    # enforce_eager: no CUDA graphs, 631,242,752 B more -> 59,948,063,154 // 655,360 = 91,473
    assert kv_capacity_blocks("Llama-3.1-70B", "H100", 8, 16, enforce_eager=True) == 91_473
    # max_num_seqs 1,024 (vLLM serve's H100 default): sampler 1,024 x 128,256 x 14 + 134,217,728 =
    # 1,972,895,744 (+1,379,008,512 B), and 102 graphs (51 + 51): 16 x 7 MiB = 117,440,512 B more
    # -> 57,820,371,378 // 655,360 = 88,226 blocks
    assert kv_capacity_blocks("Llama-3.1-70B", "H100", 8, 16, max_num_seqs=1024) == 88_226


def test_kv_cache_memory_and_the_block_override_replace_the_profile():
    # kv_cache_memory replaces what the profile leaves (and ignores the utilization)
    c = kv_capacity("Llama-3.1-70B", "H100", 8, 16, kv_cache_memory="20GiB")
    assert c.kv_bytes_available == 20 * 2**30 and c.blocks == 20 * 2**30 // 655_360 == 32_768
    assert c.profiled_kv_bytes == 59_316_820_402
    # the override wins over both, as vLLM applies it last
    c = kv_capacity("Llama-3.1-70B", "H100", 8, 16, kv_cache_memory="20GiB", num_gpu_blocks_override=1000)
    assert c.blocks == 1000 and c.kv_bytes_available == 20 * 2**30
    with pytest.raises(ConfigError, match="kv_cache_memory"):
        kv_capacity("Llama-3.1-70B", "H100", 8, 16, kv_cache_memory="20 parsecs")
    with pytest.raises(ConfigError, match="num_gpu_blocks_override"):
        kv_capacity("Llama-3.1-70B", "H100", 8, 16, num_gpu_blocks_override=0)
    with pytest.raises(ConfigError, match="max_num_seqs"):
        kv_capacity("Llama-3.1-70B", "H100", 8, 16, max_num_seqs=True)


def test_kv_capacity_bad_inputs():
    with pytest.raises(ConfigError, match="weights per GPU"):
        kv_capacity_blocks("Llama-3.1-405B", "H100", 1)
    with pytest.raises(ConfigError, match="tp"):
        kv_capacity_blocks("Llama-3.1-8B", "H100", 0)
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        kv_capacity_blocks("Llama-3.1-8B", "H100", 1, 16, 0)
    with pytest.raises(ConfigError, match="block_size"):
        kv_capacity_blocks("Llama-3.1-8B", "H100", 1, 0)
    with pytest.raises(ConfigError, match="unknown GPU"):
        kv_capacity_blocks("Llama-3.1-8B", "H101", 1)


# ------------------------------------------------------------------------------------------
# Dynamo NPZ profile


def write_npz(path, **overrides):
    arrays = {
        "prefill_isl": np.array([100.0, 1000.0, 4000.0]),
        "prefill_ttft_ms": np.array([10.0, 40.0, 130.0]),
        "decode_active_kv_tokens": np.array([1000.0, 5000.0, 9000.0]),   # rows
        "decode_context_length": np.array([100.0, 1100.0]),              # columns
        "decode_itl": np.array([[10.0, 12.0], [18.0, 24.0], [26.0, 36.0]]),
    }
    arrays.update(overrides)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(path, **arrays)
    return path


@pytest.fixture
def profile(tmp_path):
    return DynamoNpzProfile(write_npz(tmp_path / "p.npz"))


def test_npz_prefill_interpolates_and_extrapolates(profile):
    # segment [100, 1000]: slope 30 / 900 = 1/30; segment [1000, 4000]: slope 90 / 3000 = 0.03
    assert profile.interp_prefill(550) == pytest.approx(25.0)       # 10 + 450 / 30
    assert profile.interp_prefill(2500) == pytest.approx(85.0)      # 40 + 1500 x 0.03
    assert profile.interp_prefill(1000) == pytest.approx(40.0)      # a grid point
    assert profile.interp_prefill(40) == pytest.approx(8.0)         # below: 10 - 60 / 30
    assert profile.interp_prefill(5000) == pytest.approx(160.0)     # above: 130 + 1000 x 0.03


def test_npz_decode_bilinear_inside_and_outside_both_axes(profile):
    # inside, cell rows [1000, 5000] x cols [100, 1100], tx = ty = 0.5:
    #   z1 = 10 + 0.5 x 8 = 14, z2 = 12 + 0.5 x 12 = 18, z = 14 + 0.5 x 4 = 16
    assert profile.interp_decode(3000, 600) == pytest.approx(16.0)
    assert profile.interp_decode(5000, 1100) == pytest.approx(24.0)  # a grid point
    # above both axes: last row cell [5000, 9000], tx = 1.5; ty = (2100 - 100) / 1000 = 2:
    #   z1 = 18 + 1.5 x 8 = 30, z2 = 24 + 1.5 x 12 = 42, z = 30 + 2 x 12 = 54
    assert profile.interp_decode(11000, 2100) == pytest.approx(54.0)
    # below both axes: first cell, tx = -0.25, ty = -0.1:
    #   z1 = 10 - 0.25 x 8 = 8, z2 = 12 - 0.25 x 12 = 9, z = 8 - 0.1 x 1 = 7.9
    assert profile.interp_decode(0, 0) == pytest.approx(7.9)
    # inside on x, below on y: cell [5000, 9000], tx = 0.5, ty = -0.05:
    #   z1 = 18 + 4 = 22, z2 = 24 + 6 = 30, z = 22 - 0.05 x 8 = 21.6
    assert profile.interp_decode(7000, 50) == pytest.approx(21.6)


def test_npz_step_follows_dynamo_batch_rules(profile):
    # prefill: k = 2, isl = (0 + 300 + 200 + 501) // 2 = 500, prefix = 200 // 2 = 100:
    #   tokens = 2 x (500 - 100) = 800 (Dynamo's integer means drop the 801st), 10 + 700 / 30 ms
    # decode: b = 2, context = 1201 // 2 = 600, active = 1201 (sum of contexts, none given):
    #   tx = 201 / 4000, z1 = 10 + 8 tx, z2 = 12 + 12 tx, z = z1 + 0.5 (z2 - z1)
    b = StepBatch(prefill_new=[300, 501], prefill_cached=[0, 200], decode_context=[500, 701])
    prefill, decode = profile.step_parts_ms(b)
    assert prefill == pytest.approx(10 + 700 / 30)
    tx = 201 / 4000
    assert decode == pytest.approx((10 + 8 * tx) + 0.5 * ((12 + 12 * tx) - (10 + 8 * tx)))
    assert profile.step_time(b) == pytest.approx((prefill + decode) / 1000)   # summed, in seconds
    # the scheduler's physical active KV replaces the sum when given: (3000, 600) -> 16 ms
    b2 = StepBatch(prefill_new=[300, 501], prefill_cached=[0, 200], decode_context=[500, 701], active_kv_tokens=3000)
    assert profile.step_parts_ms(b2)[1] == pytest.approx(16.0)
    assert profile.step_time(StepBatch()) == 0.0
    # a prefill of only cached tokens charges nothing
    assert profile.step_parts_ms(StepBatch([0], [500]))[0] == 0.0


def test_npz_clamps_prefill_at_zero_and_decode_at_one_ms(tmp_path):
    p = DynamoNpzProfile(write_npz(tmp_path / "small.npz",
                                   prefill_isl=np.array([1000.0, 2000.0]), prefill_ttft_ms=np.array([5.0, 105.0]),
                                   decode_itl=np.array([[0.2, 0.3], [0.4, 0.5], [0.6, 0.7]])))
    assert p.interp_prefill(10) == pytest.approx(-94.0)   # 5 + (10 - 1000) x 0.1
    assert p.prefill_ms(1, 10, 0) == 0.0                   # max(., 0)
    assert p.decode_ms(1, 3000, 600) == 1.0                # 0.35 ms raised to Dynamo's 1 ms floor
    assert DynamoNpzProfile(tmp_path / "small.npz", min_decode_ms=0).decode_ms(1, 3000, 600) == pytest.approx(0.35)


def test_load_time_model_picks_the_profile_by_suffix(tmp_path):
    path = write_npz(tmp_path / "prof.npz")
    m = load_time_model(str(path))
    assert isinstance(m, DynamoNpzProfile) and m.describe()["decode_grid"] == [3, 2]
    with pytest.raises(ConfigError, match="unknown time model"):
        load_time_model("fast")


@pytest.mark.parametrize("overrides, field, message", [
    ({"decode_itl": None}, "decode_itl", "missing"),
    ({"prefill_isl": np.array([100, 1000, 4000])}, "prefill_isl", "dtype int64"),
    ({"prefill_isl": np.array([100.0, 1000.0, 1000.0])}, "prefill_isl", "must rise strictly"),
    ({"decode_context_length": np.array([100.0])}, "decode_context_length", "at least 2 points"),
    ({"decode_itl": np.array([[1.0, 2.0], [3.0, 4.0]])}, "decode_itl", r"shape \(2, 2\), expected \(3, 2\)"),
    ({"prefill_ttft_ms": np.array([1.0, 2.0])}, "prefill_ttft_ms", "has 2 values"),
    ({"decode_itl": np.array([10.0, 12.0])}, "decode_itl", "must be 2-D"),
    ({"prefill_ttft_ms": np.array([1.0, np.nan, 3.0])}, "prefill_ttft_ms", "NaN"),
])
def test_malformed_npz_names_file_and_field(tmp_path, overrides, field, message):
    path = write_npz(tmp_path / "bad.npz", **overrides)
    with pytest.raises(ProfileError, match=message) as info:
        DynamoNpzProfile(path)
    err = info.value
    assert isinstance(err, ConfigError) and isinstance(err, KvreplayError)
    assert err.path == str(path) and err.field == field
    assert str(err).startswith(f"{path}: {field}: ")


def test_npz_that_is_not_a_profile(tmp_path):
    text = tmp_path / "notes.npz"
    text.write_text("prefill_isl,prefill_ttft_ms\n1,2\n")
    with pytest.raises(ProfileError, match=f"{text}: not a NumPy .npz archive"):
        DynamoNpzProfile(text)
    with pytest.raises(ProfileError, match="no such file"):
        DynamoNpzProfile(tmp_path / "absent.npz")
    single = tmp_path / "one.npz"
    with open(single, "wb") as f:
        np.save(f, np.arange(3.0))
    with pytest.raises(ProfileError, match="single array"):
        DynamoNpzProfile(single)


# ------------------------------------------------------------------------------------------
# Polynomial coefficients file


def write_poly(path, doc):
    path.write_text(json.dumps(doc))
    return path


POLY = {"format": "kvreplay-step-polynomial", "version": 1, "unit": "ms", "source": "hand-made",
        "terms": [{"coef": 2.0},
                  {"coef": 0.01, "prefill_tokens": 1},
                  {"coef": 1e-6, "prefill_tokens": 2},
                  {"coef": 0.5, "decode_batch": 1},
                  {"coef": 0.001, "decode_context": 1}]}


def test_polynomial_profile(tmp_path):
    m = load_time_model(str(write_poly(tmp_path / "poly.json", POLY)))
    assert isinstance(m, PolynomialProfile)
    b = StepBatch(prefill_new=[1000], prefill_cached=[0], decode_context=[2000, 3000])
    # 2 + 0.01 x 1000 + 1e-6 x 1000^2 + 0.5 x 2 + 0.001 x 5000 = 2 + 10 + 1 + 1 + 5 = 19 ms
    assert m.step_time(b) == pytest.approx(0.019)
    assert m.step_time(StepBatch()) == 0.0                       # the constant is not charged idle
    assert m.step_time(StepBatch(decode_context=[1000])) == pytest.approx((2 + 0.5 + 1) / 1000)
    v = PolynomialProfile.variables(StepBatch([10, 20], [5, 0], [4, 6]))
    assert v == {"prefill_tokens": 30, "prefill_requests": 2, "prefill_context": 5, "decode_batch": 2,
                 "decode_context": 10, "decode_mean_context": 5.0}
    floor = PolynomialProfile(document={**POLY, "unit": "s", "terms": [{"coef": -1.0}], "min": 0.25})
    assert floor.step_time(b) == 0.25


@pytest.mark.parametrize("doc, field, message", [
    ({**POLY, "format": "other"}, "format", "must be 'kvreplay-step-polynomial'"),
    ({**POLY, "version": 2}, "version", "unsupported version"),
    ({**POLY, "unit": "min"}, "unit", "must be one of"),
    ({**POLY, "terms": []}, "terms", "non-empty list"),
    ({**POLY, "terms": [{"prefill_tokens": 1}]}, "terms[0].coef", "missing"),
    ({**POLY, "terms": [{"coef": "1"}]}, "terms[0].coef", "finite number"),
    ({**POLY, "terms": [{"coef": 1, "batch": 1}]}, "terms[0].batch", "unknown variable"),
    ({**POLY, "terms": [{"coef": 1, "decode_batch": 0.5}]}, "terms[0].decode_batch", "whole number"),
    ({**POLY, "extra": 1}, "extra", "unknown key"),
])
def test_malformed_polynomial_names_file_and_field(tmp_path, doc, field, message):
    path = write_poly(tmp_path / "bad.json", doc)
    with pytest.raises(ProfileError, match=message) as info:
        PolynomialProfile(path)
    assert info.value.field == field and str(info.value).startswith(f"{path}: {field}: ")


def test_polynomial_file_that_is_not_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{terms: [")
    with pytest.raises(ProfileError, match=f"{path}: not JSON"):
        PolynomialProfile(path)
    with pytest.raises(ProfileError, match="no such file"):
        PolynomialProfile(tmp_path / "absent.json")
    with pytest.raises(ProfileError, match="must be a JSON object"):
        PolynomialProfile(write_poly(tmp_path / "list.json", [1, 2]))


# ------------------------------------------------------------------------------------------
# The compiled form the simulator's kernel runs agrees with each model's step_time


def _models(tmp_path):
    npz = tmp_path / "p.npz"
    np.savez(npz, prefill_isl=np.array([128.0, 1024.0, 8192.0]), prefill_ttft_ms=np.array([9.0, 30.0, 520.0]),
             decode_active_kv_tokens=np.array([0.0, 5e4, 4e5]), decode_context_length=np.array([128.0, 4096.0]),
             decode_itl=np.array([[6.0, 6.5], [7.5, 8.0], [18.0, 19.0]]))
    poly = {"format": "kvreplay-step-polynomial", "unit": "ms", "min": 0.5,
            "terms": [{"coef": 4.2}, {"coef": 0.021, "prefill_tokens": 1}, {"coef": 3.1e-7, "prefill_tokens": 2},
                      {"coef": 0.05, "decode_batch": 1}, {"coef": 0.0009, "decode_mean_context": 1},
                      {"coef": 1e-6, "prefill_context": 1, "prefill_requests": 1}]}
    return [InstantTimeModel(), RooflineTimeModel("Llama-3.1-8B", "H100"), RooflineTimeModel("gemma-2-9b", "A100", 1),
            RooflineTimeModel("Llama-3.1-70B", "H200", 8, dtype="fp8"), DynamoNpzProfile(npz),
            PolynomialProfile(document=poly), CalibratedRooflineTimeModel("Llama-3.1-8B", "H100"),
            CalibratedRooflineTimeModel("gemma-2-9b", "A100", 1).at_band("high"),
            CalibratedRooflineTimeModel("Llama-3.1-70B", "H200", 8, dtype="fp8").at_band("low"),
            CalibratedRooflineTimeModel("Qwen3-30B-A3B", "B200", 2),
            CalibratedRooflineTimeModel("Qwen3-Next-80B-A3B", "H100", 4, dtype="fp8"),  # Mamba layers' state term
            CalibratedRooflineTimeModel("Nemotron-H-8B", "H200", 1).at_band("high"),
            CalibratedRooflineTimeModel("MiniMax-M2.5", "H200", 4, dtype="fp8").at_band("high"),  # routed experts apart
            CalibratedRooflineTimeModel("DeepSeek-V3", "H200", 8, dtype="fp8"),
            CalibratedRooflineTimeModel("gpt-oss-120b", "H100", 2, dtype="int4"),
            CalibratedRooflineTimeModel("Mixtral-8x7B-v0.1", "A100", 2),  # no MoE kernels measured: one GEMM
            # the step terms on whatever the calibration ships: one- and two-stage all-reduces and NCCL's,
            # the decode attention's split, the elementwise kernels
            CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 8, coefficients=STEP_ON),
            CalibratedRooflineTimeModel("Qwen3-32B", "H200", 4, dtype="fp8", coefficients=STEP_ON).at_band("high"),
            CalibratedRooflineTimeModel("gemma-2-9b", "A100", 2, coefficients=STEP_ON),
            CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 2, coefficients=STEP_ON),
            # a data-parallel rank (serving/dataparallel.py): the experts over DP x TP GPUs, whole or split,
            # and out of the body's GEMM where its GPU has no MoE kernel calibrated (A100)
            _dp_rank(CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 1), 2, 1, True),
            _dp_rank(CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 2).at_band("high"), 2, 2, False),
            _dp_rank(CalibratedRooflineTimeModel("Qwen3-30B-A3B", "A100", 1), 4, 1, True),
            _dp_rank(CalibratedRooflineTimeModel("Qwen3-30B-A3B", "A100", 2).at_band("low"), 2, 2, False),
            # the ranks' token exchange (timing/exchange.py): over PCIe (the bus scaled to its link), an fp8
            # MoE kernel's quantised dispatch at 3 ranks (interpolated) and 16 (clamped), and the
            # sequence-parallel case (EP at TP 2) it does not price
            _dp_rank(CalibratedRooflineTimeModel("Qwen3-30B-A3B", "RTX-PRO-6000", 1), 2, 1, True),
            _dp_rank(CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 1, dtype="fp8"), 3, 1, True),
            _dp_rank(CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H200", 1, dtype="fp8").at_band("high"), 16, 1, False),
            _dp_rank(CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 2), 2, 2, True)]


def _dp_rank(tm, dp, tp, expert_parallel):
    from kvreplay.serving import dataparallel

    return dataparallel.time_model(tm, dataparallel.DataParallel(dp, tp, expert_parallel, lockstep=True))


#: the step terms (roofline.STEP_COEFFICIENTS) on, round
STEP_ON = {"allreduce_link_bytes_per_s": 1e11, "attn_split_decode": 0.5, "ew_floor_s": 2e-6, "e_ew": 0.8}


def test_compiled_step_time_matches_each_model(tmp_path):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kvreplay.serving.timing import aggregates, packed, roofline_window, step_seconds

    models = _models(tmp_path)

    @settings(max_examples=200, deadline=None)
    @given(prefill=st.lists(st.tuples(st.integers(1, 9000), st.integers(0, 60000)), max_size=4),
           decode=st.lists(st.integers(1, 130000), max_size=40), gathered=st.integers(0, 40000))
    def check(prefill, decode, gathered):
        # gathered: the tokens an MoE's experts run over under data parallelism (0: the step's own)
        batch = StepBatch(tuple(n for n, _ in prefill), tuple(c for _, c in prefill), tuple(decode),
                          expert_tokens=gathered or None)
        for m in models:
            tm = packed(m)
            got = step_seconds(tm, aggregates(batch, roofline_window(tm)))
            assert got == pytest.approx(m.step_time(batch), rel=1e-12, abs=1e-15), m.name

    check()


# ------------------------------------------------------------------------------------------
# The calibrated roofline (roofline.py): each term by hand, with round coefficients

ROUND = {"e_gemm": 0.5, "e_weights": 0.5, "gemm_floor_s": 1e-6, "e_attn_prefill": 0.5, "e_kv_prefill": 0.5,
         "attn_floor_prefill_s": 1e-5, "e_attn_decode": 0.25, "e_kv_decode": 0.5, "attn_floor_decode_s": 2e-5,
         "allreduce_latency_s": 5e-6, "allreduce_bus_bytes_per_s": 1e11, "per_layer_s": 1e-6, "per_step_s": 1e-3}


#: each layer GEMM's (n, k) on one GPU, by hand. Llama-3.1-8B at TP 1: q/k/v (32 + 2 x 8) x 128,
#: o, gate/up 2 x 14,336, down; sum of n x k 218,103,808 a layer (6,979,321,856 over 32 layers: the
#: body's 6,979,588,096 less its norms), sum of k 26,624, of n 43,008
L8 = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
#: Llama-3.1-70B at TP 4: q/k/v (16 + 2 x 2) x 128, o (8,192, 16 x 128), gate/up 2 x 28,672 / 4,
#: down; sum of n x k 213,909,504 a layer, of k 25,600, of n 33,280
L70_TP4 = ((2560, 8192), (8192, 2048), (14336, 8192), (8192, 7168))


def test_dense_models_are_timed_gemm_by_gemm_at_their_shapes():
    from kvreplay.analysis.models import get_model
    from kvreplay.serving.timing.roofline import layer_gemm_shapes

    assert layer_gemm_shapes(get_model("Llama-3.1-8B"), 1) == L8
    assert layer_gemm_shapes(get_model("Llama-3.1-70B"), 4) == L70_TP4
    assert sum(n * k for n, k in L8) == 218_103_808 and sum(n * k for n, k in L70_TP4) == 213_909_504
    # at TP 16 a GPU still holds one KV head (vLLM replicates them): q/k/v (4 + 2) x 128
    assert layer_gemm_shapes(get_model("Llama-3.1-70B"), 16)[0] == (768, 8192)
    # MoE, MLA and Mamba hybrids: the four GEMMs are not their layers, so one GEMM of the body
    for name in ("Qwen3-30B-A3B", "DeepSeek-V3", "Nemotron-H-8B", "gpt-oss-120b"):
        assert layer_gemm_shapes(get_model(name), 1) == (), name
    moe = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 1, coefficients=ROUND)
    t = moe.terms(StepBatch(decode_context=(1000,)))
    body = moe.body_params  # one token reads the active experts' weights only
    assert t["gemm"] == pytest.approx(max(2 * body / (989.5e12 * 0.5), body * 2 / (3.35e12 * 0.5))
                                      + 4 * moe.model.num_layers * 1e-6)


def test_calibrated_decode_terms_by_hand():
    m = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients=ROUND)
    t = m.terms(StepBatch(decode_context=(1000,)))
    # each GEMM memory-bound: its weights (2 bytes x n x k) plus the row's input (2 x k) and output
    # (2 x n) at half of 3.35e12 B/s, + a floor: 32 layers x (sum n x k, k and n above) + 4 x 32 floors
    assert t["gemm"] == pytest.approx((2 * 6_979_321_856 + 32 * 2 * (26_624 + 43_008)) / (3.35e12 * 0.5) + 128e-6)
    # LM head on 1 row: 525,336,576 x 2 bytes at half the bandwidth, + a floor
    assert t["lm_head"] == pytest.approx(525_336_576 * 2 / (3.35e12 * 0.5) + 1e-6)
    # attention: 32 x 20 us floors + 1000 tokens x 32 layers x 4096 KV bytes per layer-token (8 heads x 128 x 2 x 2)
    # at half the bandwidth (FLOPs 4 x 4096 x 32 x 1000 at a quarter of 989.5 TFLOP/s are less)
    assert t["attn_decode"] == pytest.approx(32 * 2e-5 + 1000 * 32 * 4096 / (3.35e12 * 0.5))
    assert t["allreduce"] == 0.0 and t["attn_prefill"] == 0.0
    assert t["overhead"] == pytest.approx(32e-6 + 1e-3)
    assert m.step_time(StepBatch(decode_context=(1000,))) == pytest.approx(sum(t.values()))


def test_calibrated_prefill_charges_the_lm_head_on_one_row_and_tp_all_reduces():
    m = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, coefficients=ROUND)
    t = m.terms(StepBatch(prefill_new=(2048,), prefill_cached=(0,)))
    # every GEMM compute-bound: 2 x 2048 rows x sum n x k a layer, 80 layers, + a floor each
    assert t["gemm"] == pytest.approx(80 * (2 * 2048 * 213_909_504 / (989.5e12 * 0.5) + 4 * 1e-6))
    # the LM head: 1 row (the prompt's last token), memory-bound: 128256 x 8192 x 2 bytes / 4 GPUs
    assert t["lm_head"] == pytest.approx(128256 * 8192 * 2 / 4 / (3.35e12 * 0.5) + 1e-6)
    # two all-reduces per layer of 2048 tokens x 8192 x 2 bytes: 2 x 3/4 x 33.5 MB at 100 GB/s
    assert t["allreduce"] == pytest.approx(2 * 80 * (5e-6 + 1.5 * 2048 * 8192 * 2 / 1e11))
    # causal attention: 4 x (64 heads x 128 / 4) x 2048 x 2049 / 2 per layer, compute-bound
    flops = 4 * 2048 * 80 * 2048 * 2049 / 2
    kv_bytes = m.kv_per_layer_token_gpu * 80 * 2048 + 4 * 2048 * 2048 * 80
    assert t["attn_prefill"] == pytest.approx(80 * 1e-5 + max(flops / (989.5e12 * 0.5), kv_bytes / (3.35e12 * 0.5)))


FP8 = {"e_gemm_fp8": 0.5, "e_weights_fp8": 0.5, "gemm_floor_fp8_s": 2e-6, "e_quant_fp8": 0.25}


def test_calibrated_fp8_gemms_quantise_their_inputs_and_keep_the_lm_head_bf16():
    m = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, dtype="fp8", coefficients={**ROUND, **FP8})
    t = m.terms(StepBatch(prefill_new=(2048,), prefill_cached=(0,)))
    # quantised inputs per token: 80 layers x (2 x 8192 replicated + (64 x 128 + 28672) / 4 sharded),
    # the sum of the GEMMs' k (25,600 a layer)
    assert m.quant_bytes_per_token == 3 * 80 * (2 * 8192 + (64 * 128 + 28672) / 4) == 3 * 80 * 25_600
    assert m.gemm_bytes == (1.0, 1.0, 2.0)  # fp8 input and weights, bf16 output
    assert t["gemm"] == pytest.approx(80 * (2 * 2048 * 213_909_504 / (1979e12 * 0.5) + 4 * 2e-6)
                                      + 2048 * 3 * 2_048_000 / (3.35e12 * 0.25))
    # the LM head at bf16 bytes and the bf16 coefficients, as in the bf16 test above
    assert t["lm_head"] == pytest.approx(128256 * 8192 * 2 / 4 / (3.35e12 * 0.5) + 1e-6)
    bf16 = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, coefficients={**ROUND, **FP8})
    assert bf16.quant_bytes_per_token == 0.0 and bf16.gemm_c == (0.5, 0.5, 1e-6)


def test_calibrated_fp8_gemms_compute_whole_256_row_tiles_above_128_rows():
    m = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, dtype="fp8", coefficients={**ROUND, **FP8})
    quant = 3 * 2_048_000 / (3.35e12 * 0.25)
    # 2049 rows run as 9 x 256 = 2304 (vLLM's sm90 fp8 tiles of 128 rows in clusters of 2)
    t = m.terms(StepBatch(prefill_new=(2048,), prefill_cached=(0,), decode_context=(900,)))
    assert t["gemm"] == pytest.approx(80 * (2 * 2304 * 213_909_504 / (1979e12 * 0.5) + 4 * 2e-6) + 2049 * quant)
    # at most 128 rows: as they are, here each GEMM bound by its bytes: 100 fp8 input rows (sum k
    # 25,600), the fp8 weights (sum n x k) and 100 bf16 output rows (sum n 33,280)
    t = m.terms(StepBatch(decode_context=(900,) * 100))
    assert t["gemm"] == pytest.approx(80 * ((100 * 25_600 + 213_909_504 + 2 * 100 * 33_280) / (3.35e12 * 0.5)
                                            + 4 * 2e-6) + 100 * quant)
    # bf16 GEMMs compute every row as it is
    bf16 = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, coefficients={**ROUND, **FP8})
    t = bf16.terms(StepBatch(prefill_new=(2048,), prefill_cached=(0,), decode_context=(900,)))
    assert t["gemm"] == pytest.approx(80 * (2 * 2049 * 213_909_504 / (989.5e12 * 0.5) + 4 * 1e-6))


def test_calibrated_gemm_tile_term_adds_k0_to_every_gemm_k_by_hand():
    # Llama-3.1-8B at TP 1: output columns per token over 32 layers: q/k/v (32 + 2 x 8) x 128 = 6144,
    # o 4096, gate/up 2 x 14336, down 4096: 43,008 a layer, 1,376,256 in all
    from kvreplay.serving.timing.roofline import gemm_outputs_per_token

    spec = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients=ROUND).model
    assert gemm_outputs_per_token(spec, 1) == 1_376_256
    # at TP 2: q/k/v (16 + 2 x 4) x 128 = 3072, o 4096, gate/up 14336, down 4096: 25,600 a layer
    assert gemm_outputs_per_token(spec, 2) == 25_600 * 32
    m = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients={**ROUND, "gemm_k0": 100.0})
    t = m.terms(StepBatch(prefill_new=(4096,), prefill_cached=(0,)))
    body = m.model.body_params
    # compute-bound: every GEMM computes as if k were k + 100 (sum n x (k + 100) = sum n x k + 100 sum n)
    assert t["gemm"] == pytest.approx(2 * (6_979_321_856 + 100 * 1_376_256) * 4096 / (989.5e12 * 0.5) + 4 * 32 * 1e-6)
    # the LM head (k = hidden 4096): one row, memory-bound, unchanged; its FLOPs x (1 + 100 / 4096)
    assert m.head_flop_params == pytest.approx(525_336_576 * (1 + 100 / 4096))
    off = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients=ROUND)
    assert off.body_flop_params == body and off.head_flop_params == 525_336_576


def test_calibrated_gemm_overlap_is_a_p_norm_of_compute_and_memory():
    m = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients={**ROUND, "gemm_overlap_p": 2.0})
    t = m.terms(StepBatch(decode_context=(1000,) * 64))
    # each GEMM on its own: 64 rows' compute, and its weights plus 64 rows in and out (bf16)
    compute = [2 * 64 * n * k / (989.5e12 * 0.5) for n, k in L8]
    memory = [2 * (64 * k + n * k + 64 * n) / (3.35e12 * 0.5) for n, k in L8]
    assert t["gemm"] == pytest.approx(32 * sum((c ** 2 + b ** 2) ** 0.5 + 1e-6 for c, b in zip(compute, memory)))
    plain = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients=ROUND)
    assert plain.terms(StepBatch(decode_context=(1000,) * 64))["gemm"] == pytest.approx(
        32 * sum(max(c, b) + 1e-6 for c, b in zip(compute, memory)))


def test_calibrated_fp8_partial_row_block_costs_fall_linearly_to_the_next_boundary():
    from kvreplay.serving.timing.roofline import fp8_gemm_rows

    # 2049 rows: 2304 computed, + all 50 (a block holding one row); 2176: half of them; 2304: none
    assert fp8_gemm_rows(2049, 50.0) == pytest.approx(2304 + 50)
    assert fp8_gemm_rows(2176, 50.0) == pytest.approx(2304 + 128 / 255 * 50)
    assert fp8_gemm_rows(2304, 50.0) == 2304 and fp8_gemm_rows(100, 50.0) == 100  # (at most 128: as they are)
    m = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, dtype="fp8",
                                    coefficients={**ROUND, **FP8, "fp8_partial_rows": 50.0})
    t = m.terms(StepBatch(prefill_new=(2048,), prefill_cached=(0,), decode_context=(900,)))
    quant = 3 * 2_048_000 / (3.35e12 * 0.25)
    assert t["gemm"] == pytest.approx(80 * (2 * 2354 * 213_909_504 / (1979e12 * 0.5) + 4 * 2e-6) + 2049 * quant)


def test_calibrated_fp8_gemms_of_8192_rows_and_more_compute_at_their_own_efficiency():
    from kvreplay.serving.timing.packed import aggregates, packed, step_seconds
    from kvreplay.serving.timing.roofline import fp8_gemm_efficiency

    # e_gemm_fp8 0.5 up to 4,353 rows (the tables' last rows below the step), 0.8 from 8,192, linear between
    assert fp8_gemm_efficiency(4353, 0.5, 0.8) == 0.5 and fp8_gemm_efficiency(100, 0.5, 0.8) == 0.5
    assert fp8_gemm_efficiency(8192, 0.5, 0.8) == pytest.approx(0.8) and fp8_gemm_efficiency(32768, 0.5, 0.8) == 0.8
    assert fp8_gemm_efficiency(6272, 0.5, 0.8) == pytest.approx(0.5 + 0.3 * 1919 / 3839)
    assert fp8_gemm_efficiency(8192, 0.5, 0.0) == 0.5  # 0: none
    on = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, dtype="fp8",
                                     coefficients={**ROUND, **FP8, "e_gemm_fp8_large": 0.8})
    off = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, dtype="fp8", coefficients={**ROUND, **FP8})
    quant = 3 * 2_048_000 / (3.35e12 * 0.25)  # a token's inputs quantised (unchanged)
    # 8,192 rows (32 whole tiles), compute-bound: every layer GEMM at 0.8 where it was at 0.5
    big = StepBatch(prefill_new=(8192,), prefill_cached=(0,))
    assert on.terms(big)["gemm"] == pytest.approx(80 * (2 * 8192 * 213_909_504 / (1979e12 * 0.8) + 4 * 2e-6)
                                                  + 8192 * quant)
    assert off.terms(big)["gemm"] == pytest.approx(80 * (2 * 8192 * 213_909_504 / (1979e12 * 0.5) + 4 * 2e-6)
                                                   + 8192 * quant)
    # up to 4,353 rows nothing changes; bf16 weights never take it
    small = StepBatch(prefill_new=(2048,), prefill_cached=(0,), decode_context=(900,))
    assert on.terms(small)["gemm"] == off.terms(small)["gemm"]
    bf16 = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, coefficients={**ROUND, **FP8, "e_gemm_fp8_large": 0.8})
    assert bf16.gemm_e_large == 0.0
    # the compiled step prices the three regions the same
    for batch in (small, big, StepBatch(prefill_new=(6000,), prefill_cached=(0,), decode_context=(900,) * 3)):
        assert step_seconds(packed(on), aggregates(batch)) == pytest.approx(on.step_time(batch), rel=1e-9)
    assert on.step_time(StepBatch(prefill_new=(6000,), prefill_cached=(0,))) < off.step_time(
        StepBatch(prefill_new=(6000,), prefill_cached=(0,)))
    # shipped: H100's own key; a GPU borrowing H100's coefficients (H20) takes it with them; a GPU that
    # borrows H200's but fits its GEMMs on its own tables (B200, GB200) does not take H200's, which
    # belongs with H200's e_gemm_fp8 (GB200's own e_gemm_fp8 would fall at 8,192 rows otherwise)
    h100, h20 = (CalibratedRooflineTimeModel("Llama-3.1-70B", g, 4, dtype="fp8") for g in ("H100", "H20"))
    assert h100.gemm_e_large > h100.gemm_c[0] and h20.gemm_e_large == h100.gemm_e_large
    for g in ("B200", "GB200"):
        own = CalibratedRooflineTimeModel("Llama-3.1-70B", g, 4, dtype="fp8")
        assert "gemm" in own.calibration.own_fitted and own.gemm_e_large == 0.0


def test_calibrated_decode_attention_pays_a_cost_per_request_per_layer():
    m = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1,
                                    coefficients={**ROUND, "attn_per_request_decode_s": 1e-7})
    t = m.terms(StepBatch(decode_context=(1000,) * 10))
    # 32 layers x (20 us floor + 10 requests x 0.1 us) + 10,000 tokens' KV at half the bandwidth
    assert t["attn_decode"] == pytest.approx(32 * (2e-5 + 10 * 1e-7) + 10_000 * 32 * 4096 / (3.35e12 * 0.5))


def test_calibrated_all_reduce_waits_a_skew_per_doubling_of_the_group():
    # in a real step each all-reduce also waits for the last GPU (allreduce_skew_s x log2(tp)):
    # Llama-3.1-70B at TP 8, 80 layers, 2 all-reduces each, skew 10 us x 3 = 30 us more per call
    batch = StepBatch(decode_context=(1000,) * 4)
    off = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 8, coefficients=ROUND)
    on = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 8, coefficients={**ROUND, "allreduce_skew_s": 1e-5})
    assert on.terms(batch)["allreduce"] - off.terms(batch)["allreduce"] == pytest.approx(2 * 80 * 3e-5)
    assert on.allreduce_latency_s == pytest.approx(5e-6 + 3e-5)
    # one GPU has no all-reduce, so no skew
    one = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients={**ROUND, "allreduce_skew_s": 1e-5})
    assert one.terms(batch)["allreduce"] == 0.0


def test_calibrated_all_reduce_runs_vllms_custom_kernel_one_or_two_stage_and_nccl_above():
    from kvreplay.serving.timing.roofline import allreduce_time

    c = {**ROUND, "allreduce_link_bytes_per_s": 1e11}
    # one stage below 256 KiB on 8 GPUs: every GPU reads its 7 peers' buffers over its links
    assert allreduce_time(8, 65536, 5e-6, c) == pytest.approx(5e-6 + 7 * 65536 / 1e11)
    # 1 MiB on 8 GPUs: two stages, a second barrier, the ring's 2 x 7/8 of the bytes at the bus
    assert allreduce_time(8, 2 ** 20, 5e-6, c) == pytest.approx(2 * 5e-6 + 1.75 * 2 ** 20 / 1e11)
    # 4 GPUs: one stage below 512 KiB; 2 GPUs: one stage up to vLLM's 8 MiB limit
    assert allreduce_time(4, 300 * 1024, 5e-6, c) == pytest.approx(5e-6 + 3 * 300 * 1024 / 1e11)
    assert allreduce_time(2, 4 * 2 ** 20, 5e-6, c) == pytest.approx(5e-6 + 4 * 2 ** 20 / 1e11)
    # 8 MiB and more: NCCL's ring, one latency
    assert allreduce_time(2, 8 * 2 ** 20, 5e-6, c) == pytest.approx(5e-6 + 8 * 2 ** 20 / 1e11)
    # the first barrier's latency is the one given (the serving skew rides on it), the second the kernel's
    assert allreduce_time(8, 2 ** 20, 9e-6, c) == pytest.approx(9e-6 + 5e-6 + 1.75 * 2 ** 20 / 1e11)
    # no link bandwidth: every message on the ring formula, as before
    assert allreduce_time(8, 65536, 5e-6, ROUND | {"allreduce_link_bytes_per_s": 0.0}) == pytest.approx(
        5e-6 + 1.75 * 65536 / 1e11)
    # in a step: Llama-3.1-70B at TP 8, 4 decodes (64 KiB a message), 80 layers x 2
    m = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 8, coefficients=c)
    assert m.terms(StepBatch(decode_context=(1000,) * 4))["allreduce"] == pytest.approx(160 * (5e-6 + 7 * 65536 / 1e11))


def test_calibrated_all_reduce_runs_nccls_own_terms_per_degree_from_8_mib():
    # NCCL's latency and bus at TP 2, 4 and 8 (fitted per degree), between them log2-interpolated,
    # outside them clamped; without them (0) the custom kernel's ring, as before
    from kvreplay.serving.timing.roofline import allreduce_floor, allreduce_time, nccl_terms

    nccl = {"allreduce_nccl_latency_tp2_s": 10e-6, "allreduce_nccl_bus_tp2_bytes_per_s": 2e11,
            "allreduce_nccl_latency_tp4_s": 20e-6, "allreduce_nccl_bus_tp4_bytes_per_s": 3e11,
            "allreduce_nccl_latency_tp8_s": 30e-6, "allreduce_nccl_bus_tp8_bytes_per_s": 4e11}
    c = {**ROUND, "allreduce_link_bytes_per_s": 1e11, **nccl}
    mib128 = 128 * 2 ** 20
    # 128 MiB on 8 GPUs: 5 us first barrier + 30 us + 2 x 7/8 x 128 MiB / 400 GB/s = 622.2 us
    assert allreduce_time(8, mib128, 5e-6, c) == pytest.approx(5e-6 + 30e-6 + 1.75 * mib128 / 4e11)
    assert allreduce_time(2, mib128, 5e-6, c) == pytest.approx(5e-6 + 10e-6 + mib128 / 2e11)
    # TP 6: halfway in log2 between 4 and 8 is log2(6) = 2.585 -> 58.5% of the way
    w = np.log2(6) - 2
    lat, bus = nccl_terms(6, c)
    assert lat == pytest.approx(20e-6 + w * 10e-6) and bus == pytest.approx(3e11 + w * 1e11)
    assert nccl_terms(16, c) == pytest.approx((30e-6, 4e11))  # clamped at the largest degree fitted
    # below 8 MiB the custom kernel, whatever NCCL's terms
    assert allreduce_time(8, 2 ** 20, 5e-6, c) == pytest.approx(2 * 5e-6 + 1.75 * 2 ** 20 / 1e11)
    # no NCCL terms: the ring at the custom kernel's bus (as before 2026-12-07)
    assert allreduce_time(8, mib128, 5e-6, ROUND | {"allreduce_link_bytes_per_s": 1e11}) == pytest.approx(
        5e-6 + 1.75 * mib128 / 1e11)
    # the floor stays below the time at every size from 8 MiB
    for size in (8 * 2 ** 20, 2 ** 25, mib128, 2 ** 30):
        for tp in (2, 4, 8):
            assert allreduce_floor(tp, size, 5e-6, c) <= allreduce_time(tp, size, 5e-6, c) + 1e-12
    # the compiled step prices it the same: a 4,096-token prefill of Llama-3.1-70B at TP 8 (64 MiB a message)
    from kvreplay.serving.timing.packed import aggregates, packed, roofline_window, step_seconds

    m = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 8, coefficients=c)
    batch = StepBatch(prefill_new=(4096,), prefill_cached=(0,))
    assert m.terms(batch)["allreduce"] == pytest.approx(160 * (m.allreduce_latency_s + 30e-6 + 1.75 * 4096 * 8192 * 2 / 4e11))
    tm = packed(m)
    assert step_seconds(tm, aggregates(batch, roofline_window(tm))) == pytest.approx(m.step_time(batch), rel=1e-9)


def test_the_shipped_nccl_terms_are_measured_gpus_own_and_off_on_another_link():
    from kvreplay.serving.timing.roofline import nccl_terms

    h100 = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 8)
    lat, bus = nccl_terms(8, h100.c)
    assert 5e-6 < lat < 50e-6 and 3.5e11 < bus < 4.5e11  # (NCCL on 8 H100s: 410 GB/s in the ring's form)
    assert nccl_terms(2, h100.c)[1] < bus  # TP 2 runs slower than the ring at TP 8's bus
    # the B200 borrows H200's all-reduce at its own NVLink: NCCL's per-degree terms are off there
    b200 = CalibratedRooflineTimeModel("Llama-3.1-70B", "B200", 8)
    assert nccl_terms(8, b200.c) == (0.0, b200.c["allreduce_bus_bytes_per_s"])


def test_calibrated_elementwise_kernels_of_a_llama_layer_by_hand():
    from kvreplay.serving.timing.roofline import elementwise_kernels

    m = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients={**ROUND, "ew_floor_s": 2e-6, "e_ew": 0.5})
    # per token: 64 RMSNorms with the residual add (8 x 4096 bytes each), the embedding (4 x 4096)
    # and final norm (8 x 4096), 32 ropes of q and k (4 x 40 heads x 128), 32 KV writes (a layer's
    # 2 x 8 x 128 bf16 read and written: 8,192), 32 SiLU-and-mul (6 x 14,336)
    kinds = elementwise_kernels(m.model, 1, m.kv_per_token_gpu, 2.0, False, 0)
    assert sorted(kinds) == sorted([(64, 32768.0), (1, 16384.0), (1, 32768.0), (32, 20480.0), (32, 8192.0),
                                    (32, 86016.0)])
    assert m.ew_kernels == 162 and m.ew_bytes_per_token == 5_816_320
    t = m.terms(StepBatch(decode_context=(1000,) * 10))
    assert t["elementwise"] == pytest.approx(162 * 2e-6 + 10 * 5_816_320 / (3.35e12 * 0.5))
    # at TP 4 the heads, KV heads (2 of 8) and MLP width split; the norms stay whole
    kinds4 = elementwise_kernels(m.model, 4, m.kv_per_token_gpu / 4, 2.0, False, 0)
    assert {(32, 4.0 * (8 + 2) * 128), (32, 6.0 * 14336 / 4), (64, 32768.0)} <= set(kinds4)
    # an MLA model's attention kernels are in its measured module: its norms only; an MoE has no
    # dense activation (its fused kernel's); e_ew 0 is off
    ds = CalibratedRooflineTimeModel("DeepSeek-V3", "H100", 8, dtype="fp8", coefficients={"ew_floor_s": 2e-6, "e_ew": 0.5})
    assert ds.mla
    assert ds.ew_kernels == 2 * 61 + 2 and ds.ew_bytes_per_token == (16 * 61 + 12) * 7168
    assert "elementwise" not in CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients=ROUND).terms(
        StepBatch(decode_context=(1000,)))


def test_calibrated_decode_attention_reads_slower_with_few_request_kv_head_pairs():
    # Llama-3.1-70B at TP 8: one KV head a GPU; 2 decodes of 1000 tokens, split 0.5: the KV read x 1.25
    m = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 8, coefficients={**ROUND, "attn_split_decode": 0.5})
    kv = 2000 * 80 * m.kv_per_layer_token_gpu
    assert m.kv_heads_gpu == 1.0
    assert m.terms(StepBatch(decode_context=(1000,) * 2))["attn_decode"] == pytest.approx(
        80 * 2e-5 + kv * 1.25 / (3.35e12 * 0.5))
    # at TP 1 (8 KV heads) the same two decodes: 1 + 0.5 / 16
    m1 = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 1, coefficients={**ROUND, "attn_split_decode": 0.5})
    assert m1.terms(StepBatch(decode_context=(1000,) * 2))["attn_decode"] == pytest.approx(
        80 * 2e-5 + 2000 * 80 * m1.kv_per_layer_token_gpu * (1 + 0.5 / 16) / (3.35e12 * 0.5))


def test_the_shipped_calibration_holds_the_serving_term_fitted_on_silicon_runs():
    from kvreplay.serving.timing.roofline import SERVING_COEFFICIENTS, calibration_data

    # fitted once, on H100's silicon runs, and shipped alike to every measured GPU
    h100 = calibration_data()["gpus"]["H100"]["coefficients"]
    m = CalibratedRooflineTimeModel("Llama-3.1-70B", "H200", 8, dtype="fp8")
    assert SERVING_COEFFICIENTS == ("allreduce_skew_s",)
    assert m.c["allreduce_skew_s"] > 0 and m.c["allreduce_skew_s"] == h100["allreduce_skew_s"]
    # what the host CPU adds is not a roofline coefficient (serving/timing/host.py)
    assert not hasattr(m, "frontend_s")
    with pytest.raises(ConfigError, match="unknown roofline coefficient"):
        CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1, coefficients={**ROUND, "frontend_s": 0.02})


def test_calibrated_fp8_needs_fp8_coefficients():
    with pytest.raises(ConfigError, match="no fp8 GEMM coefficients"):
        CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, dtype="fp8", coefficients=ROUND)


def test_calibrated_band_scales_each_kind_of_step():
    m = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100")
    lo, hi = m.at_band("low"), m.at_band("high")
    for batch, phase in ((StepBatch((512,), (0,)), "prefill"), (StepBatch(decode_context=(900,) * 8), "decode"),
                         (StepBatch((512,), (0,), (900,) * 8), "mixed")):
        t = m.step_time(batch)
        assert lo.step_time(batch) == pytest.approx(t * m.calibration.band(phase)[0])
        assert hi.step_time(batch) == pytest.approx(t * m.calibration.band(phase)[1])
        assert lo.step_time(batch) < t < hi.step_time(batch)


def test_calibrated_gpu_without_measurements_borrows_its_relatives():
    b200 = CalibratedRooflineTimeModel("Llama-3.1-8B", "B200")
    assert b200.calibration.borrowed and b200.calibration.measured_on == "H200"
    assert b200.describe()["borrowed_calibration"] is True
    # B200's bands: H200's coefficients checked on B200's own measured kernels, not the cross-GPU spread
    from kvreplay.serving.timing.roofline import calibration_data

    checked = calibration_data()["relative_bands"]["B200"]
    assert checked["relative"] == "H200"
    assert b200.calibration.band("prefill") == tuple(checked["bands"]["prefill"])
    assert b200.calibration.band("prefill", fp8=True) == tuple(checked["bands_fp8"]["prefill"])
    # ... but for its GEMMs, fused MoE kernels, GDN and MLA terms, fitted on its own tables (FlashInfer's
    # TRT-LLM MoE kernels and Blackwell's attention kernels are not Hopper's): the rest is H200's as it is
    h200 = calibration_data()["gpus"]["H200"]["coefficients"]
    own = b200.calibration.coefficients
    assert b200.calibration.own_fitted == ("gemm", "moe", "gdn", "mla", "elementwise")
    assert own["moe_e_gemm_fp8"] == checked["coefficients"]["moe_e_gemm_fp8"] != h200["moe_e_gemm_fp8"]
    assert own["mla_floor_s"] != h200["mla_floor_s"] and own["gdn_parallel"] != h200["gdn_parallel"]
    assert own["e_gemm"] != h200["e_gemm"] and own["e_gemm_fp8"] != h200["e_gemm_fp8"]
    assert all(own[k] == h200[k] for k in ("e_attn_prefill", "attn_floor_decode_s", "allreduce_latency_s", "allreduce_skew_s"))
    # the time line says which: B200's relative's coefficients checked on its kernels, its own three terms
    from kvreplay.output.serving import _describe_time

    line = _describe_time(CalibratedRooflineTimeModel("MiniMax-M2.5", "B200", 4, dtype="fp8").describe())
    assert ("calibrated on H200's measured kernels (its nearest measured relative's, checked on B200's own kernels; "
            "its GEMM/MoE/GDN/MLA/elementwise terms fitted on them)") in line
    assert "(no measurements of MI300X: its nearest measured relative's)" in _describe_time(
        CalibratedRooflineTimeModel("Llama-3.1-8B", "MI300X").describe())
    mi300x = CalibratedRooflineTimeModel("Llama-3.1-8B", "MI300X")  # no kernels measured: the transfer spread
    assert mi300x.calibration.band("prefill") == tuple(calibration_data()["transfer_bands"]["prefill"])
    h100 = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100")
    assert not h100.calibration.borrowed and h100.describe()["calibrated_on"] == "H100"


def test_calibrated_memory_terms_run_at_the_measured_streaming_bandwidth():
    from kvreplay.serving.timing.roofline import calibration_data, stream_bandwidth

    probes = calibration_data()["stream_bandwidth"]
    # every measured GPU with a probe: the share of its datasheet peak a streaming kernel sustains
    for name, p in probes.items():
        gpu = get_gpu(name)
        assert p["bytes_per_s"] == pytest.approx(p["fraction_of_peak"] * gpu.bandwidth_bytes_per_s)
        assert 0.7 < p["fraction_of_peak"] < 1.0 and p["shapes"] > 0 and p["file"].endswith(".parquet")
    h100, h200 = (CalibratedRooflineTimeModel("Llama-3.1-8B", g) for g in ("H100", "H200"))
    assert h100.bandwidth == probes["H100"]["bytes_per_s"] and h200.bandwidth == probes["H200"]["bytes_per_s"]
    assert h200.describe()["stream_bandwidth_source"] == "measured on this GPU"
    # a weight-bound decode step's GEMMs scale with it, not with the datasheet peaks' ratio
    batch = StepBatch(decode_context=(1000,))
    gemm = {m.gpu.name: m.terms(batch)["gemm"] - 4 * 32 * m.c["gemm_floor_s"] for m in (h100, h200)}
    assert gemm["H100"] / gemm["H200"] * h100.c["e_weights"] / h200.c["e_weights"] == pytest.approx(
        probes["H200"]["bytes_per_s"] / probes["H100"]["bytes_per_s"])
    # no probe, borrowed coefficients: the datasheet peak at the share measured where they were fitted
    mi300x = get_gpu("MI300X")
    bw, source = stream_bandwidth(mi300x, "H200")
    assert bw == pytest.approx(mi300x.bandwidth_bytes_per_s * probes["H200"]["fraction_of_peak"])
    assert "H200" in source and CalibratedRooflineTimeModel("Llama-3.1-8B", "MI300X").bandwidth == bw
    # no probe anywhere (A100's tables have no quantisation kernels): the datasheet peak
    a100 = get_gpu("A100-80GB")
    assert "A100-80GB" not in probes
    assert stream_bandwidth(a100, "A100-80GB") == (a100.bandwidth_bytes_per_s, "the datasheet peak")
    assert stream_bandwidth(a100, "H100", probes)[0] == pytest.approx(2.039e12 * probes["H100"]["fraction_of_peak"])
    # every coefficient given and no bandwidth: the datasheet peak (the hand-worked tests above)
    assert CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", coefficients=ROUND).bandwidth == 3.35e12
    assert CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", coefficients=ROUND, stream_bytes_per_s=2e12).bandwidth == 2e12


def test_roofline_options_belong_to_roofline_raw():
    with pytest.raises(ConfigError, match="roofline-raw"):
        load_time_model("roofline", model="Llama-3.1-8B", gpu="H100", mfu=0.4)
    raw = load_time_model("roofline-raw", model="Llama-3.1-8B", gpu="H100", mfu=0.4)
    assert isinstance(raw, RooflineTimeModel) and raw.mfu == 0.4 and raw.name == "roofline-raw"
    assert isinstance(load_time_model("roofline", model="Llama-3.1-8B", gpu="H100"), CalibratedRooflineTimeModel)
    with pytest.raises(ConfigError, match="unknown roofline coefficient"):
        CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", coefficients={"e_magic": 1.0})


def test_calibrated_roofline_prices_mamba_layers_by_their_state():
    # Qwen3-Next-80B-A3B: 12 attention layers, 36 Gated DeltaNet layers of 1,097,728 state bytes.
    # Attention runs on the 12 only; without measured GDN kernels (A100's tables have none) the state
    # term reads and writes each layer's state once per request in the step and updates it per token
    # (roofline.py's module docstring), as it does for Mamba-2 layers
    from kvreplay.serving.timing import CalibratedRooflineTimeModel

    m = CalibratedRooflineTimeModel("Qwen3-Next-80B-A3B", "A100", tp=4)
    assert m.gdn is None
    c = m.c
    assert (m.attn_layers, m.layers_full, m.mamba_layers, m.state_bytes) == (12, 12, 36, 1_097_728)
    decode = StepBatch([], [], [1000] * 8)
    # 2 x 1,097,728 B x 36 layers x 8 requests / 4 GPUs = 158,072,832 B; 6 x 548,864 x 36 x 8 / 4 FLOPs
    nbytes, flops = 158_072_832, 237_109_248
    want = 36 * c["attn_floor_decode_s"] + max(flops / (m.attn_peak * c["e_attn_decode"]),
                                               nbytes / (m.bandwidth * c["e_kv_decode"]))
    terms = m.terms(decode)
    assert terms["mamba"] == pytest.approx(want, rel=1e-12)
    assert terms["attn_decode"] > 0 and terms["attn_decode"] < 36 * c["attn_floor_decode_s"]
    # a step's state traffic grows with its requests, not with their contexts
    longer = m.terms(StepBatch([], [], [100_000] * 8))
    assert longer["mamba"] == pytest.approx(want, rel=1e-12) and longer["attn_decode"] > terms["attn_decode"]
    assert m.describe()["mamba_layers"] == 36 and m.describe()["mamba_state_bytes_per_layer"] == 1_097_728
    # a model without Mamba layers has no such term
    llama = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100")
    assert "mamba" not in llama.terms(decode) and "mamba_layers" not in llama.describe()


#: round GDN coefficients (GDN_TERMS' order: parallel, then prefill floor, e, e_bytes, per request,
#: then decode's)
GDN_ROUND = (64.0, 1e-5, 0.1, 0.5, 1e-6, 2e-6, 0.2, 0.8, 1e-7)


def test_gdn_layer_by_hand():
    from kvreplay.serving.timing.roofline import gdn_layer_time

    state, act = 1_000_000.0, 10_000.0  # bytes per request, per token
    # decode of 4 requests: 6 x 500,000 x 4 = 12e6 FLOPs at 0.2 x 1e15 = 60 ns; bytes 2 x 1e6 x 4 +
    # 4 x 1e4 = 8.04e6 at 0.8 x 1e12 = 10.05 us: bytes-bound, + 2 us + 4 x 0.1 us
    t = gdn_layer_time(GDN_ROUND, 4, 4, state, act, 8, False, 1e15, 1e12)
    assert float(t) == pytest.approx(2e-6 + 8.04e6 / 0.8e12 + 4e-7)
    # prefill of 2 requests x 4,096 tokens on 8 value heads: 16 heads in flight of the 64 that fill the
    # GPU, so its compute runs 4x slower: 6 x 5e5 x 8,192 FLOPs x 4 at 0.1 x 1e15 = 983 us (bytes
    # 2e6 x 2 + 1e4 x 8,192 = 86 MB at 0.5e12 = 172 us), + 10 us + 2 x 1 us
    t = gdn_layer_time(GDN_ROUND, 8192, 2, state, act, 8, True, 1e15, 1e12)
    assert float(t) == pytest.approx(1e-5 + 6 * 5e5 * 8192 * 4 / 0.1e15 + 2e-6)
    # 16 requests: 128 heads in flight, no slowdown
    t = gdn_layer_time(GDN_ROUND, 16 * 512, 16, state, act, 8, True, 1e15, 1e12)
    assert float(t) == pytest.approx(1e-5 + 6 * 5e5 * 8192 / 0.1e15 + 16e-6)


def test_calibrated_gated_deltanet_layers_run_their_measured_kernels():
    from kvreplay.serving.timing.roofline import gdn_layer_time

    m = CalibratedRooflineTimeModel("Qwen3-Next-80B-A3B", "H100", tp=4)
    assert m.gdn["kind"] == "gated_deltanet" and m.gdn_v_heads == 8
    # per GPU: 274,432 state bytes a request (1,097,728 / 4); q, k, v in and the output (2 x 16 x 128
    # + 2 x 32 x 128) x 2 bytes / 4 = 6,144 bytes a token
    assert m.gdn_act == 6144
    decode = StepBatch([], [], [1000] * 8)
    want = 36 * float(gdn_layer_time(m.gdn_c, 8, 8, 274_432, 6144, 8, False, m.attn_peak, m.bandwidth))
    assert m.terms(decode)["mamba"] == pytest.approx(want, rel=1e-12)
    prefill = StepBatch((4096,), (0,))
    want = 36 * float(gdn_layer_time(m.gdn_c, 4096, 1, 274_432, 6144, 8, True, m.attn_peak, m.bandwidth))
    assert m.terms(prefill)["mamba"] == pytest.approx(want, rel=1e-12)
    # its band: its MoE steps' (Qwen3-Next is an MoE too), widened to the GDN kernels' spread (a mixed
    # step: both phases')
    cal = m.calibration
    assert m.moe_kernel == "bf16"
    lo, hi = cal.bands_moe_steps["bf16"]["mixed"]
    assert m.band("mixed") == (min(lo, cal.bands_gdn["prefill"][0], cal.bands_gdn["decode"][0]),
                               max(hi, cal.bands_gdn["prefill"][1], cal.bands_gdn["decode"][1]))
    assert m.describe()["mamba_term"] == "Gated DeltaNet kernels, fitted on measured ones"
    # Mamba-2 layers (Nemotron-H) keep the unmeasured state term
    nemotron = CalibratedRooflineTimeModel("Nemotron-H-8B", "H100")
    assert nemotron.gdn is None and nemotron.describe()["mamba_term"].startswith("unmeasured")


# ------------------------------------------------------------------------------------------
# An MoE's routed experts: the fused MoE kernel's term (roofline.moe_layer_time)

#: round MoE kernel coefficients (MOE_TERMS' order: e_gemm, e_weights, floor_s, overlap_p (inf: the
#: plain max), per_token_s, tile_rows, k0, tile_rows_large)
MOE_ROUND = (0.5, 0.8, 1e-5, float("inf"), 1e-8, 16.0, 0.0, 64.0)


def test_moe_layer_by_hand_few_tokens_read_their_experts_and_compute_whole_tiles():
    from kvreplay.serving.timing.roofline import moe_layer_time

    # 2 tokens x top-2 of 8 experts: 4 routed tokens, 4 experts active, each computing a 16-row tile
    # (64 rows): FLOPs 2 x 64 x (2 x 1024 x 512 + 512 x 1024) = 201,326,592 at 0.5 x 1e15 = 0.40 us;
    # weights 4 x 3 x 1024 x 512 x 2 bytes = 12,582,912 at 0.8 x 1e12 = 15.73 us: memory-bound
    t = moe_layer_time(MOE_ROUND, 2, 1024, 512, 8, 2, 2.0, 1e15, 1e12)
    assert float(t) == pytest.approx(12_582_912 / 0.8e12 + 1e-5 + 4 * 1e-8)


def test_moe_layer_by_hand_many_tokens_touch_every_expert_and_compute_their_rows():
    from kvreplay.serving.timing.roofline import moe_layer_time

    # 1,000 tokens x top-2: 2,000 routed rows over all 8 experts (8 x 16 tile rows fewer), compute-bound:
    # 2 x 2,000 x 1,572,864 = 6.29e9 FLOPs at 0.5e15 = 12.58 us against 8 experts' 25.2 MB at 0.8e12 = 31.5 us
    t = moe_layer_time(MOE_ROUND, 1000, 1024, 512, 8, 2, 2.0, 1e15, 1e12)
    assert float(t) == pytest.approx(8 * 3 * 1024 * 512 * 2 / 0.8e12 + 1e-5 + 2000 * 1e-8)
    fast = moe_layer_time(MOE_ROUND, 1000, 1024, 512, 8, 2, 2.0, 1e13, 1e12)  # at 1e13 FLOP/s: compute-bound
    assert float(fast) == pytest.approx(2 * 2000 * 1_572_864 / 0.5e13 + 1e-5 + 2000 * 1e-8)
    k0 = moe_layer_time(MOE_ROUND[:6] + (64.0, 64.0), 1000, 1024, 512, 8, 2, 2.0, 1e13, 1e12)  # k0 more of each K
    assert float(k0) == pytest.approx(2 * 2000 * (2 * 1088 * 512 + 576 * 1024) / 0.5e13 + 1e-5 + 2000 * 1e-8)


def test_moe_layer_above_64_tokens_computes_taller_tiles():
    from kvreplay.serving.timing.roofline import MOE_TILE_ABOVE, moe_layer_time

    # vLLM's block-fp8 fused MoE runs 16-row tiles up to 64 tokens and 64-row ones above: 65 tokens x
    # top-2 over 128 experts route 130 rows to 128 active experts, each computing a 64-row tile (8,192
    # rows); 64 tokens route 128, one 16-row tile each (2,048 rows). Compute-bound at 1e12 FLOP/s
    assert MOE_TILE_ABOVE == 64
    per_row = 2 * (2 * 1024 * 512 + 512 * 1024)
    above = moe_layer_time(MOE_ROUND, 65, 1024, 512, 128, 2, 2.0, 1e12, 1e15)
    at = moe_layer_time(MOE_ROUND, 64, 1024, 512, 128, 2, 2.0, 1e12, 1e15)
    assert float(above) == pytest.approx(128 * 64 * per_row / 0.5e12 + 1e-5 + 130 * 1e-8)
    assert float(at) == pytest.approx(128 * 16 * per_row / 0.5e12 + 1e-5 + 128 * 1e-8)


def _moe_coefficients(kernel):
    from kvreplay.serving.timing.roofline import moe_names

    return dict(zip(moe_names(kernel), MOE_ROUND))


def test_calibrated_moe_times_its_routed_experts_apart_from_the_body():
    from kvreplay.analysis.models import get_model

    spec = get_model("Qwen3-30B-A3B")  # 48 MoE layers of 128 experts, top 8, 768 wide; hidden 2048
    assert spec.routed_expert_params == 3 * 48 * 8 * 2048 * 768
    m = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 2, coefficients={**ROUND, **_moe_coefficients("bf16")},
                                    moe_routing="balanced")
    bw = m.bandwidth
    t = m.terms(StepBatch(decode_context=(1000,)))
    # one token: 8 experts of 3 x 2048 x 384 (768 / tp 2) bf16 weights each layer, memory-bound, + floor + 8 routed
    assert t["moe"] == pytest.approx(48 * (8 * 3 * 2048 * 384 * 2 / (bw * 0.8) + 1e-5 + 8 * 1e-8))
    # the rest of the body (attention, norms) at the GEMMs' coefficients: its weights read whole
    body = spec.body_params - spec.routed_expert_params
    assert m.body_params == body and m.body_weight_bytes == body * 2
    assert t["gemm"] == pytest.approx(body * 2 / 2 / (bw * 0.5) + 4 * 48 * 1e-6)


def test_calibrated_moe_band_is_that_of_the_moe_models_steps():
    from kvreplay.serving.timing.roofline import calibration_data

    m = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 2)
    shipped = calibration_data()["gpus"]["H100"]["bands_moe_steps"]["bf16"]
    for phase in ("prefill", "decode", "mixed"):
        assert m.band(phase) == tuple(shipped[phase])
        assert m.describe()["bands"][phase] == list(m.band(phase))
    assert m.band("prefill") != m.calibration.band("prefill")  # not the dense models' steps
    hi = m.at_band("high")
    batch = StepBatch((512,), (0,))
    assert hi.step_time(batch) == pytest.approx(m.step_time(batch) * m.band("prefill")[1])
    # int4 weights: no MoE step was composed (no table times Marlin at these models' shapes): the
    # dense band widened to the int4 MoE kernel's spread
    q = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 1, dtype="int4")
    cal = q.calibration
    lo, hi = cal.band("decode")
    assert "int4" not in cal.bands_moe_steps
    assert q.band("decode") == (min(lo, cal.bands_moe["int4"][0]), max(hi, cal.bands_moe["int4"][1]))
    # a GPU without measurements: the spread of the held-back GPU's MoE steps
    mi = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "MI300X", 2)
    assert mi.band("mixed") == tuple(calibration_data()["transfer_bands_moe_steps"]["bf16"]["mixed"])


def test_calibrated_moe_kernel_by_weights_dtype():
    fp8 = CalibratedRooflineTimeModel("MiniMax-M2.5", "H200", 4, dtype="fp8")
    assert fp8.moe_kernel == "fp8" and fp8.moe_peak == fp8.gpu.peak_flops("fp8") and fp8.moe_inter == 1536 / 4
    int4 = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 1, dtype="int4")
    assert int4.moe_kernel == "int4" and int4.moe_peak == int4.gpu.peak_flops("bf16")  # Marlin: bf16 math
    # an MXFP4 checkpoint's int4 weights run OpenAI's Triton MoE kernel, not Marlin
    mx = CalibratedRooflineTimeModel("gpt-oss-120b", "H100", 1, dtype="int4")
    assert mx.moe_kernel == "mxfp4" and mx.moe_weight_bytes == 0.5 and mx.moe_c != int4.moe_c
    # A100 has no MoE kernel measured: the experts stay in the one GEMM of the active parameters
    a100 = CalibratedRooflineTimeModel("Mixtral-8x7B-v0.1", "A100", 2)
    assert a100.moe is None and "moe" not in a100.terms(StepBatch(decode_context=(10,)))
    dense = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100")
    assert dense.moe is None and dense.band("decode") == dense.calibration.band("decode")


def test_gpt_oss_body_is_its_attention_and_router_in_bf16():
    # gpt-oss-120b's card counts 5.1e9 active parameters without the input embedding (config.json's
    # shapes: 5.71e9 with it), so the body is 5.1e9 less the LM head only (vocab 201,088 x 2,880)
    from kvreplay.analysis.models import get_model

    spec = get_model("gpt-oss-120b")
    assert spec.active_excludes_embedding and not spec.tie_word_embeddings
    assert spec.body_params == 5_100_000_000 - 201_088 * 2_880 == 4_520_866_560
    # less the routed experts (36 layers x 4 experts x 3 x 2,880 x 2,880): 937,685,760, near the
    # attention projections and router its shapes give, 36 x (2,880 x (4,096 + 2 x 512) + 4,096 x
    # 2,880 + 2,880 x 128) = 968,785,920 (the card's 5.1e9 is rounded)
    m = CalibratedRooflineTimeModel("gpt-oss-120b", "H100", 4, dtype="int4")
    assert m.body_params == 4_520_866_560 - 36 * 4 * 3 * 2_880 * 2_880 == 937_685_760
    assert abs(m.body_params / 968_785_920 - 1) < 0.04
    # ... read in bf16: the MXFP4 checkpoint quantises the experts only (vLLM runs the other linear
    # layers unquantised), 2 bytes a weight, not int4's half byte
    assert m.body_weight_bytes == m.active_body_weight_bytes == 2 * 937_685_760
    # a dense int4 model's body stays at half a byte
    q = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 1, dtype="int4")
    assert q.body_weight_bytes == 0.5 * q.body_params


def test_prefill_attention_at_64_wide_heads():
    from kvreplay.serving.timing.roofline import ATTN_PREFILL_HEAD64, attn_head_efficiency

    # H100's FlashAttention 3 table: 64-wide heads at 0.769 of the 128-wide efficiency
    assert ATTN_PREFILL_HEAD64 == 0.769
    assert attn_head_efficiency(64) == attn_head_efficiency(32) == 0.769
    assert attn_head_efficiency(128) == attn_head_efficiency(256) == attn_head_efficiency(None) == 1.0
    # 96 = 2^6.585: 0.769 + 0.231 x 0.585 = 0.904
    assert attn_head_efficiency(96) == pytest.approx(0.769 + 0.231 * (math.log2(96) - 6))
    gpt = CalibratedRooflineTimeModel("gpt-oss-120b", "H100", 4, dtype="int4")
    llama = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1)
    c = gpt.calibration.coefficients
    assert gpt.e_attn == (c["e_attn_prefill"] * 0.769, c["e_attn_decode"])
    assert llama.e_attn == (c["e_attn_prefill"], c["e_attn_decode"])
    # one 8,192-token prefill at TP 4: 18 full layers of 8,192 x 8,193 / 2 keys and 18 of the 128-token
    # window (128 x 129 / 2 + 8,064 x 128 keys), 16 heads x 64 = 1,024 wide, 4 FLOPs a key and width
    keys = 18 * 8192 * 8193 // 2 + 18 * (128 * 129 // 2 + 8064 * 128)
    compute = 4.0 * 1024 * keys / (gpt.attn_peak * c["e_attn_prefill"] * 0.769)
    t = gpt.terms(StepBatch((8192,), (0,)))["attn_prefill"]
    assert t == pytest.approx(36 * c["attn_floor_prefill_s"] + compute)  # compute-bound: 6.44 ms
    assert t == pytest.approx(6.44e-3, rel=0.01)


def test_calibrated_moe_prefill_is_slower_than_the_experts_as_gemms():
    # the fused MoE kernels run far below the dense GEMMs' efficiency (the fit: benchmarks/calibrate.py)
    import dataclasses

    from kvreplay.analysis.models import get_model

    spec = get_model("MiniMax-M2.5")
    moe = CalibratedRooflineTimeModel(spec, "H200", 8, dtype="fp8")
    before = CalibratedRooflineTimeModel(dataclasses.replace(spec, moe=None), "H200", 8, dtype="fp8")
    batch = StepBatch((8192,), (0,))
    t, gemms = moe.terms(batch), before.terms(batch)["gemm"]
    assert t["gemm"] + t["moe"] > 1.5 * gemms and moe.step_time(batch) > before.step_time(batch)


def test_calibrated_mla_moe_band_is_that_of_deepseeks_composed_steps():
    # DeepSeek-V3's steps composed from the measured MLA modules (benchmarks/calibrate.py) are wider
    # than the GQA MoE models' steps, and an MLA MoE run takes their spread
    from kvreplay.serving.timing.roofline import calibration_data

    m = CalibratedRooflineTimeModel("DeepSeek-V3", "H200", 8, dtype="fp8")
    assert m.moe_kernel == "fp8"
    shipped = calibration_data()["gpus"]["H200"]["bands_mla_steps"]["fp8"]
    for phase in ("prefill", "decode", "mixed"):
        assert m.band(phase) == tuple(shipped[phase])
    assert m.band("decode") != tuple(calibration_data()["gpus"]["H200"]["bands_moe_steps"]["fp8"]["decode"])
    # Kimi-K2 (MLA too) at bf16: no MLA steps were composed at bf16, so the GQA MoE models' steps
    kimi = CalibratedRooflineTimeModel("Kimi-K2-Instruct", "H200", 8)
    assert kimi.band("decode") == tuple(calibration_data()["gpus"]["H200"]["bands_moe_steps"]["bf16"]["decode"])


#: the MLA term's coefficients, round (roofline.MLA_COEFFICIENTS)
MLA = {"mla_floor_s": 5e-5, "mla_e_attn_prefill": 0.8, "mla_e_attn_decode": 0.4, "mla_per_token_s": 2e-8,
       "mla_per_head_token_s": 1e-9}
#: DeepSeek-V3's MLA projections on one GPU of TP 8 (16 heads), by hand from its config.json:
#: q_a + kv_a fused and replicated (1,536 + 512 + 64, 7,168), q_b (16 x (128 + 64), 1,536), kv_b
#: (16 x (128 + 128), 512), o (7,168, 16 x 128); per layer at TP 1: 187,105,280 parameters
DS_TP8 = ((2112, 7168), (3072, 1536), (4096, 512), (7168, 2048))


def test_mla_projections_by_hand():
    from kvreplay.analysis.models import get_model

    ds = get_model("DeepSeek-V3")
    assert ds.mla_gemm_shapes(8) == DS_TP8
    assert ds.mla_projection_params == 61 * (2112 * 7168 + 24576 * 1536 + 32768 * 512 + 7168 * 16384) == 11_413_422_080
    assert ds.mla_projection_params < ds.body_params - ds.routed_expert_params  # shared experts, dense MLPs left
    assert get_model("Kimi-K2-Instruct").mla_gemm_shapes(8)[1] == (8 * 192, 1536)  # 64 heads
    assert get_model("Llama-3.1-8B").mla_gemm_shapes(1) == () and get_model("Llama-3.1-8B").mla_projection_params == 0


def test_calibrated_mla_decode_terms_by_hand():
    # DeepSeek-V3 at TP 8, bf16, round coefficients (no MoE kernel: the experts stay in the body's GEMM)
    m = CalibratedRooflineTimeModel("DeepSeek-V3", "H100", 8, coefficients={**ROUND, **MLA})
    assert m.mla and m.moe is None and m.gemm_shapes == DS_TP8
    t = m.terms(StepBatch(decode_context=(1000,)))
    bw = 3.35e12 * 0.5
    # the projections one by one, memory-bound at one row (input, weights, output, bf16), a floor each;
    # the rest of the body one GEMM beside them (its weights / tp), three floors a layer
    proj = sum((2 * k + 2 * k * n + 2 * n) / bw + 1e-6 for n, k in DS_TP8)
    rest = m.model.body_params - 11_413_422_080
    assert t["gemm"] == pytest.approx(61 * proj + rest * 2 / 8 / bw + 3 * 61 * 1e-6)
    # absorbed decode: 4 x 16 heads x (2 x 512 + 64) / 2 FLOPs per key and layer at 0.4 of the peak,
    # against 1,152 bytes (the latent and rope, bf16) per key and layer at 0.5 of the bandwidth
    compute = 4 * 16 * 544 * 1000 * 61 / (989.5e12 * 0.4)
    assert t["attn_decode"] == pytest.approx(61 * 2e-5 + max(compute, 1152 * 1000 * 61 / bw))
    # the MLA module's floor and its cost per token (2e-8 + 16 heads x 1e-9), each layer
    assert t["mla"] == pytest.approx(61 * (5e-5 + (2e-8 + 16e-9) * 1))


def test_calibrated_mla_prefill_runs_unabsorbed_and_decompresses_its_cached_context():
    m = CalibratedRooflineTimeModel("DeepSeek-V3", "H100", 8, coefficients={**ROUND, **MLA})
    t = m.terms(StepBatch((100,), (900,)))
    bw = 3.35e12 * 0.5
    # q.k over 128 + 64 and v over 128: a width of 16 x 160 per GPU; 100 x 900 + 100 x 101 / 2 causal pairs
    pairs = 100 * 900 + 100 * 101 // 2
    f = 4 * 16 * 160 * pairs * 61
    b = 1152 * 1000 * 61 + 4 * 16 * 160 * 100 * 61
    assert t["attn_prefill"] == pytest.approx(61 * 1e-5 + max(f / (989.5e12 * 0.8), b / bw))
    # kv_b decompresses the 900 cached latents: 2 x 512 x 16 x (128 + 128) FLOPs each, at the GEMMs' 0.5
    context = 2 * 512 * 16 * 256 * 900 / (989.5e12 * 0.5)
    assert t["mla"] == pytest.approx(61 * (5e-5 + 36e-9 * 100 + context))
    # without the MLA coefficients: attention at the latent width, no MLA term, the projections in the body
    plain = CalibratedRooflineTimeModel("DeepSeek-V3", "H100", 8, coefficients=ROUND)
    assert not plain.mla and "mla" not in plain.terms(StepBatch((100,), (900,))) and plain.gemm_shapes == ()
    assert plain.attn_width_prefill == plain.attn_width == 128 * 576


def test_the_profile_peak_is_the_larger_of_the_forward_pass_and_the_sampler():
    from kvreplay.analysis.models import get_model
    from kvreplay.serving.timing import memory

    # Qwen3-30B-A3B, TP 1: attention 2 x (32 + 4) x 128 = 9,216; the fused MoE's workspaces (vLLM
    # 0.33.0's TritonExperts, not chunked) 8 x max(768, 2,048) + 8 x max(1,536, 2,048) = 32,768
    # plus the router's fp32 logits 2 x 128 = 256 -> 33,024 elements a token
    spec = get_model("Qwen3-30B-A3B")
    assert memory.layer_width(spec, 1) == 33_024
    # fp8 weights add the quantized input and activation: (2,048 + 8 x 768) / 2 = 4,096
    assert memory.layer_width(spec, 1, "fp8") == 37_120
    # forward at 8,192 tokens: 8,192 x (2 x 2,048 + 33,024) x 2 = 608,174,080 B
    # sampler at 256 rows: 256 x 151,936 x 14 = 544,538,624 + hidden 8,192 x 2,048 x 2 = 33,554,432
    forward, sampler = memory.activation_bytes(spec, 1, 8192, 256)
    assert (forward, sampler) == (608_174_080, 578_093_056)
    # at 1,024 rows the sampler is the peak: 1,024 x 151,936 x 14 + 33,554,432 = 2,211,708,928
    assert memory.activation_bytes(spec, 1, 8192, 1024)[1] == 2_211_708_928
    # DeepSeek-R1 at TP 8: MLA 16 heads x (192 q + 320 up-projected k/v + 128 out) = 10,240; the
    # MoE 8 x 7,168 x 2 + 2 x 256 = 115,200, + (7,168 + 8 x 256) / 2 = 4,608 at fp8 -> 119,808
    r1 = get_model("DeepSeek-R1")
    assert memory.layer_width(r1, 8, "fp8") == 119_808
    # expert parallelism keeps each expert whole: Qwen3-235B-A22B at 8 ranks, I = 1,536 (not 192)
    big = get_model("Qwen3-235B-A22B")
    assert memory.layer_width(big, 8, ep=True) == 8 * 4_096 + 8 * 4_096 + 256


def test_served_routing_scales_the_routed_experts_between_its_knots():
    from kvreplay.serving.timing.roofline import MOE_ROUTING_KNOTS, SERVED_ROUTING, served_routing

    # the knots sit at 2^0 .. 2^14 tokens; between them linear in log2(tokens), beyond them the end's
    mx = SERVED_ROUTING["mxfp4"]
    assert len(mx) == MOE_ROUTING_KNOTS
    assert served_routing("mxfp4", 1024) == pytest.approx(1.366)  # knot 10 (gpt-oss's MXFP4 kernel 1.37x)
    assert served_routing("mxfp4", 1536) == pytest.approx(1.366 + (1.339 - 1.366) * (math.log2(1536) - 10))
    assert served_routing("mxfp4", 100_000) == pytest.approx(1.069) and served_routing("mxfp4", 1) == pytest.approx(0.987)
    assert served_routing("bf16", 0) == 1.0 and served_routing("no-such-kernel", 512) == 1.0


def test_calibrated_moe_under_served_routing_in_python_and_in_c():
    from kvreplay.serving.timing.packed import aggregates, packed, step_seconds

    coefficients = {**ROUND, **_moe_coefficients("bf16")}
    served = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 2, coefficients=coefficients)
    balanced = CalibratedRooflineTimeModel("Qwen3-30B-A3B", "H100", 2, coefficients=coefficients, moe_routing="balanced")
    # a prefill of 3,000 tokens and 5 decodes: 3,005 tokens, between the knots at 2,048 (1.08) and 4,096 (1.087)
    batch = StepBatch(prefill_new=(3000,), prefill_cached=(0,), decode_context=(100,) * 5)
    factor = 1.08 + (1.087 - 1.08) * (math.log2(3005) - 11)
    ts, tb = served.terms(batch), balanced.terms(batch)
    assert ts["moe"] == pytest.approx(tb["moe"] * factor)
    assert {k: v for k, v in ts.items() if k != "moe"} == {k: v for k, v in tb.items() if k != "moe"}
    assert served.describe()["moe_routing"] == "served" and balanced.describe()["moe_routing"] == "balanced"
    for m in (served, balanced):  # the compiled loop's step is the same
        assert step_seconds(packed(m), aggregates(batch)) == pytest.approx(m.step_time(batch), rel=1e-9)
    # one decode token: fewer experts active under served routing (0.983 at 1 token)
    one = StepBatch(decode_context=(1000,))
    assert served.terms(one)["moe"] == pytest.approx(balanced.terms(one)["moe"] * 0.983)
    assert step_seconds(packed(served), aggregates(one)) == pytest.approx(served.step_time(one), rel=1e-9)


def test_served_routing_only_on_the_kernels_it_was_measured_on():
    # B200's MoE terms are its own fit of FlashInfer's TRT-LLM kernels: balanced routing stays
    b200 = CalibratedRooflineTimeModel("gpt-oss-120b", "B200", 2, dtype="int4")
    h100 = CalibratedRooflineTimeModel("gpt-oss-120b", "H100", 2, dtype="int4")
    assert "moe" in b200.calibration.own_fitted and b200.moe_route is None
    assert b200.describe()["moe_routing"] == "balanced"
    assert h100.moe_kernel == "mxfp4" and h100.describe()["moe_routing"] == "served"
    assert "moe_routing" not in CalibratedRooflineTimeModel("Llama-3.1-8B", "H100").describe()  # a dense model
    with pytest.raises(ConfigError, match="moe_routing"):
        CalibratedRooflineTimeModel("gpt-oss-120b", "H100", 2, dtype="int4", moe_routing="even")


def test_a_q_k_norm_over_every_head_all_reduces_once_more_a_layer():
    from kvreplay.analysis.models import get_model
    from kvreplay.serving.timing.packed import aggregates, packed, step_seconds
    from kvreplay.serving.timing.roofline import QK_NORM_BYTES_PER_TOKEN, allreduce_time

    # vLLM norms MiniMax-M2's q and k over all 48 (8) heads: at TP 4 each of its 62 layers all-reduces
    # every token's two fp32 variances, 8 bytes a token, besides the attention's and the experts' all-reduces
    spec = get_model("MiniMax-M2.5")
    assert spec.qk_norm_all_reduce and not get_model("gpt-oss-120b").qk_norm_all_reduce
    m = CalibratedRooflineTimeModel("MiniMax-M2.5", "H200", 4, dtype="fp8")
    plain = CalibratedRooflineTimeModel(dataclasses.replace(spec, qk_norm_all_reduce=False), "H200", 4, dtype="fp8")
    assert m.qk_norm_allreduces == 62 and plain.qk_norm_allreduces == 0
    assert QK_NORM_BYTES_PER_TOKEN == 8.0
    batch = StepBatch(prefill_new=(1000,), prefill_cached=(0,), decode_context=(500,) * 3)
    extra = m.terms(batch)["allreduce"] - plain.terms(batch)["allreduce"]
    # 1,003 tokens x 8 bytes = 8,024 bytes: the custom all-reduce's one stage, latency-bound
    assert extra == pytest.approx(62 * float(allreduce_time(4, 1003 * 8.0, m.allreduce_latency_s, m.c)))
    assert extra == pytest.approx(62 * (m.allreduce_latency_s + 3 * 8024 / m.c["allreduce_link_bytes_per_s"]))
    assert step_seconds(packed(m), aggregates(batch)) == pytest.approx(m.step_time(batch), rel=1e-9)
    # no tensor parallelism, no all-reduce
    assert CalibratedRooflineTimeModel("MiniMax-M2.5", "H200", 1, dtype="fp8").qk_norm_allreduces == 0
