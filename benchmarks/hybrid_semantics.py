"""Full-attention against hybrid semantics: the hit rate a hybrid model gets under vLLM 0.33.0's
hybrid manager (hybrid/coordinator.py) against what kvreplay printed before (every layer as full
attention), at the same KV bytes, for docs/policies.md ("Hybrid models").

For each model, trace and capacity in GiB: `kvreplay run TRACE --model M --capacity C --policy vllm
--kv-semantics full|hybrid`. Under full semantics a block costs every KV layer's bytes (the
budgets kvreplay has always used); under hybrid semantics a block id costs vLLM's layout
(group size x page: catalog/kv_groups.py), so the same GiB hold more blocks, but a hit must be
served by every group (a window's last blocks, a Mamba state at the hit's end).

    python benchmarks/hybrid_semantics.py
"""

from __future__ import annotations

import os
import time

import kvreplay
from kvreplay.catalog.kv_groups import layout
from kvreplay.analysis.models import kv_bytes_per_token

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "traces")
TRACES = {"conversation (Mooncake, 512-token blocks)": (os.path.join(SHARED, "mooncake", "conversation_trace.jsonl"),
                                                        (40, 160, 640)),
          "Claude Code sample trace_0291 (64-token blocks)": (os.path.join(SHARED, "claude-code-samples",
                                                                           "trace_0291.json"), (1, 2, 4))}
MODELS = ("gpt-oss-120b", "Qwen3-Next-80B-A3B")


def row(trace, model: str, gib: int) -> dict:
    from kvreplay.trace.coarsen import coarsen
    from kvreplay.trace.model import resolve_block_size

    bs = resolve_block_size(None, trace)
    vllm_bs = layout(model, bs).vllm_block_size
    if vllm_bs > bs and vllm_bs // bs > 1:  # a Mamba hybrid: vLLM's blocks are far coarser than the trace's
        factor = vllm_bs // bs
        trace, bs = coarsen(trace, factor, bs), bs * factor  # (exact: chained ids; both semantics at bs)
    full_blocks = gib * 2**30 // (kv_bytes_per_token(model) * bs)
    L = layout(model, bs)
    hybrid_blocks = gib * 2**30 // L.bytes_per_block
    t = time.perf_counter()
    full = kvreplay.replay(trace, "vllm", full_blocks, bs)
    hybrid = kvreplay.replay(trace, "vllm", hybrid_blocks, bs, kv_groups=L.groups)
    return {"full_blocks": full_blocks, "full": full.hit_rate, "hybrid_blocks": hybrid_blocks, "hybrid": hybrid.hit_rate,
            "seconds": time.perf_counter() - t, "vllm_bs": L.vllm_block_size, "bs": bs}


def main() -> None:
    print("| model | trace | KV GiB | full semantics: blocks, hit rate | hybrid semantics: block ids, hit rate |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, (path, sizes) in TRACES.items():
        if not os.path.exists(path):
            print(f"(no {path})")
            continue
        trace = kvreplay.load_trace(path)
        for model in MODELS:
            for gib in sizes:
                r = row(trace, model, gib)
                note = "" if r["vllm_bs"] == r["bs"] else f" (at {r['bs']}-token blocks; vLLM's are {r['vllm_bs']})"
                print(f"| {model} | {name} | {gib} | {r['full_blocks']:,}: {100 * r['full']:.2f}% | "
                      f"{r['hybrid_blocks']:,}: {100 * r['hybrid']:.2f}%{note} |", flush=True)


if __name__ == "__main__":
    main()
