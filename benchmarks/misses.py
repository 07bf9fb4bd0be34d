#!/usr/bin/env python
"""What the miss account costs: replay(), sweep() and `kvreplay run` on the Mooncake conversation
trace, with and without the account.

* ``replay()``: ``kvreplay.replay(trace, p, 4096)`` for s3fifo, lru and vllm, the trace in memory;
  with the account (the default: the account's replay loop, stranded blocks counted 32 times) and
  with ``miss_account=False`` (the plain compiled loop). On code without the account (``--code``
  a commit before it) only the plain call exists and is measured.
* ``sweep()``: ``kvreplay.sweep(trace, [1024, 4096, 16384], ["s3fifo", "lru", "fifo"])``, one
  process (lru from its one-pass curve, whose account comes from one pass of reuse distances).
* ``kvreplay run``: the command line, a fresh process each time (start-up, reading the trace, the
  replay, and with the account its headroom and advice: an infinite, a belady and a 2x replay).

Headline: CPU seconds (thread time in process, user+sys of the child for the command line),
median of --runs, with the wall-time median and the clean runs (benchmarks/_quiet.py).

Usage:  python benchmarks/misses.py [--code HEAD|installed|REF] [--runs 7]
"""

from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import time

import _code
from _quiet import children_cpu_s, measure, summary

TRACE = "/work/shared/traces/mooncake/conversation_trace.jsonl"
POLICIES = ("s3fifo", "lru", "vllm")


def timed(fn):
    def run():
        w, c = time.perf_counter(), time.thread_time()
        fn()
        return time.perf_counter() - w, time.thread_time() - c
    return run


def cli_run(policy: str):
    def run():
        before = children_cpu_s()
        w = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kvreplay.cli", "run", TRACE, "--policy", policy, "--capacity", "4096"],
                       check=True, capture_output=True)
        return time.perf_counter() - w, children_cpu_s() - before
    return run


def row(label: str, records) -> str:
    s = summary(records)
    return (f"| {label} | {1000 * s['cpu_median']:,.1f} | {1000 * s['wall_median']:,.1f} | "
            f"{s['clean_runs']}/{s['runs']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _code.add_argument(ap)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    desc = _code.activate(args.code)
    import kvreplay

    where = _code.check_imported(desc)
    trace = kvreplay.load_trace(TRACE)
    has_account = "miss_account" in inspect.signature(kvreplay.replay).parameters
    print(f"# the miss account's cost: {where}; {TRACE} ({len(trace):,} requests, {trace.num_accesses:,} accesses)")
    print("| what | CPU ms (median) | wall ms (median) | clean runs |\n|---|---|---|---|")
    for p in POLICIES:
        kvreplay.replay(trace, p, 4096)  # warm
        plain = {"miss_account": False} if has_account else {}
        print(row(f"replay {p} 4096, plain loop", measure(timed(lambda: kvreplay.replay(trace, p, 4096, **plain)),
                                                         args.runs)), flush=True)
        if has_account:
            print(row(f"replay {p} 4096, with the account", measure(timed(lambda: kvreplay.replay(trace, p, 4096)),
                                                                    args.runs)), flush=True)
    caps, pols = [1024, 4096, 16384], ["s3fifo", "lru", "fifo"]
    kvreplay.sweep(trace, caps, pols)
    print(row("sweep 3 policies x 3 capacities", measure(timed(lambda: kvreplay.sweep(trace, caps, pols)),
                                                         args.runs)), flush=True)
    env_path = os.environ.get("PYTHONPATH", "")
    assert env_path or args.code == "installed"
    for p in ("s3fifo",):
        print(row(f"kvreplay run --policy {p} --capacity 4096", measure(cli_run(p), max(3, args.runs // 2))),
              flush=True)


if __name__ == "__main__":
    main()
