"""What the HTML report shows, as plain data: the curve, one operating point, the trace's stats.

`collect` runs the replays and returns JSON-ready data; `output.html.render` draws it.

Everything the page calls a result counts only the measured window (the requests after the
warm-up): the headline figures, the curve, the operating point, the hit rate over time and
the per-request spread. The trace's own description is given for the window and, when there
is a warm-up, for the whole trace next to it, each column labelled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..engine.replay import replay, warmup_count
from ..engine.report import window_text
from ..errors import ConfigError
from ..policies.registry import parse_policy
from ..progress import labelled, tell
from . import metrics
from .stats import stats as trace_stats
from .sweep import sweep

TIME_WINDOWS = 50  # points on the hit-rate-over-time chart (at most; the leftover requests join the last window)
MIN_TIME_WINDOW = 10  # requests per point at least (a point of one or two requests is noise)
BOUNDS = ("infinite", "belady")  # not policies a server could run: never picked as "the best"
FOCUS_SHARE = 0.5  # the default operating point: where the best policy first reaches this share of the ceiling


def trace_name(source) -> str:
    """The name a page shows for a trace: a path's file name (never the directories of the
    machine it ran on); a description ("<memory>", "synthetic ...") as it is."""
    text = str(source)
    if os.sep in text or (os.altsep and os.altsep in text) or os.path.exists(text):
        return os.path.basename(text.rstrip(os.sep)) or text
    return text


def window_info(num_requests: int, warmup_fraction: float) -> dict:
    """The measured window: ``warmup_requests`` (only warm the cache), ``measured_requests``,
    1-based ``first_request``/``last_request``, and the sentence every output uses."""
    warmup = warmup_count(num_requests, warmup_fraction)
    return {"warmup_fraction": float(warmup_fraction), "warmup_requests": warmup,
            "measured_requests": num_requests - warmup, "first_request": warmup + 1, "last_request": num_requests,
            "description": window_text(warmup, num_requests)}


def _describe(trace, block_size, progress=None) -> dict:
    """The page's description of a trace (or a window of one)."""
    s = trace_stats(trace, block_size, progress=labelled(progress, "requests described"))
    n = len(trace)
    span_ms = float(trace.timestamp.max() - trace.timestamp.min()) if n else 0.0
    return {
        "num_requests": s["num_requests"],
        "total_prompt_tokens": s["total_prompt_tokens"],
        "num_block_accesses": s["num_block_accesses"],
        "num_unique_blocks": s["num_unique_blocks"],
        "time_span_s": span_ms / 1000.0,
        "request_rate_per_s": (n - 1) / (span_ms / 1000.0) if span_ms > 0 and n > 1 else None,
        "input_length": s["input_length"],
        "output_length": s["output_length"],
        "sessions": s.get("sessions"),
        "infinite_cache_hit_rate": s["infinite_cache_hit_rate"],
    }


def merge_short_tail(windows: list[dict], per_window: int) -> list[dict]:
    """Windows of `per_window` requests with a shorter last one: the leftover requests join the
    window before them (so no point of the chart rests on a handful of requests). Totals are
    unchanged; the merged window's ``requests`` says how many it holds."""
    if len(windows) < 2 or windows[-1]["requests"] >= per_window:
        return windows
    a, b = windows[-2], windows[-1]
    merged = dict(a)
    for key in ("requests", "prompt_tokens", "hit_tokens"):
        merged[key] = a[key] + b[key]
    if "last_request" in b:
        merged["last_request"] = b["last_request"]
    if "end_s" in b:
        merged["end_s"] = b["end_s"]
    merged["hit_rate"] = merged["hit_tokens"] / merged["prompt_tokens"] if merged["prompt_tokens"] else 0.0
    return windows[:-2] + [merged]


