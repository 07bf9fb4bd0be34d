"""The weights dtype (--weights-dtype bf16|fp16|fp8|int4) and the GPU catalog's interconnect figures.

Every number below is worked by hand from the catalogs: the model's parameter count
(kvreplay/data/models.json) and the GPU's memory, peaks and links (kvreplay/data/gpus.json).
"""

from __future__ import annotations

import json

import pytest

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.serving.config import resolve
from kvreplay.serving.timing import StepBatch, gpu_catalog, kv_capacity, kv_capacity_blocks, load_time_model
from kvreplay.serving.timing.gpus import WEIGHTS_COMPUTE_DTYPE, check_weights_dtype, compute_dtype, get_gpu
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


def test_llama_8b_on_h100_at_fp8_leaves_30503_blocks():
    # Llama-3.1-8B: 8,030,261,248 parameters, 1 byte each at fp8 = 8,030,261,248 B of weights.
    # H100: 80 GB x 0.9 = 72,000,000,000 B usable; 72,000,000,000 - 8,030,261,248 = 63,969,738,752 B left.
    # KV: 32 layers x 8 heads x 128 x 2 (K, V) x 2 B (bf16 KV) = 131,072 B/token, x 16 = 2,097,152 B/block.
    # 63,969,738,752 / 2,097,152 = 30,503.15 -> 30,503 blocks (30,503 x 2,097,152 = 63,969,427,456).
    c = kv_capacity("Llama-3.1-8B", "H100", 1, 16, dtype="fp8")
    assert c.weight_bytes_per_gpu == 8_030_261_248
    assert c.kv_bytes_available == 63_969_738_752
    assert c.blocks == 30_503 and c.weights_dtype == "fp8"
    # bf16: 16,060,522,496 B of weights, 55,939,477,504 left: 26,674.02 -> 26,674 blocks
    assert kv_capacity_blocks("Llama-3.1-8B", "H100", 1, 16) == 26_674
    # int4: 4,015,130,624 B of weights, 67,984,869,376 left: 32,417.71 -> 32,417 blocks
    assert kv_capacity_blocks("Llama-3.1-8B", "H100", 1, 16, dtype="int4") == 32_417


def test_int4_weights_take_a_quarter_of_bf16s_bytes():
    # Llama-3.1-70B: 70,553,706,496 parameters over tp 8: bf16 2 B -> 17,638,426,624 B per GPU,
    # int4 0.5 B -> 4,409,606,656 B per GPU, a quarter exactly (fp8: half, 8,819,213,312).
    per_gpu = {d: kv_capacity("Llama-3.1-70B", "H100", 8, 16, dtype=d).weight_bytes_per_gpu
               for d in ("bf16", "fp8", "int4")}
    assert per_gpu == {"bf16": 17_638_426_624, "fp8": 8_819_213_312, "int4": 4_409_606_656}
    assert per_gpu["int4"] * 4 == per_gpu["bf16"]
    bf16, int4 = RooflineTimeModel("Llama-3.1-70B", "H100", 8), RooflineTimeModel("Llama-3.1-70B", "H100", 8,
                                                                                 dtype="int4")
    assert int4.weight_bytes == 35_276_853_248 and int4.weight_bytes * 4 == bf16.weight_bytes


