"""Many capacities x policies over one loaded trace, in one process."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..engine import driver
from ..engine.replay import DEFAULT_BLOCK_SIZE, as_trace, check_capacity, replay, warmup_count
from ..output.report import window_text
from .mrc import mrc
from ..errors import ConfigError
from ..policies.registry import get_policy, parse_policy

SWEEP_FIELDS = ("policy", "params", "cache_capacity_blocks", "total_prompt_tokens", "total_hit_tokens", "hit_rate", "final_cache_blocks")


def auto_capacities(num_blocks: int, points: int = 12, smallest: int = 16) -> list[int]:
    """Log-spaced capacities from `smallest` up to the number of unique blocks (the infinite-cache size)."""
    if num_blocks <= smallest:
        return [max(num_blocks, smallest)]
    return sorted({int(c) for c in np.round(np.geomspace(smallest, num_blocks, points))})


def _policy_list(policies) -> list[tuple]:
    out = []
    for p in policies:
        if isinstance(p, str):
            out.append(parse_policy(p))
        else:
            name, params = p
            spec = get_policy(name)
            out.append((spec, spec.resolve(dict(params))))
    if not out:
        raise ConfigError("no policies to sweep")
    return out


def sweep(
    trace,
    capacities="auto",
    policies=("s3fifo", "lru", "fifo"),
    block_size: int | None = None,
    *,
    warmup_fraction: float = 0.0,
    jobs: int = 1,
    engine: str = "compiled",
) -> dict:
    """Replay every (policy, capacity) pair over one trace.

    capacities: a list of block counts, or "auto" (log-spaced up to the number of unique blocks).
    policies: names ("s3fifo"), "name:key=value:key=value" strings, or (name, params) pairs.
    warmup_fraction: the first floor(F * N) requests warm the cache and are not counted.
    jobs: threads running replays at once (the compiled kernels release the GIL).

    Returns ``{"trace", "block_size", "warmup_fraction", "window", "results": [...]}``; each
    result has the fields of SWEEP_FIELDS plus ``counters``, ordered by policy then capacity.
    """
    trace = as_trace(trace)
    if isinstance(capacities, str):
        if capacities != "auto":
            raise ConfigError(f"capacities must be a list of block counts or 'auto', got {capacities!r}")
        capacities = auto_capacities(trace.num_blocks)
    capacities = [check_capacity(c) for c in capacities]
    if not capacities:
        raise ConfigError("no capacities to sweep")
    # A policy that ignores capacity (the infinite ceiling) needs one run, not one per capacity.
    grid = []
    for spec, params in _policy_list(policies):
        grid += [(spec, params, c) for c in (capacities[-1:] if spec.capacity == "ignored" else capacities)]
    for spec, params, capacity in grid:  # fail fast on impossible queue sizes, before any replay runs
        spec.sizes(capacity, **params)

    # LRU's whole curve comes from one stack-distance pass (analysis/mrc.py), exactly.
    curve = None
    if engine == "compiled" and driver.HAVE_NUMBA and any(spec.name == "lru" for spec, _, _ in grid):
        curve = {p["cache_capacity_blocks"]: p for p in mrc(trace, capacities, block_size, warmup_fraction=warmup_fraction)["points"]}

    def one(job):
        spec, params, capacity = job
        if curve is not None and spec.name == "lru":
            point = curve[capacity]
            row = {k: point[k] for k in SWEEP_FIELDS if k in point}
            row.update(policy="lru", params={}, counters={"admissions": point["admissions"], "evictions": point["evictions"]})
            return row
        r = replay(trace, spec.name, capacity, block_size, engine=engine, warmup_fraction=warmup_fraction, **params)
        row = {k: getattr(r, k) for k in SWEEP_FIELDS}
        row["params"] = dict(r.params)
        row["counters"] = dict(r.counters)
        return row

    if jobs > 1:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(one, grid))
    else:
        results = [one(job) for job in grid]
    warmup = warmup_count(len(trace), warmup_fraction)
    return {
        "trace": trace.source,
        "block_size": int(block_size or trace.block_size or DEFAULT_BLOCK_SIZE),
        "warmup_fraction": float(warmup_fraction),
        "window": window_text(warmup, len(trace)),
        "num_requests": len(trace),
        "results": results,
    }


def points_to_rows(results: list[dict]) -> list[dict]:
    """Flatten params into a printable string for tables and CSV."""
    rows = []
    for r in results:
        row = dict(r)
        row["params"] = ";".join(f"{k}={v}" for k, v in r["params"].items())
        row.pop("counters", None)
        rows.append(row)
    return rows

