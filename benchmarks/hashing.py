"""`kvreplay hash` throughput: prompt tokens per second, token log in, Mooncake trace out.

    python benchmarks/hashing.py [--tokens 10000000] [--runs 5] [--code HEAD|REF|installed]

Generates (once) a synthetic token log in benchmarks/.cache/ (git-ignored): chat sessions
over 200 shared system prompts of 500-4000 tokens (Zipf popularity), each turn resending
the prompt, the session's history and 50-2000 new tokens, ids drawn from a 150k vocabulary,
plus timestamps and output lengths. Then times kvreplay.trace.hashing.hash_token_log over
it at block sizes 512 and 16 (median of --runs, in this process; the first run of each is
untimed) and prints tokens per CPU-second of the converting thread (see _quiet.py).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import msgspec
import numpy as np

import _code
import _quiet

CACHE = Path(__file__).resolve().parent / ".cache"


def generate(path: Path, target_tokens: int, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, 150_000, int(n)) for n in rng.integers(500, 4000, 200)]
    weights = 1.0 / np.arange(1, len(prompts) + 1) ** 1.1
    weights /= weights.sum()
    tmp = path.with_suffix(".tmp")
    written = 0
    stamp = 0
    with open(tmp, "wb") as f:
        while written < target_tokens:
            history = prompts[rng.choice(len(prompts), p=weights)]
            for _ in range(1 + int(rng.geometric(0.2))):
                history = np.concatenate([history, rng.integers(0, 150_000, int(rng.integers(50, 2000)))])
                stamp += int(rng.integers(0, 2000))
                rec = {"timestamp": stamp, "token_ids": history.tolist(), "output_length": int(rng.integers(10, 500))}
                f.write(msgspec.json.encode(rec) + b"\n")
                written += history.size
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5)
    _code.add_argument(ap)
    args = ap.parse_args()
    code = _code.activate(args.code)
    from kvreplay.trace.hashing import hash_token_log

    CACHE.mkdir(exist_ok=True)
    log = CACHE / f"tokens-{args.tokens}.jsonl"
    if not log.exists():
        generate(log, args.tokens)
    out = CACHE / "tokens-hashed.jsonl"
    print(f"kvreplay: {code} ({_code.check_imported(code)})")
    print(f"input: {log.name}, {log.stat().st_size / 1e6:.1f} MB; median of {args.runs} runs")
    print("| block size | requests | tokens | blocks | unique blocks | CPU s | wall s | M tokens/CPU-s | clean runs |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    try:
        for block_size in (512, 16):
            summary = hash_token_log(log, out, block_size=block_size)  # untimed: warms the page cache

            def once():
                t, c = time.perf_counter(), time.thread_time()
                hash_token_log(log, out, block_size=block_size)
                return time.perf_counter() - t, time.thread_time() - c

            s = _quiet.summary(_quiet.measure(once, args.runs))
            print(f"| {block_size} | {summary['requests']:,} | {summary['tokens']:,} | {summary['blocks']:,} "
                  f"| {summary['unique_blocks']:,} | {s['cpu_median']:.3f} | {s['wall_median']:.3f} "
                  f"| {summary['tokens'] / s['cpu_median'] / 1e6:.1f} | {s['clean_runs']}/{s['runs']} |")
    finally:
        out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
