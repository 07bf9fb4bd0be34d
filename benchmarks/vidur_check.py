"""The calibrated roofline's layer GEMMs against Microsoft Vidur's measured A100 and H100 profiles:
a second collection of kernel timings, from another serving stack, that the fit never saw.

Source: Vidur (github.com/microsoft/vidur, MIT License, Copyright (c) Microsoft Corporation),
``data/profiling/compute/<gpu>/<model>/mlp.csv``: per-layer operator times (medians, ms) of
dense models at TP 1-8 and 1-32,768 tokens, timed with Sarathi-Serve's PyTorch layers. Nothing of
it ships with kvreplay, and no package registry carries it: clone the repository and point
``--vidur`` at it (checked at commit 7d47513363ec447a741ac5e47241580b47724fbf).

Each row's four projection GEMMs (``attn_pre_proj`` q/k/v, ``attn_post_proj`` o,
``mlp_up_proj`` gate/up, ``mlp_down_proj`` down), at the shapes the row's model and TP degree
give them, are predicted by benchmarks/calibrate.py's bf16 GEMM model with the shipped
coefficients of the GPU (A100-80GB's and H100's own fits, on aiconfigurator's tables) and with
H100's on the A100 (the cross-GPU transfer), at the GPU's streaming bandwidth. Also printed: the
row's elementwise operators (two norms, the activation, rope, the residual add) as a share of its
GEMMs, and (since 2026-12-07) against the calibrated roofline's elementwise term (its floor per
kernel and each operator's bytes at the streaming bandwidth: roofline.elementwise_kernels), which
is fitted on vLLM's quantisation kernel, not on these.

    git clone https://github.com/microsoft/vidur /tmp/vidur
    python benchmarks/vidur_check.py --vidur /tmp/vidur
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

GPUS = {"a100": "A100-80GB", "h100": "H100"}
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "mlp_act", "attn_rope", "add")


def shapes(row) -> list[tuple[int, int]]:
    """The (n, k) of the row's four GEMMs on one GPU of its TP group, as calibrate.composed_step
    takes them."""
    tp = int(row.num_tensor_parallel_workers)
    hidden, mlp = int(row.n_embd), int(row.n_expanded_embd)
    d = hidden // int(row.n_head)
    h, kv = int(row.n_head) // tp, max(1, int(row.n_kv_head) // tp)
    up = (2 if bool(row.use_gated_mlp) else 1) * mlp // tp
    return [((h + 2 * kv) * d, hidden), (hidden, h * d), (up, hidden), (hidden, mlp // tp)]


def rows_of(vidur: Path, gpu_dir: str):
    import pandas as pd

    for path in sorted((vidur / "data" / "profiling" / "compute" / gpu_dir).glob("*/*/mlp.csv")):
        table = pd.read_csv(path)
        table.columns = [c.replace(".", "_") for c in table.columns]  # time_stats.mlp_act.median -> _
        yield f"{path.parent.parent.name}/{path.parent.name}", table


def elementwise_bytes(row) -> list[float]:
    """Bytes each of the row's ELEMENTWISE_OPS moves on one GPU (bf16): a norm reads and writes the
    hidden state, the activation reads gate and up (one input ungated) and writes their product,
    rope reads and writes q and k, the residual add reads two and writes one."""
    tp, m = int(row.num_tensor_parallel_workers), float(row.num_tokens)
    hidden, mlp = int(row.n_embd), int(row.n_expanded_embd)
    d = hidden // int(row.n_head)
    h, kv = int(row.n_head) // tp, max(1, int(row.n_kv_head) // tp)
    act = (6 if bool(row.use_gated_mlp) else 4) * mlp / tp
    return [4 * m * hidden, 4 * m * hidden, m * act, 4 * m * (h + kv) * d, 6 * m * hidden]


def check(vidur: Path, gpu_dir: str, coefficients_from: str, data: dict) -> list[dict]:
    import calibrate as cal
    from kvreplay.catalog.gpus import get_gpu
    from kvreplay.serving.timing.roofline import stream_bandwidth

    name = GPUS[gpu_dir]
    gpu = get_gpu(name)
    bw = stream_bandwidth(gpu, coefficients_from, data["stream_bandwidth"])[0]
    coef = data["gpus"][coefficients_from]["coefficients"]
    streamed = cal.streamed(gpu, bw)
    out = []
    for model, table in rows_of(vidur, gpu_dir):
        for row in table.itertuples():
            m = float(row.num_tokens)
            predicted = sum(float(np.asarray(cal.gemm_model(coef, streamed, np.array([m]), n, k)).ravel()[0])
                            for n, k in shapes(row))
            measured = sum(getattr(row, f"time_stats_{op}_median") for op in GEMM_OPS) / 1e3
            elementwise = sum(getattr(row, f"time_stats_{op}_median", 0.0) for op in ELEMENTWISE_OPS) / 1e3  # (absent: 0)
            ops = [op for op in ELEMENTWISE_OPS if hasattr(row, f"time_stats_{op}_median")]
            ew = sum(float(cal.ew_model(coef, streamed, b)) for op, b in zip(ELEMENTWISE_OPS, elementwise_bytes(row))
                     if op in ops)
            out.append({"model": model, "tp": int(row.num_tensor_parallel_workers), "tokens": int(m),
                        "ratio": measured / predicted, "elementwise_share": elementwise / measured,
                        "elementwise_ratio": elementwise / ew})
    return out


def summary(rows: list[dict]) -> dict:
    r = np.array([x["ratio"] for x in rows])
    e = np.array([x["elementwise_share"] for x in rows])
    w = np.array([x["elementwise_ratio"] for x in rows])
    return {"cases": len(r), "mape": float(np.mean(np.abs(1 / r - 1))), "median": float(np.median(r)),
            "band": [float(np.percentile(r, 5)), float(np.percentile(r, 95))], "elementwise": float(np.median(e)),
            "elementwise_mape": float(np.mean(np.abs(1 / w - 1))), "elementwise_median": float(np.median(w))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur", type=Path, required=True, help="a clone of github.com/microsoft/vidur")
    args = ap.parse_args()
    if not (args.vidur / "data" / "profiling" / "compute").is_dir():
        print(f"--vidur {args.vidur}: no data/profiling/compute (a clone of github.com/microsoft/vidur?)",
              file=sys.stderr)
        return 2
    import calibrate as cal

    data = json.loads(cal.OUT.read_text())
    print("| GPU | coefficients | model | cases | layer GEMMs: error (MAPE) | measured / predicted, median "
          "[5-95%] | up to 256 tokens | above | elementwise ops / GEMMs, median | elementwise ops: error, median "
          "measured / predicted (up to 256 tokens; above) |")
    print("| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |")
    for gpu_dir, coefficients_from in (("h100", "H100"), ("a100", "A100-80GB"), ("a100", "H100")):
        rows = check(args.vidur, gpu_dir, coefficients_from, data)
        for model in [*sorted({r["model"] for r in rows}), "all"]:
            part = [r for r in rows if model in ("all", r["model"])]
            s = summary(part)
            small = summary([r for r in part if r["tokens"] <= 256])
            large = summary([r for r in part if r["tokens"] > 256])
            print(f"| {GPUS[gpu_dir]} | {coefficients_from}'s | {model} | {s['cases']} | {100 * s['mape']:.1f}% | "
                  f"{s['median']:.2f} [{s['band'][0]:.2f}-{s['band'][1]:.2f}] | {100 * small['mape']:.1f}% | "
                  f"{100 * large['mape']:.1f}% | {100 * s['elementwise']:.0f}% | {100 * s['elementwise_mape']:.1f}%, "
                  f"{small['elementwise_median']:.2f}; {large['elementwise_median']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
