"""The pool's budget on the command line and the benchmark docs/memory.md documents."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import benchmark_module, jsonl, write
from test_cli import fails, kv, ok

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def trace_file(tmp_path):
    return write(tmp_path, "t.jsonl", jsonl({"timestamp": 0, "input_length": 40, "output_length": 2,
                                             "hash_ids": [1, 2, 3]}))


def test_simulate_prints_and_reports_the_budget(trace_file):
    out = ok("simulate", trace_file, "--model", "Llama-3.1-70B", "--gpu", "H100", "--tp", "8", "--block-size", "16",
             "--time-model", "instant")
    assert "90,510 blocks of 16 tokens" in out  # docs/timing.md's worked example (tests/serving/test_timing.py)
    # the profile's peak is the sampler's 593,887,232 B (0.55 GiB) over the forward pass's 0.41 GiB;
    # 59,316,820,402 B = 55.24 GiB left
    for line in ("total memory, as the device reports it", "x gpu_memory_utilization 0.92", "- weights, Llama-3.1-70B",
                 "- profile peak, the larger of the forward pass (0.41 GiB, 8,192 tokens) and the sampler "
                 "(0.55 GiB, 256 rows)", "- CUDA graphs, 86 graphs",
                 "- non-torch memory", "= KV left by the profile", "55.24 GiB"):
        assert line in out
    doc = json.loads(ok("simulate", trace_file, "--model", "Llama-3.1-70B", "--gpu", "H100", "--tp", "8",
                        "--block-size", "16", "--time-model", "instant", "--json", "--summary-only",
                        "--kv-cache-memory", "20GiB", "--num-gpu-blocks-override", "1000"))
    src = doc["config"]["capacity_source"]
    assert (src["kv_cache_memory_bytes"], src["num_gpu_blocks_override"], src["blocks"]) == (20 * 2**30, 1000, 1000)
    assert src["profiled_kv_bytes"] == 59_316_820_402 and src["cudagraph_graphs"] == 86


def test_the_default_utilization_is_vllms_0_92(trace_file):
    # vLLM 0.33.0's default (vllm/config/cache.py:215): Llama-3.1-8B on one H100, by hand from the
    # terms simulate prints: ceil(85,061,827,297 B x 0.92) = 78,256,881,114 B; - weights 16,094,076,928
    # - profile peak (the forward pass) 838,860,800 - 86 CUDA graphs 631,242,752 - non-torch 42,949,672
    # = 60,649,750,962 B // 2,097,152 B a block (131,072 B a token x 16) = 28,920 blocks
    base = ("simulate", trace_file, "--model", "Llama-3.1-8B", "--gpu", "H100", "--block-size", "16",
            "--time-model", "instant")
    out = ok(*base)
    assert "x gpu_memory_utilization 0.92" in out and "28,920 blocks of 16 tokens" in out
    src = json.loads(ok(*base, "--json", "--summary-only"))["config"]["capacity_source"]
    assert (src["gpu_memory_utilization"], src["usable_bytes"], src["kv_bytes_available"], src["blocks"]) == \
        (0.92, 78_256_881_114, 60_649_750_962, 28_920)
    # the flag given as 0.9 (vLLM before 0.20.0): ceil(85,061,827,297 x 0.9) = 76,555,644,568 B, the
    # same terms off: 58,948,514,416 B // 2,097,152 = 28,108 blocks
    old = json.loads(ok(*base, "--gpu-memory-utilization", "0.9", "--json", "--summary-only"))
    src = old["config"]["capacity_source"]
    assert (src["gpu_memory_utilization"], src["usable_bytes"], src["blocks"]) == (0.9, 76_555_644_568, 28_108)
    assert "default 0.92, as vLLM 0.33.0" in " ".join(ok("simulate", "--help").split())


def test_an_explicit_utilization_is_refused_where_it_cannot_apply(trace_file):
    # given, even at a value that was once the default, the flag is vLLM's: the SGLang style's pool
    # takes --mem-fraction-static and the TensorRT-LLM style's is given as --capacity
    base = ("simulate", trace_file, "--model", "Llama-3.1-8B", "--gpu", "H100", "--block-size", "16",
            "--time-model", "instant", "--gpu-memory-utilization", "0.9")
    assert "--mem-fraction-static" in fails(*base, "--engine-style", "sglang")
    assert "--gpu-memory-utilization" in fails(*base, "--engine-style", "trtllm", "--capacity", "100")


def test_enforce_eager_leaves_the_cuda_graphs_out(trace_file):
    # 59,316,820,402 + the 86 graphs' 631,242,752 B = 59,948,063,154 // 655,360 = 91,473 blocks
    out = ok("simulate", trace_file, "--model", "Llama-3.1-70B", "--gpu", "H100", "--tp", "8", "--block-size", "16",
             "--time-model", "instant", "--enforce-eager")
    assert "91,473 blocks of 16 tokens" in out and "- CUDA graphs (enforce_eager: none)" in out
    assert "--enforce-eager" in fails("simulate", trace_file, "--time-model", "instant", "--block-size", "16",
                                      "--capacity", "100", "--enforce-eager")


@pytest.mark.parametrize("args, message", [
    (("--kv-cache-memory", "20 parsecs"), "--kv-cache-memory"),
    (("--num-gpu-blocks-override", "0"), "--num-gpu-blocks-override"),
    (("--capacity", "100", "--num-gpu-blocks-override", "3"), "--num-gpu-blocks-override"),
])
def test_bad_pool_flags_exit_2_naming_the_flag(trace_file, args, message):
    r = kv("simulate", trace_file, "--model", "Llama-3.1-8B", "--gpu", "H100", "--time-model", "instant",
           "--block-size", "16", *args)
    assert r.returncode == 2 and message in r.stderr.decode().strip().splitlines()[0]


def test_the_pool_flags_need_a_gpu_and_a_model(trace_file):
    assert "needs --gpu and --model" in fails("simulate", trace_file, "--time-model", "instant", "--block-size", "16",
                                              "--kv-cache-memory", "20GiB")


@pytest.fixture(scope="module")
def kv_pool_stdout():
    """What `python benchmarks/kv_pool.py` prints, run once for the tests that read its tables."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kv_pool.py")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_benchmark_docs_memory_quotes_runs(kv_pool_stdout):
    assert "55 points, 39 computed, 16 skipped" in kv_pool_stdout
    assert "| pr10511-llama3-8b-tp1 | H100 | 1 | Llama-3.1-8B |" in kv_pool_stdout
    # the data-parallel point (dp 2, the experts over 2 GPUs): kvreplay's kv_capacity(..., dp=2), +2.7%
    assert ("| llmservingsim-rtxpro6000-qwen3-30b-a3b-dp2ep | RTX-PRO-6000 | 1 | Qwen3-30B-A3B | 0.28.0 | V1 | test "
            "| 55.40 | 56.88 | +1.49 | +2.7% |") in kv_pool_stdout
    assert (ROOT / "docs" / "memory.md").read_text().count("| pr10511-llama3-8b-tp1 | H100 | 1 |") == 1


