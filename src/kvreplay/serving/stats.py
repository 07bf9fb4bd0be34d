"""Latency statistics: nearest-rank percentiles as Dynamo reports them, and a latency's summary."""

from __future__ import annotations

import math

import numpy as np

PERCENTILES = (50, 90, 99)


def nearest_rank(sorted_values: np.ndarray, p: float) -> float:
    """The value at index round((n - 1) * p / 100) of sorted values (halves away from zero)."""
    n = len(sorted_values)
    if n == 0:
        return float("nan")
    return float(sorted_values[int(math.floor((n - 1) * p / 100.0 + 0.5))])


def latency_stats(values: np.ndarray) -> dict:
    """mean, p50, p90, p99, max (seconds); count. NaN-free input."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    out = {"count": int(v.size)}
    out["mean"] = float(v.mean()) if v.size else float("nan")
    for p in PERCENTILES:
        out[f"p{p}"] = nearest_rank(v, p)
    out["max"] = float(v[-1]) if v.size else float("nan")
    return out
