"""Prefill attention at 64-wide heads: FlashAttention's compute efficiency at head_dim 64 against the
128-wide heads the calibrated roofline's ``e_attn_prefill`` is fitted on (`python
benchmarks/attention_heads.py`; docs/timing.md, "prefill attention").

calibrate.py fits the prefill attention terms on each GPU's context-attention table at head_dim 128
(bf16 KV, no window). A 64-wide head does half the FLOPs of a 128-wide one per (query, key) pair, but
FlashAttention's per-tile work (the softmax's exp and rescaling of each score, loads and
synchronisation) does not halve with it, so its tensor cores run a smaller share of the time: on
H100's FlashAttention 3 table the 64-wide rows run at about 1.3x the time the 128-wide efficiency
predicts. gpt-oss (64 heads of 64) is the catalog's model with such heads; vLLM 0.18.0 runs its
attention (with sinks) on FlashAttention 3 on Hopper (platforms/cuda.py:92-97 puts FLASH_ATTN first,
v1/attention/backends/fa_utils.py:164-168 gives it sinks at FA version 3) and FlashInfer's TRT-LLM
kernels on Blackwell (cuda.py:84-90).

The shipped ratio (roofline.ATTN_PREFILL_HEAD64) is ``e_64 / e_attn_prefill`` on H100: ``e_64`` the
prefill compute efficiency refitted on the table's head_dim-64 rows alone (bf16 KV, no window), the
floor and the KV efficiency at H100's shipped values, by calibrate.py's fit_family (least mean
relative error). This prints it on H100 (fit), H200 and B200 (held back: checked, never fitted), the
64-wide rows' error with and without it on each, and whether the shipped constant is H100's.
"""

from __future__ import annotations

import sys

import numpy as np
from calibrate import Tables, attention_kernel, ctx_model, fit_family, stream, stream_probes, streamed, wheel

GPUS = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm"}
FIT_GPU = "H100"


def head_rows(table, head_dim: int):
    """A context-attention table's rows of the GPU's prefill kernel at `head_dim`, bf16 KV, no window."""
    keep = (table.kv_cache_dtype == "bfloat16") & (table.head_dim == head_dim)
    if "window_size" in table:
        keep &= table.window_size == 0
    rows = table[keep]
    return rows[rows.kernel_source == attention_kernel(table[table.kv_cache_dtype == "bfloat16"], "prefill")]


def args_of(rows):
    return [rows[a].to_numpy(float) for a in ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim")]


def head_ratio(rows, c: dict, gpu) -> float:
    """``e_64 / e_attn_prefill``: the compute efficiency refitted on `rows` (the other terms at `c`)."""
    args, y = args_of(rows), rows.latency.to_numpy(float) / 1e3
    fitted, _ = fit_family(["e_attn_prefill"], c, lambda cc: ctx_model(cc, gpu, *args), y)
    return fitted["e_attn_prefill"] / c["e_attn_prefill"]


def errors(rows, c: dict, gpu, ratio: float) -> tuple[float, float, float, float]:
    """The rows' mean |error| and median measured / predicted, at e_attn_prefill and at it x `ratio`."""
    args, y = args_of(rows), rows.latency.to_numpy(float) / 1e3
    out = []
    for r in (1.0, ratio):
        pred = ctx_model({**c, "e_attn_prefill": c["e_attn_prefill"] * r}, gpu, *args)
        out += [float(np.mean(np.abs(pred - y) / y)), float(np.median(y / pred))]
    return tuple(out)


def main() -> int:
    from kvreplay.catalog.gpus import get_gpu
    from kvreplay.serving.timing.roofline import ATTN_PREFILL_HEAD64, calibration_for

    t = Tables(wheel())
    probes = stream_probes(t)
    ratios, rows = {}, {}
    for name, d in GPUS.items():
        cal = calibration_for(name)
        gpu = streamed(get_gpu(name), stream(probes, name, cal.measured_on))
        table = t.read(d, "attention", "context_attention_perf.parquet")
        rows[name] = (head_rows(table, 64), cal.coefficients, gpu, attention_kernel(table, "prefill"))
        ratios[name] = head_ratio(rows[name][0], cal.coefficients, gpu)
    print("prefill attention at head_dim 64: e_64 / e_attn_prefill (each GPU's own 128-wide fit), and the 64-wide "
          "rows (bf16 KV, no window) at the shipped ratio")
    print("| GPU | kernel | rows | own ratio | mean abs error: 128-wide e -> shipped ratio | median measured / predicted |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    for name, (r, c, gpu, kernel) in rows.items():
        e0, m0, e1, m1 = errors(r, c, gpu, ATTN_PREFILL_HEAD64)
        role = "fit" if name == FIT_GPU else "held back"
        print(f"| {name} ({role}) | {kernel} | {len(r)} | {ratios[name]:.3f} | {100 * e0:.1f}% -> {100 * e1:.1f}% | "
              f"{m0:.2f} -> {m1:.2f} |")
    fitted = round(ratios[FIT_GPU], 3)
    print(f"shipped ATTN_PREFILL_HEAD64 {ATTN_PREFILL_HEAD64}; H100's fit {fitted}")
    if fitted != ATTN_PREFILL_HEAD64:
        print("roofline.ATTN_PREFILL_HEAD64 is not H100's fit: update it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
