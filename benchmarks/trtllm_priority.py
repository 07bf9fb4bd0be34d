"""What TensorRT-LLM's priority eviction gains over plain LRU, next to the seed's "+20% hit rate".

The seed (003) reports that TensorRT-LLM's prioritized LRU (retention priorities 0-100)
"improved hit rate ~20%". This replays two workloads through `trtllm` (policies/trtllm.py) with
and without a priority class for shared system prompts, and through `lru`:

- the three Claude Code samples merged (../shared/traces/claude-code-samples, 64-token blocks,
  three sessions that share no block): a request's priority range is the prefix every request
  of its session shares (its system prompt and tool definitions);
- a synthetic workload (`kvreplay synth --system-priority 90`): each request's system-prompt
  tokens at priority 90;
- a synthetic RAG workload where one-off documents flush the shared prompts between their uses
  (`kvreplay synth --mix rag=1 --docs 100000 --prefixes 50 --zipf 0.8 --turns 1
  --system-priority 90`): the case priority eviction is for.

Capacities are fractions of each trace's distinct blocks. The gain is relative:
(hit rate with priorities - without) / without, token-weighted over the whole trace.

    python benchmarks/trtllm_priority.py
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

import kvreplay
from kvreplay.trace.retention import Retention
from kvreplay.trace.synth import synth

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "claude-code-samples"
FRACTIONS = (0.05, 0.1, 0.2, 0.4)
PRIORITY = 90


def shared_prefix_ranges(trace, block_size: int, priority: int = PRIORITY) -> Retention:
    """Per request: the prefix every request of its session shares (its system prompt and tool
    definitions), at `priority`."""
    first, common = {}, {}
    for i in range(len(trace)):
        s = int(trace.session[i])
        ids = trace.blocks[trace.offsets[i]:trace.offsets[i + 1]].tolist()
        if s not in first:
            first[s], common[s] = ids, len(ids)
            continue
        k = 0
        while k < min(len(ids), common[s]) and ids[k] == first[s][k]:
            k += 1
        common[s] = k
    ranges = []
    for i in range(len(trace)):
        tokens = min(common[int(trace.session[i])] * block_size, int(trace.input_length[i]))
        ranges.append([(0, tokens, priority, None)] if tokens else [])
    return Retention.from_lists(ranges)


def workloads() -> dict:
    """name -> (trace without priorities, with them, block size, capacity fractions)."""
    out = {}
    if SHARED.is_dir():
        cc = kvreplay.load_trace(str(SHARED))
        out["Claude Code samples (3 sessions)"] = (cc, replace(cc, retention=shared_prefix_ranges(cc, 64)), 64,
                                                   FRACTIONS)
    prio = synth(3000, block_size=64, system_priority=PRIORITY, seed=0)
    out["synthetic (chat, RAG, agents), system prompts at 90"] = (replace(prio, retention=None), prio, 64, FRACTIONS)
    rag = synth(3000, block_size=64, system_priority=PRIORITY, seed=0, mix="rag=1", docs=100_000, prefixes=50,
                zipf=0.8, turns=1.0)
    out["synthetic RAG, one-off documents, system prompts at 90"] = (replace(rag, retention=None), rag, 64,
                                                                     (0.02, 0.05, 0.1))
    return out


def rows() -> list[dict]:
    out = []
    for name, (plain, prio, bs, fractions) in workloads().items():
        for f in fractions:
            cap = max(1, int(f * plain.num_blocks))
            lru = kvreplay.replay(plain, "lru", cap, bs).hit_rate
            base = kvreplay.replay(plain, "trtllm", cap, bs).hit_rate
            with_p = kvreplay.replay(prio, "trtllm", cap, bs).hit_rate
            out.append({"workload": name, "capacity": cap, "fraction": f, "lru": lru, "trtllm": base,
                        "trtllm_priority": with_p, "gain": (with_p - base) / base if base else float("nan")})
    return out


def main() -> None:
    print("| workload | capacity (blocks) | lru | trtllm, no priorities | trtllm, system prompts at 90 | gain |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows():
        gain = "-" if np.isnan(r["gain"]) else f"{100 * r['gain']:+.1f}%"
        print(f"| {r['workload']} | {r['capacity']:,} ({100 * r['fraction']:.0f}%) | {100 * r['lru']:.2f}% | "
              f"{100 * r['trtllm']:.2f}% | {100 * r['trtllm_priority']:.2f}% | {gain} |")


if __name__ == "__main__":
    main()
