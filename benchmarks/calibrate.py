"""Calibrate the roofline on measured GPU kernels, and check it on what the fit did not see.

Source: NVIDIA aiconfigurator's kernel database (Apache-2.0), shipped in the PyPI wheel
`aiconfigurator-core==0.12.0` (github.com/ai-dynamo/aiconfigurator): vLLM 0.24.0 (H100, H200) and
0.14.0 (A100) GEMM, FlashAttention (context and generation) and custom all-reduce kernels, timed
on each GPU (``systems/data/<gpu>/<op>/vllm/<version>/*.parquet``), and its silicon end-to-end
serving runs (``systems/silicon_sample.csv``). The script downloads the wheel (pip download) into
benchmarks/.cache/ and reads the tables with pyarrow.

1. **Fit** (H100 only): each kernel family's coefficients (roofline.py COEFFICIENTS) by least
   relative error over its table: GEMMs (bf16 torch linear), context and generation attention
   (bf16 KV, no window, head_dim 128), all-reduce (vLLM's custom kernel in CUDA-graph mode up to
   8 MiB, NCCL above, as vLLM picks; since 2026-12-07 its one- and two-stage algorithms,
   roofline.allreduce_time), and the elementwise kernels' floor (since 2026-12-07: the measured
   elementwise kernel, PROBE_KERNEL, over every shape; roofline.elementwise_kernels).
2. **Held back**: steps of dense models (Llama-3.1-8B/70B, Qwen3-8B/32B, Qwen2.5-72B,
   Mistral-7B) at TP 1-8 (since 2026-12-07 every model at every TP degree it runs at, prefills
   from 16 tokens, decode batches of 1-256 at contexts of 128-32,768: step_shapes), composed kernel
   by kernel from each GPU's own measured tables (the layers' GEMMs at their real shapes,
   attention, two all-reduces per layer, the LM head on the logits rows, and the elementwise
   kernels no table times, each as the GPU's measured elementwise kernel at its traffic), on H200
   and A100, which the fit never saw, predicted with H100's coefficients, the target GPU's catalog
   compute peaks and its streaming bandwidth (below): the error a GPU without measurements gets
   from its nearest measured relative. H100's own steps are reported too (in-sample GPU, every
   step shape unseen), and every GPU's by TP degree, also with the serving terms in the step as a
   simulation runs it.
   **Streaming bandwidth** (since 2026-12-04 (4)): every memory term runs at the bandwidth a
   memory-bound kernel sustains on the GPU, one figure per GPU as a STREAM-like test gives it:
   vLLM's static fp8 quantisation kernel (``quantize/vllm/<version>/scale_matrix_perf.parquet``,
   a bf16 read and an fp8 write per element) over its shapes moving >= 256 MB (PROBE_MIN_BYTES).
   H100, H200 and B200 have it; A100's tables have no quantisation kernels, so A100 (and a GPU
   without measurements) streams at its datasheet peak times the share measured on the GPU whose
   coefficients it uses (roofline.stream_bandwidth). It is the only figure the held-back check
   takes from the held-back GPU's tables, and not one of the tables the steps are composed from
   (the fp8 GEMMs' timings do include an input quantisation of this kind, at their own shapes).
   **MoE** (since 2026-12-04 (5)): vLLM's fused MoE kernel per weights dtype (MOE_KERNELS: bf16 and
   block-fp8 Triton, int4 Marlin, gpt-oss's MXFP4 Triton; ``moe/vllm/<version>/moe_perf.parquet``,
   experts split by TP, balanced routing) is fitted with the rest, checked one layer at a time on
   every shape of its table and, for the MOE models, in steps composed the same way as the dense
   ones with the fused experts at each model's shape (composed_moe_step); each printed beside the
   same check with the experts timed as the other GEMMs (before). calibrate_moe.py has the MoE
   tables, the kernel's roofline, the composed MoE steps and their bands.
   **Gated DeltaNet** (since 2026-12-04 (5)): vLLM's GDN kernels
   (``linear_attention/vllm/<version>/gdn_perf.parquet``) fitted the same way and checked one
   layer at a time, beside the state term used before (calibrate_gdn.py).
   **MLA** (since 2026-12-05): DeepSeek-V3's attention module as vLLM runs it
   (``mla/vllm/<version>/mla_{context,generation}_module_perf.parquet``: projections, norms, rope
   and attention of one layer) fits the MLA term (roofline.py MLA_COEFFICIENTS), checked one layer
   at a time and in DeepSeek-V3's steps composed from the modules (calibrate_mla.py).
3. **Per-GPU fits** for the package data: each measured GPU fitted on its own kernels; its band is
   the 5th-95th percentile of measured/predicted over its composed steps, per phase. B200
   (RELATIVE_CHECKS) ships H200's coefficients, checked on steps composed from its own kernels
   (its bands).
4. **The serving terms** (the all-reduce's skew and the front end's latency per request, which no
   kernel table holds): fitted on H100's silicon serving runs, held back on H200's and B200's
   (calibrate_e2e.py has the runs, the benchmark client kvreplay simulates, and the fit); the
   decode band of a GPU with silicon runs is widened to their TPOT's spread.
5. **End to end** (`--e2e`): every silicon run simulated under roofline-raw, the calibrated
   kernels alone and the shipped calibration, by GPU and source (about 7 minutes).
6. **Held-out sources** (since 2026-12-07; calibrate_sources.py): steps composed from another
   collection's kernels (NVIDIA's aisimulate wheel: vLLM 0.24.0 re-measured, 0.25.0 and 0.31.0
   tables of H100, H200 and B200), every family, against the shipped coefficients; and the
   all-reduce tables of other vLLM versions, SGLang and TensorRT-LLM.

    python benchmarks/calibrate.py            # fit, write src/kvreplay/data/roofline_calibration.json
    python benchmarks/calibrate.py --check    # the held-back error tables, from the shipped data
    python benchmarks/calibrate.py --check --e2e  # and the silicon serving runs
    python benchmarks/calibrate.py --check --calibration OLD.json  # another calibration's tables (not --e2e's)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = HERE / ".cache" / "aiconfigurator"
WHEEL_VERSION = "0.12.0"
OUT = REPO / "src" / "kvreplay" / "data" / "roofline_calibration.json"
CUSTOM_AR_MAX = 8 * 2 ** 20  # bytes
GPUS = {"H100": "h100_sxm", "H200": "h200_sxm", "A100-80GB": "a100_sxm"}
#: the streaming-bandwidth probe: vLLM's static fp8 quantisation (a bf16 read and an fp8 write per
#: element, no reuse) over shapes moving at least this many bytes, well past every catalog GPU's L2
PROBE_KERNEL, PROBE_MIN_BYTES = "static_scaled_fp8_quant", 256e6
#: GPUs with measured kernels that ship their relative's coefficients (its own fit is no closer on its
#: composed steps: benchmarks/RESULTS.md, the calibration record), checked on their own kernels for their bands
#: (since 2026-12-07: the GB200 and GB300 of the NVL72 racks and the HGX B300, Blackwell as the B200 is,
#: with B200's relative; each fitted on its own tables as B200 is)
RELATIVE_CHECKS = {"B200": ("b200_sxm", "H200"), "GB200": ("gb200", "H200"), "GB300": ("gb300", "H200"),
                   "B300": ("b300_sxm", "H200")}
#: measured GPUs without silicon serving runs of the benchmark's protocol, and the GPU whose runs' TPOT
#: spread widens their decode band (widen_decode_bands)
SILICON_PROXY = {"GB200": "B200", "GB300": "B200", "B300": "B200"}
#: GPUs without measured kernels and the measured GPU whose coefficients each borrows (by architecture:
#: Hopper's H20 the H100's, the same GH100 die; the A100-40GB its 80 GB sibling's; Ada's L4 what the
#: L40S borrows, the A100-80GB's, and so do the consumer RTX 4090 (Ada) and RTX 3090 (Ampere); AMD's
#: CDNA 3 MI325X and CDNA 4 MI355X what the MI300X borrows, H200's, the measured GPU nearest in
#: bandwidth and compute); docs/gpus.md, "GPU catalog"
RELATIVES = {"MI300X": "H200", "L40S": "A100-80GB", "A100-40GB": "A100-80GB", "H20": "H100", "L4": "A100-80GB",
             "MI325X": "H200", "MI355X": "H200", "RTX-4090": "A100-80GB", "RTX-3090": "A100-80GB",
             "RTX-PRO-6000": "A100-80GB"}
FIT_GPU = "H100"
#: MoE models with GQA attention (head_dim 128) whose fused MoE kernel the tables time at their
#: exact shape, at the TP degrees tried (a degree without the shape is skipped)
MOE = [("Qwen3-30B-A3B", (1, 2, 4)), ("Qwen3-235B-A22B", (4, 8)), ("MiniMax-M2.5", (2, 4, 8)), ("Mixtral-8x7B-v0.1", (1, 2, 4))]
#: the dense models' steps at every TP degree vLLM could run them at (since 2026-12-07: the small
#: models at TP 4 and 8 too, where per-GPU work is smallest and the fixed costs weigh most)
DENSE = [("Llama-3.1-8B", (1, 2, 4, 8)), ("Qwen3-8B", (1, 2, 4, 8)), ("Mistral-7B-Instruct-v0.3", (1, 2, 4, 8)),
         ("Qwen3-32B", (1, 2, 4, 8)), ("Llama-3.1-70B", (2, 4, 8)), ("Qwen2.5-72B", (2, 4, 8))]

sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(HERE))
from calibrate_stats import RATIO_COLUMNS, print_table, ratio_cells, ratio_stats, spread  # noqa: E402
from calibrate_gdn import GDN_START, gdn_args, gdn_kernels, gdn_model, gdn_table, print_gdn  # noqa: E402
from calibrate_mla import (MLA_MODEL, MLA_TPS, composed_mla_step, experts_within_memory, fit_mla,  # noqa: E402
                           mla_modules, mla_table, print_mla)
from calibrate_moe import MOE_START, composed_moe_step, moe_args, moe_kernels, moe_model, moe_table, print_moe  # noqa: E402
import calibrate_sources as sources  # noqa: E402
from kvreplay.serving.timing.roofline import SERVING_COEFFICIENTS as SERVING_TERMS  # noqa: E402


# ---------------------------------------------------------------------------------------------
# the data


def wheel() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"aiconfigurator_core-{WHEEL_VERSION}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(CACHE),
                        f"aiconfigurator-core=={WHEEL_VERSION}"], check=True)
        found = sorted(CACHE.glob(f"aiconfigurator_core-{WHEEL_VERSION}-*.whl"))
    return found[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Tables:
    """The wheel's tables, read on demand (pandas DataFrames through pyarrow)."""

    def __init__(self, whl: Path):
        self.zip = zipfile.ZipFile(whl)
        self.names = self.zip.namelist()
        self.used = {}

    def bytes_of(self, name: str) -> bytes:
        """A member's bytes by the name `names` lists it under (calibrate_sources.HeldOutTables maps them)."""
        return self.zip.read(name)

    def path(self, gpu_dir: str, op: str, table: str) -> str:
        prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/{op}/vllm/"
        cands = [n for n in self.names if n.startswith(prefix) and n.endswith("/" + table)]
        if not cands:
            raise SystemExit(f"no {table} for {gpu_dir} in the wheel")

        def version(n):
            return tuple(int(x) for x in n[len(prefix):].split("/")[0].split(".") if x.isdigit())

        return max(cands, key=version)

    def read_nccl(self, gpu_dir: str):
        import io

        import pyarrow.parquet as pq

        prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/comm/nccl/"
        cands = [n for n in self.names if n.startswith(prefix) and n.endswith("/nccl_perf.parquet")]
        name = max(cands, key=lambda n: tuple(int(x) for x in n[len(prefix):].split("/")[0].split(".") if x.isdigit()))
        self.used[name] = True
        return pq.read_table(io.BytesIO(self.bytes_of(name))).to_pandas()

    def read(self, gpu_dir: str, op: str, table: str):
        import io

        import pyarrow.parquet as pq

        name = self.path(gpu_dir, op, table)
        self.used[name] = True
        return pq.read_table(io.BytesIO(self.bytes_of(name))).to_pandas()

    def silicon(self):
        import csv
        import io

        name = "aiconfigurator_core/systems/silicon_sample.csv"
        self.used[name] = True
        return list(csv.DictReader(io.StringIO(self.zip.read(name).decode())))