def test_deepseek_v3_on_8_h200_fits_at_fp8_not_at_bf16():
    # DeepSeek-V3: 671e9 parameters; H200: 141 GB x 0.9 = 126.9e9 B usable per GPU.
    # bf16: 671e9 x 2 / 8 = 167.75e9 B per GPU > 126.9e9: refused ("167.8 GB").
    with pytest.raises(ConfigError, match=r"needs 167\.8 GB of weights per GPU.*--weights-dtype fp8 or int4"):
        kv_capacity("DeepSeek-V3", "H200", 8, 16)
    # fp8: 671e9 / 8 = 83.875e9 B per GPU; 126.9e9 - 83.875e9 = 43.025e9 B left. MLA's latent is
    # replicated on every rank: 61 layers x 576 x 2 B = 70,272 B/token, 1,124,352 B per 16-token block.
    # 43,025,000,000 / 1,124,352 = 38,266.49 -> 38,266 blocks.
    c = kv_capacity("DeepSeek-V3", "H200", 8, 16, dtype="fp8")
    assert (c.weight_bytes_per_gpu, c.kv_bytes_per_token_per_gpu, c.blocks) == (83_875_000_000, 70_272, 38_266)
    r = kvreplay.simulate(TRACE, model="DeepSeek-V3", gpu="H200", tp=8, time_model="roofline", weights_dtype="fp8")
    assert r.capacity_blocks == 38_266
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
    (("--model", "DeepSeek-V3", "--gpu", "H200", "--tp", "8"), "needs 167.8 GB of weights per GPU"),
])
def test_cli_refusals_are_one_line(trace_file, args, message):
    assert message in fails("simulate", trace_file, *args)


def test_cli_sizes_the_pool_and_the_roofline_at_the_weights_dtype(trace_file):
    doc = json.loads(ok("simulate", trace_file, "--model", "DeepSeek-V3", "--gpu", "H200", "--tp", "8",
                        "--weights-dtype", "FP8", "--json", "--summary-only"))
    cfg = doc["config"]
    assert cfg["capacity_blocks"] == 38_266
    assert cfg["capacity_source"]["weights_dtype"] == "fp8"
    assert cfg["capacity_source"]["weight_bytes_per_gpu"] == 83_875_000_000
    assert cfg["time_model"]["dtype"] == "fp8" and cfg["time_model"]["peak_tflops"] == 1979
    # the roofline built from --mfu takes it too
    doc = json.loads(ok("simulate", trace_file, "--model", "Llama-3.1-8B", "--gpu", "H100", "--weights-dtype",
                        "int4", "--mfu", "0.4", "--json", "--summary-only"))
    assert doc["config"]["time_model"]["dtype"] == "int4" and doc["config"]["capacity_blocks"] == 32_417


def test_a_load_sweep_carries_the_weights_dtype(trace_file):
    doc = json.loads(ok("simulate", trace_file, "--model", "Llama-3.1-8B", "--gpu", "H100", "--weights-dtype", "fp8",
                        "--speedups", "1,2", "--json"))
    assert [row["capacity_blocks"] for row in doc["rows"]] == [30_503, 30_503]


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
# The released checkpoint's weights (models.json checkpoint_weights)


def test_checkpoint_weights_name_the_nearest_weights_dtype():
    from kvreplay.analysis.models import get_model

    assert get_model("gpt-oss-120b").checkpoint_weights == "mxfp4"
    assert get_model("gpt-oss-120b").checkpoint_weights_dtype == "int4"  # 4.25 bits a weight: half a byte is nearest
    assert get_model("DeepSeek-V3").checkpoint_weights_dtype == "fp8"
    assert get_model("Llama-3.1-8B").checkpoint_weights is None
    assert get_model("Llama-3.1-8B").checkpoint_weights_dtype == "bf16"
    assert get_model("Llama-3.1-8B").checkpoint_note() is None


def test_weights_that_do_not_fit_name_the_checkpoints_dtype():
    # gpt-oss-120b at bf16: 116.8e9 x 2 = 233.6 GB against 80 GB x 0.9 = 72.0 GB on one H100; its
    # checkpoint is MXFP4, which the refusal says (int4, half a byte: 58.4 GB, fits)
    with pytest.raises(ConfigError) as e:
        kv_capacity("gpt-oss-120b", "H100", 1)
    assert "needs 233.6 GB of weights per GPU, more than the 72.0 GB" in str(e.value)
    assert "checkpoint stores its weights as mxfp4" in str(e.value) and "nearest --weights-dtype is int4" in str(e.value)
    assert kv_capacity("gpt-oss-120b", "H100", 1, dtype="int4").weight_bytes_per_gpu == pytest.approx(58.4e9)
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
