"""The weights dtype (--weights-dtype bf16|fp16|fp8|int4) and the GPU catalog's interconnect figures.

Every number below is worked by hand from the catalogs: the model's parameter count
(the catalog, kvreplay/catalog/) and the GPU's memory, peaks and links (kvreplay/data/gpus.json).
"""

from __future__ import annotations

import json

import pytest

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.serving.config import resolve
from kvreplay.serving.timing import StepBatch, gpu_catalog, kv_capacity, kv_capacity_blocks, load_time_model
from kvreplay.catalog.gpus import WEIGHTS_COMPUTE_DTYPE, check_weights_dtype, compute_dtype, get_gpu
from kvreplay.serving.timing.models import WEIGHT_DTYPE_BYTES, RooflineTimeModel

from conftest import jsonl, write
from test_cli import fails, kv, ok

# Two requests of 40 tokens (16-token blocks), sharing their first block.
TRACE = kvreplay.Trace.from_requests([([1, 2, 3], 40), ([1, 4, 5], 40)], block_size=16)
TWO = jsonl({"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1, 2, 3], "block_size": 16},
            {"timestamp": 500, "input_length": 40, "output_length": 2, "hash_ids": [1, 4, 5], "block_size": 16})


# ------------------------------------------------------------------------------------------
# The dtypes: bytes per weight, GEMM dtype


def test_bytes_and_compute_dtype_of_each_weights_dtype():
    assert WEIGHT_DTYPE_BYTES == {"bf16": 2, "fp16": 2, "fp8": 1, "int4": 0.5}
    assert {d: compute_dtype(d) for d in WEIGHT_DTYPE_BYTES} == {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8",
                                                                 "int4": "bf16"}  # int4: W4A16, bf16 GEMMs
    assert set(WEIGHTS_COMPUTE_DTYPE) == set(WEIGHT_DTYPE_BYTES)
    assert compute_dtype(" INT4 ") == "bf16"
    with pytest.raises(ConfigError, match="--weights-dtype"):
        compute_dtype("fp4")


# ------------------------------------------------------------------------------------------
# The pool after the weights


def test_llama_8b_on_h100_at_fp8_leaves_32248_blocks():
    # Llama-3.1-8B at fp8 (timing/memory.py): embedding and LM head stay bf16, 128,256 x 4,096 x 2 B
    # = 1,050,673,152 B each; the other 8,030,261,248 - 2 x 525,336,576 = 6,979,588,096 weights at
    # 1 B; the rotary cache 131,072 x 128 x 2 = 33,554,432 B: 9,114,488,832 B.
    # H100: ceil(85,061,827,297 x 0.92) = 78,256,881,114 B; minus the weights, the profile's peak (the
    # forward pass 8,192 x (2 x 4,096 + 3 x 14,336) x 2 = 838,860,800 over the sampler's 256 x 128,256
    # x 14 + 8,192 x 4,096 x 2 = 526,778,368), 86 CUDA graphs (631,242,752) and non-torch
    # (42,949,672): 67,629,339,058 B. 131,072 B/token x 16 = 2,097,152 B/block -> 32,248 blocks
    # (31,436 at a utilization of 0.9).
    c = kv_capacity("Llama-3.1-8B", "H100", 1, 16, dtype="fp8")
    assert c.weight_bytes_per_gpu == 9_114_488_832
    assert c.kv_bytes_available == 67_629_339_058
    assert c.blocks == 32_248 and c.weights_dtype == "fp8"
    assert kv_capacity_blocks("Llama-3.1-8B", "H100", 1, 16, 0.9, dtype="fp8") == 31_436
    # bf16: 6,979,588,096 more bytes of weights -> 60,649,750,962 B left: 28,920 blocks
    assert kv_capacity_blocks("Llama-3.1-8B", "H100", 1, 16) == 28_920
    # int4 (group-128: 0.5 + 2.5 / 128 B a weight): 3,353,473,968 B fewer than fp8 -> 70,982,813,026
    # // 2,097,152 = 33,847 blocks
    assert kv_capacity_blocks("Llama-3.1-8B", "H100", 1, 16, dtype="int4") == 33_847


def test_quantised_weights_keep_the_embedding_and_lm_head_at_bf16():
    # Llama-3.1-70B over tp 8: embedding + LM head 2 x 262,668,288 B and the rotary cache
    # 33,554,432 B at every dtype; the other 68,452,360,192 weights / 8 = 8,556,545,024 per GPU at
    # 2 B (bf16), 1 B (fp8) or 0.5 + 2.5 / 128 B (int4, group-128 scales and zeros).
    per_gpu = {d: kv_capacity("Llama-3.1-70B", "H100", 8, 16, dtype=d).weight_bytes_per_gpu
               for d in ("bf16", "fp8", "int4")}
    fixed = 2 * 262_668_288 + 33_554_432
    assert per_gpu["bf16"] == fixed + 2 * 8_556_545_024 == 17_671_981_056
    assert per_gpu["fp8"] == fixed + 8_556_545_024 == 9_115_436_032
    assert per_gpu["int4"] == pytest.approx(fixed + (0.5 + 2.5 / 128) * 8_556_545_024)
    bf16, int4 = RooflineTimeModel("Llama-3.1-70B", "H100", 8), RooflineTimeModel("Llama-3.1-70B", "H100", 8,
                                                                                 dtype="int4")
    assert int4.weight_bytes == 35_276_853_248 and int4.weight_bytes * 4 == bf16.weight_bytes


def test_deepseek_v3_on_8_h200_fits_at_fp8_not_at_bf16():
    # H200: ceil(150,119,844,413 x 0.92) B = 128.6 GiB per GPU. bf16 needs 157.9 GiB: refused.
    with pytest.raises(ConfigError, match=r"needs 157\.9 GiB of weights per GPU.*--weights-dtype fp8 or int4"):
        kv_capacity("DeepSeek-V3", "H200", 8, 16)
    # fp8 (block-scaled: + 4 / 16,384 B a weight), the q_a / kv_a projections and the router
    # replicated, embedding and LM head bf16: 85,155,847,465 B per GPU. ceil(150,119,844,413 x 0.92)
    # = 138,110,256,860 B, less the weights, the forward pass's peak (MLA 10,240 elements a token,
    # the MoE's workspaces 8 x 7,168 x 2 + 2 x 256 + the fp8 copies 4,608 = 119,808:
    # 8,192 x (2 x 7,168 + 119,808) x 2 = 2,197,815,296 over the sampler's 580,780,032), 86 CUDA
    # graphs 631,242,752 and non-torch 42,949,672: 50,082,401,675 B. MLA's latent is replicated
    # on every rank: 61 layers x 576 x 2 B = 70,272 B/token, 1,124,352 B a block -> 44,543 blocks
    # (41,873 at a utilization of 0.9).
    c = kv_capacity("DeepSeek-V3", "H200", 8, 16, dtype="fp8")
    assert round(c.weight_bytes_per_gpu) == 85_155_847_465
    assert (c.kv_bytes_per_token_per_gpu, c.blocks) == (70_272, 44_543)
    r = kvreplay.simulate(TRACE, model="DeepSeek-V3", gpu="H200", tp=8, time_model="roofline", weights_dtype="fp8")
    assert r.capacity_blocks == 44_543
    assert r.capacity_source["weights_dtype"] == "fp8" and r.time_model["dtype"] == "fp8"
    assert r.summary()["finished"] == 2


# ------------------------------------------------------------------------------------------
# The roofline: weight bytes and the compute peak


def test_roofline_peaks_and_a_decode_step_by_hand():
    # H100: bf16 989.5 TFLOP/s, fp8 1,979 dense. int4 is weight-only: its GEMMs run at bf16's peak.
    assert RooflineTimeModel("Llama-3.1-8B", "H100", dtype="bf16").peak_flops == 989.5e12
    assert RooflineTimeModel("Llama-3.1-8B", "H100", dtype="fp8").peak_flops == 1979e12
    m = RooflineTimeModel("Llama-3.1-8B", "H100", dtype="int4")
    assert m.peak_flops == 989.5e12 and m.describe()["dtype"] == "int4"
    # One decode at context 1: bytes = 8,030,261,248 x 0.5 + 131,072 (one token's KV) = 4,015,261,696;
    # 4,015,261,696 / (3,350e9 x 0.6) = 1.99764e-3 s. FLOPs = 2 x 8,030,261,248 + 4 x 4,096 x 32 x 1 =
    # 16,061,046,784; / (989.5e12 x 0.5) = 3.246e-5 s: memory bound.
    b = m.breakdown(StepBatch((), (), (1,)))
    assert b["bytes_per_gpu"] == 4_015_261_696 and b["flops_per_gpu"] == 16_061_046_784
    assert b["bound"] == "memory" and b["step_s"] == pytest.approx(4_015_261_696 / (3350e9 * 0.6), rel=1e-12)
    # the time model loader carries the dtype through its roofline options
    assert load_time_model("roofline", model="Llama-3.1-8B", gpu="H100", dtype="fp8").peak_flops == 1979e12


# ------------------------------------------------------------------------------------------
# Refusals


def test_fp8_on_an_a100_is_refused_naming_the_flag_and_the_gpu():
    for call in (lambda: check_weights_dtype("fp8", "A100"),
                 lambda: kv_capacity("Llama-3.1-8B", "A100", 1, 16, dtype="fp8"),
                 lambda: RooflineTimeModel("Llama-3.1-8B", "A100", dtype="fp8"),
                 lambda: resolve(TRACE, capacity=100, model="Llama-3.1-8B", gpu="A100", weights_dtype="fp8"),
                 lambda: kvreplay.simulate(TRACE, model="Llama-3.1-8B", gpu="A100", time_model="instant",
                                           weights_dtype="fp8")):
        with pytest.raises(ConfigError, match=r"--weights-dtype fp8 .*A100-80GB has no fp8 tensor cores"):
            call()
    # int4 runs bf16 GEMMs, which the A100 has (312 TFLOP/s)
    assert check_weights_dtype("INT4", "A100") == "int4"
    assert RooflineTimeModel("Llama-3.1-8B", "A100", dtype="int4").peak_flops == 312e12


def test_a_roofline_at_another_weights_dtype_than_the_pool_is_refused():
    tm = RooflineTimeModel("Llama-3.1-8B", "H100", dtype="fp8")
    with pytest.raises(ConfigError, match="runs fp8 weights but the pool is sized for weights_dtype='bf16'"):
        kvreplay.simulate(TRACE, model="Llama-3.1-8B", gpu="H100", time_model=tm)
    r = kvreplay.simulate(TRACE, model="Llama-3.1-8B", gpu="H100", time_model=tm, weights_dtype="fp8")
    assert r.capacity_blocks == kv_capacity_blocks("Llama-3.1-8B", "H100", 1, 16, dtype="fp8")


# ------------------------------------------------------------------------------------------
# The command line


@pytest.fixture
def trace_file(tmp_path):
    return write(tmp_path, "two.jsonl", TWO)


def test_cli_exits_2_on_an_unknown_weights_dtype(trace_file):
    r = kv("simulate", trace_file, "--model", "Llama-3.1-8B", "--gpu", "H100", "--weights-dtype", "fp4")
    err = r.stderr.decode()
    assert r.returncode == 2 and "Traceback" not in err
    assert err.splitlines()[0].startswith("kvreplay simulate: --weights-dtype: invalid choice: 'fp4'")


@pytest.mark.parametrize("args, message", [
    (("--model", "Llama-3.1-8B", "--gpu", "A100", "--weights-dtype", "fp8"),
     "--weights-dtype fp8 runs fp8 GEMMs, and A100-80GB has no fp8 tensor cores"),
    (("--model", "Llama-3.1-8B", "--gpu", "A100", "--weights-dtype", "fp8", "--mfu", "0.4"),
     "--weights-dtype fp8 runs fp8 GEMMs, and A100-80GB has no fp8 tensor cores"),
    (("--time-model", "instant", "--capacity", "10", "--weights-dtype", "fp8"), "--weights-dtype sizes the model"),
    (("--model", "DeepSeek-V3", "--gpu", "H200", "--tp", "8"), "needs 157.9 GiB of weights per GPU"),
])
def test_cli_refusals_are_one_line(trace_file, args, message):
    assert message in fails("simulate", trace_file, *args)


def test_cli_sizes_the_pool_and_the_roofline_at_the_weights_dtype(trace_file):
    doc = json.loads(ok("simulate", trace_file, "--model", "DeepSeek-V3", "--gpu", "H200", "--tp", "8",
                        "--weights-dtype", "FP8", "--json", "--summary-only"))
    cfg = doc["config"]
    assert cfg["capacity_blocks"] == 44_543
    assert cfg["capacity_source"]["weights_dtype"] == "fp8"
    assert round(cfg["capacity_source"]["weight_bytes_per_gpu"]) == 85_155_847_465
    assert cfg["time_model"]["dtype"] == "fp8" and cfg["time_model"]["peak_tflops"] == 1979
    # the roofline built from --mfu takes it too
    doc = json.loads(ok("simulate", trace_file, "--model", "Llama-3.1-8B", "--gpu", "H100", "--weights-dtype",
                        "int4", "--mfu", "0.4", "--json", "--summary-only"))
    assert doc["config"]["time_model"]["dtype"] == "int4" and doc["config"]["capacity_blocks"] == 33_847


def test_a_load_sweep_carries_the_weights_dtype(trace_file):
    doc = json.loads(ok("simulate", trace_file, "--model", "Llama-3.1-8B", "--gpu", "H100", "--weights-dtype", "fp8",
                        "--speedups", "1,2", "--json"))
    assert [row["capacity_blocks"] for row in doc["rows"]] == [32_248, 32_248]


# ------------------------------------------------------------------------------------------
# The interconnect


# Per GPU and per direction: the datasheets print both directions added (A100 NVLink 600 GB/s,
# H100/H200 900, HGX B200 1.8 TB/s, L40S PCIe Gen4 x16 64 GB/s bidirectional, MI300X 7 x 128 GB/s).
@pytest.mark.parametrize("name, gbps, topology", [
    ("A100-80GB", 300, "switch"), ("H100", 450, "switch"), ("H200", 450, "switch"), ("B200", 900, "switch"),
    ("L40S", 32, "pcie"), ("MI300X", 448, "mesh"),
])
def test_link_figures(name, gbps, topology):
    g = get_gpu(name)
    assert (g.link_gbps, g.link_topology, g.link_bytes_per_s) == (gbps, topology, gbps * 1e9)


def test_every_catalog_gpu_has_a_positive_link_with_a_source():
    for g in gpu_catalog():
        assert g.link_gbps > 0 and g.link_bytes_per_s == g.link_gbps * 1e9, g.name
        assert g.link_topology in ("switch", "mesh", "pcie"), g.name
        assert g.link_kind and len(g.link_source) > 40, g.name
    doc = json.loads(ok("gpus", "--json"))
    assert all(e["link_gbps"] > 0 and e["link_source"] for e in doc["gpus"])
    assert "link GB/s each way" in ok("gpus")


# ------------------------------------------------------------------------------------------
# The released checkpoint's weights (ModelSpec.checkpoint_weights, from config.json)


def test_checkpoint_weights_name_the_nearest_weights_dtype():
    from kvreplay.analysis.models import get_model

    assert get_model("gpt-oss-120b").checkpoint_weights == "mxfp4"
    assert get_model("gpt-oss-120b").checkpoint_weights_dtype == "int4"  # 4.25 bits a weight: half a byte is nearest
    assert get_model("DeepSeek-V3").checkpoint_weights_dtype == "fp8"
    assert get_model("Llama-3.1-8B").checkpoint_weights is None
    assert get_model("Llama-3.1-8B").checkpoint_weights_dtype == "bf16"
    assert get_model("Llama-3.1-8B").checkpoint_note() is None


def test_weights_that_do_not_fit_name_the_checkpoints_dtype():
    # gpt-oss-120b at bf16: 217.6 GiB against 79.22 GiB x 0.92 = 72.9 GiB on one H100; its checkpoint
    # is MXFP4, which the refusal says (int4: the experts at 4.25 bits, their hidden size padded to
    # 3,072 by the Triton MoE kernel's Hopper layout, attention bf16: 69,268,217,856 B = 64.51 GiB,
    # against the 64.38 GiB vLLM 0.14.1 printed on one H100, vllm-project/vllm issue 33155)
    with pytest.raises(ConfigError) as e:
        kv_capacity("gpt-oss-120b", "H100", 1)
    assert "needs 217.6 GiB of weights per GPU, more than the 72.9 GiB" in str(e.value)
    assert "checkpoint stores its weights as mxfp4" in str(e.value) and "nearest --weights-dtype is int4" in str(e.value)
    assert kv_capacity("gpt-oss-120b", "H100", 1, dtype="int4").weight_bytes_per_gpu == 69_268_217_856
    # a bf16 checkpoint says nothing of it
    with pytest.raises(ConfigError) as e:
        kv_capacity("Llama-3.1-405B", "H100", 1)
    assert "checkpoint" not in str(e.value)


def test_simulate_warns_when_the_weights_are_not_the_checkpoints():
    def warnings(model, dtype, tp):
        r = kvreplay.simulate(TRACE, "vllm", None, 16, model=model, gpu="H200", tp=tp, time_model="roofline",
                              weights_dtype=dtype)
        return r.summary()["latency_band_s"]["warnings"]

    assert any(w.startswith("weights at int4, but DeepSeek-V3's checkpoint stores its weights as fp8-block")
               for w in warnings("DeepSeek-V3", "int4", 8))
    fp8 = warnings("DeepSeek-V3", "fp8", 8)
    assert not any("checkpoint stores" in w for w in fp8)
    assert any("fitted on per-tensor W8A8 kernels; DeepSeek-V3's block-scaled fp8 weights" in w for w in fp8)
    assert not any("checkpoint" in w or "W8A8" in w for w in warnings("Llama-3.1-8B", "fp8", 1))


def test_mxfp4_experts_pad_the_rank_width_and_leave_attention_bf16():
    # gpt-oss-20b (24 layers, 32 experts of 2,880 x 2,880 x 3, hidden 2,880, vocab 201,088, 20.9e9
    # parameters): the experts 19,110,297,600 parameters at 0.53125 B = 10,152,345,600 B; on an H100
    # the Triton MoE kernel pads the hidden size to 3,072 (x 3,072 / 2,880 = 10,829,168,640 B); the
    # parameters outside the experts, the embeddings and the router stay bf16: attention
    # 20.9e9 - 2 x 201,088 x 2,880 - 19,110,297,600 - 32 x 24 x 2,880 = 629,223,680 x 2 B
    from kvreplay.analysis.models import get_model
    from kvreplay.serving.timing.memory import mxfp4_alignment, weight_parts

    assert 19_110_297_600 * 0.53125 * 3072 / 2880 == 10_829_168_640
    assert 20_900_000_000 - 2 * 201_088 * 2880 - 19_110_297_600 - 32 * 24 * 2880 == 629_223_680
    small = weight_parts(get_model("gpt-oss-20b"), "int4", 1, "H100")
    assert small["experts"] == 10_829_168_640 and small["dense"] == 2 * 629_223_680
    assert f"{sum(small.values()) / (1 << 30):.2f}" == "13.43"  # vLLM 0.14.1 printed 13.47 (llm-d's H100 run)
    # on an A100 Marlin pads the intermediate size to 128 as well: 2,944 x 3,072 (13.66 GiB; 13.72 printed)
    assert mxfp4_alignment("A100-80GB") == (128, 256) and mxfp4_alignment("H100") == (64, 256)
    assert mxfp4_alignment("B200") == (128, 256) and mxfp4_alignment("") == (128, 256)
    assert mxfp4_alignment("MI300X") == (256, 256)  # ROCm rounds both to 256 for a SwiGLU-OAI MoE
    # gpt-oss-120b over 4 A100s: a rank's intermediate size is 2,880 / 4 = 720, padded to 768 (not
    # 2,880 to 2,944): 114,661,785,600 x 0.53125 / 4 x (768 x 3,072) / (720 x 2,880) = 17,326,669,824 B;
    # with the bf16 attention a quarter each: 17.17 GiB against the 17.22 vLLM 0.10.1.1 printed
    assert 114_661_785_600 * 0.53125 / 4 * (768 * 3072) / (720 * 2880) == 17_326_669_824
    big = weight_parts(get_model("gpt-oss-120b"), "int4", 4, "A100-80GB")
    assert big["experts"] == 17_326_669_824
    assert f"{sum(big.values()) / (1 << 30):.2f}" == "17.17"
