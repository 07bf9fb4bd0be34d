"""The KV pool kvreplay predicts against the pool vLLM measured, on public start-up logs.

    python benchmarks/kv_pool.py          # the error table (docs/memory.md)
    python benchmarks/kv_pool.py --fit    # refit memory.py's constants on the points marked "fit"

Each point of benchmarks/data/vllm_kv_pool_points.csv is a public vLLM log (URL and quoted
lines in the file) with its configuration. The measured KV memory is the log's "Available KV
cache memory" (or "the rest of the memory reserved for KV Cache"), else its token count x the
model's KV bytes per token per GPU. The prediction is timing/memory.py's budget at the point's
GPU, TP, weights dtype, utilization, max_num_batched_tokens, max_num_seqs and enforce_eager; the
CUDA graph estimate is taken from the budget only from vLLM 0.21 on (before, vLLM captured its
graphs after sizing the pool). Points whose model or GPU the catalogs lack are listed as skipped,
with the reason. The error is (predicted - measured) / measured KV memory; its median absolute
value is reported over the test points, by GPU, model family and vLLM version.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

import numpy as np

from kvreplay.analysis.models import get_model
from kvreplay.serving.timing import memory
from kvreplay.serving.timing.gpus import get_gpu
from kvreplay.serving.timing.models import kv_bytes_per_token_per_gpu

POINTS = Path(__file__).parent / "data" / "vllm_kv_pool_points.csv"
GiB = 1 << 30
#: NCCL's buffers on a TP rank, inside the budget before vLLM 0.11 only (fitted, --fit)
NCCL_BYTES = int(2.0 * GiB)
#: a pool smaller than this is judged by its error in GiB (a relative error of a near-empty pool
#: says nothing)
SMALL_POOL = 5 * GiB


def version_tuple(text: str) -> tuple:
    m = re.search(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (99, 0)  # unstated: a recent V1


def load_points() -> list[dict]:
    with open(POINTS, newline="") as f:
        return list(csv.DictReader(f))


def terms(p: dict) -> dict | None:
    """The budget's terms at a point's configuration (None when it cannot be computed)."""
    if p["skip_reason"]:
        return None
    spec, gpu = get_model(p["catalog_model"]), get_gpu(p["gpu"])
    tp = int(p["tp"])
    tokens, seqs = int(p["max_num_batched_tokens"]), int(p["max_num_seqs"])
    eager = p["enforce_eager"] == "True"
    forward, sampler = memory.activation_bytes(spec, tp, tokens, seqs, scale=1.0, copies=1.0)
    graphs = memory.cudagraph_graphs(seqs, gpu.name, eager) if version_tuple(p["vllm_version"]) >= (0, 21) else 0
    per_token = kv_bytes_per_token_per_gpu(spec, tp, p["kv_dtype"] or "bf16")
    measured = (float(p["measured_kv_gib"]) * GiB if p["measured_kv_gib"]
                else int(p["measured_tokens"]) * per_token)
    # before vLLM 0.11 (PR 25359) the snapshot preceded NCCL's init: its buffers were non-torch
    # memory inside the budget, on TP > 1 only
    nccl = 1.0 if tp > 1 and version_tuple(p["vllm_version"]) < (0, 11) else 0.0
    return {"requested": np.ceil(gpu.memory_bytes * float(p["gpu_memory_utilization"])), "nccl": nccl,
            "weights": sum(memory.weight_parts(spec, p["weights_dtype"], tp, gpu.name).values()),
            "forward": forward, "sampler": sampler, "graphs": graphs, "measured": measured}


def predict(t: dict, c: dict) -> float:
    return (t["requested"] - t["weights"] - c["scale"] * t["forward"] - c["copies"] * t["sampler"]
            - c["graph"] * t["graphs"] - c["non_torch"] - c["nccl"] * t["nccl"])


def constants() -> dict:
    return {"scale": memory.ACTIVATION_SCALE, "copies": memory.SAMPLER_COPIES,
            "graph": memory.CUDAGRAPH_BYTES_PER_GRAPH, "non_torch": memory.NON_TORCH_BYTES, "nccl": NCCL_BYTES}


def fit(rows: list[tuple[dict, dict]]) -> dict:
    """Least squares (bytes) of the measured KV memory on the terms, over the fit points: the
    activation scale and sampler copies on a grid (>= 0.5), the non-torch and NCCL constants by
    least squares (>= 0); the CUDA graph constant is kept (no fit point is from vLLM 0.21 on)."""
    a = np.array([[t["forward"], t["sampler"], 1.0, t["nccl"]] for _, t in rows])
    b = np.array([t["requested"] - t["weights"] - t["measured"] - memory.CUDAGRAPH_BYTES_PER_GRAPH * t["graphs"]
                  for _, t in rows])
    cols = [2] + ([3] if a[:, 3].any() else [])
    best = None
    for scale in np.arange(0.5, 3.01, 0.05):
        for copies in np.arange(0.5, 6.01, 0.25):
            rest = b - scale * a[:, 0] - copies * a[:, 1]
            x, *_ = np.linalg.lstsq(a[:, cols], rest, rcond=None)
            x = np.maximum(x, 0)
            err = float(np.sum((rest - a[:, cols] @ x) ** 2))
            if best is None or err < best[0]:
                nccl = float(x[1]) if len(cols) > 1 else float(NCCL_BYTES)
                best = (err, {"scale": round(float(scale), 2), "copies": round(float(copies), 2),
                              "graph": float(memory.CUDAGRAPH_BYTES_PER_GRAPH), "non_torch": float(x[0]),
                              "nccl": nccl})
    return best[1]


def family(p: dict) -> str:
    return p["catalog_model"].split("-")[0]


def table(rows, c: dict) -> None:
    print("| point | GPU | TP | model (catalog) | vLLM | split | measured KV GiB | predicted KV GiB | error GiB | error |")
    print("|---|---|---:|---|---|---|---:|---:|---:|---:|")
    errors = []
    for p, t in rows:
        pred = predict(t, c)
        small = abs(t["measured"]) < SMALL_POOL
        err = (pred - t["measured"]) / abs(t["measured"])
        if not small:
            errors.append((p, err))
        print(f"| {p['id']} | {p['gpu']} | {p['tp']} | {p['catalog_model']} | {p['vllm_version']} | {p['split']} | "
              f"{t['measured'] / GiB:.2f} | {pred / GiB:.2f} | {(pred - t['measured']) / GiB:+.2f} | "
              + ("(pool < 5 GiB)" if small else f"{100 * err:+.1f}%") + " |")
    print("\nBelow: points whose measured pool is at least 5 GiB (relative error).\n")
    print()
    for label, key in (("GPU", lambda p: p["gpu"]), ("model family", family),
                       ("vLLM version", lambda p: ".".join(map(str, version_tuple(p["vllm_version"]))))):
        groups: dict = {}
        for p, e in errors:
            groups.setdefault(key(p), []).append(abs(e))
        print(f"| {label} | points | median abs error | max abs error |")
        print("|---|---:|---:|---:|")
        for k in sorted(groups):
            v = groups[k]
            print(f"| {k} | {len(v)} | {100 * statistics.median(v):.1f}% | {100 * max(v):.1f}% |")
        print()
    for split in ("fit", "test"):
        v = [abs(e) for p, e in errors if p["split"] == split]
        if v:
            print(f"{split} points: {len(v)}, median abs error {100 * statistics.median(v):.1f}%, "
                  f"max {100 * max(v):.1f}%, within 5%: {sum(x <= 0.05 for x in v)} of {len(v)}")


def weights_check(points) -> None:
    print("\n| point | measured weights GiB | predicted GiB | error |")
    print("|---|---:|---:|---:|")
    for p in points:
        if not p["measured_weights_gib"] or not p["catalog_model"] and not p["id"].startswith("i33155"):
            continue
        model = p["catalog_model"] or "gpt-oss-120b"
        tp, dtype = int(p["tp"] or 1), p["weights_dtype"] or "int4"
        pred = sum(memory.weight_parts(get_model(model), dtype, tp, p["gpu"]).values())
        meas = float(p["measured_weights_gib"]) * GiB
        print(f"| {p['id']} | {meas / GiB:.2f} | {pred / GiB:.2f} | {100 * (pred - meas) / meas:+.1f}% |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true", help="refit the constants on the 'fit' points and print them")
    args = ap.parse_args(argv)
    points = load_points()
    rows = [(p, t) for p in points if (t := terms(p)) is not None]
    c = constants()
    if args.fit:
        c = fit([(p, t) for p, t in rows if p["split"] == "fit" and abs(t["measured"]) >= SMALL_POOL])
        print(f"fitted: ACTIVATION_SCALE={c['scale']}, SAMPLER_COPIES={c['copies']}, "
              f"NON_TORCH_BYTES={c['non_torch'] / GiB:.3f} GiB, NCCL_BYTES (before 0.11)={c['nccl'] / GiB:.3f} GiB; "
              f"CUDAGRAPH_BYTES_PER_GRAPH kept at {c['graph'] / 2**20:.2f} MiB\n")
    print(f"{len(points)} points, {len(rows)} computed, {len(points) - len(rows)} skipped\n")
    table(rows, c)
    weights_check(points)
    skipped = [p for p in points if p["skip_reason"]]
    if skipped:
        print("\nskipped:")
        for p in skipped:
            print(f"  {p['id']} ({p['hf_id']}, {p['gpu']}): {p['skip_reason']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
