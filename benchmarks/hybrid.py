"""Hybrid KV semantics' replay throughput: block accesses per second of the compiled engine
(hybrid/coordinator.c, ``replay_hybrid_compiled``) and of the reference (hybrid/coordinator.py,
``replay_hybrid``), vLLM 0.33.0's hybrid manager request by request; with ``--policy radix``,
SGLang 0.5.23's UnifiedRadixCache (hybrid/unified_radix.c and .py; the pool: its full-attention
pages, the SWA pool 0.8 of it).

    python benchmarks/hybrid.py [--policy vllm|radix] [--runs 5] [--reference-runs 5] [--capacities 2275,100000] [--code HEAD|REF|installed]

The Mooncake conversation trace (12,031 requests, 288,500 block accesses of 512 tokens) with
two layouts at block size 512: gpt-oss-120b (a sliding window of 128 tokens and full attention,
one group each) and Qwen3-Next-80B-A3B (3 Mamba groups and one full-attention group), vLLM's
default retention (0) and prefill chunk (8192 tokens), at a small and a large pool (block ids
of the shared pool). Each cell: the trace in memory, one untimed call, then the median of
--runs timed calls of the replay alone (hit blocks, counters and resident count out), wall
and CPU time of this thread (benchmarks/_quiet.py: the machine is shared; runs during which
other processes were busy are retried and counted as not clean), and the fastest run's rate
(a busy neighbour on the shared host slows a run by up to ~1.6x, not always seen as contention).
Every cell also checks that the compiled engine's hits and counters equal the reference's.
For scale, each pool also times the single-group vLLM pool of policies/vllm.c (policy vllm with
full semantics: every layer full attention, one block per block access) in the same way: the
host's speed varies over time, and that row says what one group costs at that moment.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import _code
import _quiet

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
MODELS = ("gpt-oss-120b", "Qwen3-Next-80B-A3B")
BLOCK_SIZE = 512


def timed(fn):
    def once():
        wall, cpu = time.perf_counter(), time.thread_time()
        fn()
        return time.perf_counter() - wall, time.thread_time() - cpu
    return once


def replayers(policy: str, trace, groups):
    """(compiled, reference) replays of one pool size, each returning (hits, counters, resident)."""
    if policy == "vllm":
        from kvreplay.hybrid.coordinator import replay_hybrid, replay_hybrid_compiled

        def reference(capacity):
            hits, pool = replay_hybrid(trace, capacity, groups, BLOCK_SIZE)
            return hits, pool.stats, pool.resident_count()

        return (lambda capacity: replay_hybrid_compiled(trace, capacity, groups, BLOCK_SIZE)), reference
    from kvreplay.hybrid.unified_radix import replay_radix_hybrid, replay_radix_hybrid_compiled

    def reference(capacity):
        hits, cache = replay_radix_hybrid(trace, groups, BLOCK_SIZE, full_pages=capacity)
        return hits, cache.stats, cache.resident_count()

    return (lambda capacity: replay_radix_hybrid_compiled(trace, groups, BLOCK_SIZE, full_pages=capacity)[:3]), reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", choices=("vllm", "radix"), default="vllm",
                    help="vllm: vLLM's hybrid manager; radix: SGLang's UnifiedRadixCache")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--reference-runs", type=int, default=5, help="runs of the reference (0: skip it)")
    ap.add_argument("--capacities", default="2275,100000", help="pool sizes in block ids, comma separated")
    ap.add_argument("--trace", type=Path, default=TRACE)
    _code.add_argument(ap)
    args = ap.parse_args()
    code = _code.activate(args.code)
    import kvreplay
    from kvreplay.catalog.kv_groups import layout
    from kvreplay.engine import driver
    from kvreplay.policies.registry import get_policy

    trace = kvreplay.load_trace(args.trace)
    accesses = int(trace.blocks.shape[0])
    capacities = [int(c) for c in args.capacities.split(",")]
    print(f"kvreplay: {code} ({_code.check_imported(code)})")
    print(f"trace: {args.trace.name}, {len(trace):,} requests, {accesses:,} block accesses, block size {BLOCK_SIZE}; "
          f"policy {args.policy}; retention 0, prefill chunk 8192; median of {args.runs} runs (reference: "
          f"{args.reference_runs})\n")
    print("| layout | groups | pool (block ids) | engine | wall s | CPU s | M block accesses / CPU-s "
          "| M block accesses / wall-s | best run, M / CPU-s | clean runs | hit blocks | evictions |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|")
    vllm = get_policy("vllm")

    def single_group(capacity: int) -> None:
        state = vllm.make_state(capacity, trace, **vllm.resolve({}))
        hit_blocks, hit_tokens = np.zeros(len(trace), dtype=np.int64), np.zeros(len(trace), dtype=np.int64)
        driver.replay_state(vllm, state, trace.offsets, trace.blocks, trace.input_length, BLOCK_SIZE, hit_blocks,
                            hit_tokens)

    for model in MODELS + ("(scale)",):
        if model == "(scale)":
            for capacity in capacities:
                single_group(capacity)
                s = _quiet.summary(_quiet.measure(timed(lambda: single_group(capacity)), args.runs))
                print(f"| (any, full semantics) | 1x full | {capacity:,} | vllm.c | {s['wall_median']:.4f} "
                      f"| {s['cpu_median']:.4f} | {accesses / s['cpu_median'] / 1e6:.2f} "
                      f"| {accesses / s['wall_median'] / 1e6:.2f} | {accesses / s['cpu_min'] / 1e6:.2f} "
                      f"| {s['clean_runs']}/{s['runs']} | | |", flush=True)
            continue
        groups = list(layout(model, BLOCK_SIZE).groups)
        shape = " + ".join(f"{g.copies}x {g.kind}" + (f" {g.window}" if g.window else "") for g in groups)
        compiled_of, reference_of = replayers(args.policy, trace, groups)
        for capacity in capacities:
            compiled = lambda: compiled_of(capacity)  # noqa: E731
            hits, counters, resident = compiled()  # untimed: loads the core, warms the caches
            rows = [("compiled", compiled, args.runs)]
            if args.reference_runs:
                ref_hits, ref_counters, ref_resident = reference_of(capacity)
                same = np.array_equal(hits, ref_hits) and counters == ref_counters and resident == ref_resident
                assert same, f"{model} at {capacity}: the compiled engine differs from the reference"
                rows.append(("reference", lambda: reference_of(capacity), args.reference_runs))
            for engine, fn, runs in rows:
                s = _quiet.summary(_quiet.measure(timed(fn), runs))
                print(f"| {model} | {shape} | {capacity:,} | {engine} | {s['wall_median']:.4f} "
                      f"| {s['cpu_median']:.4f} | {accesses / s['cpu_median'] / 1e6:.2f} "
                      f"| {accesses / s['wall_median'] / 1e6:.2f} | {accesses / s['cpu_min'] / 1e6:.2f} "
                      f"| {s['clean_runs']}/{s['runs']} "
                      f"| {int(hits.sum()):,} | {counters['evictions']:,} |", flush=True)


if __name__ == "__main__":
    main()
