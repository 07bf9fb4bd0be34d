"""The KV pool kvreplay predicts for SGLang against the pool SGLang logged (public start-up logs).

    python benchmarks/sglang_pool.py

Each point of benchmarks/data/sglang_kv_pool_points.csv is a public SGLang log (URL and quoted lines
in the file): its "KV Cache is allocated" line (K size + V size, SGLang's GB being 2^30 bytes) is
the measured pool. Two predictions: "formula", SGLang 0.5.23's budget (timing/sglang_memory.py)
with the free memory before the weights as the log prints it ("Load weight begin. avail mem") and
the weights kvreplay computes; "full", the whole budget from the GPU catalog's total memory (points
on a GPU the catalog has). The error is (predicted - measured) / measured.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from kvreplay.analysis.models import get_model
from kvreplay.errors import KvreplayError
from kvreplay.serving.timing import memory
from kvreplay.serving.timing.sglang_memory import sglang_capacity

POINTS = Path(__file__).parent / "data" / "sglang_kv_pool_points.csv"
GiB = 1 << 30


def load_points() -> list[dict]:
    with open(POINTS, newline="") as f:
        return list(csv.DictReader(f))


def predictions(p: dict) -> dict:
    spec, tp, dtype = get_model(p["catalog_model"]), int(p["tp"]), p["weights_dtype"]
    fraction = float(p["mem_fraction_static"])
    weights = sum(memory.weight_parts(spec, dtype, tp, p["gpu"]).values())
    out = {"weights": weights}
    if p["measured_pre_load_gib"]:
        pre = float(p["measured_pre_load_gib"]) * GiB
        out["formula"] = pre * fraction - weights
    try:
        out["full"] = sglang_capacity(spec, p["gpu"], tp, 1, fraction, dtype=dtype,
                                      kv_dtype=p["kv_dtype"] or "bf16").kv_bytes_available
    except KvreplayError:
        pass
    return out


def main() -> int:
    points = load_points()
    print(f"{len(points)} points\n")
    print("| point | GPU | TP | model (catalog) | SGLang | mem_fraction_static | measured KV GiB | formula GiB | error "
          "| full GiB | error | weights GiB (measured / kvreplay) |")
    print("|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|")
    for p in points:
        pred, measured = predictions(p), float(p["measured_kv_gib"]) * GiB
        cell = lambda k: (f"{pred[k] / GiB:.2f} | {100 * (pred[k] - measured) / measured:+.1f}%"  # noqa: E731
                          if k in pred else "- | -")
        w = f"{p['measured_weights_gib'] or '-'} / {pred['weights'] / GiB:.2f}"
        print(f"| {p['id']} | {p['gpu']} | {p['tp']} | {p['catalog_model']} | {p['sglang_version']} | "
              f"{p['mem_fraction_static']} | {measured / GiB:.2f} | {cell('formula')} | {cell('full')} | {w} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
