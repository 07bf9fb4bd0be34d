"""The MoE half of benchmarks/calibrate.py: vLLM's fused MoE kernels in aiconfigurator's tables,
their roofline (kvreplay.serving.timing.roofline.moe_layer_time), the MoE models' steps composed
from measured kernels, and the bands they give (since 2026-12-04 (5); docs/timing.md, "routed
experts of an MoE", and benchmarks/RESULTS.md, the calibration record).

- **The tables**: ``systems/data/<gpu>/moe/vllm/<version>/moe_perf.parquet`` of the same wheel,
  the rows with the experts split by TP (``moe_ep_size`` 1) and tokens routed evenly
  ("balanced"), one kernel per weights dtype (MOE_KERNELS).
- **The check**: each kernel one layer at a time over every shape of its table (moe_table), beside
  the same rows timed as the roofline timed experts before, with the other GEMMs (as_dense); and
  the steps of calibrate.MOE's models, composed like the dense ones with the fused experts at each
  model's exact shape (composed_moe_step).
"""

from __future__ import annotations

import numpy as np
from calibrate_stats import RATIO_COLUMNS, print_table, ratio_cells, ratio_stats

#: the fused MoE kernel vLLM runs for each weights dtype, of those the tables timed (the first
#: present): the Triton kernels on Hopper, FlashInfer's TRT-LLM ones on Blackwell (B200's tables
#: have no Triton fp8 or bf16 rows), Marlin's W4A16 for int4 weights
MOE_KERNELS = {"bf16": ("bfloat16", ("unquantizedfusedmoe_triton", "unquantizedfusedmoe_flashinfer_trtllm")),
               "fp8": ("fp8_block", ("fp8moe_triton", "fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic")),
               "int4": ("int4_wo", ("wna16marlinmoe",)),
               "mxfp4": ("w4a16_mxfp4", ("gptossmxfp4moe_triton", "gptossmxfp4moe_flashinfer_trtllm"))}


def moe_kernels(t, gpu_dir: str) -> dict:
    """Each weights dtype's fused MoE kernel timings on the GPU (``moe/vllm/<version>/moe_perf.parquet``):
    the experts split by TP (moe_ep_size 1), tokens routed evenly ("balanced"); {} without a table."""
    prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/moe/vllm/"
    if not any(n.startswith(prefix) and n.endswith("/moe_perf.parquet") for n in t.names):
        return {}
    m = t.read(gpu_dir, "moe", "moe_perf.parquet")
    return kernel_rows(m[(m.moe_ep_size == 1) & (m.distribution == "balanced")])


def kernel_rows(m) -> dict:
    """{kernel: its rows}: each weights dtype's kernel (MOE_KERNELS), the first of its kernel
    sources the table times."""
    out = {}
    for kernel, (dtype, sources) in MOE_KERNELS.items():
        rows = m[m.moe_dtype == dtype]
        pick = next((p for p in (rows[rows.kernel_source.str.contains(src)] for src in sources) if len(p)), None)
        if pick is not None:
            out[kernel] = pick
    return out


def routing_rows(t, gpu_dir: str) -> dict:
    """Each weights dtype's kernel (MOE_KERNELS) timed under both routings, experts split by TP:
    {kernel: (balanced rows, power_law_1.01 rows)}; {} without a table."""
    prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/moe/vllm/"
    if not any(n.startswith(prefix) and n.endswith("/moe_perf.parquet") for n in t.names):
        return {}
    m = t.read(gpu_dir, "moe", "moe_perf.parquet")
    return {kernel: (pick[pick.distribution == "balanced"], pick[pick.distribution == SERVED_DISTRIBUTION])
            for kernel, pick in kernel_rows(m[m.moe_ep_size == 1]).items()}


#: the routing a served model's tokens take, as aiconfigurator models it (its ModelConfig's
#: workload_distribution "power_law" at alpha 1.01, sdk/config.py and sdk/models/*.py)
SERVED_DISTRIBUTION = "power_law_1.01"


