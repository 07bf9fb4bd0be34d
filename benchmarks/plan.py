"""Speed of `kvreplay plan`: a search of at least 200 configurations on the conversation trace.

The grid: Llama-3.1-8B on {H100, H200, A100-80GB} x TP {1, 2, 4, 8} x tiers {none, 256 GiB
DRAM, 1 TiB DRAM} x routers {round-robin, kv-aware, session} x policies {vllm, lru}: 216
configurations, TTFT p90 <= 2 s in every 5-minute window of the judged span (after the auto
warm-up), at --loads (default 1), judged at the calibrated roofline's pessimistic end. The search runs in this process (one configuration after
another, pruning what cannot beat the best) or with --jobs N on processes, then again with the
same --cache directory to show that a refined search simulates nothing twice.

Prints wall and CPU time (this process and its children), simulations, pruned configurations and
the answer per load, as a Markdown table for docs/performance.md.

    python benchmarks/plan.py [--trace conversation_trace.jsonl] [--loads 1] [--jobs 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time

import kvreplay
from kvreplay.serving.plan import plan
from kvreplay.serving.slo import SLO

TRACE = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces", "mooncake", "conversation_trace.jsonl")
GRID = dict(gpus=["H100", "H200", "A100-80GB"], tps=[1, 2, 4, 8],
            tiers=[None, "dram=256GiB@64GB/s", "dram=1TiB@64GB/s"], routers=["round-robin", "kv-aware", "session"],
            policies=["vllm", "lru"])


def cpu_all() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def one(trace, loads, jobs, cache):
    t, c = time.perf_counter(), cpu_all()
    out = plan(trace, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), loads=loads, cache_dir=cache, jobs=jobs,
               max_instances=32, **GRID)
    return out, time.perf_counter() - t, cpu_all() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--loads", default="1")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    if not os.path.exists(args.trace):
        sys.exit(f"no trace at {args.trace}: give --trace")
    trace = kvreplay.load_trace(args.trace)
    loads = [float(x) for x in args.loads.split(",")]
    configs = 1
    for v in GRID.values():
        configs *= len(v)
    print(f"## plan: {configs} configurations x {len(loads)} loads on {os.path.basename(args.trace)}, jobs {args.jobs}\n")
    print("| run | wall s | CPU s | simulations | from cache | pruned on cost | unreachable | best per load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as cache:
        for name in ("first", "again (same --cache)"):
            out, wall, cpu = one(trace, loads, args.jobs, cache)
            best = "; ".join(
                f"x{b['load']:g}: " + (f"{b['best']['instances']} x {b['best']['tp']} x {b['best']['gpu']}, "
                                       f"{b['best']['tiers']}, {b['best']['router']}, {b['best']['policy']}, "
                                       f"{b['best']['cost_per_hour']:,.2f} USD/h" if b["best"] else "none")
                for b in out["loads"])
            pruned = sum(b["counts"]["pruned"] for b in out["loads"])
            floors = sum(b["counts"]["unreachable"] for b in out["loads"])
            print(f"| {name} | {wall:.1f} | {cpu:.1f} | {out['runs']:,} | {out['disk_hits']:,} | {pruned} | {floors} "
                  f"| {best} |", flush=True)


if __name__ == "__main__":
    main()