def attention_kernel(table, phase: str) -> str:
    """The attention kernel vLLM runs for the phase on this GPU, of those the table timed: FlashAttention 3
    on Hopper (H100, H200), FA2 on A100 (vLLM 0.14's only one), and on Blackwell (B200), where FA3 does
    not run, FlashInfer's TRT-LLM kernels, the prefill one for context and the decode one for generation
    (vLLM's FlashInfer backend, vllm/v1/attention/backends/flashinfer.py, picks them on sm100)."""
    kern = sorted(table.kernel_source.unique())
    for name in ("vllm_flash_attn_fa3", f"vllm_flashinfer_trtllm{phase}", "vllm_flash_attn_fa2"):
        if name in kern:
            return name
    return kern[0]


def stream_probe(t: Tables, gpu_dir: str, gpu) -> dict | None:
    """The GPU's streaming memory bandwidth: the median over PROBE_KERNEL's shapes moving at least
    PROBE_MIN_BYTES (None where the GPU's tables have no quantisation kernels: A100). One figure per
    GPU, as a STREAM-like test gives it; the calibrated roofline's memory terms run at it."""
    prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/quantize/vllm/"
    if not any(n.startswith(prefix) and n.endswith("/scale_matrix_perf.parquet") for n in t.names):
        return None
    q = t.read(gpu_dir, "quantize", "scale_matrix_perf.parquet")
    q = q[q.kernel_source == PROBE_KERNEL]
    moved = 3.0 * q.m.to_numpy(float) * q.k.to_numpy(float)
    keep = moved >= PROBE_MIN_BYTES
    bw = float(np.median(moved[keep] / (q.latency.to_numpy(float)[keep] / 1e3)))
    return {"bytes_per_s": bw, "fraction_of_peak": bw / gpu.bandwidth_bytes_per_s, "shapes": int(keep.sum()),
            "kernel": PROBE_KERNEL, "min_bytes": PROBE_MIN_BYTES,
            "file": t.path(gpu_dir, "quantize", "scale_matrix_perf.parquet")}


def stream_probes(t: Tables) -> dict:
    """stream_probe of every measured GPU that has one, by catalog name."""
    from kvreplay.catalog.gpus import get_gpu

    dirs = {**GPUS, **{name: d for name, (d, _) in RELATIVE_CHECKS.items()}}
    found = {name: stream_probe(t, d, get_gpu(name)) for name, d in dirs.items()}
    return {name: p for name, p in found.items() if p}


def stream(probes: dict, name: str, coefficients_from: str) -> float:
    """The bandwidth GPU `name`'s memory terms run at with `coefficients_from`'s coefficients
    (roofline.stream_bandwidth over `probes`), bytes/s."""
    from kvreplay.catalog.gpus import get_gpu
    from kvreplay.serving.timing.roofline import stream_bandwidth

    return stream_bandwidth(get_gpu(name), coefficients_from, probes)[0]


def streamed(gpu, bytes_per_s: float):
    """`gpu` with its memory at `bytes_per_s` (what the kernel families' rooflines read)."""
    import dataclasses

    return dataclasses.replace(gpu, bandwidth_gbps=bytes_per_s / 1e9)


def elementwise_table(t: Tables, gpu_dir: str):
    """The GPU's measured elementwise kernel (PROBE_KERNEL, vLLM's static fp8 quantisation: a bf16
    read and an fp8 write per element) over every shape timed, with the bytes each moves (None where
    the tables have no quantisation kernels: A100)."""
    prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/quantize/vllm/"
    if not any(n.startswith(prefix) and n.endswith("/scale_matrix_perf.parquet") for n in t.names):
        return None
    q = t.read(gpu_dir, "quantize", "scale_matrix_perf.parquet")
    q = q[q.kernel_source == PROBE_KERNEL]
    return q.assign(nbytes=3.0 * q.m.to_numpy(float) * q.k.to_numpy(float))


def allreduce_table(t: Tables, gpu_dir: str):
    """The GPU's bf16 all-reduces: vLLM's custom kernel (CUDA-graph mode) up to 8 MiB, NCCL's table
    above (vllm/distributed/device_communicators/custom_all_reduce.py, max_size 8 MiB), the faster
    of the two where both time a message."""
    import pandas as pd

    ar = t.read(gpu_dir, "comm", "custom_allreduce_perf.parquet")
    ar = ar[(ar.op_name == "all_reduce") & ar.kernel_source.str.contains("graph") & (ar.message_size * 2 <= CUSTOM_AR_MAX)]
    nccl = t.read_nccl(gpu_dir)
    nccl = nccl[(nccl.op_name == "all_reduce") & (nccl.nccl_dtype == "half") & (nccl.message_size * 2 > CUSTOM_AR_MAX)]
    ar = pd.concat([ar[["num_gpus", "message_size", "latency"]], nccl[["num_gpus", "message_size", "latency"]]])
    return ar.groupby(["num_gpus", "message_size"], as_index=False).latency.min()


def refit_allreduce(t: Tables) -> int:
    """`--allreduce`: each measured GPU's NCCL terms fitted (fit_allreduce), every other coefficient
    as shipped (the custom kernel's too: fit_gpu fits them as before); the shipped file rewritten
    with them."""
    from kvreplay.serving.timing.roofline import SHAPE_COEFFICIENTS

    data = json.loads(OUT.read_text())
    for name, gpu_dir in GPUS.items():
        c = {**SHAPE_COEFFICIENTS, **data["gpus"][name]["coefficients"]}
        fitted, errs = fit_allreduce(allreduce_table(t, gpu_dir), c, custom=False)
        data["gpus"][name]["coefficients"].update(fitted)
        print(f"{name}: all-reduce {100 * errs['allreduce']:.1f}% (custom kernel {100 * errs['allreduce_custom']:.1f}%, "
              f"NCCL {100 * errs['allreduce_nccl']:.1f}%); " + ", ".join(
                  f"TP {tp} NCCL {fitted[f'allreduce_nccl_latency_tp{tp}_s'] * 1e6:.1f} us + ring / "
                  f"{fitted[f'allreduce_nccl_bus_tp{tp}_bytes_per_s'] / 1e9:.0f} GB/s" for tp in (2, 4, 8)))
    write(data)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


def kernels(t: Tables, gpu_dir: str) -> dict:
    g_all = t.read(gpu_dir, "gemm", "gemm_perf.parquet")
    g = g_all[(g_all.gemm_dtype == "bfloat16")]
    # fp8 per-tensor (W8A8 with the input quantised per call: vLLM's Fp8LinearMethod, as FP8
    # checkpoints such as nvidia/Llama-3.1-8B-Instruct-FP8 run); A100's tables have none
    g8 = g_all[(g_all.gemm_dtype == "fp8")]
    ctx = t.read(gpu_dir, "attention", "context_attention_perf.parquet")
    gen = t.read(gpu_dir, "attention", "generation_attention_perf.parquet")
    def sel(a):
        keep = (a.kv_cache_dtype == "bfloat16") & (a.head_dim == 128)
        if "window_size" in a:  # (A100's vLLM 0.14 tables have no sliding-window rows)
            keep &= a.window_size == 0
        return a[keep]
    ctx, gen = sel(ctx), sel(gen)
    ctx, gen = ctx[ctx.kernel_source == attention_kernel(ctx, "prefill")], gen[gen.kernel_source == attention_kernel(gen, "decode")]
    out = {"gemm": g, "ctx": ctx, "gen": gen, "ar": allreduce_table(t, gpu_dir)}
    ew = elementwise_table(t, gpu_dir)
    if ew is not None:
        out["ew"] = ew
    if len(g8):
        out["gemm_fp8"] = g8
    moe = moe_kernels(t, gpu_dir)
    if moe:
        out["moe"] = moe
    gdn = gdn_kernels(t, gpu_dir)
    if gdn is not None:
        out["gdn"] = gdn
    mla = mla_modules(t, gpu_dir)
    if mla is not None:
        out["mla"] = mla
    return out


