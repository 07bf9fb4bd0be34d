"""`kvreplay simulate` of a hybrid model under full-attention and hybrid KV semantics, with the
calibrated roofline and its band, for docs/engines.md ("Hybrid layer groups").

The whole conversation trace (12,031 requests, 512-token blocks) at its timestamps divided by
each --speedups load, gpt-oss-120b on --tp x --gpu with int4 weights (its checkpoint is mxfp4),
--capacity of KV: full semantics (every layer full attention, a block holds all 36 KV layers)
against vLLM 0.33.0's hybrid KV cache manager (a block id holds one group's 18 layers). Each
cell is one simulate() call (its three runs: the band's centre and both ends), with its wall and
CPU time (the machine is shared). Prints a Markdown table.

    python benchmarks/hybrid_simulate.py [--speedups 1,2] [--capacity 40GiB] [--gpu H100] [--tp 2]
    python benchmarks/hybrid_simulate.py --model Qwen3-Next-80B-A3B --weights-dtype fp8 --speedups 1
    python benchmarks/hybrid_simulate.py --engine-style sglang

--engine-style sglang runs SGLang's scheduler style and its cache, policy radix: full semantics
(a radix tree of pages holding every layer) against SGLang 0.5.23's UnifiedRadixCache (a full-
attention pool of pages, a sliding-window pool of 0.8 as many, Mamba states apart).

A Mamba hybrid (Qwen3-Next) also runs its Mamba / linear-attention layers through the roofline's
state term, which no measurement checks (the band does not cover it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speedups", default="1,2")
    ap.add_argument("--capacity", default="40GiB")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--model", default="gpt-oss-120b")
    ap.add_argument("--weights-dtype", default="int4", help="int4 (gpt-oss's mxfp4 checkpoint), fp8, bf16")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--engine-style", default="vllm", choices=("vllm", "sglang"))
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"(no {args.trace})")
        return 0
    import kvreplay

    trace = kvreplay.load_trace(str(args.trace))
    print(f"{args.model} on {args.tp} x {args.gpu}, {args.weights_dtype} weights, {args.capacity} of KV; {args.trace.name}, "
          f"{len(trace):,} requests; {args.engine_style} style; TTFT [band: the calibrated roofline's low / high end]\n")
    policy = "radix" if args.engine_style == "sglang" else "vllm"
    unit = "full-attention pages" if args.engine_style == "sglang" else "block ids"
    print("| load | semantics | pool | TTFT p50 [band] | TTFT p90 [band] | hit rate | preemptions | wall / CPU, 3 runs |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for speedup in (float(x) for x in args.speedups.split(",")):
        for semantics in ("full", "hybrid"):
            wall, cpu = time.perf_counter(), time.process_time()
            r = kvreplay.simulate(trace, policy, args.capacity, model=args.model, gpu=args.gpu, tp=args.tp,
                                  engine_style=args.engine_style,
                                  weights_dtype=args.weights_dtype, speedup=speedup, kv_semantics=semantics,
                                  time_model="roofline", compare_sequential=False)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert r.kv_semantics["semantics"] == semantics
            ttft, band = r.latencies()["ttft"], r.latency_band()["ttft"]
            pool = f"{r.capacity_blocks:,} {unit if semantics == 'hybrid' else 'blocks'}"
            cell = lambda q: f"{ttft[q]:.2f} s [{band[q][0]:.2f}-{band[q][1]:.2f}]"  # noqa: E731
            print(f"| {speedup:g}x | {semantics} | {pool} | {cell('p50')} | {cell('p90')} | "
                  f"{100 * r.summary()['hit_rate']:.2f}% | {int(r.preemptions.sum()):,} | {wall:.1f} s / {cpu:.1f} s |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
