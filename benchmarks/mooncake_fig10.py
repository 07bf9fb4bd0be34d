"""Mooncake FAST'25, Figure 10: a global KV cache against local ones, from the released traces.

The paper serves its traces on 10 prefill instances with a 3M-token cache each and reports the
cache hit rate of a global cache (every instance reads one pool of the combined size) against
local caches (each instance its own): 2.22x on the conversation trace and 2.36x on the synthetic
one. Here, as the paper's cache does, prefill reuse alone is counted (no output tokens take
cache room) and requests do not overlap (instant time), so:

- local = 10 sequential replays, one per instance, of the requests a router sends it
  (`kvreplay.serving.simulate.route`: round-robin, random or session);
- global = one sequential replay through a cache of 10 x 3M tokens.

    python benchmarks/mooncake_fig10.py [--traces DIR] [--policy lru] [--instances 10] [--tokens 3000000]

Prints a markdown table; docs/serving.md ("Mooncake FAST'25, Figure 10") discusses it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import kvreplay
from kvreplay.serving.simulate import arrivals, route

PAPER = {"conversation_trace.jsonl": 2.22, "synthetic_trace.jsonl": 2.36}


def local_hit_rate(trace, policy, capacity, instances, router, seed=0):
    which = route(trace, arrivals(trace), instances, router, seed)
    hits = 0
    for k in range(instances):
        idx = np.flatnonzero(which == k)
        if idx.size:
            hits += int(kvreplay.replay(trace.take(idx), policy, capacity).hit_tokens.sum())
    return hits / int(trace.input_length.sum())


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", default=os.path.join(here, "..", "..", "shared", "traces", "mooncake"))
    p.add_argument("--policy", default="lru")
    p.add_argument("--instances", type=int, default=10)
    p.add_argument("--tokens", type=int, default=3_000_000, help="cache tokens per instance")
    p.add_argument("--routers", default="round-robin,random,session")
    args = p.parse_args(argv)
    rows = []
    t0 = time.perf_counter()
    for name in ("conversation_trace.jsonl", "synthetic_trace.jsonl"):
        path = os.path.join(args.traces, name)
        if not os.path.exists(path):
            print(f"{path}: not found", file=sys.stderr)
            return 2
        trace = kvreplay.load_trace(path)
        bs = trace.block_size or 512
        per_instance = args.tokens // bs
        glob = kvreplay.replay(trace, args.policy, per_instance * args.instances).hit_rate
        ceiling = kvreplay.replay(trace, "infinite", None).hit_rate
        for router in args.routers.split(","):
            local = local_hit_rate(trace, args.policy, per_instance, args.instances, router)
            rows.append((name, router, per_instance, local, glob, ceiling, glob / local if local else float("inf")))
    print(f"{args.instances} instances x {args.tokens:,} tokens, policy {args.policy}, whole trace, token-weighted\n")
    print("| trace | router (local) | blocks per instance | local hit rate | global hit rate | ceiling | global / local | paper |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, router, blocks, local, glob, ceiling, ratio in rows:
        print(f"| {name} | {router} | {blocks:,} | {100 * local:.2f}% | {100 * glob:.2f}% | {100 * ceiling:.2f}% | "
              f"{ratio:.2f}x | {PAPER[name]:.2f}x |")
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