def test_the_fitted_constant_comparison_docs_memory_quotes():
    # docs/memory.md, "The fitted constant and vLLM's term": the budget as timing/memory.py has it
    # (vLLM 0.33.0's term, 0.04 GiB) and --fit (the constant it replaced, refitted: 0.753 GiB)
    def run(*args):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kv_pool.py"), *args], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    terms, refit = run(), run("--fit")
    assert refit.startswith("fitted: NON_TORCH_BYTES=0.753 GiB")
    assert "V1 test points: 25, median abs error 2.7%, max 14.0%, within 5%: 20 of 25" in refit
    assert "V1 fit points: 4, median abs error 11.0%, max 20.3%, within 5%: 2 of 4" in refit
    assert "V1 test points: 25, median abs error 0.7%, max 8.6%, within 5%: 24 of 25" in terms
    assert "V1 fit points: 4, median abs error 10.6%, max 22.6%, within 5%: 1 of 4" in terms
    # the Qwen3-8B-FP8 log's terms all match with vLLM's: 18.82 - 8.81 - 1.39 - 0.04 = 8.59 GiB
    assert "| 8.60 | 8.59 | -0.01 | -0.2% |" in terms and "| qwen3-8b-fp8-24gb-v0102 | non-torch | 0.02 | 0.04 |" in terms
    doc = (ROOT / "docs" / "memory.md").read_text()
    assert ("| refitted constant (0.753 GiB) with the version terms | `python benchmarks/kv_pool.py --fit` | "
            "2.7% / 14.0% / 20 of 25 | 11.0% / 20.3% / 2 of 4 |") in doc
    assert ("| term by term: 0.04 GiB with the version terms (timing/memory.py) | `python benchmarks/kv_pool.py` | "
            "0.7% / 8.6% / 24 of 25 | 10.6% / 22.6% / 1 of 4 |") in doc


