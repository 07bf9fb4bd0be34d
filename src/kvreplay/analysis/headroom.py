"""Headroom, decomposed: how far a policy's hit rate is from what the workload allows, and what
bounds each part of the gap (docs/metrics.md, "Headroom").

For one trace, window and capacity, four hit rates, each token-weighted over the window:

1. the **ceiling**: an infinite cache (every block ever seen stays): what the workload allows;
   the rest is first uses and what the engine never serves (workload-bound);
2. **belady** at this capacity: the offline optimum's eviction order (MIN, which knows the
   future) at this capacity: ceiling - belady is capacity-bound;
3. the **policy** at this capacity: belady - policy is policy-bound (the eviction order; it
   includes the tokens an engine-faithful policy never serves, the partial block);
4. **served**, when the trace was simulated at a load: policy - served is concurrency-bound
   (running requests' KV and prefixes still computing).

Belady minimises block misses, not prefix-hit tokens, so a policy can beat it by a little: the
policy gap is then negative and said so. Each gap is given in tokens and, with a prefill cost
(``cost(prompt_tokens, hit_tokens) -> seconds`` per request, e.g. serving/prefill_cost.py's from
the serving time model), in GPU-seconds of prefill.
"""

from __future__ import annotations

import numpy as np

from ..engine.replay import replay
from ..trace.model import exact_sum

LEVELS = ("ceiling", "belady", "policy", "served")
GAPS = {"capacity": ("ceiling", "belady"), "policy": ("belady", "policy"), "concurrency": ("policy", "served")}


def bound_hits(trace, block_size: int, capacity: int, engine: str = "compiled") -> dict:
    """Per request, the hit tokens of the ceiling and of belady at `capacity` (the whole trace):
    headroom()'s `bounds`, computed once for several policies at one capacity."""
    common = dict(block_size=block_size, engine=engine, miss_account=False)
    # belady first: its next uses are never resident beside the trace's indexes the checks keep
    belady = replay(trace, "belady", capacity, **common).hit_tokens
    return {"ceiling": replay(trace, "infinite", None, **common).hit_tokens, "belady": belady}


def headroom(trace, report, *, served_hit_tokens=None, requests=None, cost=None, engine: str = "compiled",
             bounds: dict | None = None) -> dict:
    """The four levels and the three gaps for `report` (a replay of `trace`), its capacity and
    window. served_hit_tokens: per request, the hit tokens of a simulated run of the same policy
    and capacity (None: not simulated); requests: a bool mask of the requests to count (the
    served run's finished ones; default all of the window). cost: per-request prefill seconds, see
    the module doc. bounds: bound_hits() of this capacity, when already computed."""
    bounds = bounds or bound_hits(trace, report.block_size, report.cache_capacity_blocks, engine)  # the whole trace
    window = np.arange(len(trace)) >= report.warmup_requests
    if requests is not None:
        window &= np.asarray(requests, dtype=bool)
    hits = {"ceiling": bounds["ceiling"], "belady": bounds["belady"], "policy": report.hit_tokens}
    if served_hit_tokens is not None:
        hits["served"] = np.asarray(served_hit_tokens, dtype=np.int64)
    prompt = np.asarray(report.prompt_tokens, dtype=np.int64)
    total = exact_sum(prompt[window])
    levels = {}
    for name, h in hits.items():
        tokens = exact_sum(np.asarray(h, dtype=np.int64)[window])
        levels[name] = {"hit_tokens": tokens, "hit_rate": tokens / total if total else 0.0}
        if cost is not None:
            levels[name]["prefill_gpu_seconds"] = float(cost(prompt[window], np.asarray(h, dtype=np.int64)[window]))
    gaps = {}
    for gap, (upper, lower) in GAPS.items():
        if lower not in levels:
            continue
        g = {"tokens": levels[upper]["hit_tokens"] - levels[lower]["hit_tokens"],
             "points": 100 * (levels[upper]["hit_rate"] - levels[lower]["hit_rate"])}
        if cost is not None:
            g["prefill_gpu_seconds"] = levels[lower]["prefill_gpu_seconds"] - levels[upper]["prefill_gpu_seconds"]
        gaps[gap] = g
    return {"capacity_blocks": report.cache_capacity_blocks, "policy": report.policy, "prompt_tokens": total,
            "window": report.window if requests is None else f"the {int(window.sum()):,} requests that finished", "levels": levels, "gaps": gaps,
            "workload": {"tokens": total - levels["ceiling"]["hit_tokens"],
                         "points": 100 * (1 - levels["ceiling"]["hit_rate"])}}


def headroom_sentence(h: dict) -> str:
    """"of the 26.9 points between your 10.5% and the 37.4% ceiling, 14 are capacity, 9 are the
    policy, 4 are concurrency" (each gap rounded to one decimal)."""
    levels = h["levels"]
    bottom = levels["served"] if "served" in levels else levels["policy"]
    top = levels["ceiling"]["hit_rate"]
    span = 100 * (top - bottom["hit_rate"])
    names = {"capacity": "capacity", "policy": "the policy", "concurrency": "concurrency"}
    parts = [_gap_text(g["points"], names[k], k) for k, g in h["gaps"].items()]
    return (f"of the {span:.1f} points between your {100 * bottom['hit_rate']:.1f}% and the {100 * top:.1f}% ceiling "
            f"({h['capacity_blocks']:,} blocks), " + ", ".join(parts))


#: what a level above the one over it means (a gap below zero): never printed as negative points
_ABOVE = {"capacity": "Belady's order at this capacity hits more than the infinite cache",
          "policy": "the policy hits more than Belady's order at this capacity (Belady's minimises misses of "
                    "blocks, not of prefix tokens)",
          "concurrency": "served, the cache hits more than the sequential replay (another order of the same "
                         "requests)"}


def _gap_text(points: float, name: str, gap: str) -> str:
    """"14.0 are capacity"; a gap below zero as what it gives back ("the policy gives back 3.0: ...")."""
    if round(points, 1) >= 0:
        return f"{abs(points):.1f} {'is' if round(points, 1) == 1 else 'are'} {name}"
    return f"{name} gives back {-points:.1f} ({_ABOVE[gap]})"
