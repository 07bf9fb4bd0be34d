"""Served routing: vLLM's fused MoE kernels as a served model routes its tokens, against the
balanced routing the MoE kernel terms are fitted on (`python benchmarks/moe_routing.py`; docs/timing.md,
"routed experts of an MoE").

aiconfigurator's MoE tables (``moe/vllm/0.24.0/moe_perf.parquet`` in the wheel calibrate.py reads)
time each kernel (vLLM's whole ``FusedMoE`` layer given the router's logits: top-k, alignment,
the experts' input quantisation, both GEMMs, the weighted sum; collector/vllm/collect_moe.py)
under three routings: balanced, and power laws of alpha 1.01 and 1.2, the one aiconfigurator's own
serving model takes (its ModelConfig ``workload_distribution = "power_law"``, alpha 1.01 in
sdk/models). kvreplay's MoE terms are fitted on the balanced rows (calibrate_moe.py); the served
factor (roofline.SERVED_ROUTING) is the power-law time over the balanced time of the same kernel
and shape, fitted on H100's table (calibrate_moe.served_routing). This prints:

- each kernel's factors at 2^0 .. 2^14 tokens on H100 (shipped), H200 (held back) and B200
  (FlashInfer's TRT-LLM kernels, not Hopper's: B200 keeps balanced routing);
- the MoE term's error over the power-law rows of each Hopper GPU's table, with and without the
  factor (H100's coefficients on H100, each GPU's shipped coefficients on the others).
"""

from __future__ import annotations

import sys

import numpy as np
from calibrate import Tables, stream, stream_probes, streamed, wheel
from calibrate_moe import moe_args, moe_model, routing_rows, served_routing

GPUS = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm"}


def main() -> int:
    from kvreplay.catalog.gpus import get_gpu
    from kvreplay.serving.timing.roofline import SERVED_ROUTING, calibration_for
    from kvreplay.serving.timing.roofline import served_routing as factor

    t = Tables(wheel())
    probes = stream_probes(t)
    rows = {name: routing_rows(t, d) for name, d in GPUS.items()}
    fitted = {k: served_routing(b, p) for k, (b, p) in rows["H100"].items()}
    stale = [k for k, v in fitted.items() if tuple(SERVED_ROUTING.get(k, ())) != v]
    print("served routing (power law 1.01) / balanced, median per knot of 2^0 .. 2^14 tokens")
    print("| kernel | GPU | factors | max |difference| from H100's |")
    print("| --- | --- | --- | ---: |")
    for kernel, f in fitted.items():
        for name in GPUS:
            if kernel not in rows[name]:
                continue
            g = served_routing(*rows[name][kernel])
            print(f"| {kernel} | {name} | {' '.join(f'{x:.2f}' for x in g)} | "
                  f"{max(abs(a - b) for a, b in zip(g, f)):.3f} |")
    print("\nthe MoE term over each table's power-law 1.01 rows: mean |error|, median measured / predicted")
    print("| kernel | GPU | rows | balanced | served | served, 1,024-16,384 tokens: balanced -> served |")
    print("| --- | --- | ---: | --- | --- | --- |")
    for name in ("H100", "H200"):
        cal = calibration_for(name)
        gpu = streamed(get_gpu(name), stream(probes, name, cal.measured_on))
        for kernel, (_, p) in rows[name].items():
            y = p.latency.to_numpy(float) / 1e3
            bal = moe_model(cal.coefficients, gpu, kernel, *moe_args(p))
            served = bal * np.array([factor(kernel, n) for n in p.num_tokens])
            big = p.num_tokens.to_numpy() >= 1024

            def cell(pred, keep=slice(None)):
                r = y[keep] / pred[keep]
                return f"{100 * np.mean(np.abs(1 / r - 1)):.1f}%, {np.median(r):.2f}"

            print(f"| {kernel} | {name} | {len(p)} | {cell(bal)} | {cell(served)} | {cell(bal, big)} -> {cell(served, big)} |")
    if stale:
        print(f"\nroofline.SERVED_ROUTING differs from H100's table for {', '.join(stale)}: paste {fitted}")
        return 1
    print("\nroofline.SERVED_ROUTING is H100's table, as shipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
