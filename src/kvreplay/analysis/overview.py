"""What the HTML report shows, as plain data: the curve, one operating point, the trace's stats.

`collect` runs the replays and returns JSON-ready data; `output.html.render` draws it.
"""

from __future__ import annotations

from ..engine.replay import replay
from ..errors import ConfigError
from ..policies.registry import parse_policy
from . import metrics
from .stats import stats as trace_stats
from .sweep import sweep

TIME_WINDOWS = 50  # points on the hit-rate-over-time chart


def collect(trace, *, policies=("s3fifo", "lru", "fifo"), capacities="auto", focus_capacity: int | None = None,
            block_size: int | None = None, warmup_fraction: float = 0.0, bounds: bool = False,
            active_params: int | None = None, bytes_per_block: int | None = None, budget_note: str = "",
            price_hit: float = metrics.DEFAULT_PRICE_HIT, price_miss: float = metrics.DEFAULT_PRICE_MISS,
            progress=None, engine: str = "compiled") -> dict:
    """Everything the report shows, as plain data.

    The curve comes from `sweep` over `capacities` (plus the infinite-cache ceiling, and
    belady with `bounds`); the per-request views replay each policy once more at
    `focus_capacity` (default: the middle capacity of the curve).
    """
    policies = [p for p in policies if p]
    names = [parse_policy(p)[0].name for p in policies]
    swept = policies + [p for p in (["infinite"] + (["belady"] if bounds else [])) if p not in names]
    extra = {"progress": progress} if progress else {}
    curve = sweep(trace, capacities, swept, block_size, warmup_fraction=warmup_fraction, engine=engine, **extra)
    caps = sorted({r["cache_capacity_blocks"] for r in curve["results"] if r["policy"] != "infinite"})
    if focus_capacity is None:
        if not caps:
            raise ConfigError("the report needs at least one capacity")
        focus_capacity = caps[len(caps) // 2]
    per_window = max(1, len(trace) // TIME_WINDOWS)
    focus = []
    for p in policies:
        spec, params = parse_policy(p)
        r = replay(trace, spec.name, focus_capacity, block_size, engine=engine, warmup_fraction=warmup_fraction, **params)
        focus.append({
            "label": p,
            "summary": r.summary(),
            "metrics": metrics.summarize(r, active_params=active_params, price_hit=price_hit, price_miss=price_miss),
            "over_time": metrics.over_time(r, requests=per_window),
            "request_hit_rates": metrics.request_hit_rates(r).tolist(),
        })
    ceiling = next((r for r in curve["results"] if r["policy"] == "infinite"), None)
    span_ms = float(trace.timestamp.max() - trace.timestamp.min()) if len(trace) else 0.0
    return {
        "trace": {**trace.summary(), "time_span_s": span_ms / 1000.0},
        "stats": trace_stats(trace, block_size),
        "block_size": curve["block_size"],
        "window": curve["window"],
        "warmup_fraction": warmup_fraction,
        "curve": curve["results"],
        "capacities": caps,
        "ceiling": ceiling,
        "focus_capacity": int(focus_capacity),
        "focus": focus,
        "requests_per_time_window": per_window,
        "bytes_per_block": bytes_per_block,
        "budget_note": budget_note,
        "active_params": active_params,
        "price_source": metrics.PRICE_SOURCE,
        "policy_summaries": [(spec.name, spec.summary) for spec in
                             dict.fromkeys(parse_policy(p)[0] for p in swept)],
    }