def choose_focus(curve: list[dict], names: list[str], ceiling: float | None, capacities: list[int]) -> tuple[int, str, str]:
    """The default operating point: (capacity, rule, reason).

    Rule ``half-ceiling``: the smallest capacity of the curve at which the best of the policies
    (`names`, bounds left out) reaches half the infinite-cache hit rate. Below it no policy
    keeps much; far above it every policy nears the ceiling; around it the choice of policy
    and size matters most. When no policy gets there: the largest capacity (``largest``); when
    the trace has no reuse at all: the middle of the curve (``middle``)."""
    practical = [n for n in names if n not in BOUNDS] or names
    best: dict[int, float] = {}
    for r in curve:
        if r["policy"] in practical:
            c = r["cache_capacity_blocks"]
            best[c] = max(best.get(c, 0.0), r["hit_rate"])
    if not ceiling or ceiling <= 0:
        return capacities[len(capacities) // 2], "middle", (
            "the middle of the curve: the trace has no reuse (the infinite-cache hit rate is 0), so every size is alike")
    target = FOCUS_SHARE * ceiling
    for c in capacities:
        if best.get(c, 0.0) >= target:
            return c, "half-ceiling", (
                f"the smallest capacity on the curve where the best policy reaches half the infinite-cache hit rate "
                f"({100 * target:.2f}% of {100 * ceiling:.2f}%): smaller caches keep little for any policy, much "
                "larger ones bring every policy near the ceiling, so here the choice of size and policy matters most")
    return capacities[-1], "largest", (
        f"the largest capacity on the curve: no policy reaches half the infinite-cache hit rate "
        f"({100 * target:.2f}%) at any capacity swept")


def collect(trace, *, policies=("s3fifo", "lru", "fifo"), capacities="auto", focus_capacity: int | None = None,
            block_size: int | None = None, warmup_fraction: float = 0.0, bounds: bool = False,
            active_params: int | None = None, bytes_per_block: int | None = None, budget_note: str = "",
            price_hit: float = metrics.DEFAULT_PRICE_HIT, price_miss: float = metrics.DEFAULT_PRICE_MISS,
            progress=None, engine: str | None = None, focus_rule: str = "given",
            focus_reason: str = "the capacity asked for (--capacity)") -> dict:
    """Everything the report shows, as plain data.

    The curve comes from `sweep` over `capacities` (plus the infinite-cache ceiling, and
    belady with `bounds`); the per-request views replay each policy once more at
    `focus_capacity` (default: `choose_focus`, explained in the data's ``focus_reason``).
    Every result counts only the measured window (``window``); ``measured`` describes the
    window's requests and ``whole_trace`` the whole file.
    """
    return collect_with(trace, policies, capacities, bounds,
                        Replays(block_size=block_size, warmup_fraction=warmup_fraction, engine=engine),
                        Focus(capacity=focus_capacity, rule=focus_rule, reason=focus_reason),
                        Costing(active_params=active_params, bytes_per_block=bytes_per_block, budget_note=budget_note,
                                price_hit=price_hit, price_miss=price_miss), progress)


@dataclass(frozen=True)
class Replays:
    """How every replay of the report runs: tokens per block, the warm-up, the engine."""

    block_size: int | None = None
    warmup_fraction: float = 0.0
    engine: str | None = None


@dataclass(frozen=True)
class Focus:
    """The operating point: a capacity (None: choose_focus picks it), the rule and the reason shown."""

    capacity: int | None = None
    rule: str = "given"
    reason: str = "the capacity asked for (--capacity)"


@dataclass(frozen=True)
class Costing:
    """What the page's budget and money figures rest on (metrics.summarize)."""

    active_params: int | None = None
    bytes_per_block: int | None = None
    budget_note: str = ""
    price_hit: float = metrics.DEFAULT_PRICE_HIT
    price_miss: float = metrics.DEFAULT_PRICE_MISS


