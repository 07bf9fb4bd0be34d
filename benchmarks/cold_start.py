#!/usr/bin/env python
"""Cold and warm start of ``kvreplay run`` for every policy, and a cold ``kvreplay sweep`` of all.

Up to the compiled core (commit 6e7a47a for the engines; the analysis passes later) a newcomer's
first command compiled the policy's kernel, and numba cached it on disk afterwards; this script
measures those commits (--code REF). Since then nothing compiles: cold equals warm.
For each policy this script points numba at a fresh, empty cache directory (NUMBA_CACHE_DIR),
then times two whole processes:

    kvreplay run TRACE --policy P --capacity C --summary-only --json     # cold: compiles
    kvreplay run TRACE --policy P --capacity C --summary-only --json     # warm: same cache dir

Each record is wall time and CPU time (user+sys of the child) and the load other processes put
on the machine meanwhile (benchmarks/_quiet.py). ``--sweep`` adds one cold ``kvreplay sweep``
over every policy (each compiles in the same process).

Usage:  python benchmarks/cold_start.py [--trace T] [--capacity 4096] [--policies a,b] [--sweep]
        [--warm-runs 3] [--json out.json] [--code HEAD|REF|installed]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _code
from _quiet import Probe, children_cpu_s, wait_quiet

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def timed(cmd: list[str], env: dict) -> dict:
    c0 = children_cpu_s()
    with Probe() as p:
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    return {"wall": round(wall, 2), "cpu": round(children_cpu_s() - c0, 2), "others": round(p.others, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--capacity", default="4096")
    ap.add_argument("--policies", default=None, help="comma-separated (default: every registered policy)")
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--sweep", action="store_true", help="also time one cold sweep over every policy")
    ap.add_argument("--json", default=None)
    _code.add_argument(ap)
    args = ap.parse_args()
    code = _code.activate(args.code)  # re-execs with the snapshot on PYTHONPATH (children inherit it)
    print(f"kvreplay: {code}")
    exe = [sys.executable, "-m", "kvreplay.cli"]
    if args.policies:
        policies = args.policies.split(",")
    else:
        from kvreplay.policies.registry import POLICIES

        policies = list(POLICIES)
    rows = []
    print(f"{'policy':10} {'cold wall':>9} {'cold cpu':>9} {'warm wall':>9} {'warm cpu':>9} {'others':>6}")
    for policy in policies:
        cache = tempfile.mkdtemp(prefix="kvreplay-cold-")
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        cmd = [*exe, "run", args.trace, "--policy", policy, "--capacity", args.capacity, "--summary-only", "--json"]
        try:
            wait_quiet(20)
            cold = timed(cmd, env)
            warm = sorted((timed(cmd, env) for _ in range(args.warm_runs)), key=lambda r: r["wall"])
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        mid = warm[len(warm) // 2]
        rows.append({"policy": policy, "cold": cold, "warm_median": mid})
        print(f"{policy:10} {cold['wall']:9.2f} {cold['cpu']:9.2f} {mid['wall']:9.2f} {mid['cpu']:9.2f} {cold['others']:6.2f}",
              flush=True)
    result = {"code": code, "trace": args.trace, "capacity": args.capacity, "runs": rows}
    if args.sweep:
        cache = tempfile.mkdtemp(prefix="kvreplay-cold-")
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        cmd = [*exe, "sweep", args.trace, "--policies", ",".join(policies), "--capacities", args.capacity, "--json"]
        try:
            wait_quiet(20)
            result["sweep_cold"] = timed(cmd, env)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        s = result["sweep_cold"]
        print(f"cold sweep over {len(policies)} policies: {s['wall']:.2f} s wall, {s['cpu']:.2f} s CPU, others {s['others']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
