"""Trace loading speed: MB/s for Mooncake JSONL (plain and gzip), and peak memory.

    python benchmarks/load.py [--copies 20] [--runs 5]

Builds a large Mooncake-format file by repeating ../shared/traces/mooncake/conversation_trace.jsonl
with every copy's ids shifted (so blocks stay distinct across copies), then times
kvreplay.load_trace on it in fresh processes and prints medians.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"

CHILD = r"""
import resource, sys, time
t0 = time.perf_counter()
import kvreplay
t1 = time.perf_counter()
trace = kvreplay.load_trace(sys.argv[1])
t2 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(t2 - t1, peak, trace.nbytes(), trace.num_accesses, len(trace))
"""


def build(path: Path, copies: int) -> None:
    lines = SOURCE.read_text().splitlines()
    shift = 1 + max(max(json.loads(line)["hash_ids"], default=0) for line in lines)
    with open(path, "w") as out:
        for c in range(copies):
            for line in lines:
                rec = json.loads(line)
                rec["hash_ids"] = [h + c * shift for h in rec["hash_ids"]]
                rec["timestamp"] += c * 3_600_000
                out.write(json.dumps(rec) + "\n")


def measure(path: Path, runs: int) -> dict:
    times, peaks = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True)
        seconds, peak, nbytes, accesses, requests = out.stdout.split()
        times.append(float(seconds))
        peaks.append(int(peak))
    return {"seconds": statistics.median(times), "peak": statistics.median(peaks), "nbytes": int(nbytes),
            "accesses": int(accesses), "requests": int(requests)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "big.jsonl"
        build(plain, args.copies)
        gz = Path(tmp) / "big.jsonl.gz"
        gz.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=6))
        size = plain.stat().st_size
        print(f"file: {size / 1e6:.1f} MB, {args.copies} copies of {SOURCE.name}; median of {args.runs} fresh processes")
        print("| input | requests | block accesses | load s | MB/s (uncompressed) | peak RSS MB | flat arrays MB |")
        print("|---|---|---|---|---|---|---|")
        for name, path in (("plain", plain), ("gzip", gz)):
            m = measure(path, args.runs)
            print(f"| {name} | {m['requests']:,} | {m['accesses']:,} | {m['seconds']:.3f} | {size / 1e6 / m['seconds']:.0f} "
                  f"| {m['peak'] / 1e6:.0f} | {m['nbytes'] / 1e6:.1f} |")


if __name__ == "__main__":
    main()