def test_the_benchmark_counts_vllm_0102s_sort_path_and_sizes_a_gpu_less_log_from_its_printed_total(kv_pool_stdout):
    # Qwen3-Next at TP 2 on H200, whose 0.10.2 log states the PyTorch-native sampler: 1,024 rows x
    # 151,936 logits (a multiple of 64: no padding) x 38 B = 5,912,133,632 B, plus the held hidden
    # states 8,192 x 2,048 x 2 B = 33,554,432 B: 5,945,688,064 B = 5.54 GiB against the 5.58 printed
    assert 1024 * 151_936 * 38 + 8192 * 2048 * 2 == 5_945_688_064
    assert f"{5_945_688_064 / (1 << 30):.2f}" == "5.54"
    assert "| qwen3next-h200-tp2-v0102 | profile peak (forward 0.70, sampler 5.54) | 5.58 | 5.54 |" in kv_pool_stdout
    # a log naming no GPU is sized from the total it prints: ceil(23.53 GiB x 0.8) = 18.82 GiB less the
    # fp8 weights 8.81, the sampler's 1.39 (0.10.2 sorts: 256 x 151,936 x 38 B + 2,048 x 4,096 x 2 B)
    # and the non-torch 0.04: 8.59 GiB
    assert 256 * 151_936 * 38 + 2048 * 4096 * 2 == 1_494_810_624  # 1.39 GiB
    row = next(line for line in kv_pool_stdout.splitlines() if line.startswith("| qwen3-8b-fp8-24gb-v0102 | unnamed (23.53 GiB) |"))
    assert row.endswith("| 8.60 | 8.59 | -0.01 | -0.2% |")
    assert "| qwen3-8b-fp8-24gb-v0102 | profile peak (forward 0.17, sampler 1.39) | 1.40 | 1.39 |" in kv_pool_stdout
    # vLLM up to 0.10 held NCCL inside the budget over NVLink (1.79 GiB beside the 0.04), not over PCIe
    assert "| qwen3next-h200-tp2-v0102 | non-torch (with NCCL) | 1.38 | 1.83 |" in kv_pool_stdout
    assert "| l40s-qwen3-235b-fp8-tp8-ep | non-torch | 0.21 | 0.04 |" in kv_pool_stdout
    # the RTX 3090, now in the GPU catalog, makes its V0 log computable
    assert "| i10517-llama31-8b-3090 | RTX 3090 | 1 | Llama-3.1-8B |" in kv_pool_stdout


def kv_pool_module():
    return benchmark_module("kv_pool")


def test_the_dummy_sampler_sorted_up_to_vllm_016(kv_pool_stdout):
    # vLLM up to 0.11.0 sampled with FlashInfer only when the wheel's extra was installed; 0.11.1-0.16
    # made it opt-in (VLLM_USE_FLASHINFER_SAMPLER, default None) and sorted on every install; 0.17.0
    # filters in Triton from 8 rows (topk_topp_sampler.py:251): 0.33.0's 14 B a logit
    kv_pool = kv_pool_module()
    point = lambda version, sampler="": {"vllm_version": version, "sampler": sampler}
    assert [kv_pool.sorts_logits(point(v)) for v in ("0.8.5", "0.10.2", "0.11.1", "0.16.0", "0.17.0", "0.19.0")] == [
        True, True, True, True, False, False]
    assert not kv_pool.sorts_logits(point("0.10.1.1", "flashinfer"))  # the log says FlashInfer sampled
    assert kv_pool.sorts_logits(point("0.19.0", "sort"))
    assert not kv_pool.sorts_logits(point("0.6.5.dev (V0)"))
    # llm-d's Qwen3-0.6B on an H100 (Jan 2026 image; the printed peak 5.56 GiB is the sort's): 1,024
    # rows x 151,936 logits x 38 B + the held hidden states 8,192 x 1,024 x 2 B = 5,928,910,848 B
    # = 5.52 GiB; the pool: ceil(85,061,827,297 x 0.9) = 76,555,644,568 B less the weights
    # 1,202,585,600 (embedding 311,164,928 tied + layers 880,934,912 + rotary 10,485,760), the peak
    # and the non-torch 42,949,672: 69,381,198,448 B = 64.62 GiB against the 64.45 printed
    assert 1024 * 151_936 * 38 + 8192 * 1024 * 2 == 5_928_910_848
    assert 311_164_928 + 880_934_912 + 10_485_760 == 1_202_585_600
    assert 76_555_644_568 - 1_202_585_600 - 5_928_910_848 - 42_949_672 == 69_381_198_448
    assert f"{69_381_198_448 / (1 << 30):.2f}" == "64.62"
    assert "| llmd-qwen3-0.6b-h100 | H100 | 1 | Qwen3-0.6B |" in kv_pool_stdout
    assert "| 64.45 | 64.62 | +0.17 | +0.3% |" in kv_pool_stdout
    assert "| llmd-qwen3-0.6b-h100 | profile peak (forward 0.17, sampler 5.52) | 5.56 | 5.52 |" in kv_pool_stdout


