"""Speed of cluster simulations: 64 instances on 50,000 requests, and a 1M-request cluster sweep.

The trace is the conversation trace repeated back to back (benchmarks/simulate.py `repeated`:
copy k has its own block ids and its timestamps shifted by k spans), served with roofline
Llama-3.1-8B on one H100 per instance (the pool is what the GPU holds after the weights), vLLM
style, arrivals at the trace's rate x --speedup.

1. 64 instances x 50,000 requests, one run per router, in this process after a warm-up run on
   the first 2,000 requests (the kernel compiled or loaded): wall and CPU time, hit rate, TTFT.
2. A 1M-request cluster sweep: instances {16, 64} x routers {round-robin, least-loaded, mooncake}
   through `load_sweep` on a process pool of --jobs workers (kvreplay simulate --instances-list
   16,64 --routers ... --jobs 2): the sweep's wall time and the CPU time of this process and its
   children.
3. Memory: 64 instances on the 1M-request trace, one fresh process per router, each instance's
   state over its own ids (the default) and, for comparison, every instance over the trace's ids
   (`local_ids=False`, as before per-instance ids): peak RSS of each process, and the results
   must be identical (every per-request field).

    python benchmarks/cluster_scale.py [--parts scale,sweep,memory] [--sweep-requests 1000000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvreplay  # noqa: E402
from kvreplay.serving.simulate import load_sweep, simulate  # noqa: E402
from simulate import repeated  # noqa: E402

OPTIONS = dict(policy="vllm", capacity=None, time_model="roofline", model="Llama-3.1-8B", gpu="H100",
               compare_sequential=False)


def cpu_all() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def scale(trace, routers, speedup):
    big = repeated(trace, 50_000)
    simulate(big.take(range(2000)), instances=64, router="round-robin", speedup=speedup, **OPTIONS)
    print(f"## 64 instances, {len(big):,} requests (conversation trace repeated), x{speedup:g}\n")
    print("| router | wall s | CPU s | hit rate | TTFT p50 | TTFT p90 | load balance |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for router in routers:
        simulate(big.take(range(2000)), instances=64, router=router, speedup=speedup, **OPTIONS)  # warm
        t, c = time.perf_counter(), time.process_time()
        r = simulate(big, instances=64, router=router, speedup=speedup, **OPTIONS)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        lat = r.latencies()["ttft"]
        print(f"| {router} | {wall:.1f} | {cpu:.1f} | {100 * r.hit_rate:.2f}% | {lat['p50']:.2f} s | "
              f"{lat['p90']:.2f} s | {r.load_balance():.2f} |", flush=True)
    print()


def sweep(trace, requests, jobs, speedup):
    big = repeated(trace, requests)
    print(f"## Cluster sweep: {len(big):,} requests, instances 16, 64 x routers round-robin, least-loaded, "
          f"mooncake, x{speedup:g}, {jobs} processes\n")
    t, c = time.perf_counter(), cpu_all()
    rows = load_sweep(big, speedups=[speedup], instances=[16, 64], routers=["round-robin", "least-loaded", "mooncake"],
                      jobs=jobs, **{k: v for k, v in OPTIONS.items() if k != "compare_sequential"},
                      compare_sequential=False)
    wall, cpu = time.perf_counter() - t, cpu_all() - c
    print("| instances | router | hit rate | TTFT p50 | TTFT p90 | load balance | keeps up |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r['instances']} | {r['router']} | {100 * r['hit_rate']:.2f}% | {r['ttft_p50_s']:.2f} s | "
              f"{r['ttft_p90_s']:.2f} s | {r['load_balance']:.2f} | {'yes' if r['stable'] else 'no'} |")
    print(f"\nsweep of {len(rows)} runs: {wall:.0f} s wall, {cpu:.0f} s CPU (this process and its workers)\n")


MEMORY_FIELDS = ("scheduled_s", "first_token_s", "finish_s", "hit_tokens", "preemptions", "instance")


def memory_one(trace_path, requests, router, local, speedup, out):
    """One 64-instance run in this (fresh) process: its figures and peak RSS, saved to `out`."""
    import json

    import numpy as np

    from kvreplay.serving import run as run_module

    trace = repeated(kvreplay.load_trace(trace_path), requests)
    original = run_module.run_once
    if not local:  # every instance over the trace's ids
        run_module.run_once = lambda *a, **k: original(*a, **{**k, "local_ids": False})
        import kvreplay.serving.simulate as sim_module

        sim_module.run_once = run_module.run_once
    t, c = time.perf_counter(), time.process_time()
    r = simulate(trace, instances=64, router=router, speedup=speedup, **OPTIONS)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    np.savez(out + ".npz", **{f: np.asarray(getattr(r, f)) for f in MEMORY_FIELDS})
    with open(out + ".json", "w") as f:
        json.dump({"router": router, "local": local, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak_kib / 1024,
                   "hit_rate": r.hit_rate, "requests": len(trace)}, f)


def memory(trace_path, requests, routers, speedup):
    import json
    import subprocess
    import tempfile

    import numpy as np

    print(f"## Memory: 64 instances, {requests:,} requests (conversation trace repeated), x{speedup:g}\n")
    print("| router | ids | peak RSS | wall s | CPU s | hit rate | identical |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for router in routers:
            outs = {}
            for local in (True, False):
                out = os.path.join(tmp, f"{router}-{local}")
                subprocess.run([sys.executable, __file__, "--memory-one", router, str(int(local)), out,
                                "--trace", trace_path, "--sweep-requests", str(requests), "--sweep-speedup", str(speedup)],
                               check=True)
                with open(out + ".json") as f:
                    outs[local] = json.load(f)
                outs[local]["arrays"] = np.load(out + ".npz")
            same = all(np.array_equal(outs[True]["arrays"][k], outs[False]["arrays"][k], equal_nan=True)
                       for k in MEMORY_FIELDS)
            for local in (True, False):
                o = outs[local]
                ids = "per instance" if local else "the trace's"
                print(f"| {router} | {ids} | {o['peak_rss_mib'] / 1024:.2f} GB | "
                      f"{o['wall_s']:.1f} | {o['cpu_s']:.1f} | {100 * o['hit_rate']:.2f}% | {'yes' if same else 'NO'} |",
                      flush=True)
    print()


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=os.path.join(here, "..", "..", "shared", "traces", "mooncake",
                                                   "conversation_trace.jsonl"))
    p.add_argument("--parts", default="scale,sweep")
    p.add_argument("--routers", default="round-robin,least-loaded,kv-aware,sglang,llm-d,mooncake")
    p.add_argument("--speedup", type=float, default=4.0)
    p.add_argument("--sweep-requests", type=int, default=1_000_000)
    p.add_argument("--sweep-speedup", type=float, default=16.0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--memory-routers", default="round-robin,least-loaded,mooncake")
    p.add_argument("--memory-one", nargs=3, metavar=("ROUTER", "LOCAL", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_one:
        router, local, out = args.memory_one
        memory_one(args.trace, args.sweep_requests, router, local == "1", args.sweep_speedup, out)
        return 0
    if "memory" in args.parts:
        memory(args.trace, args.sweep_requests, args.memory_routers.split(","), args.sweep_speedup)
    trace = kvreplay.load_trace(args.trace)
    if "scale" in args.parts:
        scale(trace, args.routers.split(","), args.speedup)
    if "sweep" in args.parts:
        sweep(trace, args.sweep_requests, args.jobs, args.sweep_speedup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
