"""vLLM PR #43447's failure mode as a scenario: sliding-window prefix caching that collapses to
zero hits when the sliding-window groups cache every block (vLLM's behaviour before #43447, and
its default until #52216), and what the fix (``prefix_cache_retention_interval`` 0, vLLM
0.33.0's default) restores.

The shape of vllm-project/vllm#48435 (Gemma on one GPU): S sessions, each a long prompt (21,000
tokens) re-sent with a 200-token tail each turn, round robin, three rounds; gemma-3-27b-it's
layout (52 sliding-window layers of 1,024 tokens in 6 groups, 10 full-attention layers), block
size 16, one request at a time. The pool is sized so the sessions' full-attention blocks fill
25%, 50% or 12.5% of it. Prints the warm rounds' hit rate (token-weighted over rounds 2 and 3)
under each retention, from kvreplay's hybrid semantics (hybrid/coordinator.py), which
tests/real_engines/test_vllm_hybrid.py checks request by request against vLLM 0.33.0's own
KVCacheManager in both modes, on this same scenario.

    python benchmarks/hybrid_retention.py [--sessions 5] [--prefix 21000]
"""

from __future__ import annotations

import argparse
import itertools

import kvreplay
from kvreplay.catalog.kv_groups import layout

BS = 16


def sessions_round_robin(sessions: int, prefix: int, tail: int = 200, rounds: int = 3, block_size: int = BS):
    """(hash ids, prompt tokens) per request: each session's prompt grows by `tail` tokens a turn."""
    counter = itertools.count(1)
    prompts = [[next(counter) for _ in range(prefix // block_size)] for _ in range(sessions)]
    out = []
    for _ in range(rounds):
        for s in range(sessions):
            prompts[s] = prompts[s] + [next(counter) for _ in range(tail // block_size)]
            out.append((list(prompts[s]), len(prompts[s]) * block_size))
    return out


def warm_hit_rate(requests, capacity: int, groups, retention, sessions: int) -> float:
    r = kvreplay.replay(kvreplay.Trace.from_requests(requests), "vllm", capacity, BS, kv_groups=groups,
                        kv_retention=retention)
    return float(r.hit_tokens[sessions:].sum() / r.prompt_tokens[sessions:].sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--prefix", type=int, default=21000)
    args = ap.parse_args()
    groups = layout("gemma-3-27b-it", BS).groups
    requests = sessions_round_robin(args.sessions, args.prefix)
    full = sum(len(ids) for ids, _ in requests[-args.sessions:])
    print(f"## {args.sessions} sessions of {args.prefix:,} tokens, round robin, gemma-3-27b-it layout, block size {BS}\n")
    print("| pool (block ids) | sessions' full-attention share | warm hit rate, every block cached (before #43447) "
          "| warm hit rate, retention 0 (the fix) |")
    print("| ---: | ---: | ---: | ---: |")
    for share in (0.5, 0.25, 0.125):
        capacity = int(full / share)
        dense, sparse = (warm_hit_rate(requests, capacity, groups, ret, args.sessions) for ret in (None, 0))
        print(f"| {capacity:,} | {100 * share:g}% | {100 * dense:.1f}% | {100 * sparse:.1f}% |")


if __name__ == "__main__":
    main()