def test_nccl_stays_out_of_an_early_budget_without_p2p(kv_pool_stdout):
    # up to 0.10 the snapshot preceded NCCL (1.79 GiB a rank over NVLink); where the log says custom
    # all-reduce is disabled (no P2P, or ranks on several nodes) NCCL's buffers are PCIe-sized: none
    from kvreplay.catalog.gpus import get_gpu

    kv_pool = kv_pool_module()
    a100, l40s = get_gpu("A100-80GB"), get_gpu("L40S")
    point = lambda version, notes="", tp=2: {"vllm_version": version, "notes": notes, "tp": str(tp)}
    assert kv_pool.nccl_in_budget(point("0.10.1.1"), a100)
    assert not kv_pool.nccl_in_budget(point("0.10.1.1", "two GPUs: custom all-reduce disabled (no P2P)"), a100)
    assert not kv_pool.nccl_in_budget(point("0.10.2"), l40s)
    assert not kv_pool.nccl_in_budget(point("0.11.0"), a100)
    assert not kv_pool.nccl_in_budget(point("0.10.1.1", tp=1), a100)
    # dennislee22's Qwen2-7B at TP 2 on two A100 80GB without P2P at utilization 0.25: ceil(84,986,665,370
    # x 0.25) = 21,246,666,343 B, 19.79 GiB, less 7.12 GiB of weights, FlashInfer's sampler (256 x
    # 152,064 x 14 B + 2,048 x 3,584 x 2 B = 559,677,440 B, 0.52 GiB) and 0.04: 12.11 GiB against
    # the 12.02 printed (10.32 with NCCL's 1.79 GiB)
    assert -(-84_986_665_370 // 4) == 21_246_666_343
    assert 256 * 152_064 * 14 + 2048 * 3584 * 2 == 559_677_440
    assert "| dl22-qwen2-7b-a100-tp2-u025 | A100-80GB | 2 | Qwen2.5-7B | 0.10.1.1 | V1 | test | 12.02 | 12.11 | +0.09 | +0.7% |" in kv_pool_stdout


def test_the_019_window_residue_is_fitted_on_the_fit_point_and_checked_on_the_rest(kv_pool_stdout):
    # vLLM 0.19-0.20 profiled the CUDA graphs inside the memory-profiling window (estimate not applied).
    # The one fit point of those versions, gpt-oss-20b on an A100 80GB at 0.65 (2,048 tokens, 256 seqs):
    # ceil(84,986,665,370 x 0.65) = 55,241,332,491 B less the mxfp4 weights 14,665,998,848, the sampler
    # (256 x 201,088 x 14 + 2,048 x 2,880 x 2 = 732,495,872) and the non-torch 42,949,672 leaves
    # 39,799,888,099 B; vLLM printed 36.56 GiB (39,256,001,085 B): a residue of 543,887,014 B, 0.51 GiB
    assert math.ceil(84_986_665_370 * 0.65) == 55_241_332_491
    assert 256 * 201_088 * 14 + 2048 * 2880 * 2 == 732_495_872
    assert 55_241_332_491 - 14_665_998_848 - 732_495_872 - 42_949_672 == 39_799_888_099
    assert round(36.56 * (1 << 30)) == 39_256_001_085 and 39_799_888_099 - 39_256_001_085 == 543_887_014
    # held out: the RTX 4090 run (0.19.0, 2,048 tokens, 256 seqs, 0.9): ceil(25,250,627,584 x 0.9) =
    # 22,725,564,826 B less Llama-3.1-8B's 16,094,076,928, the sampler (256 x 128,256 x 14 + 2,048 x
    # 4,096 x 2 = 476,446,720), 42,949,672 and the residue: 5,568,204,492 B, 5.19 GiB against 2,588
    # blocks x 16 x 128 KiB = 5,427,429,376 B (5.05 GiB): +2.6 % (+15.0 % before: 23.65 GiB, no residue)
    assert math.ceil(25_250_627_584 * 0.9) == 22_725_564_826
    assert 256 * 128_256 * 14 + 2048 * 4096 * 2 == 476_446_720
    assert 22_725_564_826 - 16_094_076_928 - 476_446_720 - 42_949_672 - 543_887_014 == 5_568_204_492
    assert 2588 * 16 * 131_072 == 5_427_429_376
    kv_pool = kv_pool_module()
    rows = [(p, t) for p in kv_pool.load_points() if (t := kv_pool.terms(p)) is not None]
    residue, n = kv_pool.fit_window(rows)
    assert n == 1 and round(residue) == 543_887_014
    # only 0.19-0.20 points that state their version and capture graphs take it
    inside = sorted(p["id"] for p, t in rows if t["window"])
    assert inside == ["llmservingsim-rtx4090-llama31-8b", "myoceane-gptoss20b-a100", "tokenkaki-qwen3-8b-a100-40gb-v0191"]
    assert "vLLM 0.19-0.20 window residue (fitted on 1 fit point, taken from 3 points): 0.51 GiB" in kv_pool_stdout
    assert "| llmservingsim-rtx4090-llama31-8b | RTX-4090 | 1 | Llama-3.1-8B | 0.19.0 | V1 | test | 5.05 | 5.19 | +0.13 | +2.6% |" in kv_pool_stdout
    assert "| tokenkaki-qwen3-8b-a100-40gb-v0191 | A100-40GB | 1 | Qwen3-8B | 0.19.1 | V1 | test | 19.36 | 19.19 | -0.17 | -0.9% |" in kv_pool_stdout


def test_the_workstation_and_a100_40gb_points_by_hand(kv_pool_stdout):
    # 1 x A100 40GB (GCP a2-highgpu-1g), vLLM 0.15.1, LLM(..., enforce_eager=True): 8,192 tokens and 256
    # seqs (the LLM class's defaults below 70 GiB), 0.9: ceil(42,402,064,630 x 0.9) = 38,161,858,167 B less
    # 16,094,076,928 of weights, the sorting sampler (256 x 128,256 x 38 + 8,192 x 4,096 x 2 =
    # 1,314,783,232) and 42,949,672: 20,710,048,335 B, 19.29 GiB against the 19.28 printed; no graphs
    assert math.ceil(42_402_064_630 * 0.9) == 38_161_858_167
    assert 256 * 128_256 * 38 + 8192 * 4096 * 2 == 1_314_783_232
    assert 38_161_858_167 - 16_094_076_928 - 1_314_783_232 - 42_949_672 == 20_710_048_335
    # 2 x RTX PRO 6000 over PCIe, Qwen3-32B at TP 2, vLLM 0.28.0 (2,048 tokens, 128 seqs, 0.92): ceil(
    # 101,976,440,832 x 0.92) = 93,818,325,566 B less 32,810,485,760 of weights a rank, the sampler (128 x
    # 151,936 x 14 + 2,048 x 5,120 x 2 = 293,240,832), 54 graphs of 7 MiB (capture sizes to 256: 35
    # PIECEWISE, 19 FULL) and 42,949,672: 60,275,287,574 B, 56.14 GiB against 28,884 x 16 x 128 KiB =
    # 60,574,138,368 B (56.41 GiB) recorded: -0.5 %
    assert math.ceil(101_976_440_832 * 0.92) == 93_818_325_566
    assert 128 * 151_936 * 14 + 2048 * 5120 * 2 == 293_240_832
    assert 93_818_325_566 - 32_810_485_760 - 293_240_832 - 54 * 7 * (1 << 20) - 42_949_672 == 60_275_287_574
    assert 28_884 * 16 * 131_072 == 60_574_138_368
    assert "| gce-llama31-8b-a100-40gb-v0151 | A100-40GB | 1 | Llama-3.1-8B | 0.15.1 | V1 | test | 19.28 | 19.29 | +0.01 | +0.0% |" in kv_pool_stdout
    assert "| llmservingsim-rtxpro6000-qwen3-32b-tp2 | RTX-PRO-6000 | 2 | Qwen3-32B | 0.28.0 | V1 | test | 56.41 | 56.14 | -0.28 | -0.5% |" in kv_pool_stdout
