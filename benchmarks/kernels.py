#!/usr/bin/env python
"""Kernel throughput of every registered policy on one trace: a quick before/after check.

For each policy and capacity (1% / 10% / 50% of the trace's unique blocks) the compiled driver
replays the trace `--runs` times on a fresh state (numba cache warmed by an untimed first run);
the figure is block accesses per CPU-second of the replaying thread, median of the runs. Run it
once per commit to compare, one after the other on the same machine:

    python benchmarks/kernels.py --code 48ae7ab
    python benchmarks/kernels.py                     # HEAD

(benchmarks/throughput.py is the full benchmark: more traces, wall times, the machine's load.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import _code

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
FRACTIONS = (0.01, 0.10, 0.50)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--policies", default=None, help="comma-separated (default: every registered policy)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", default=None)
    _code.add_argument(ap)
    args = ap.parse_args()
    code = _code.activate(args.code)

    from kvreplay.engine import driver
    from kvreplay.policies.registry import POLICIES, get_policy
    from kvreplay.trace import load_trace

    trace = load_trace(args.trace)
    accesses = trace.num_accesses
    caps = [max(20, int(trace.num_blocks * f)) for f in FRACTIONS]
    names = args.policies.split(",") if args.policies else list(POLICIES)
    print(f"kvreplay: {code}\n{args.trace}: {accesses:,} block accesses, {trace.num_blocks:,} unique blocks; "
          f"capacities {caps}; M accesses per CPU-second, median of {args.runs}")
    rows = []
    for name in names:
        spec = get_policy(name)
        figures = []
        for cap in caps:
            times = []
            for run in range(args.runs + 1):
                state = spec.make_state(cap, trace, **spec.resolve({}))
                hit_blocks = np.zeros(len(trace), np.int64)
                hit_tokens = np.zeros(len(trace), np.int64)
                t0 = time.thread_time()
                _code.replay_kernel(spec, state, trace, 512, hit_blocks, hit_tokens)
                if run:  # the first run compiles or loads the kernel
                    times.append(time.thread_time() - t0)
            figures.append(round(accesses / statistics.median(times) / 1e6, 1))
        rows.append({"policy": name, "capacities": caps, "m_accesses_per_cpu_s": figures})
        print(f"{name:10} " + " ".join(f"{f:7.1f}" for f in figures), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"code": code, "trace": args.trace, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