def collect_with(trace, policies, capacities, bounds: bool, replays: Replays, focus: Focus, costing: Costing,
                 progress=None) -> dict:
    """collect() with its options packed: the curve, the operating point and the trace's stats."""
    if isinstance(policies, str):
        policies = policies.split(",")
    policies = [p.strip() for p in policies if p and p.strip()]
    if not policies:
        raise ConfigError("the report needs at least one policy")
    names = [parse_policy(p)[0].name for p in policies]
    swept = policies + [p for p in (["infinite"] + (["belady"] if bounds else [])) if p not in names]
    curve = sweep(trace, capacities, swept, replays.block_size, warmup_fraction=replays.warmup_fraction,
                  engine=replays.engine, progress=progress)
    results = list(curve["results"])
    caps = sorted({r["cache_capacity_blocks"] for r in results if r["policy"] != "infinite"})
    if not caps:
        raise ConfigError("the report needs at least one capacity")
    ceiling = next((r for r in results if r["policy"] == "infinite"), None)
    if focus.capacity is None:
        focus = Focus(*choose_focus(results, names, ceiling["hit_rate"] if ceiling else None, caps))

    n = len(trace)
    window = window_info(n, replays.warmup_fraction)
    measured_n = window["measured_requests"]
    per_window = max(1, min(measured_n, max(MIN_TIME_WINDOW, measured_n // TIME_WINDOWS)))
    # Style indices: the i-th policy of the curve (bounds after them) keeps its colour on every chart.
    curve_order = [p for p in swept if parse_policy(p)[0].name != "infinite"]
    rows, reports = _focus_replays(trace, policies, curve_order, focus.capacity, replays, per_window, costing, progress)
    misses = explain(trace, policies, reports, replays.engine)
    whole = _describe(trace, replays.block_size, progress)
    measured = whole if window["warmup_requests"] == 0 else _describe(
        trace.take(np.arange(window["warmup_requests"], n)), replays.block_size, progress)
    last = rows[0]["over_time"][-1]["requests"] if rows and rows[0]["over_time"] else per_window
    return {
        "trace": {"name": trace_name(trace.source), "source": str(trace.source), "format": trace.format},
        "measured": measured,
        "whole_trace": whole,
        "block_size": curve["block_size"],
        "window": window,
        "warmup_fraction": float(replays.warmup_fraction),
        "curve": results,
        "capacities": caps,
        "ceiling": ceiling,
        "focus_capacity": int(focus.capacity),
        "focus_rule": focus.rule,
        "focus_reason": focus.reason,
        "focus": rows,
        "requests_per_time_window": per_window,
        "last_time_window_requests": last,
        "bytes_per_block": costing.bytes_per_block,
        "budget_note": costing.budget_note,
        "active_params": costing.active_params,
        "price_source": metrics.PRICE_SOURCE,
        "policy_summaries": [(spec.name, spec.summary) for spec in
                             dict.fromkeys(parse_policy(p)[0] for p in swept)],
        "misses": misses,
    }


def _focus_replays(trace, policies: list[str], curve_order: list[str], capacity: int, replays: Replays,
                   per_window: int, costing: Costing, progress) -> tuple[list[dict], list]:
    """Each policy replayed once more at the operating point: its row of the page's per-request
    views (summary, metrics, hit rate over time, per-request hit rates), and its report."""
    rows = []
    reports = []
    tell(progress, 0, len(policies), "per-request replays")
    for p in policies:
        spec, params = parse_policy(p)
        r = replay(trace, spec.name, capacity, replays.block_size, engine=replays.engine,
                   warmup_fraction=replays.warmup_fraction, **params)
        reports.append(r)
        tell(progress, len(rows) + 1, len(policies), "per-request replays")
        windows = metrics.over_time(r, requests=per_window)
        rows.append({
            "label": p,
            "series": curve_order.index(p) if p in curve_order else len(curve_order) + len(rows),
            "summary": r.summary(),
            "metrics": metrics.summarize(r, active_params=costing.active_params, price_hit=costing.price_hit,
                                         price_miss=costing.price_miss),
            "over_time": merge_short_tail(windows, per_window),
            "request_hit_rates": metrics.request_hit_rates(r).tolist(),
        })
    return rows, reports


def explain(trace, labels: list[str], reports: list, engine: str) -> dict:
    """Why the cache missed at the operating point: each policy's account, stranded blocks over
    time and headroom (analysis/headroom.py), and the advice for the best deployable one."""
    from .advice import advice, stranded_mean
    from .headroom import bound_hits, headroom

    with_account = [(label, r) for label, r in zip(labels, reports) if r.misses is not None]
    if not with_account:
        return {"policies": [], "advice": []}
    first = with_account[0][1]
    bounds = bound_hits(trace, first.block_size, first.cache_capacity_blocks, engine)
    rows = []
    for label, r in with_account:
        rows.append({"label": label, "policy": r.policy, "account": r.misses.to_dict(),
                     "hit_tokens": r.total_hit_tokens, "prompt_tokens": r.total_prompt_tokens,
                     "stranded_mean": stranded_mean(r), "stranded_end": r.stranded_blocks,
                     "headroom": None if r.policy in BOUNDS else headroom(trace, r, bounds=bounds, engine=engine)})
    practical = [(row, r) for row, (_, r) in zip(rows, with_account) if r.policy not in BOUNDS]
    sentences = []
    if practical:
        best_row, best = max(practical, key=lambda item: item[1].hit_rate)
        stranded = {row["label"]: row["stranded_mean"] for row, _ in practical if row["stranded_mean"] is not None}
        sentences = advice(trace, best, headroom=best_row["headroom"], engine=engine,
                           stranded_mean=best_row["stranded_mean"], stranded_by_policy=stranded)
    return {"policies": rows, "advice": sentences, "capacity": first.cache_capacity_blocks}