def served_routing(balanced, served) -> tuple[float, ...]:
    """The fused MoE kernel's time under served routing over its time under balanced routing, the
    same kernel at the same shape (hidden, width, top-k, experts, TP) and tokens: at each of
    roofline.MOE_ROUTING_KNOTS (tokens 2^0 .. 2^14) the median over every shape and token count
    within half an octave of the knot (rounded to 3 decimals; nan where no row is)."""
    from kvreplay.serving.timing.roofline import MOE_ROUTING_KNOTS

    keys = ["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "num_tokens"]
    r = (served.groupby(keys).latency.min() / balanced.groupby(keys).latency.min()).dropna()
    octave = np.log2(r.index.get_level_values("num_tokens").to_numpy(float))
    out = []
    for k in range(MOE_ROUTING_KNOTS):
        near = r.to_numpy()[(octave >= k - 0.5) & (octave < k + 0.5)]
        out.append(round(float(np.median(near)), 3) if near.size else float("nan"))  # nan: no row near the knot
    return tuple(out)


def moe_args(table):
    """A MoE table's columns as moe_model takes them: tokens, hidden, expert width, topk, experts, tp."""
    return [table[x].to_numpy(float) for x in ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size")]


def moe_model(c, gpu, kernel, tokens, hidden, inter, topk, experts, tp):
    """The routed experts of one layer (roofline.moe_layer_time) at coefficients `c` (a dict)."""
    from kvreplay.serving.timing.roofline import MOE_WEIGHT_BYTES, moe_layer_time, moe_names

    peak = gpu.peak_flops("fp8" if kernel == "fp8" else "bf16")
    return moe_layer_time(tuple(c[k] for k in moe_names(kernel)), tokens, hidden, inter / tp, experts, topk,
                          MOE_WEIGHT_BYTES[kernel], peak, gpu.bandwidth_bytes_per_s)


def as_dense(coefficients: dict, kernel: str) -> dict:
    """The MoE kernel's coefficients as the roofline took them before it had its own: the experts
    timed with the other GEMMs, at the GEMMs' efficiencies, overlap and tile term (int4 at bf16's),
    no floor of their own, no cost per routed token, no minimum rows per expert."""
    from kvreplay.serving.timing.roofline import moe_names

    f = "_fp8" if kernel == "fp8" else ""
    dense = (coefficients[f"e_gemm{f}"], coefficients[f"e_weights{f}"], 0.0, coefficients[f"gemm_overlap_p{f}"], 0.0, 0.0,
             coefficients[f"gemm_k0{f}"], 0.0)
    return {**coefficients, **dict(zip(moe_names(kernel), dense))}


def moe_table(tables: dict, gpu, coefficients: dict) -> dict:
    """Each MoE kernel's measured / predicted over its table, by kernel (`gpu` a GPUSpec at its
    streaming bandwidth)."""
    from kvreplay.serving.timing.roofline import moe_names

    out = {}
    for kernel, table in tables.get("moe", {}).items():
        if not set(moe_names(kernel)) <= set(coefficients):
            continue
        args, y = moe_args(table), table.latency.to_numpy(float) / 1e3
        ratios = y / moe_model(coefficients, gpu, kernel, *args)
        before = y / moe_model(as_dense(coefficients, kernel), gpu, kernel, *args)
        dense = ratio_stats(before)
        out[kernel] = {**ratio_stats(ratios), "mape_as_dense": dense["mape"], "median_ratio_as_dense": dense["median_ratio"]}
    return out


def print_moe(title, s):
    print_table(title, (("weights", False), *RATIO_COLUMNS, ("as the GEMMs (before): error, median ratio", False)),
                ([kernel, *ratio_cells(v), f"{100 * v['mape_as_dense']:.1f}%, {v['median_ratio_as_dense']:.2f}"]
                 for kernel, v in s.items()))


#: the MoE kernels' starting point, in MOE_TERMS' order (roofline.py)
MOE_START = (0.4, 0.9, 3e-5, 2.0, 1e-8, 16.0, 100.0, 32.0)


def composed_moe_step(meas, spec, tp, prefill: list[int], decodes: int, ctx: int, head=None):
    """An MoE step from measured kernels: each layer's q/k/v and o GEMMs, router, attention and
    two all-reduces, each MoE layer's fused experts at the model's exact shape, the LM head (None
    where a table lacks a shape)."""
    H, V, d, m = spec.hidden_size, spec.vocab_size, spec.head_dim, spec.moe
    h, kv = spec.num_attention_heads // tp, max(1, spec.num_kv_heads // tp)
    T = sum(prefill) + decodes
    experts = meas.moe_time(T, H, m["expert_intermediate"], m["experts_per_token"], m["experts"], tp)
    if experts is None:
        return None
    layer = meas.gemm_time(T, (h + 2 * kv) * d, H) + meas.gemm_time(T, H, h * d) + meas.gemm_time(T, m["experts"], H)
    for t in ((meas.ctx_time(len(prefill), prefill[0], h, kv),) if prefill else ()) + \
            ((meas.gen_time(decodes, ctx, h, kv),) if decodes else ()):
        if t is None:
            return None
        layer += t
    ar = 2 * meas.ar_time(tp, T * H) if tp > 1 else 0.0
    return (spec.num_layers * (layer + ar) + m["layers"] * experts + (head or meas).gemm_time(len(prefill) + decodes, V // tp, H)
            + (head or meas).elementwise_time(spec, tp, T))
