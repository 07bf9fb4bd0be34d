"""The L40S's all-reduce over PCIe, fitted per TP degree on aiconfigurator's measured tables.

Source: NVIDIA aiconfigurator's kernel database (Apache-2.0), in the PyPI wheel
``aiconfigurator-core==0.12.0`` (github.com/ai-dynamo/aiconfigurator), the same wheel
benchmarks/calibrate.py reads:
- ``systems/data/l40s/comm/vllm/0.22.0/custom_allreduce_perf.parquet``: vLLM's custom all-reduce on
  L40S, bf16, 2, 4 and 8 GPUs, CUDA-graph rows (``kernel_source`` vLLM_custom_graph), messages up to
  vLLM's 8 MiB custom-kernel limit;
- ``systems/data/l40s/comm/nccl/2.27.3/nccl_perf.parquet``: NCCL 2.27.3's all_reduce (half) above it.

An L40S has no NVLink: its GPUs exchange over PCIe Gen4 x16 (32 GB/s each way), and the bus
bandwidth a group sustains falls with its size (traffic between PCIe switches crosses the host),
so one set of coefficients cannot serve every TP degree. Each degree gets its own fit of
roofline.allreduce_time's three terms (latency, the one-stage kernel's link bandwidth, the
two-stage / ring bus bandwidth), minimising the mean relative error over its messages, as
calibrate.py fits an NVLink GPU's over all degrees at once. The table it prints is what
kvreplay/catalog/gpus.py PCIE_ALLREDUCE ships (--check: the shipped figures against the tables).

    python benchmarks/fit_pcie_allreduce.py            # fit, print the table
    python benchmarks/fit_pcie_allreduce.py --check    # the shipped coefficients' errors per degree
    python benchmarks/fit_pcie_allreduce.py --steps    # and L40S steps composed from its own kernels

``--steps`` composes the dense models' bf16 steps (calibrate.py DENSE, step_shapes) from the L40S's
own measured kernels (its vLLM GEMM, attention and all-reduce tables) and prints, per TP degree,
measured / predicted under the shipped roofline (A100-80GB's coefficients at the L40S's peaks and
datasheet bandwidth) before (the A100's all-reduce scaled to PCIe's 32 GB/s) and after (the fit).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))
from calibrate import CUSTOM_AR_MAX, fit_family, wheel  # noqa: E402

GPU_DIR = "l40s"
CUSTOM = f"aiconfigurator_core/systems/data/{GPU_DIR}/comm/vllm/0.22.0/custom_allreduce_perf.parquet"
NCCL = f"aiconfigurator_core/systems/data/{GPU_DIR}/comm/nccl/2.27.3/nccl_perf.parquet"
START = {"allreduce_latency_s": 1e-5, "allreduce_link_bytes_per_s": 2e10, "allreduce_bus_bytes_per_s": 2e10}


def measured():
    """(num_gpus, message elements, seconds) of every all-reduce the fit reads (module doc)."""
    import zipfile

    import pandas as pd
    import pyarrow.parquet as pq

    z = zipfile.ZipFile(wheel())
    ar = pq.read_table(io.BytesIO(z.read(CUSTOM))).to_pandas()
    ar = ar[(ar.op_name == "all_reduce") & ar.kernel_source.str.contains("graph") & (ar.message_size * 2 <= CUSTOM_AR_MAX)]
    nccl = pq.read_table(io.BytesIO(z.read(NCCL))).to_pandas()
    nccl = nccl[(nccl.op_name == "all_reduce") & (nccl.nccl_dtype == "half") & (nccl.message_size * 2 > CUSTOM_AR_MAX)]
    x = pd.concat([ar[["num_gpus", "message_size", "latency"]], nccl[["num_gpus", "message_size", "latency"]]])
    x = x.groupby(["num_gpus", "message_size"], as_index=False).latency.min()
    return x.num_gpus.to_numpy(int), x.message_size.to_numpy(float), x.latency.to_numpy(float) / 1e3


def predict(c, tp, elements):
    from kvreplay.serving.timing.roofline import allreduce_time

    return allreduce_time(tp, elements * 2.0, c["allreduce_latency_s"], c)


def errors(c, tp, elements, seconds) -> dict:
    ratio = seconds / predict(c, tp, elements)
    return {"mean_abs_error": float(np.mean(np.abs(1 / ratio - 1))), "median_ratio": float(np.median(ratio)),
            "ratio_5_95": [float(np.percentile(ratio, 5)), float(np.percentile(ratio, 95))], "messages": int(ratio.size)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="the shipped coefficients against the tables")
    ap.add_argument("--steps", action="store_true", help="also L40S steps composed from its own kernels, before / after")
    args = ap.parse_args(argv)
    n, size, y = measured()
    for tp in sorted(set(n.tolist())):
        keep = n == tp
        if args.check:
            from kvreplay.catalog.gpus import PCIE_ALLREDUCE

            c = PCIE_ALLREDUCE["L40S"][tp]
        else:
            c, _ = fit_family(list(START), START, lambda cc: predict(cc, tp, size[keep]), y[keep])
            for _ in range(3):  # (restarts from the last optimum)
                c, _ = fit_family(list(START), c, lambda cc: predict(cc, tp, size[keep]), y[keep])
        e = errors(c, tp, size[keep], y[keep])
        bus = 2.0 * (tp - 1) / tp * size[keep] * 2.0 / y[keep] / 1e9  # (what nccl-tests prints as busbw)
        print(f"TP {tp}: latency {c['allreduce_latency_s'] * 1e6:.3f} us, link {c['allreduce_link_bytes_per_s'] / 1e9:.3f} "
              f"GB/s, bus {c['allreduce_bus_bytes_per_s'] / 1e9:.3f} GB/s; {e['messages']} messages, mean |error| "
              f"{e['mean_abs_error']:.1%}, median measured / predicted {e['median_ratio']:.3f} "
              f"(5-95%: {e['ratio_5_95'][0]:.3f}-{e['ratio_5_95'][1]:.3f}); measured busbw up to {bus.max():.2f} GB/s")
        if not args.check:
            print(f"    {tp}: {{\"allreduce_latency_s\": {c['allreduce_latency_s']:.6g}, \"allreduce_link_bytes_per_s\": "
                  f"{c['allreduce_link_bytes_per_s']:.6g}, \"allreduce_bus_bytes_per_s\": {c['allreduce_bus_bytes_per_s']:.6g}, "
                  f"\"band\": ({e['ratio_5_95'][0]:.4f}, {e['ratio_5_95'][1]:.4f})}},")
    if args.steps:
        composed_steps()
    return 0


def composed_steps() -> None:
    """The --steps table (module doc)."""
    from calibrate import DENSE, Measured, Tables, kernels, step_table, summary
    from calibrate_stats import print_table

    from kvreplay.catalog.gpus import PCIE_ALLREDUCE, get_gpu
    from kvreplay.serving.timing.roofline import calibration_data

    data = calibration_data()
    relative = data["relatives"]["L40S"]
    rel = dict(data["gpus"][relative]["coefficients"])
    gpu, other = get_gpu("L40S"), get_gpu(relative)
    scaled = {k: rel[k] * gpu.link_bytes_per_s / other.link_bytes_per_s
              for k in ("allreduce_bus_bytes_per_s", "allreduce_link_bytes_per_s")}
    meas = Measured(kernels(Tables(wheel()), GPU_DIR))
    rows, shipped = [], []
    for tp in sorted({tp for _, tps in DENSE for tp in tps if tp > 1}):
        fitted = {k: v for k, v in PCIE_ALLREDUCE["L40S"][tp].items() if k.startswith("allreduce_")}
        for label, ar in (("before: A100's all-reduce at 32/300", scaled), ("after: fitted on L40S's", fitted)):
            steps = [r for r in step_table(meas, "L40S", {**rel, **ar}, gpu.bandwidth_bytes_per_s) if r["tp"] == tp]
            bands = {phase: tuple(round(x, 4) for x in v["band"]) for phase, v in summary(steps).items()}
            if label.startswith("after"):
                shipped.append(f"    {tp}: \"steps\": {bands}")
            for phase, v in summary(steps).items():
                rows.append([str(tp), label, phase, str(v['cases']), f"{100 * v['mape']:.1f}%", f"{v['median_ratio']:.3f}",
                             f"{v['band'][0]:.3f}-{v['band'][1]:.3f}"])
    print_table("L40S bf16 steps composed from its own kernels: measured / predicted",
                (("TP", True), ("all-reduce", False), ("phase", False), ("steps", True), ("error", True),
                 ("median", True), ("5-95%", True)), rows)
    print("\nthe fits' step bands (PCIE_ALLREDUCE's \"steps\"):\n" + "\n".join(shipped))


if __name__ == "__main__":
    raise SystemExit(main())
