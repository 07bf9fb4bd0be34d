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


def window_percentiles(index: np.ndarray, values: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """The nearest-rank p-th percentile of `values` in each window of `index` (NaN values left
    out): (windows ascending, their percentiles), from one sort for every window."""
    values = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(values)
    index, values = np.asarray(index)[keep], values[keep]
    if not values.size:
        return index, values
    order = np.lexsort((values, index))
    win, v = index[order], values[order]
    starts = np.flatnonzero(np.r_[True, win[1:] != win[:-1]])
    counts = np.diff(np.r_[starts, win.size])
    return win[starts], v[starts + np.floor((counts - 1) * p / 100.0 + 0.5).astype(np.int64)]  # as nearest_rank
