"""Mooncake FAST'25 from its released traces: Figure 10 (a global KV cache against local ones) and
Figure 5's ordering of prefill schedulers on TTFT. docs/fidelity.md ("Mooncake FAST'25") discusses
the numbers this prints.

Figure 10. The paper serves its traces on 10 prefill instances with a 3M-token cache each and
reports the hit rate of a global cache (one pool every instance reads) against local ones:
2.22x on the conversation trace and 2.36x on the synthetic one. Prefill reuse alone is counted.

  a. The instant limit (no overlap, no load): local = 10 sequential replays of the requests a
     trace-fixed router sends each instance (round-robin, random, session); global = one
     replay through the combined size.
  b. Under load, as the paper measures it: 10 prefill-only instances (each request outputs its
     first token there: Mooncake decodes elsewhere), Llama-3.1-70B on 8 x H100 each (roofline),
     the trace's own arrival times, behind Mooncake's cache-aware router (the least estimated
     TTFT). Each instance: its GPU pool (what 8 x H100 hold after the weights) over a DRAM tier of
     3M tokens (local), or over its share of one global store of 10 x 3M tokens every instance
     reads (global, Mooncake Store). DRAM loads at 64 GB/s, the global store at 25 GB/s.

Figure 5. 8 prefill-only instances as above behind four schedulers: random, load-balancing
(least-loaded: fewest requests in flight), local cache-aware (Mooncake's router over each
instance's own pool and DRAM tier) and global cache-aware (the same router over the global
store). Mean and p90 TTFT at the trace's rate x --speedups.

    python benchmarks/mooncake_paper.py [--traces DIR] [--parts fig10,fig5] [--speedups 4,8] [--fig10-speedups 1,8]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np

import kvreplay
from kvreplay.serving.simulate import arrivals, route, simulate

PAPER_FIG10 = {"conversation_trace.jsonl": 2.22, "synthetic_trace.jsonl": 2.36}
PAPER_FIG5 = {"random": 92.07, "least-loaded": 60.41, "local cache-aware": 14.36, "global cache-aware": 6.26}
MODEL, GPU, TP = "Llama-3.1-70B", "H100", 8


def prefill_only(trace):
    """Each request outputs one token on its prefill instance (decode runs elsewhere)."""
    return dataclasses.replace(trace, output_length=np.ones(len(trace), dtype=np.int64))


def local_instant(trace, capacity, instances, router, seed=0):
    which = route(trace, arrivals(trace), instances, router, seed)
    hits = 0
    for k in range(instances):
        idx = np.flatnonzero(which == k)
        if idx.size:
            hits += int(kvreplay.replay(trace.take(idx), "lru", capacity).hit_tokens.sum())
    return hits / int(trace.input_length.sum())


def served(trace, *, instances, router, tiers=None, store=None, speedup=1.0):
    t0 = time.perf_counter()
    c0 = time.process_time()
    r = simulate(trace, "lru", None, time_model="roofline", model=MODEL, gpu=GPU, tp=TP, instances=instances,
                 router=router, tiers=tiers, global_store=store, speedup=speedup, compare_sequential=False)
    ttft = r.ttft_s[r.finished]
    return {"hit_rate": r.hit_rate, "ttft_mean_s": float(ttft.mean()), "ttft_p50_s": float(np.percentile(ttft, 50)),
            "ttft_p90_s": float(np.percentile(ttft, 90)), "hbm_hit_rate": r.tiers["tiers"][0]["hit_rate"] if r.tiers
            else r.hit_rate, "pool_blocks": r.capacity_blocks, "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0, "finished": r.num_finished}


def fig10(traces, tokens, instances, speedups=(1.0,)):
    print(f"## Figure 10: global against local caches ({instances} instances x {tokens:,} tokens, LRU)\n")
    print("a. Instant limit (sequential, prefill reuse only; local = one replay per instance of what a router "
          "sends it)\n")
    print("| trace | router (local) | local | global | ceiling | global / local | paper |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, trace in traces.items():
        bs = trace.block_size or 512
        per = tokens // bs
        glob = kvreplay.replay(trace, "lru", per * instances).hit_rate
        ceiling = kvreplay.replay(trace, "infinite", None).hit_rate
        for router in ("round-robin", "random", "session"):
            local = local_instant(trace, per, instances, router)
            print(f"| {name} | {router} | {100 * local:.2f}% | {100 * glob:.2f}% | {100 * ceiling:.2f}% | "
                  f"{glob / local:.2f}x | {PAPER_FIG10[name]:.2f}x |")
    print(f"\nb. Under load: {instances} prefill-only instances of {MODEL} on {TP} x {GPU} (roofline), trace "
          "arrival times, Mooncake's cache-aware router; each instance's GPU pool over a DRAM tier of "
          f"{tokens:,} tokens (local) or over one global store of {instances} x {tokens:,} tokens (global)\n")
    print("| trace | load | cache | hit rate | from HBM | TTFT mean | TTFT p90 | global / local | paper | wall s | cpu s |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, trace in traces.items():
        bs = trace.block_size or 512
        per = tokens // bs
        one = prefill_only(trace)
        for x in speedups:
            local = served(one, instances=instances, router="mooncake", tiers=f"dram={per}@64GB/s", speedup=x)
            glob = served(one, instances=instances, router="mooncake", store=f"{per * instances}@25GB/s", speedup=x)
            for label, r in (("local", local), ("global", glob)):
                ratio = f"{glob['hit_rate'] / local['hit_rate']:.2f}x" if label == "global" else ""
                paper = f"{PAPER_FIG10[name]:.2f}x" if label == "global" else ""
                print(f"| {name} | x{x:g} | {label} | {100 * r['hit_rate']:.2f}% | {100 * r['hbm_hit_rate']:.2f}% | "
                      f"{r['ttft_mean_s']:.2f} s | {r['ttft_p90_s']:.2f} s | {ratio} | {paper} | {r['wall_s']:.1f} | "
                      f"{r['cpu_s']:.1f} |")
    print()


def fig5(trace, name, tokens, instances, speedups):
    bs = trace.block_size or 512
    per = tokens // bs
    one = prefill_only(trace)
    print(f"## Figure 5: prefill schedulers on TTFT ({name}, {instances} prefill-only instances of {MODEL} on "
          f"{TP} x {GPU}, roofline; local caches: GPU pool + {tokens:,}-token DRAM tier at 64 GB/s; global: "
          f"GPU pool + one store of {instances} x {tokens:,} tokens at 25 GB/s)\n")
    print("| load | scheduler | TTFT mean | TTFT p50 | TTFT p90 | hit rate | paper mean TTFT | wall s | cpu s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    configs = (("random", dict(router="random", tiers=f"dram={per}@64GB/s")),
               ("least-loaded", dict(router="least-loaded", tiers=f"dram={per}@64GB/s")),
               ("local cache-aware", dict(router="mooncake", tiers=f"dram={per}@64GB/s")),
               ("global cache-aware", dict(router="mooncake", store=f"{per * instances}@25GB/s")))
    for x in speedups:
        for label, kw in configs:
            r = served(one, instances=instances, speedup=x, **kw)
            print(f"| x{x:g} | {label} | {r['ttft_mean_s']:.2f} s | {r['ttft_p50_s']:.2f} s | {r['ttft_p90_s']:.2f} s | "
                  f"{100 * r['hit_rate']:.2f}% | {PAPER_FIG5[label]:.2f} s | {r['wall_s']:.1f} | {r['cpu_s']:.1f} |")
    print()


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", default=os.path.join(here, "..", "..", "shared", "traces", "mooncake"))
    p.add_argument("--parts", default="fig10,fig5")
    p.add_argument("--tokens", type=int, default=3_000_000, help="cache tokens per instance (Fig. 10)")
    p.add_argument("--speedups", default="4,8", help="Fig. 5: the trace's arrival rate x these")
    p.add_argument("--fig10-speedups", default="1,8", help="Fig. 10 under load: the trace's arrival rate x these")
    args = p.parse_args(argv)
    traces = {}
    for name in ("conversation_trace.jsonl", "synthetic_trace.jsonl"):
        path = os.path.join(args.traces, name)
        if not os.path.exists(path):
            print(f"{path}: not found", file=sys.stderr)
            return 2
        traces[name] = kvreplay.load_trace(path)
    t0 = time.perf_counter()
    parts = args.parts.split(",")
    if "fig10" in parts:
        fig10(traces, args.tokens, 10, [float(x) for x in args.fig10_speedups.split(",")])
    if "fig5" in parts:
        fig5(traces["conversation_trace.jsonl"], "conversation_trace.jsonl", args.tokens, 8,
             [float(x) for x in args.speedups.split(",")])
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
