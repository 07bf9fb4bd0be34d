"""TTFT under full-attention against hybrid semantics, from vLLM 0.33.0's own v1 Scheduler and
KVCacheManager (tests/real_engines/vllm_scheduler.py drives them, unmodified, on CPU), for
docs/policies.md ("Hybrid models", "What it changes").

kvreplay's `simulate` serves them the same way (serving/kernel/hybrid.c; --kv-semantics auto picks
hybrid for gpt-oss-120b): each of its rows must equal the real engine's row above it. The
conversation trace's first --limit requests at their trace times (divided by --speedup), each
step a constant --step-ms (the harness's time model: TTFT here is scheduling and KV room, not
kernel time), vLLM's default step budget (8,192 tokens, 256 requests), gpt-oss-120b's groups at
512-token blocks, and the same KV bytes both ways:

- full semantics: one full-attention group, a block costing every KV layer's bytes (what
  `kvreplay simulate` does today);
- hybrid semantics: vLLM's HybridKVCacheCoordinator over gpt-oss-120b's groups (a 128-token
  sliding window and full attention, 18 layers each), a block id costing one group's page
  (catalog/kv_groups.py), retention 0 (vLLM's default).

    python benchmarks/hybrid_scheduler.py [--gib 40] [--limit 1000] [--speedup 1] [--step-ms 20]
    python benchmarks/hybrid_scheduler.py --model Qwen3-Next-80B-A3B   # 3 Mamba groups (align) + full

After each vLLM row, `kvreplay simulate` of the same requests with the same step time and the same
semantics (full: kv_semantics="full"; hybrid: model="gpt-oss-120b", its default), which match
vLLM's scheduler request by request (tests/real_engines/test_vllm_scheduler.py). Both sides use
gpt-oss-120b's context limit, 131,072 tokens (vLLM's admission cap for the sliding window uses it).

Needs the vLLM 0.33.0 wheel and numpy, msgspec and pydantic (as the harness says). Prints a
Markdown table. --model picks another hybrid model of the catalog (its own groups and context limit).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
BLOCK = 512


def row(label, result, requests, blocks, seconds) -> str:
    done = [(r, q) for r, q in zip(result.requests, requests) if r.first_token_s is not None]
    ttft = np.array([r.first_token_s - q.arrival_s for r, q in done])
    prompt = sum(q.input_length for _, q in done)
    hit = sum(r.hit_tokens for r, _ in done)
    return (f"| {label} | {blocks:,} | {len(done):,} / {len(requests):,} | {np.mean(ttft):.2f} s "
            f"| {np.percentile(ttft, 50):.2f} s | {np.percentile(ttft, 90):.2f} s | {100 * hit / prompt:.2f}% "
            f"| {sum(r.preemptions for r, _ in done):,} | {seconds:.2f} s |")


def kvreplay_row(requests, blocks, settings, semantics: str, model: str) -> str:
    """`kvreplay simulate` of the same requests, settings and step time under `semantics`, as
    tests/real_engines/test_vllm_scheduler.py runs it."""
    import kvreplay
    from kvreplay.serving.simulate import Scheduler
    from kvreplay.serving.timing import PolynomialProfile

    rows = [(q.hash_ids, q.input_length, q.arrival_s * 1e3, q.output_length) for q in requests]
    trace = kvreplay.Trace.from_requests(rows, block_size=BLOCK)
    profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                          "terms": [{"coef": settings.step_seconds}]})
    t = time.perf_counter()
    r = kvreplay.simulate(trace, policy="vllm", capacity=blocks, block_size=BLOCK, engine_style="vllm",
                          time_model=profile, compare_sequential=False, model=model, kv_semantics=semantics,
                          max_model_len=settings.max_model_len, scheduler=Scheduler(max_num_batched_tokens=8192, max_num_seqs=256))
    assert r.kv_semantics["semantics"] == semantics, r.kv_semantics
    seconds = time.perf_counter() - t
    ok = np.isfinite(r.first_token_s)
    ttft = (r.first_token_s - r.arrival_s)[ok]
    hit = 100 * float(np.sum(r.hit_tokens[ok])) / float(np.sum(trace.input_length[ok]))
    return (f"| kvreplay simulate, {semantics} semantics | {blocks:,} | {int(ok.sum()):,} / {len(requests):,} "
            f"| {np.mean(ttft):.2f} s | {np.percentile(ttft, 50):.2f} s | {np.percentile(ttft, 90):.2f} s "
            f"| {hit:.2f}% | {int(np.sum(r.preemptions)):,} | {seconds:.2f} s |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=40.0, help="KV bytes, GiB (both semantics)")
    ap.add_argument("--limit", type=int, default=1000, help="the trace's first N requests")
    ap.add_argument("--speedup", type=float, default=1.0, help="divide the trace's timestamps by this")
    ap.add_argument("--step-ms", type=float, default=20.0, help="every step's duration")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--model", default="gpt-oss-120b", help="a hybrid model of the catalog")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "real_engines"))
    import vllm_scheduler as harness

    from kvreplay.catalog.kv_groups import layout
    from kvreplay.analysis.models import get_model, kv_bytes_per_token

    if not args.trace.exists():
        print(f"(no {args.trace})")
        return 0
    try:
        real = harness.real_vllm()
    except harness.VLLMMissing as e:
        print(f"(vLLM's scheduler cannot run here: {e})")
        return 0
    requests = harness.load_jsonl(str(args.trace), args.limit, args.speedup)
    budget = int(args.gib * 2**30)
    model = get_model(args.model).name
    max_len = get_model(model).max_model_len  # its config.json's, as vLLM derives it
    L = layout(model, BLOCK)
    runs = (("full semantics (every layer full attention)", budget // (kv_bytes_per_token(model) * BLOCK), None),
            ("hybrid semantics (vLLM's hybrid coordinator)", budget // L.bytes_per_block, list(L.groups)))
    shape = " + ".join(f"{g.copies}x {g.kind}" + (f" {g.window}" if g.window else "") for g in L.groups)
    print(f"vLLM {harness.VERSION}'s Scheduler (real); {model} ({shape}), {args.gib:g} GiB of KV, "
          f"{BLOCK}-token blocks; {args.trace.name}, first {len(requests):,} requests, timestamps / {args.speedup:g}; "
          f"every step {args.step_ms:g} ms; 8,192 tokens and 256 requests per step\n")
    print("| semantics | block ids | first token / requests | TTFT mean | p50 | p90 | hit rate (first schedule, "
          "token-weighted) | preemptions | harness wall |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, blocks, groups in runs:
        settings = harness.Settings(block_size=BLOCK, usable_blocks=int(blocks), max_num_batched_tokens=8192,
                                    max_num_seqs=256, step_seconds=args.step_ms / 1000.0, groups=groups,
                                    max_model_len=max_len)
        t = time.perf_counter()
        result = harness.run(requests, settings, real)
        print(row(label, result, requests, int(blocks), time.perf_counter() - t), flush=True)
        print(kvreplay_row(requests, int(blocks), settings, "full" if groups is None else "hybrid", model), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