# ---------------------------------------------------------------------------------------------
# each kernel family's roofline (what the fit adjusts), in seconds; latencies in the tables are ms


def gemm_model(c, gpu, m, n, k):
    from kvreplay.serving.timing.roofline import soft_max

    """A bf16 GEMM: compute (k0 more of K per tile: roofline.py's tile term) or its bytes."""
    peak, bw = gpu.peak_flops("bf16"), gpu.bandwidth_bytes_per_s
    return (soft_max(2.0 * m * n * (k + c["gemm_k0"]) / (peak * c["e_gemm"]), 2.0 * (m * k + k * n + m * n) / (bw * c["e_weights"]),
                     c["gemm_overlap_p"]) + c["gemm_floor_s"])


def gemm_fp8_model(c, gpu, m, n, k):
    """An fp8 GEMM with its input's quantisation (a bf16 read, an fp8 write of m x k elements), its
    compute on the rows its tiles cover (roofline.fp8_gemm_rows) and k0 more of K per tile."""
    from kvreplay.serving.timing.roofline import fp8_gemm_efficiency, fp8_gemm_rows, soft_max

    peak, bw = gpu.peak_flops("fp8"), gpu.bandwidth_bytes_per_s
    rows = fp8_gemm_rows(m, c["fp8_partial_rows"])
    e_gemm = fp8_gemm_efficiency(m, c["e_gemm_fp8"], c.get("e_gemm_fp8_large", 0.0))
    return (soft_max(2.0 * rows * n * (k + c["gemm_k0_fp8"]) / (peak * e_gemm), (m * k + k * n + 2.0 * m * n) / (bw * c["e_weights_fp8"]),
                     c["gemm_overlap_p_fp8"])
            + c["gemm_floor_fp8_s"] + 3.0 * m * k / (bw * c["e_quant_fp8"]))


def ctx_model(c, gpu, b, s, h, kv, d):
    peak, bw = gpu.peak_flops("bf16"), gpu.bandwidth_bytes_per_s
    f = 4.0 * b * h * d * s * (s + 1) / 2
    by = 2.0 * b * s * d * (2 * h + 2 * kv)
    return np.maximum(f / (peak * c["e_attn_prefill"]), by / (bw * c["e_kv_prefill"])) + c["attn_floor_prefill_s"]


def gen_model(c, gpu, b, ctx, h, kv, d):
    """Decode attention: its KV read slowed by ``1 + attn_split_decode / (b x kv)`` when few
    (request, KV head) pairs share it out (roofline.py terms())."""
    peak, bw = gpu.peak_flops("bf16"), gpu.bandwidth_bytes_per_s
    f = 4.0 * b * h * d * ctx
    by = 2.0 * b * ctx * kv * d * 2 * (1.0 + c["attn_split_decode"] / (b * kv))
    return (np.maximum(f / (peak * c["e_attn_decode"]), by / (bw * c["e_kv_decode"])) + c["attn_floor_decode_s"]
            + b * c["attn_per_request_decode_s"])


def ar_model(c, n, elements):
    """One bf16 all-reduce of `elements` over `n` GPUs (roofline.allreduce_time)."""
    from kvreplay.serving.timing.roofline import allreduce_time

    return allreduce_time(n, elements * 2.0, c["allreduce_latency_s"], c)


def ew_model(c, gpu, nbytes):
    """An elementwise kernel moving `nbytes`: its floor and its bytes at ``e_ew`` of the stream."""
    return c["ew_floor_s"] + nbytes / (gpu.bandwidth_bytes_per_s * c["e_ew"])


def fit_moe(tables: dict, gpu) -> tuple[dict, dict]:
    """Each weights dtype's MoE kernel coefficients, fitted on its table (twice: the second fit
    restarts from the first's optimum)."""
    from kvreplay.serving.timing.roofline import moe_names

    c, errs = {}, {}
    for kernel, table in tables.get("moe", {}).items():
        start = dict(zip(moe_names(kernel), MOE_START))
        args, y = moe_args(table), table.latency.to_numpy(float) / 1e3
        for _ in range(2):
            fitted, err = fit_family(list(start), start, lambda cc: moe_model(cc, gpu, kernel, *args), y)
            start = {**start, **fitted}
        c.update(start)
        errs[f"moe_{kernel}"] = err
    return c, errs


