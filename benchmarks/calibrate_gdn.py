"""The linear-attention half of benchmarks/calibrate.py: vLLM's Gated DeltaNet kernels in
aiconfigurator's tables (``systems/data/<gpu>/linear_attention/vllm/<version>/gdn_perf.parquet``:
Qwen3.5's GDN layers at 1-64 value heads, prefill of 1-64 requests of 1-32,768 tokens, decode of
1-1,024 requests), their roofline (kvreplay.serving.timing.roofline.gdn_layer_time) and its check
(since 2026-12-04 (5); docs/timing.md, "Mamba / linear-attention layers").

A layer's time is the sum of its kernels in the phase: the causal conv1d and FlashInfer's chunked
gated delta rule in prefill ("context"), the conv1d update and the fused recurrent rule in decode
("generation"). Its shapes at Qwen3.5-35B-A3B's heads (16 key and 32 value heads of 128, split by
TP) are Qwen3-Next-80B-A3B's, the catalog's GDN model: those rows are reported apart.
"""

from __future__ import annotations

import numpy as np
from calibrate_stats import print_table, ratio_stats

#: the GDN term's starting point, in GDN_TERMS' order (roofline.py)
GDN_START = (200.0, 3e-5, 0.05, 0.5, 1e-6, 1e-5, 0.1, 0.8, 1e-7)
COLUMNS = ("batch_size", "seq_len", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "d_conv")
#: Qwen3-Next-80B-A3B's GDN heads at TP 1 (its config.json's linear_num_key_heads / value_heads)
NEXT_HEADS = (16, 32)


def gdn_kernels(t, gpu_dir: str):
    """One row per GDN layer shape and phase, its kernels' latencies summed (None without a table)."""
    prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/linear_attention/vllm/"
    if not any(n.startswith(prefix) and n.endswith("/gdn_perf.parquet") for n in t.names):
        return None
    g = t.read(gpu_dir, "linear_attention", "gdn_perf.parquet")
    g = g.astype({c: int for c in COLUMNS})
    return g.groupby(["model_name", "phase", *COLUMNS], as_index=False).latency.sum()


def gdn_args(table):
    """tokens, requests, state bytes per request, activation bytes per token, value heads, prefill?"""
    b, s = (table[c].to_numpy(float) for c in ("batch_size", "seq_len"))
    hk, hv, dk, dv, conv = (table[c].to_numpy(float) for c in COLUMNS[2:])
    prefill = (table.phase == "context").to_numpy()
    state = (hv * dk * dv + (conv - 1) * (2 * hk * dk + hv * dv)) * 2.0  # recurrent + conv state, bf16
    act = (2 * hk * dk + 2 * hv * dv) * 2.0  # q, k, v in and the output, bf16
    return np.where(prefill, b * s, b), b, state, act, hv, prefill


def gdn_model(c, gpu, tokens, rows, state, act, v_heads, prefill):
    """The GDN layer's roofline at coefficients `c` (a dict) on `gpu` (at its streaming bandwidth)."""
    from kvreplay.serving.timing.roofline import GDN_COEFFICIENTS, gdn_layer_time

    return gdn_layer_time(tuple(c[k] for k in GDN_COEFFICIENTS), tokens, rows, state, act, v_heads, prefill,
                          gpu.peak_flops("bf16"), gpu.bandwidth_bytes_per_s)


def before(c, gpu, tokens, rows, state, act, v_heads, prefill):
    """The same layers under the state term the roofline used before (roofline.mamba_term without
    GDN coefficients: the attention phase's floor and efficiency, the decode KV read's)."""
    peak, bw = gpu.peak_flops("bf16"), gpu.bandwidth_bytes_per_s
    floor = np.where(prefill, c["attn_floor_prefill_s"], c["attn_floor_decode_s"])
    e = np.where(prefill, c["e_attn_prefill"], c["e_attn_decode"])
    return floor + np.maximum(6.0 * state / 2.0 * tokens / (peak * e), 2.0 * state * rows / (bw * c["e_kv_decode"]))


def gdn_table(table, gpu, coefficients: dict) -> dict:
    """measured / predicted by phase (prefill: context, decode: generation), over every shape and
    at Qwen3-Next's heads (any TP split), with the same for the state term used before."""
    from kvreplay.serving.timing.roofline import GDN_COEFFICIENTS

    if table is None or not set(GDN_COEFFICIENTS) <= set(coefficients):
        return {}
    args, y = gdn_args(table), table.latency.to_numpy(float) / 1e3
    ratio, old = y / gdn_model(coefficients, gpu, *args), y / before(coefficients, gpu, *args)
    split = table.num_v_heads.to_numpy() * NEXT_HEADS[0] == table.num_k_heads.to_numpy() * NEXT_HEADS[1]
    nxt = (table.model_name == "Qwen/Qwen3.5-35B-A3B").to_numpy() & split & (table.head_k_dim == 128).to_numpy()
    out = {}
    for phase, rows in (("prefill", args[5]), ("decode", ~args[5])):
        n, o = ratio_stats(ratio[rows & nxt]), ratio_stats(old[rows & nxt])
        out[phase] = {**ratio_stats(ratio[rows]), "next_cases": n["cases"], "next_mape": n["mape"],
                      "next_mape_before": o["mape"], "next_median_before": o["median_ratio"]}
    return out


def print_gdn(title, s):
    columns = (("phase", False), ("cases", True), ("error (MAPE)", True), ("median", True), ("5-95% band", False),
               ("Qwen3-Next's heads: cases, error", False), ("before (the state term): error, median", False))
    print_table(title, columns, ([phase, str(v["cases"]), f"{100 * v['mape']:.1f}%", f"{v['median_ratio']:.2f}",
                                  f"{v['band'][0]:.2f}-{v['band'][1]:.2f}", f"{v['next_cases']}, {100 * v['next_mape']:.1f}%",
                                  f"{100 * v['next_mape_before']:.1f}%, {v['next_median_before']:.2f}"]
                                 for phase, v in s.items()))
