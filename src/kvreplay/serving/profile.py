"""Rate profiles: reshape arrivals over time (`--rate-profile diurnal|FILE`; docs/serving.md).

A profile is a rate multiplier m(f) over the fraction f of the arrival span, piecewise linear
between its points and scaled to a mean of 1, so the span, the number of requests and the mean
rate stay as they were and only where the requests fall changes. An arrival at time t of a span S
moves to S x M^-1(t / S), where M is the integral of m: where m is 2, requests arrive twice as
densely as before.

`diurnal` is one day stretched over the span: a cosine with its peak at 14:00 and its trough at
02:00, three times as busy at the peak as at the trough (peak 1.5x the mean, trough 0.5x). A FILE
is CSV with a `fraction,multiplier` row per point (fractions from 0 to 1, rising; multipliers >= 0,
not all 0), or JSON `{"points": [[fraction, multiplier], ...]}`.
"""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np

from ..errors import ConfigError, TraceError
from ..files import read_text

GRID = 4097


def diurnal() -> np.ndarray:
    """(fraction, multiplier) of the built-in day: 1 + 0.5 cos(2 pi (hour - 14) / 24), hourly."""
    hours = np.arange(25)
    return np.column_stack([hours / 24.0, 1.0 + 0.5 * np.cos(2 * math.pi * (hours - 14) / 24.0)])


def load_profile(spec) -> tuple[np.ndarray, str]:
    """The profile's points and how to name it: "diurnal", a FILE, or an array of points."""
    if isinstance(spec, str) and spec.strip().lower() == "diurnal":
        return diurnal(), "diurnal (peak 14:00, trough 02:00, 3:1)"
    if isinstance(spec, str):
        return _read(spec), spec
    return _check(np.asarray(spec, dtype=float), "rate_profile"), "given points"


def _read(path: str) -> np.ndarray:
    text = read_text(path, TraceError, "a rate profile", "no such file (--rate-profile: diurnal or a FILE)")
    if path.lower().endswith(".json"):
        try:
            doc = json.loads(text)
            points = np.asarray(doc["points"], dtype=float)
        except (ValueError, KeyError, TypeError, RecursionError):
            raise TraceError(path, 'not a rate profile: JSON {"points": [[fraction, multiplier], ...]}') from None
        return _check(points, path)
    rows = []
    for line, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or (line == 1 and not _is_number(row[0])):
            continue  # a blank line, or the header
        if len(row) != 2 or not all(_is_number(x) for x in row):
            raise TraceError(f"{path}:{line}", "want fraction,multiplier (two numbers)")
        rows.append([float(row[0]), float(row[1])])
    return _check(np.asarray(rows, dtype=float).reshape(-1, 2), path)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _check(points: np.ndarray, where: str) -> np.ndarray:
    if points.ndim != 2 or points.shape[1] != 2 or len(points) < 2:
        raise ConfigError(f"{where}: a rate profile needs at least 2 points of (fraction, multiplier)")
    f, m = points[:, 0], points[:, 1]
    if not np.all(np.isfinite(points)) or f[0] != 0 or f[-1] != 1 or np.any(np.diff(f) <= 0):
        raise ConfigError(f"{where}: the fractions must rise strictly from 0 to 1")
    if np.any(m < 0) or not np.any(m > 0):
        raise ConfigError(f"{where}: the multipliers must be >= 0 and not all 0")
    return points


def reshape(arrival_s: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Arrivals moved so that their rate follows the profile (module docstring)."""
    span = float(arrival_s.max()) if arrival_s.size else 0.0
    if span <= 0:
        return arrival_s
    grid = np.linspace(0.0, 1.0, GRID)
    m = np.interp(grid, points[:, 0], points[:, 1])
    cumulative = np.concatenate([[0.0], np.cumsum((m[1:] + m[:-1]) / 2 * np.diff(grid))])
    cumulative /= cumulative[-1]  # a mean of 1 over the span
    return span * np.interp(np.asarray(arrival_s) / span, cumulative, grid)
