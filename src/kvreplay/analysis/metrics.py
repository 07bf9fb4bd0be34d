"""What a hit rate is worth: prefill speedup, compute and money saved, per-request spread, hit rate over time.

Every figure here is derived from a Report's per-request arrays over the report's window
(the whole trace, or the requests after the warm-up), so it can be recomputed by hand:

- ``ideal_prefill_speedup`` = 1 / (1 - h), h the token-weighted hit rate: prefill work is
  proportional to the tokens that miss, if prefill time were linear in uncomputed tokens
  (it is not quite: attention over a cached prefix still costs; this is an upper bound).
- ``prefill_flops_saved`` ~= 2 x active parameters x hit tokens (the standard forward-pass
  estimate of 2 FLOPs per parameter per token; attention FLOPs are left out).
- money: ``cost_without_cache`` = prompt tokens x miss price; ``cost_with_cache`` = hit tokens
  x hit price + missed tokens x miss price; prices are per million tokens.
- per-request hit rate = hit_tokens / prompt_tokens of one request (requests with no prompt
  tokens left out); its percentiles weigh every request equally, unlike the headline rate.
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import number, whole
from ..errors import ConfigError

# DeepSeek API, deepseek-chat (DeepSeek-V3), USD per 1M input tokens, cache hit / cache miss:
# https://api-docs.deepseek.com/quick_start/pricing-details-usd (as published in 2025). A provider
# that prices cached input separately; override with --price-hit / --price-miss for yours.
DEFAULT_PRICE_HIT = 0.07
DEFAULT_PRICE_MISS = 0.27
PRICE_SOURCE = "DeepSeek API deepseek-chat (V3) list prices, api-docs.deepseek.com/quick_start/pricing-details-usd"

PERCENTILES = (50, 90, 99)


def ideal_speedup(hit_rate: float) -> float:
    """1 / (1 - h); infinite when every prompt token hits."""
    return float("inf") if hit_rate >= 1.0 else 1.0 / (1.0 - hit_rate)


def money(hit_tokens: int, prompt_tokens: int, price_hit: float = DEFAULT_PRICE_HIT, price_miss: float = DEFAULT_PRICE_MISS) -> dict:
    """Input-token cost with and without the cache, prices in currency units per million tokens."""
    if price_hit < 0 or price_miss < 0:
        raise ConfigError(f"prices must be >= 0, got hit {price_hit} and miss {price_miss}")
    without = prompt_tokens * price_miss / 1e6
    with_cache = (hit_tokens * price_hit + (prompt_tokens - hit_tokens) * price_miss) / 1e6
    return {
        "price_hit_per_million": price_hit,
        "price_miss_per_million": price_miss,
        "cost_without_cache": without,
        "cost_with_cache": with_cache,
        "saved": without - with_cache,
    }


def request_hit_rates(report) -> np.ndarray:
    """Per-request hit rates over the report's window (requests with no prompt tokens left out)."""
    prompt = report.prompt_tokens[report.warmup_requests:]
    hits = report.hit_tokens[report.warmup_requests:]
    keep = prompt > 0
    return hits[keep] / prompt[keep]


def percentiles(rates: np.ndarray, qs=PERCENTILES) -> dict:
    """``{"p50": ..., ...}`` by the "lower" rule: every value is some request's real hit rate."""
    if rates.size == 0:
        return {f"p{q}": 0.0 for q in qs}
    return {f"p{q}": float(np.percentile(rates, q, method="lower")) for q in qs}


MAX_WINDOWS = 10_000  # a table or chart of more windows is unreadable (and the labels cost memory)


def over_time(report, timestamp_ms=None, *, requests: int | None = None, seconds: float | None = None) -> list[dict]:
    """Token-weighted hit rate per window of `requests` consecutive requests, or of `seconds`
    of trace time (needs `timestamp_ms`, in trace order). Only requests in the report's window
    count; a window with no prompt tokens has hit_rate 0 and ``"prompt_tokens": 0``."""
    if (requests is None) == (seconds is None):
        raise ConfigError("give exactly one of requests= or seconds= for the hit rate over time")
    start = report.warmup_requests
    prompt = report.prompt_tokens[start:]
    hits = report.hit_tokens[start:]
    n = prompt.shape[0]
    if requests is not None:
        # a window longer than the trace is the whole trace: the same windows, no huge integers
        requests = min(whole(requests, "requests per window (--over-time N)", 1), max(n, 1))
        bucket = np.arange(n) // requests
        # Request numbers are 1-based, as in the window text ("requests 101-200").
        labels = [{"first_request": start + a + 1, "last_request": start + min(a + requests, n)} for a in range(0, n, requests)]
    else:
        if timestamp_ms is None:
            raise ConfigError("a hit rate per window of time needs the trace's timestamps")
        seconds = min(number(seconds, "seconds per window (--over-time Ns)", unit="seconds"), 1e300)
        t = np.asarray(timestamp_ms, dtype=np.float64)[start:]
        if n == 0:
            return []
        t0 = float(t.min())
        span = float(t.max()) - t0
        count = math.floor(span / (seconds * 1000.0)) + 1 if math.isfinite(span / (seconds * 1000.0)) else math.inf
        if count > MAX_WINDOWS:
            least = span / 1000.0 / (MAX_WINDOWS - 1)
            raise ConfigError(f"windows of {seconds:g} s over a trace spanning {span / 1000.0:,.6g} s make more than "
                              f"{MAX_WINDOWS:,} windows: use windows of at least {least:,.6g} s")
        bucket = ((t - t0) // (seconds * 1000.0)).astype(np.int64)
        labels = [{"start_s": (t0 / 1000.0) + i * seconds, "end_s": (t0 / 1000.0) + (i + 1) * seconds} for i in range(count)]
    size = len(labels)
    window_prompt = np.bincount(bucket, weights=prompt, minlength=size)[:size]
    window_hits = np.bincount(bucket, weights=hits, minlength=size)[:size]
    window_requests = np.bincount(bucket, minlength=size)[:size]
    out = []
    for label, p, h, r in zip(labels, window_prompt, window_hits, window_requests):
        p, h = int(p), int(h)
        out.append({**label, "requests": int(r), "prompt_tokens": p, "hit_tokens": h, "hit_rate": h / p if p else 0.0})
    return out


def summarize(report, *, active_params: int | None = None, price_hit: float = DEFAULT_PRICE_HIT,
              price_miss: float = DEFAULT_PRICE_MISS) -> dict:
    """The headline metrics of one replay over its window (see the module docstring)."""
    hit, prompt = report.total_hit_tokens, report.total_prompt_tokens
    h = hit / prompt if prompt else 0.0
    speedup = ideal_speedup(h)
    out = {
        "window": report.window,
        "hit_rate": h,
        "ideal_prefill_speedup": None if speedup == float("inf") else speedup,
        "request_hit_rate_percentiles": percentiles(request_hit_rates(report)),
        "money": money(hit, prompt, price_hit, price_miss),
    }
    if active_params is not None:
        out["active_params"] = int(active_params)
        out["prefill_flops_saved"] = 2 * int(active_params) * hit
    return out