def nelder_mead(loss, x0, steps, iters=600):
    """Minimise loss over log-parameters (numpy only)."""
    n = len(x0)
    pts = [np.array(x0, dtype=float)] + [np.array(x0, dtype=float) + np.eye(n)[i] * steps[i] for i in range(n)]
    vals = [loss(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centroid = np.mean(pts[:-1], axis=0)
        xr = centroid + (centroid - pts[-1])
        fr = loss(xr)
        if fr < vals[0]:
            xe = centroid + 2 * (centroid - pts[-1])
            fe = loss(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (pts[-1] - centroid)
            fc = loss(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0] + 0.5 * (p - pts[0]) for p in pts]
                vals = [loss(p) for p in pts]
    best = int(np.argmin(vals))
    return pts[best], vals[best]


def fit_family(names, start, predict, measured):
    """Fit coefficients `names` (positive; log-space) minimising the mean relative error."""
    x0 = np.log([start[k] for k in names])

    def loss(x):
        c = {**start, **dict(zip(names, np.exp(x)))}
        pred = predict(c)
        return float(np.mean(np.abs(pred - measured) / measured))

    x, err = nelder_mead(loss, x0, [0.3] * len(names))
    return dict(zip(names, np.exp(x))), err


START = {"e_gemm": 0.7, "e_weights": 0.8, "gemm_floor_s": 5e-6, "gemm_k0": 100.0, "gemm_overlap_p": 4.0, "e_attn_prefill": 0.5, "e_kv_prefill": 0.5,
         "attn_floor_prefill_s": 2e-5, "e_attn_decode": 0.3, "e_kv_decode": 0.6, "attn_floor_decode_s": 1e-5,
         "attn_per_request_decode_s": 2e-8, "attn_split_decode": 0.2,
         "allreduce_latency_s": 1e-5, "allreduce_bus_bytes_per_s": 3e11, "allreduce_link_bytes_per_s": 3e11,
         "ew_floor_s": 2e-6, "e_ew": 0.9, "per_layer_s": 0.0, "per_step_s": 0.0}
START_FP8 = {"e_gemm_fp8": 0.6, "e_weights_fp8": 0.8, "gemm_floor_fp8_s": 5e-6, "gemm_k0_fp8": 300.0, "fp8_partial_rows": 50.0, "gemm_overlap_p_fp8": 4.0,
             "e_quant_fp8": 0.3}


def fit_gdn(table, gpu, c: dict) -> tuple[dict, float]:
    """The Gated DeltaNet term's coefficients on a GPU's GDN table (three restarts from the last
    optimum), the others fixed at `c`."""
    from kvreplay.serving.timing.roofline import GDN_COEFFICIENTS

    args, y = gdn_args(table), table.latency.to_numpy(float) / 1e3
    c = {**c, **dict(zip(GDN_COEFFICIENTS, GDN_START))}
    for _ in range(3):
        fitted, err = fit_family(list(GDN_COEFFICIENTS), c, lambda cc: gdn_model(cc, gpu, *args), y)
        c.update(fitted)
    return {k: c[k] for k in GDN_COEFFICIENTS}, err


#: the GEMMs' coefficients (bf16 and fp8), fitted on the GEMM tables
GEMM_TERMS = ("e_gemm", "e_weights", "gemm_floor_s", "gemm_k0", "gemm_overlap_p")


def fit_gemms(tables: dict, gpu, c: dict) -> tuple[dict, dict]:
    """The bf16 and fp8 GEMMs' coefficients on a GPU's GEMM tables (n, k >= 256), from `c` (START's
    and START_FP8's), and their errors."""
    c, errs = dict(c), {}
    g = tables["gemm"]
    g = g[(g.n >= 256) & (g.k >= 256)]
    m, n, k, y = (g[x].to_numpy(float) for x in ("m", "n", "k", "latency"))
    fitted, errs["gemm"] = fit_family(list(GEMM_TERMS), c, lambda cc: gemm_model(cc, gpu, m, n, k), y / 1e3)
    c.update(fitted)
    if "gemm_fp8" in tables:
        g = tables["gemm_fp8"]
        g = g[(g.n >= 256) & (g.k >= 256)]
        m, n, k, y = (g[x].to_numpy(float) for x in ("m", "n", "k", "latency"))
        c.update({**START_FP8, "e_gemm_fp8_large": 0.0})
        fitted, errs["gemm_fp8"] = fit_family(list(START_FP8), c, lambda cc: gemm_fp8_model(cc, gpu, m, n, k), y / 1e3)
        c.update(fitted)
    return {k: float(c[k]) for k in GEMM_TERMS + (tuple(START_FP8) if "gemm_fp8" in tables else ())}, errs


def fp8_large_rows(g):
    """The fp8 GEMM table's rows from FP8_LARGE_AT (n, k >= 256)."""
    from kvreplay.serving.timing.roofline import FP8_LARGE_AT

    return g[(g.n >= 256) & (g.k >= 256) & (g.m >= FP8_LARGE_AT)]


def fit_fp8_large(g, gpu, c: dict) -> tuple[dict, float]:
    """``e_gemm_fp8_large`` (roofline.fp8_gemm_efficiency) on the fp8 GEMM table's rows from
    FP8_LARGE_AT, every other coefficient as in `c` (fitted on every row before it), by least mean
    relative error; and that error."""
    g = fp8_large_rows(g)
    m, n, k, y = (g[x].to_numpy(float) for x in ("m", "n", "k", "latency"))
    return fit_family(["e_gemm_fp8_large"], {**c, "e_gemm_fp8_large": c["e_gemm_fp8"]},
                      lambda cc: gemm_fp8_model(cc, gpu, m, n, k), y / 1e3)


def refit_fp8_large(t: Tables) -> int:
    """`--fp8-large`: FIT_GPU's ``e_gemm_fp8_large`` fitted on its own fp8 GEMM table (fit_fp8_large),
    every other coefficient as shipped; the shipped file rewritten with it. The table's rows from
    FP8_LARGE_AT: their mean relative error without it and with it."""
    from kvreplay.catalog.gpus import get_gpu
    from kvreplay.serving.timing.roofline import SHAPE_COEFFICIENTS

    data = json.loads(OUT.read_text())
    gpu = streamed(get_gpu(FIT_GPU), stream(data.get("stream_bandwidth", {}), FIT_GPU, FIT_GPU))
    c = {**SHAPE_COEFFICIENTS, **data["gpus"][FIT_GPU]["coefficients"], "e_gemm_fp8_large": 0.0}
    g = kernels(t, GPUS[FIT_GPU])["gemm_fp8"]
    large = fp8_large_rows(g)
    m, n, k, y = (large[x].to_numpy(float) for x in ("m", "n", "k", "latency"))
    before = float(np.mean(np.abs(gemm_fp8_model(c, gpu, m, n, k) - y / 1e3) / (y / 1e3)))
    fitted, after = fit_fp8_large(g, gpu, c)
    data["gpus"][FIT_GPU]["coefficients"].update({k: float(v) for k, v in fitted.items()})
    print(f"{FIT_GPU}: fp8 GEMMs of {int(large.m.min())}+ rows ({len(large)} shapes): mean error "
          f"{100 * before:.1f}% -> {100 * after:.1f}%, e_gemm_fp8 {c['e_gemm_fp8']:.3f} -> "
          f"e_gemm_fp8_large {fitted['e_gemm_fp8_large']:.3f}")
    write(data)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


AR_TERMS = ("allreduce_latency_s", "allreduce_link_bytes_per_s", "allreduce_bus_bytes_per_s")


def fit_allreduce(ar, c: dict, custom: bool = True) -> tuple[dict, dict]:
    """The all-reduce's coefficients on a GPU's all-reduce table (roofline.allreduce_time): vLLM's
    custom kernel's latency, one-stage link and two-stage bus over every message (the ring formula
    above CUSTOM_AR_MAX, as fitted before NCCL had terms of its own; `custom` False: as `c` has them),
    then NCCL's latency and bus at each TP degree (NCCL_TPS) on the messages from CUSTOM_AR_MAX, by
    least relative squares (linear in the latency and the bus's inverse); and their errors (mean
    relative, over every message, the custom kernel's and NCCL's)."""
    from kvreplay.serving.timing.roofline import NCCL_COEFFICIENTS, NCCL_TPS

    nn, size, y = ar.num_gpus.to_numpy(float), ar.message_size.to_numpy(float), ar.latency.to_numpy(float) / 1e3
    c, fitted = {**c, **dict.fromkeys(NCCL_COEFFICIENTS, 0.0)}, {}
    if custom:
        fitted, _ = fit_family(list(AR_TERMS), c, lambda cc: ar_model(cc, nn, size), y)
        c.update(fitted)
    small = size * 2.0 < CUSTOM_AR_MAX
    for tp in NCCL_TPS:
        at = ~small & (nn == tp)
        ring = 2.0 * (tp - 1) / tp * size[at] * 2.0
        a = np.vstack([np.ones_like(ring), ring]).T / y[at][:, None]
        latency, inverse = np.linalg.lstsq(a, (y[at] - c["allreduce_latency_s"]) / y[at], rcond=None)[0]
        fitted[f"allreduce_nccl_latency_tp{tp}_s"] = float(max(latency, 0.0))
        fitted[f"allreduce_nccl_bus_tp{tp}_bytes_per_s"] = float(1.0 / inverse)
    c.update(fitted)
    rel = np.abs(ar_model(c, nn, size) - y) / y
    return fitted, {"allreduce": float(rel.mean()), "allreduce_custom": float(rel[small].mean()),
                    "allreduce_nccl": float(rel[~small].mean())}


def fit_gpu(tables: dict, gpu) -> tuple[dict, dict]:
    gemms, errs = fit_gemms(tables, gpu, START)
    c = {**START, **gemms}
    if "gemm_fp8" in tables:  # (a measured GPU's own fit; the Blackwell GPUs' own GEMM fits keep none:
        # B200's composed fp8 prefill steps came out 8.6 -> 8.8% with its own, 0.881)
        fitted, errs["gemm_fp8_large"] = fit_fp8_large(tables["gemm_fp8"], gpu, c)
        c.update(fitted)
    x = tables["ctx"]
    args = [x[a].to_numpy(float) for a in ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim")]
    fitted, errs["attn_prefill"] = fit_family(["e_attn_prefill", "e_kv_prefill", "attn_floor_prefill_s"], c,
                                              lambda cc: ctx_model(cc, gpu, *args), x.latency.to_numpy(float) / 1e3)
    c.update(fitted)
    x = tables["gen"]
    args = [x.batch_size.to_numpy(float), x.step.to_numpy(float) + 1, x.num_heads.to_numpy(float),
            x.num_key_value_heads.to_numpy(float), x.head_dim.to_numpy(float)]
    fitted, errs["attn_decode"] = fit_family(["e_attn_decode", "e_kv_decode", "attn_floor_decode_s",
                                              "attn_per_request_decode_s", "attn_split_decode"], c,
                                             lambda cc: gen_model(cc, gpu, *args), x.latency.to_numpy(float) / 1e3)
    c.update(fitted)
    fitted, ar_errs = fit_allreduce(tables["ar"], c)
    c.update(fitted)
    errs.update(ar_errs)
    if "ew" in tables:  # the elementwise kernels' floor and efficiency (else START's, replaced by FIT_GPU's)
        fitted, errs["elementwise"] = fit_elementwise(tables["ew"], gpu, c)
        c.update(fitted)
    families, family_errs = fit_families(tables, gpu, c)
    c.update(families)
    errs.update(family_errs)
    return c, errs


#: the elementwise kernels' coefficients: their floor, fitted on the GPU's measured elementwise kernel
#: (PROBE_KERNEL), and their efficiency, 1 by construction (the streaming bandwidth is that kernel's
#: own rate past the L2 cache; below it the table's replays reuse their buffers from L2)
EW_TERMS = ("ew_floor_s", "e_ew")


def fit_elementwise(table, gpu, c: dict) -> tuple[dict, float]:
    """EW_TERMS on a GPU's measured elementwise kernel (elementwise_table), every shape."""
    fitted, err = fit_family(["ew_floor_s"], {**c, "e_ew": 1.0}, lambda cc: ew_model(cc, gpu, table.nbytes.to_numpy(float)),
                             table.latency.to_numpy(float) / 1e3)
    return {**fitted, "e_ew": 1.0}, err


def fit_families(tables: dict, gpu, c: dict) -> tuple[dict, dict]:
    """The fused MoE kernels' (calibrate_moe.py), the Gated DeltaNet (calibrate_gdn.py) and the MLA
    terms' (calibrate_mla.py) coefficients on a GPU's tables, the others fixed at `c`, and their errors."""
    out, errs = fit_moe(tables, gpu)
    if "gdn" in tables:
        gdn, errs["gdn"] = fit_gdn(tables["gdn"], gpu, {**c, **out})
        out.update(gdn)
    if "mla" in tables and "gemm_fp8" in tables:
        mla, errs["mla"] = fit_mla(tables["mla"], gpu, {**c, **out}, fit_family, gemm_fp8_model)
        out.update(mla)
    return out, errs


# ---------------------------------------------------------------------------------------------
# measured steps, composed kernel by kernel from a GPU's own tables


class Measured:
    """A GPU's measured kernels, looked up at any shape (gemm: "gemm" bf16 or "gemm_fp8")."""

    def __init__(self, tables, gemm="gemm"):
        g = tables[gemm]
        self.gemm = {}
        for (n, k), part in g.groupby(["n", "k"]):
            part = part.sort_values("m")
            self.gemm[(int(n), int(k))] = (part.m.to_numpy(float), part.latency.to_numpy(float) / 1e3)
        # the grid of (n, k) the table times: each n (k) timed at half the k (n) or more (a table may
        # also time a few off-grid shapes: aisimulate's vLLM 0.31.0 GEMMs add GLM-5.3's widths at
        # k 4,096, which interpolation between grid points cannot use)
        ns, ks = {}, {}
        for n, k in self.gemm:
            ns.setdefault(n, set()).add(k)
            ks.setdefault(k, set()).add(n)
        self.ns = sorted(n for n, v in ns.items() if 2 * len(v) >= len(ks))
        self.ks = sorted(k for k, v in ks.items() if 2 * len(v) >= len(ns))
        self.ctx = tables["ctx"]
        self.gen = tables["gen"].assign(ctxlen=tables["gen"].step + 1)  # the table's step: tokens before this one
        ar = tables["ar"]
        self.ar = {int(n): (p.sort_values("message_size").message_size.to_numpy(float),
                            p.sort_values("message_size").latency.to_numpy(float) / 1e3) for n, p in ar.groupby("num_gpus")}
        # the measured elementwise kernel by the bytes it moves (the median of the shapes moving each)
        ew = tables.get("ew")
        self.ew = None if ew is None else (lambda g: (g.index.to_numpy(float), g.to_numpy(float) / 1e3))(
            ew.groupby("nbytes").latency.median())
        # the fused MoE kernel of the GEMMs' weights (bf16 or fp8), by (hidden, width, topk, experts, tp)
        moe = tables.get("moe", {}).get("fp8" if gemm == "gemm_fp8" else "bf16")
        self.moe = {} if moe is None else {
            tuple(int(v) for v in key): (p.sort_values("num_tokens").num_tokens.to_numpy(float),
                                         p.sort_values("num_tokens").latency.to_numpy(float) / 1e3)
            for key, p in moe.groupby(["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"])}

    def moe_time(self, tokens, hidden, inter, topk, experts, tp):
        """One MoE layer's routed experts for `tokens` (log-interpolated; None: not measured)."""
        found = self.moe.get((hidden, inter, topk, experts, tp))
        if found is None:
            return None
        xs, ys = found
        return float(np.interp(np.log(tokens), np.log(xs), ys)) if tokens <= xs[-1] else float(ys[-1] * tokens / xs[-1])

    def _gemm_at(self, m, n, k):
        xs, ys = self.gemm[(n, k)]
        return float(np.interp(m, xs, ys)) if m <= xs[-1] else float(ys[-1] * m / xs[-1])

    def gemm_time(self, m, n, k):
        def bracket(v, grid):
            if v <= grid[0]:
                return grid[0], grid[0]
            if v >= grid[-1]:
                return grid[-1], grid[-1]
            i = int(np.searchsorted(grid, v))
            return (v, v) if grid[i] == v else (grid[i - 1], grid[i])

        n0, n1 = bracket(n, self.ns)
        k0, k1 = bracket(k, self.ks)

        def at(nn, kk):
            return self._gemm_at(m, nn, kk)

        def lin(v, a, b, fa, fb):
            return fa if a == b else fa + (fb - fa) * (v - a) / (b - a)

        t = lin(k, k0, k1, lin(n, n0, n1, at(n0, k0), at(n1, k0)), lin(n, n0, n1, at(n0, k1), at(n1, k1)))
        # beyond the grid: proportional
        if n > self.ns[-1]:
            t *= n / self.ns[-1]
        if k > self.ks[-1]:
            t *= k / self.ks[-1]
        return t

    def _curves(self, table, key_col, h, kv):
        """batch size -> (keys, latencies in s) of the table's rows at `h` heads and `kv` KV heads,
        sorted by key (cached: the composed steps look the same few up thousands of times)."""
        cache = self.__dict__.setdefault("_curve_cache", {})
        key = (key_col, h, kv)
        if key not in cache:
            part = table[(table.num_heads == h) & (table.num_key_value_heads == kv)]
            cache[key] = {}
            for bb in sorted(part.batch_size.unique()):
                q = part[part.batch_size == bb].sort_values(key_col)
                cache[key][bb] = (q[key_col].to_numpy(float), q.latency.to_numpy(float) / 1e3)
        return cache[key]

    def _attn(self, table, key_col, b, x, h, kv):
        curves = self._curves(table, key_col, h, kv)
        if not curves:
            return None
        bs = list(curves)
        out = []
        b_lo = max([v for v in bs if v <= b], default=bs[0])
        b_hi = min([v for v in bs if v >= b], default=bs[-1])
        for bb in sorted({b_lo, b_hi}):
            xs, ys = curves[bb]
            if len(xs) < 2:
                return None
            out.append((bb, float(np.interp(np.log(x), np.log(xs), ys)) if x <= xs[-1] else float(ys[-1] * x / xs[-1])))
        if len(out) == 1:
            return out[0][1] * (b / out[0][0] if b > out[0][0] else 1.0)
        (b0, t0), (b1, t1) = out
        return t0 + (t1 - t0) * (np.log(b) - np.log(b0)) / (np.log(b1) - np.log(b0))

    def ctx_time(self, b, s, h, kv):
        return self._attn(self.ctx, "isl", b, s, h, kv)

    def gen_time(self, b, ctx, h, kv):
        return self._attn(self.gen, "ctxlen", b, ctx, h, kv)

    def ew_time(self, nbytes):
        """One elementwise kernel moving `nbytes`: the measured kernel at the same traffic
        (log-interpolated; beyond its largest shape, proportional)."""
        xs, ys = self.ew
        return float(np.interp(np.log(nbytes), np.log(xs), ys)) if nbytes <= xs[-1] else float(ys[-1] * nbytes / xs[-1])

    def elementwise_time(self, spec, tp, tokens, mla=False):
        """A step's elementwise kernels (roofline.elementwise_kernels: norms, rope, the KV-cache write,
        the activation, the embedding), each timed as the measured elementwise kernel at its traffic
        (0 where the GPU has no measured one: A100)."""
        from kvreplay.serving.timing.models import kv_bytes_per_token_per_gpu
        from kvreplay.serving.timing.roofline import elementwise_kernels

        if self.ew is None:
            return 0.0
        cache = self.__dict__.setdefault("_kinds_cache", {})
        key = (spec.name, tp, mla)
        if key not in cache:
            cache[key] = elementwise_kernels(spec, tp, kv_bytes_per_token_per_gpu(spec, tp), 2.0, mla, spec.mamba_layers or 0)
        return sum(n * self.ew_time(tokens * b) for n, b in cache[key])

    def has_allreduce(self, tp: int) -> bool:
        """Whether a TP group of `tp` GPUs can be composed: one GPU, or an all-reduce measured on `tp`
        (GB200's and GB300's tables time 2 and 4 GPUs, one NVL72 compute tray: their steps stop at TP 4)."""
        return tp == 1 or tp in self.ar

    def ar_time(self, n, elements):
        xs, ys = self.ar[n]
        return float(np.interp(np.log(elements), np.log(xs), ys)) if elements <= xs[-1] else float(ys[-1] * elements / xs[-1])


def composed_step(meas: Measured, spec, tp, prefill: list[int], decodes: int, ctx: int, head: Measured | None = None):
    """A step's time from measured kernels: None where a table lacks the shape (the LM head's
    GEMM from `head`'s tables, default `meas`)."""
    H, I, V, d = spec.hidden_size, spec.intermediate_size, spec.vocab_size, spec.head_dim
    h, kv = spec.num_attention_heads // tp, max(1, spec.num_kv_heads // tp)
    T = sum(prefill) + decodes
    rows = len(prefill) + decodes
    layer = (meas.gemm_time(T, (h + 2 * kv) * d, H) + meas.gemm_time(T, H, h * d)
             + meas.gemm_time(T, 2 * I // tp, H) + meas.gemm_time(T, H, I // tp))
    attn = 0.0
    if prefill:
        s = prefill[0]  # the prefills of a step share one length here
        t = meas.ctx_time(len(prefill), s, h, kv)
        if t is None:
            return None
        attn += t
    if decodes:
        t = meas.gen_time(decodes, ctx, h, kv)
        if t is None:
            return None
        attn += t
    ar = 2 * meas.ar_time(tp, T * H) if tp > 1 else 0.0
    lm_head = (head or meas).gemm_time(rows, V // tp, H)
    return spec.num_layers * (layer + attn + ar) + lm_head + (head or meas).elementwise_time(spec, tp, T)


def step_shapes():
    """The composed steps' shapes (phase, prefill lengths, decodes, their context): since 2026-12-07
    small prefills (16-64 tokens), small decode batches (1-16 requests) at every context from 128 to
    32,768 tokens, and mixed steps with 1-4 decodes too."""
    for s in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        for b in (1, 2, 4):
            if b * s <= 16384:
                yield "prefill", [s] * b, 0, 0
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        for ctx in (128, 512, 2048, 8192, 32768):
            yield "decode", [], b, ctx
    for n in (64, 256, 1024, 2048):
        for b in (1, 4, 8, 32, 128):
            for ctx in (1024, 4096):
                yield "mixed", [n], b, ctx


def kernel_terms(coefficients: dict, measured_elementwise: bool = True) -> dict:
    """The coefficients with the serving terms off: composed steps hold the kernels only (and no
    elementwise kernels where the GPU has no measured one to compose them from: A100)."""
    return {**coefficients, **dict.fromkeys(SERVING_TERMS, 0.0), **({} if measured_elementwise else {"e_ew": 0.0})}


def step_table(meas: Measured, gpu_name: str, coefficients: dict, bw: float, dtype: str = "bf16",
               head: Measured | None = None, moe: str = "", serving: bool = False):
    """Composed steps of the DENSE models against the calibrated roofline's predictions, its memory
    terms at `bw` bytes/s (stream). fp8: `meas` holds the fp8 GEMMs, `head` the bf16 ones the LM
    head runs (fp8 checkpoints keep it bf16). `moe`: the MOE models' steps instead (composed_moe_step),
    predicted with their experts apart ("experts") or as the roofline timed them before, with the
    other GEMMs ("as-dense"). `serving`: predicted with the serving terms in the step, as a
    simulation runs them (else off: a composed step holds kernels only)."""
    import dataclasses

    from kvreplay.analysis.models import get_model
    from kvreplay.serving.timing.models import StepBatch
    from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

    rows = []
    off = kernel_terms(coefficients, measured_elementwise=(head or meas).ew is not None)
    coefficients = {**off, **{k: coefficients[k] for k in SERVING_TERMS if k in coefficients}} if serving else off
    for name, tps in MOE if moe else DENSE:
        spec = get_model(name)
        predicted_spec = dataclasses.replace(spec, moe=None) if moe == "as-dense" else spec
        for tp in tps:
            if not meas.has_allreduce(tp):
                continue
            # composed from the MoE tables' balanced routing: the experts predicted as they were timed
            model = CalibratedRooflineTimeModel(predicted_spec, gpu_name, tp, dtype=dtype,
                                                coefficients=coefficients, stream_bytes_per_s=bw, moe_routing="balanced")
            for phase, prefill, b, ctx in step_shapes():
                measured = (composed_moe_step if moe else composed_step)(meas, spec, tp, prefill, b, ctx, head=head)
                if measured is None:
                    continue
                batch = StepBatch(prefill_new=tuple(prefill), prefill_cached=(0,) * len(prefill),
                                  decode_context=(ctx,) * b)
                rows.append({"model": name, "tp": tp, "phase": phase, "measured_s": measured,
                             "predicted_s": model.step_time(batch), "prefill": prefill, "decodes": b, "ctx": ctx})
    return rows


def raw_table(rows, gpu_name, dtype="bf16"):
    """The same steps under the raw roofline (MFU 0.5, MBU 0.6)."""
    from kvreplay.serving.timing.models import RooflineTimeModel, StepBatch

    out = []
    cache = {}
    for r in rows:
        key = (r["model"], r["tp"])
        if key not in cache:
            cache[key] = RooflineTimeModel(r["model"], gpu_name, r["tp"], dtype=dtype)
        batch = StepBatch(prefill_new=tuple(r["prefill"]), prefill_cached=(0,) * len(r["prefill"]),
                          decode_context=(r["ctx"],) * r["decodes"])
        out.append({**r, "predicted_s": cache[key].step_time(batch)})
    return out


def summary(rows):
    out = {}
    for phase in ("prefill", "decode", "mixed"):
        ratios = np.array([r["measured_s"] / r["predicted_s"] for r in rows if r["phase"] == phase])
        if len(ratios):
            out[phase] = ratio_stats(ratios)
    return out


def print_summary(title, s):
    print_table(title, (("phase", False), *RATIO_COLUMNS), ([phase, *ratio_cells(v)] for phase, v in s.items()))


def by_tp(rows) -> dict:
    """phase -> TP -> ratio_stats of composed-step rows."""
    out = {}
    for phase in ("prefill", "decode", "mixed"):
        for tp in sorted({r["tp"] for r in rows}):
            r = [x["measured_s"] / x["predicted_s"] for x in rows if x["phase"] == phase and x["tp"] == tp]
            if r:
                out.setdefault(phase, {})[tp] = ratio_stats(r)
    return out


def print_by_tp(title: str, tables: dict):
    """label -> by_tp: one row per label, each phase's error (median measured / predicted) at each TP."""
    tps = sorted({tp for t in tables.values() for p in t.values() for tp in p})
    cells = [[label, *(" / ".join(f"{100 * t[p][tp]['mape']:.1f}% ({t[p][tp]['median_ratio']:.2f})" if tp in t.get(p, {})
                                  else "-" for tp in tps) for p in ("prefill", "decode", "mixed"))]
             for label, t in tables.items()]
    print_table(f"{title}; each cell TP {' / '.join(map(str, tps))}: error (median measured / predicted)",
                (("steps", False), ("prefill", False), ("decode", False), ("mixed", False)), cells)


def held_back(tabs, meas, meas8, fit, probes) -> dict:
    """Each GPU's composed steps against FIT_GPU's coefficients (and the raw roofline), printed."""
    from kvreplay.catalog.gpus import get_gpu

    report, tps = {}, {}
    for name in GPUS:
        bw = stream(probes, name, FIT_GPU)
        gpu = streamed(get_gpu(name), bw)
        rows = step_table(meas[name], name, fit, bw)
        held = "in-sample GPU, unseen step shapes" if name == FIT_GPU else "held back: never fitted"
        tps[f"{name} bf16"] = by_tp(rows)
        if name != "A100-80GB":  # as a simulation runs them: the serving terms in the step
            tps[f"{name} bf16, the serving terms in the step"] = by_tp(step_table(meas[name], name, fit, bw, serving=True))
        s = summary(rows)
        print_summary(f"{name} steps ({held}), predicted with {FIT_GPU}'s coefficients", s)
        raw = summary(raw_table(rows, name))
        print_summary(f"{name} steps, roofline-raw (MFU 0.5, MBU 0.6)", raw)
        report[name] = {"calibrated": s, "raw": raw}
        if name in meas8:  # fp8 weights: the same steps with the measured fp8 GEMMs
            rows = step_table(meas8[name], name, fit, bw, "fp8", head=meas[name])
            tps[f"{name} fp8"] = by_tp(rows)
            s8, raw8 = summary(rows), summary(raw_table(rows, name, "fp8"))
            print_summary(f"{name} fp8 steps ({held}), predicted with {FIT_GPU}'s coefficients", s8)
            print_summary(f"{name} fp8 steps, roofline-raw (MFU 0.5, MBU 0.6)", raw8)
            report[name].update({"calibrated_fp8": s8, "raw_fp8": raw8})
        m = moe_table(tabs[name], gpu, fit)
        if m:  # the routed experts' fused MoE kernels, one layer at a time
            what = "the fitted tables" if name == FIT_GPU else held
            print_moe(f"{name} MoE kernels ({what}), predicted with {FIT_GPU}'s coefficients", m)
            report[name]["moe"] = m
        g = gdn_table(tabs[name].get("gdn"), gpu, fit)
        if g:  # Gated DeltaNet layers, one layer at a time
            print_gdn(f"{name} Gated DeltaNet layers ({'the fitted tables' if name == FIT_GPU else held}), "
                      f"predicted with {FIT_GPU}'s coefficients", g)
            report[name]["gdn"] = g
        modules = mla_table(tabs[name].get("mla"), gpu, fit, gemm_fp8_model)
        if modules:  # the MLA modules, one layer at a time
            print_mla(f"{name} MLA modules ({'the fitted tables' if name == FIT_GPU else held}), "
                      f"predicted with {FIT_GPU}'s coefficients", modules)
            report[name]["mla_modules"] = modules
        mla = mla_step_table(tabs[name], meas[name], meas8.get(name), name, fit, bw)
        if mla:
            print_mla_steps(f"{name} {MLA_MODEL} fp8 steps (MLA modules; {held}), predicted with {FIT_GPU}'s coefficients", mla)
            report[name]["mla_steps_fp8"] = mla
        for kernel, (mm, head) in moe_measured(meas, meas8, name).items():
            steps = summary(step_table(mm, name, fit, bw, kernel, head=head, moe="experts"))
            before = summary(step_table(mm, name, fit, bw, kernel, head=head, moe="as-dense"))
            print_summary(f"{name} {kernel} MoE steps ({held}), predicted with {FIT_GPU}'s coefficients", steps)
            print("(before, the experts timed as the other GEMMs: " +
                  ", ".join(f"{p} {100 * v['mape']:.1f}%" for p, v in before.items()) + ")")
            report[name][f"moe_steps_{kernel}"] = steps
            report[name][f"moe_steps_{kernel}_as_dense"] = before
    print_by_tp(f"dense steps by TP degree, predicted with {FIT_GPU}'s coefficients", tps)
    report["by_tp"] = {label: {p: {str(tp): v for tp, v in t.items()} for p, t in d.items()} for label, d in tps.items()}
    return report


def mla_step_rows(tabs: dict, meas, meas8, gpu_name: str, coefficients: dict, bw: float) -> list[dict]:
    """MLA_MODEL's fp8 steps composed from the MLA module tables (calibrate_mla.composed_mla_step)
    against the calibrated roofline, each with whether its measured experts the GPU's memory could
    serve (calibrate_mla.experts_within_memory; [] without an MLA table or fp8 GEMMs)."""
    from kvreplay.analysis.models import get_model
    from kvreplay.serving.timing.models import StepBatch
    from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

    if "mla" not in tabs or meas8 is None:
        return []
    spec, rows = get_model(MLA_MODEL), []
    for tp in (tp for tp in MLA_TPS if meas.has_allreduce(tp)):
        model = CalibratedRooflineTimeModel(spec, gpu_name, tp, dtype="fp8", coefficients=kernel_terms(coefficients, meas.ew is not None),
                                            stream_bytes_per_s=bw, moe_routing="balanced")
        for phase, prefill, b, ctx in step_shapes():
            measured = composed_mla_step(tabs["mla"], meas, meas8, spec, tp, prefill, b, ctx)
            if measured is not None:
                batch = StepBatch(prefill_new=tuple(prefill), prefill_cached=(0,) * len(prefill), decode_context=(ctx,) * b)
                rows.append({"phase": phase, "tp": tp, "decodes": b, "measured_s": measured, "predicted_s": model.step_time(batch),
                             "served": experts_within_memory(meas8, spec, tp, sum(prefill) + b, bw)})
    return rows


def mla_step_table(tabs: dict, meas, meas8, gpu_name: str, coefficients: dict, bw: float) -> dict:
    """mla_step_rows by phase: "all" of them, and those whose measured experts the GPU's memory could
    serve ("served"), whose spread is the band ({}: no MLA table or fp8 GEMMs)."""
    rows = mla_step_rows(tabs, meas, meas8, gpu_name, coefficients, bw)
    if not rows:
        return {}
    return {"all": summary(rows), "served": summary([r for r in rows if r["served"]])}


def print_mla_steps(title: str, s: dict):
    print_summary(title, s["all"])
    print_summary("(the same, the steps whose measured experts the GPU's memory could serve)", s["served"])


def moe_measured(meas, meas8, name) -> dict:
    """kernel -> (the Measured holding its GEMMs and MoE kernel, the LM head's): the MoE step checks
    a GPU has (its tables time the fused MoE kernel)."""
    out = {}
    if meas[name].moe:
        out["bf16"] = (meas[name], None)
    if name in meas8 and meas8[name].moe:
        out["fp8"] = (meas8[name], meas[name])
    return out


def own_kernel_terms(tabs: dict, gpu, relative: dict) -> dict:
    """The GEMMs', the fused MoE kernels', the Gated DeltaNet and the MLA terms' coefficients fitted
    on a RELATIVE_CHECKS GPU's own tables, its relative's attention and all-reduce coefficients
    fixed: B200's MoE kernels are FlashInfer's TRT-LLM ones and its GDN and MLA kernels are others
    too, which nothing fitted on Hopper's knows (H200's coefficients are 20-38% off on B200's MoE
    tables, 44-73% on its MLA modules, 1.74x slow on its GDN prefill); its own GEMM fit composes
    its steps better than H200's (bf16 9.5 / 5.5 / 9.8% -> 7.5 / 5.9 / 5.3%), its own attention fit
    worse (its fitted floors come out at 0)."""
    own, errs = fit_gemms(tabs, gpu, START)
    families, family_errs = fit_families(tabs, gpu, {**relative, **own})
    own.update(families)
    errs.update(family_errs)
    if "ew" in tabs:  # Blackwell's elementwise kernels: its own floor and efficiency
        ew, errs["elementwise"] = fit_elementwise(tabs["ew"], gpu, {**relative, **own})
        own.update(ew)
    print("\n" + f"{gpu.name}'s own GEMM, MoE, GDN, MLA and elementwise kernel fits: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in errs.items()))
    return {k: float(v) for k, v in own.items()}


def relative_checks(t: Tables, gpus: dict, probes: dict, own: dict | None = None) -> dict:
    """RELATIVE_CHECKS: each GPU's own kernels and composed steps predicted with its relative's
    coefficients (the cross-generation check) and as it ships them, its relative's attention and
    all-reduce with its own GEMM, MoE, GDN and MLA terms (own_kernel_terms, fitted here, or `own`
    as shipped, name -> terms), at its own catalog peaks: the bands and errors it gets."""
    from kvreplay.catalog.gpus import get_gpu

    out = {}
    for name, (gpu_dir, relative) in RELATIVE_CHECKS.items():
        tabs = kernels(t, gpu_dir)
        bw = stream(probes, name, relative)
        gpu = streamed(get_gpu(name), bw)
        rel = gpus[relative]["coefficients"]
        terms = own[name] if own is not None else own_kernel_terms(tabs, gpu, rel)
        coef = {**rel, **terms}
        out[name] = {"relative": relative, "coefficients": terms, **relative_steps(name, relative, tabs, bw, rel, coef),
                     **relative_kernels(name, relative, tabs, gpu, rel, coef)}
    return out


def relative_steps(name: str, relative: str, tabs: dict, bw: float, rel: dict, coef: dict) -> dict:
    """A RELATIVE_CHECKS GPU's composed steps (bf16 and fp8 dense, MLA, MoE), printed with its
    relative's coefficients and as it ships them (`coef`), whose spreads are its bands."""
    out, meas = {}, Measured(tabs)
    meas8 = Measured(tabs, "gemm_fp8") if "gemm_fp8" in tabs else None
    for dtype, mm, head, suffix in (("bf16", meas, None, ""), ("fp8", meas8, meas, "_fp8")):
        if mm is None:
            continue
        held = summary(step_table(mm, name, rel, bw, dtype, head=head))
        print_summary(f"{name} {dtype} steps (held back: {relative}'s coefficients)", held)
        s = summary(step_table(mm, name, coef, bw, dtype, head=head))
        print_summary(f"{name} {dtype} steps (as {name} ships them: {relative}'s attention, its own GEMMs)", s)
        out.update({f"bands{suffix}": {p: v["band"] for p, v in s.items()}, f"step_error{suffix}": {p: v["mape"] for p, v in s.items()},
                    f"step_error{suffix}_relative": {p: v["mape"] for p, v in held.items()}})
    mla = mla_step_table(tabs, meas, meas8, name, coef, bw)
    if mla:
        print_mla_steps(f"{name} {MLA_MODEL} fp8 steps (MLA modules; as {name} ships them)", mla)
        out["bands_mla_steps"] = {"fp8": {p: v["band"] for p, v in mla["served"].items()}}
    for kernel, mm, head in (("bf16", meas, None), ("fp8", meas8, meas)):
        if mm is not None and mm.moe:
            s = summary(step_table(mm, name, coef, bw, kernel, head=head, moe="experts"))
            print_summary(f"{name} {kernel} MoE steps (as {name} ships them)", s)
            out.setdefault("bands_moe_steps", {})[kernel] = {p: v["band"] for p, v in s.items()}
            out.setdefault("moe_step_error", {})[kernel] = {p: v["mape"] for p, v in s.items()}
    return out


def relative_kernels(name: str, relative: str, tabs: dict, gpu, rel: dict, coef: dict) -> dict:
    """A RELATIVE_CHECKS GPU's MoE kernels, GDN layers and MLA modules one layer at a time, printed
    with its relative's coefficients and with its own fits (`coef`), whose spreads are its bands."""
    out = {}
    held, m = moe_table(tabs, gpu, rel), moe_table(tabs, gpu, coef)
    if m:
        print_moe(f"{name} MoE kernels (held back: {relative}'s coefficients)", held)
        print_moe(f"{name} MoE kernels (its own fit, as {name} ships it)", m)
        out.update({"bands_moe": {k: v["band"] for k, v in m.items()}, "moe_error": {k: v["mape"] for k, v in m.items()},
                    "moe_error_relative": {k: v["mape"] for k, v in held.items()}})
    held, g = gdn_table(tabs.get("gdn"), gpu, rel), gdn_table(tabs.get("gdn"), gpu, coef)
    if g:
        print_gdn(f"{name} Gated DeltaNet layers (held back: {relative}'s coefficients)", held)
        print_gdn(f"{name} Gated DeltaNet layers (its own fit, as {name} ships it)", g)
        out["bands_gdn"] = {p: v["band"] for p, v in g.items()}
    held, modules = mla_table(tabs.get("mla"), gpu, rel, gemm_fp8_model), mla_table(tabs.get("mla"), gpu, coef, gemm_fp8_model)
    if modules:
        print_mla(f"{name} MLA modules (held back: {relative}'s coefficients)", held)
        print_mla(f"{name} MLA modules (its own MLA term, as {name} ships it)", modules)
        out.update({"mla_module_error": {p: v["mape"] for p, v in modules.items()},
                    "mla_module_error_relative": {p: v["mape"] for p, v in held.items()}})
    return out


def e2e_model(run, extra=None, coefficients=None, bw=None):
    """The calibrated roofline of a silicon run: the shipped calibration (or `coefficients`, their
    memory terms at `bw` bytes/s) with `extra` coefficients over it."""
    from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

    c = {**(coefficients or {}), **(extra or {})}
    return CalibratedRooflineTimeModel(run["model"], run["gpu"], run["tp"], dtype=run["weights"],
                                       kv_dtype=run["kv"], coefficients=c or None, stream_bytes_per_s=bw)


def e2e_check(t: Tables) -> dict:
    """The silicon runs simulated under roofline-raw, the calibrated kernels alone, and the shipped
    calibration (kernels and the serving terms), printed by GPU and source."""
    import calibrate_e2e as e2e
    from kvreplay.serving.timing.models import RooflineTimeModel

    runs, left = e2e.silicon_runs(t.silicon())
    print(f"\nsilicon runs: {len(runs)} simulated; left out: {left or 'none'}")
    off = dict.fromkeys(SERVING_TERMS, 0.0)
    out = {}
    for label, make, host in (
            ("roofline-raw", lambda r: RooflineTimeModel(r["model"], r["gpu"], r["tp"], dtype=r["weights"], kv_dtype=r["kv"]),
             lambda r: "none"),
            ("roofline, kernels only (no serving term, no host CPU)", lambda r: e2e_model(r, off), lambda r: "none"),
            ("roofline (calibrated) with the host CPU's terms (serving/timing/host.py)", lambda r: e2e_model(r), None)):
        rows = e2e.simulate_runs(runs, make, host)
        by = {k: e2e.summary(v) for k, v in e2e.groups(rows).items()}
        e2e.print_table(f"end to end: aiconfigurator's silicon vLLM runs against kvreplay, {label} "
                        f"(the benchmark's {e2e.PER_CLIENT} B requests: calibrate_e2e.py)", by)
        out[label] = {f"{g} {src}": s for (g, src), s in by.items()}
    # the MoE runs as the roofline timed them before it had an MoE kernel: the experts in the GEMMs
    import dataclasses

    from kvreplay.analysis.models import get_model

    moe = [{**r, "model": dataclasses.replace(get_model(r["model"]), moe=None)} for r in runs if get_model(r["model"]).moe]
    if moe:
        rows = e2e.simulate_runs(moe, lambda r: e2e_model(r))
        by = {k: e2e.summary(v) for k, v in e2e.groups(rows).items()}
        label = "roofline (calibrated), the experts timed as the other GEMMs (before the MoE kernel term)"
        e2e.print_table(f"end to end: the MoE runs, {label}", by)
        out[label] = {f"{g} {src}": s for (g, src), s in by.items()}
    return out


def fit_serving_terms(t: Tables, gpus: dict, probes: dict) -> dict:
    """The serving stack's terms (calibrate_e2e.py), fitted on FIT_GPU's silicon runs."""
    import calibrate_e2e as e2e

    runs, _ = e2e.silicon_runs(t.silicon())
    mine = [r for r in runs if r["gpu"] == e2e.FIT_GPU and r["source"] == e2e.FIT_SOURCE]
    coef = gpus[e2e.FIT_GPU]["coefficients"]
    bw = stream(probes, e2e.FIT_GPU, e2e.FIT_GPU)
    terms = e2e.fit_terms(mine, lambda r, extra: e2e_model(r, extra, coef, bw))
    print(f"serving terms fitted on {len(mine)} {e2e.FIT_GPU} silicon runs: " +
          ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in terms.items()))
    return terms


def widen_decode_bands(t: Tables, data: dict):
    """Decode steps in real serving also pay what no kernel table holds: each GPU with silicon runs
    of the benchmark's protocol widens its decode band to their TPOT's measured/simulated spread."""
    import calibrate_e2e as e2e

    runs, _ = e2e.silicon_runs(t.silicon())
    for name in sorted({r["gpu"] for r in runs}):
        mine = [r for r in runs if r["gpu"] == name and r["source"] == e2e.FIT_SOURCE]
        entry = data["gpus"].get(name) or data["relative_bands"].get(name)
        if not mine or entry is None:
            continue
        band = e2e.summary(e2e.simulate_runs(mine, e2e_model))["tpot"]["band"]
        _widen_decode(entry, band)
        entry["e2e_tpot_band"] = band
    # a measured GPU without silicon runs of the protocol (calibrate_e2e.SILICON_GPUS): its nearest
    # relative's spread (since 2026-12-07: the GB200, GB300 and B300 take the B200's)
    for name, proxy in SILICON_PROXY.items():
        entry, band = data["relative_bands"].get(name), data["relative_bands"].get(proxy, {}).get("e2e_tpot_band")
        if entry is not None and band is not None and "e2e_tpot_band" not in entry:
            _widen_decode(entry, band)
            entry["e2e_tpot_band_borrowed"] = {"from": proxy, "band": band}


def _widen_decode(entry: dict, band):
    for key in ("bands", "bands_fp8"):
        if key in entry:
            lo, hi = entry[key]["decode"]
            entry[key]["decode"] = [min(lo, band[0]), max(hi, band[1])]


def transfer_bands(report: dict, data: dict) -> dict:
    """A GPU without measurements nor a check of its own: the spread of the cross-GPU checks."""
    transfer = spread(report[name]["calibrated"] for name in GPUS if name != FIT_GPU)
    for entry in [*data["gpus"].values(), *data["relative_bands"].values()]:  # and the silicon TPOT spread
        if "e2e_tpot_band" in entry:
            lo, hi = transfer["decode"]
            transfer["decode"] = [min(lo, entry["e2e_tpot_band"][0]), max(hi, entry["e2e_tpot_band"][1])]
    return transfer


def transfer_kernel_bands(report: dict) -> dict:
    """A GPU without measurements: the spreads of the MoE kernels, the MoE and MLA steps and the GDN
    layers on the GPUs the fit never saw (keys as the calibration data has them)."""
    held = [report[name] for name in GPUS if name != FIT_GPU]
    kernels = dict.fromkeys(key[len("moe_steps_"):] for r in held for key in r
                            if key.startswith("moe_steps_") and not key.endswith("_as_dense"))
    return {"transfer_bands_moe": spread(r.get("moe", {}) for r in held),
            "transfer_bands_moe_steps": {k: spread(r[f"moe_steps_{k}"] for r in held if f"moe_steps_{k}" in r)
                                         for k in kernels},
            "transfer_bands_mla_steps": {"fp8": spread(r["mla_steps_fp8"]["served"] for r in held if "mla_steps_fp8" in r)},
            "transfer_bands_gdn": spread(r["gdn"] for r in held if "gdn" in r)}


def own_fits(tabs, meas, meas8, fit, probes) -> dict:
    """Each measured GPU's coefficients fitted on its own kernels, with the bands of its steps."""
    from kvreplay.catalog.gpus import get_gpu

    gpus = {}
    for name in GPUS:
        bw = stream(probes, name, name)
        gpu = streamed(get_gpu(name), bw)
        own = fit if name == FIT_GPU else fit_gpu(tabs[name], gpu)[0]
        if "ew" not in tabs[name]:  # no measured elementwise kernel (A100): FIT_GPU's
            own = {**own, **{k: fit[k] for k in EW_TERMS}}
        s = summary(step_table(meas[name], name, own, bw))
        gpus[name] = {"coefficients": {k: float(v) for k, v in own.items()},
                      "bands": {p: v["band"] for p, v in s.items()}, "step_error": {p: v["mape"] for p, v in s.items()}}
        if name in meas8:
            s8 = summary(step_table(meas8[name], name, own, bw, "fp8", head=meas[name]))
            gpus[name]["bands_fp8"] = {p: v["band"] for p, v in s8.items()}
            gpus[name]["step_error_fp8"] = {p: v["mape"] for p, v in s8.items()}
        m = moe_table(tabs[name], gpu, own)
        if m:
            gpus[name]["bands_moe"] = {k: v["band"] for k, v in m.items()}
            gpus[name]["moe_error"] = {k: v["mape"] for k, v in m.items()}
        g = gdn_table(tabs[name].get("gdn"), gpu, own)
        if g:
            gpus[name]["bands_gdn"] = {p: v["band"] for p, v in g.items()}
        mla = mla_step_table(tabs[name], meas[name], meas8.get(name), name, own, bw)
        if mla:
            gpus[name]["bands_mla_steps"] = {"fp8": {p: v["band"] for p, v in mla["served"].items()}}
        steps = moe_step_bands(moe_measured(meas, meas8, name), name, own, bw)
        if steps:
            gpus[name]["bands_moe_steps"] = steps
    return gpus


def moe_step_bands(measured: dict, name: str, coefficients: dict, bw: float) -> dict:
    """kernel -> phase -> the 5-95% band of the MoE models' composed steps (and their error)."""
    out = {}
    for kernel, (mm, head) in measured.items():
        s = summary(step_table(mm, name, coefficients, bw, kernel, head=head, moe="experts"))
        out[kernel] = {p: v["band"] for p, v in s.items()}
    return out


def write(data: dict):
    from kvreplay.serving.timing.roofline import calibration_data

    OUT.write_text(json.dumps(data, indent=1) + "\n")
    calibration_data.cache_clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group()  # (one of them, or the full fit: none is ignored for another)
    what.add_argument("--check", action="store_true", help="print the held-back tables from the shipped coefficients")
    ap.add_argument("--json", default=None, help="also write every table as JSON here")
    ap.add_argument("--e2e", action="store_true", help="also simulate aiconfigurator's silicon vLLM serving runs")
    ap.add_argument("--calibration", type=Path, default=OUT, metavar="FILE",
                    help="with --check: the coefficients to check (default: the shipped file; --e2e always simulates "
                         "the shipped one)")
    what.add_argument("--allreduce", action="store_true",
                    help="refit only each measured GPU's all-reduce coefficients (the others as shipped) and write them")
    what.add_argument("--fp8-large", action="store_true",
                    help=f"fit only {FIT_GPU}'s fp8 GEMM efficiency from 8,192 rows (the others as shipped) and write it")
    args = ap.parse_args()
    if (args.allreduce or args.fp8_large) and (args.e2e or args.json or args.calibration != OUT):
        ap.error("--allreduce and --fp8-large refit one family and write it: no --e2e, --json or --calibration")
    if args.allreduce:
        return refit_allreduce(Tables(wheel()))
    if args.fp8_large:
        return refit_fp8_large(Tables(wheel()))
    if args.calibration != OUT and not args.check:
        ap.error("--calibration needs --check (a fit writes the shipped file)")
    from kvreplay.catalog.gpus import get_gpu

    whl = wheel()
    t = Tables(whl)
    tabs = {name: kernels(t, d) for name, d in GPUS.items()}
    meas = {name: Measured(tabs[name]) for name in GPUS}
    meas8 = {name: Measured(tabs[name], "gemm_fp8") for name in GPUS if "gemm_fp8" in tabs[name]}
    if args.check:  # the shipped coefficients and streaming bandwidths
        shipped = json.loads(args.calibration.read_text())
        fit, probes = shipped["gpus"][FIT_GPU]["coefficients"], shipped.get("stream_bandwidth", {})
    else:
        probes = stream_probes(t)
    print("streaming bandwidth (" + PROBE_KERNEL + f", shapes moving >= {PROBE_MIN_BYTES / 1e6:.0f} MB): " +
          ", ".join(f"{n} {p['bytes_per_s'] / 1e12:.2f} TB/s ({100 * p['fraction_of_peak']:.1f}% of peak)"
                    for n, p in probes.items()))
    if not args.check:
        fit, errs = fit_gpu(tabs[FIT_GPU], streamed(get_gpu(FIT_GPU), stream(probes, FIT_GPU, FIT_GPU)))
        print(f"kernel fit on {FIT_GPU}: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in errs.items()))
    report = held_back(tabs, meas, meas8, fit, probes)
    if not args.check:
        gpus = own_fits(tabs, meas, meas8, fit, probes)
        terms = fit_serving_terms(t, gpus, probes)
        for entry in gpus.values():
            entry["coefficients"].update(terms)
        data = {
            "_comment": "Written by benchmarks/calibrate.py: the calibrated roofline's coefficients per measured GPU "
                        "(serving/timing/roofline.py). Bands: 5th-95th percentile of measured / predicted step time over steps "
                        "composed from the GPU's measured kernels; the decode band also spans the silicon runs' TPOT "
                        "measured / simulated (e2e_tpot_band; a GPU without runs, its relative's: e2e_tpot_band_borrowed). relative_bands: a GPU that ships its relative's coefficients, "
                        "checked on its own kernels; transfer_bands: a GPU without measurements. stream_bandwidth: the "
                        "streaming bandwidth measured on each GPU that has a quantisation table, which every memory "
                        "term runs at (efficiencies are fractions of it; roofline.stream_bandwidth). The serving terms "
                        f"({', '.join(SERVING_TERMS)}) are fitted on {FIT_GPU}'s silicon serving runs (calibrate_e2e.py).",
            "sources": [{"name": "NVIDIA aiconfigurator kernel database and silicon serving runs",
                         "repository": "https://github.com/ai-dynamo/aiconfigurator",
                         "package": f"aiconfigurator-core=={WHEEL_VERSION} (PyPI wheel {whl.name})",
                         "sha256": sha256(whl), "license": "Apache-2.0",
                         "attribution": "Copyright (c) 2026 NVIDIA CORPORATION & AFFILIATES. Licensed under the Apache "
                                        "License, Version 2.0; kvreplay ships coefficients fitted to these measurements, "
                                        "not the measurements.",
                         "files": sorted(t.used)}],
            "fitted_range": {"models": [n for n, _ in DENSE], "moe_models": [n for n, _ in MOE], "mla_models": [MLA_MODEL], "tp": [1, 2, 4, 8], "max_context": 8192,
                             "mla_max_context": int(tabs[FIT_GPU]["mla"][0].isl.max()),
                             "max_prefill_tokens": 16384, "max_decode_batch": 256},
            "gpus": gpus,
            "stream_bandwidth": probes,
            "relative_bands": relative_checks(t, gpus, probes),
            "relatives": {"B200": RELATIVE_CHECKS["B200"][1], **RELATIVES,
                          **{name: relative for name, (_, relative) in RELATIVE_CHECKS.items()}},
            "held_back": report,
        }
        data["transfer_bands"] = transfer_bands(report, data)
        data.update(transfer_kernel_bands(report))
        write(data)  # the serving terms in place: the decode bands are widened on runs simulated with them
        widen_decode_bands(t, data)
        data["transfer_bands"] = transfer_bands(report, data)
        data["sources"][0]["files"] = sorted(t.used)
        write(data)
        print(f"\nwrote {OUT.relative_to(REPO)}")
    else:
        relative_checks(t, shipped["gpus"], probes, {k: v["coefficients"] for k, v in shipped["relative_bands"].items()})
    shipped = json.loads((args.calibration if args.check else OUT).read_text())  # (as checked, or as just written)
    report["held_out_sources"] = sources.held_out_sources(t, shipped, shipped["stream_bandwidth"])
    report["allreduce_sources"] = sources.allreduce_check(t, shipped)
    if args.e2e:
        report["e2e"] = e2e_check(t)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
