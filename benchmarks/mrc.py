"""One-pass LRU curve vs separate compiled lru replays.

    python benchmarks/mrc.py [--points 100] [--runs 5]

Times kvreplay.mrc over N log-spaced capacities against N separate kvreplay.replay(..., "lru")
calls (compiled engine, kernels warmed first) on the shared Mooncake traces; prints medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

import kvreplay

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "mooncake"


def median_seconds(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    print(f"| trace | capacities | mrc s | {args.points} lru replays s | speed-up |")
    print("|---|---|---|---|---|")
    for name in ("conversation_trace.jsonl", "synthetic_trace.jsonl"):
        trace = kvreplay.load_trace(TRACES / name)
        caps = sorted({int(c) for c in np.geomspace(16, trace.num_blocks, args.points)})
        kvreplay.mrc(trace, caps[:2])
        kvreplay.replay(trace, "lru", caps[0], check=False)
        curve = kvreplay.mrc(trace, caps)["points"]
        for c, p in zip(caps[::17], curve[::17]):  # spot-check exactness while we are here
            assert p["total_hit_tokens"] == kvreplay.replay(trace, "lru", c).total_hit_tokens
        one_pass = median_seconds(lambda: kvreplay.mrc(trace, caps), args.runs)
        separate = median_seconds(lambda: [kvreplay.replay(trace, "lru", c, check=False) for c in caps], args.runs)
        print(f"| {name} | {len(caps)} | {one_pass:.3f} | {separate:.3f} | {separate / one_pass:.1f}x |")


if __name__ == "__main__":
    main()
