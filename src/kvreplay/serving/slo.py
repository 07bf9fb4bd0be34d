"""Service-level objectives judged where they bind (`kvreplay plan`): TTFT p90, TPOT p90 and
end-to-end p99 over every window of the judged arrivals, not only over the whole trace.

The judged requests are those arriving after the run's warm-up (warmup.py). They are cut into
windows of arrival (5 minutes by default); a window with too few requests for its percentile to
mean anything (fewer than MIN_WINDOW_REQUESTS for a p90, ten times as many for a p99) is merged
with its neighbours, and a judged span with fewer than that is judged as one window. A run meets
its SLOs when every such window meets each objective (nearest-rank percentiles over its finished
requests) and no request of the run was rejected or refused (a request the deployment cannot serve
at all is a miss, not an exclusion). The binding window is the one whose worst objective is
closest to, or furthest past, its limit. Goodput is the finished judged requests meeting every
objective per second of the judged span; attainment their share of the judged requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checks import number
from ..errors import ConfigError
from ..units import seconds_arg
from .stats import window_percentiles
from .verdict import _windows, default_window_s, merge_windows


#: an SLO limit (or a plan's window): at most the simulated clock's span (kernel.MAX_TIME_S)
MAX_SECONDS = 1e11


@dataclass(frozen=True)
class SLO:
    """Limits in seconds (None: not asked for): numbers of seconds, or strings with their unit
    ("2s", "50ms"; a string without one is refused, as units.parse_duration says)."""

    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    e2e_p99_s: float | None = None

    def __post_init__(self):
        for name, flag in (("ttft_p90_s", "--slo-ttft-p90"), ("tpot_p90_s", "--slo-tpot-p90"), ("e2e_p99_s", "--slo-e2e-p99")):
            value = getattr(self, name)
            if value is not None:
                seconds = number(seconds_arg(value, f"SLO {name}"), f"slo.{name} ({flag})", hi=MAX_SECONDS, unit="seconds")
                object.__setattr__(self, name, seconds)

    def objectives(self):
        """(name, percentile, limit, the report's per-request values) for each objective given."""
        for name, p, limit, attr in (("TTFT p90", 90, self.ttft_p90_s, "ttft_s"), ("TPOT p90", 90, self.tpot_p90_s, "tpot_s"),
                                     ("E2E p99", 99, self.e2e_p99_s, "e2e_s")):
            if limit is not None:
                yield name, p, float(limit), attr

    def limits(self) -> dict:
        """{"ttft_p90_s": 2.0, ...}: the limits given."""
        return {k: v for k, v in (("ttft_p90_s", self.ttft_p90_s), ("tpot_p90_s", self.tpot_p90_s),
                                  ("e2e_p99_s", self.e2e_p99_s)) if v is not None}

    def text(self) -> str:
        return " and ".join(f"{name} <= {limit:g} s" for name, _, limit, _ in self.objectives())


#: a window binds only over this many judged requests for a p90 (its 5 slowest are above its
#: nearest-rank p90, index round(49 x 0.9) = 44 of 50): one slow request cannot fail it. A p99 needs
#: ten times as many, for as many requests above it (docs/plan.md, "Windows")
MIN_WINDOW_REQUESTS = 50


def min_requests_for(p: float, min_requests: int) -> int:
    """Requests a window needs for percentile `p`: as many requests above it as `min_requests`
    gives a p90 (50 for a p90 and 500 for a p99 at the default)."""
    return max(1, math.ceil(min_requests * 0.1 / (1.0 - p / 100.0) - 1e-9))


@dataclass(frozen=True)
class Windows:
    """The judged requests' windows of arrival: each one's window index (from the judged span's
    start), the requests per window, the span's start and the window length. The last window ends
    at the last arrival; when that leaves it under half a window, it joins the one before."""

    index: np.ndarray
    counts: np.ndarray
    start_s: float
    window_s: float
    last_arrival_s: float

    @classmethod
    def of(cls, arrival_s: np.ndarray, judged: np.ndarray, start_s: float, window_s: float | None = None) -> "Windows":
        """Windows of `window_s` (default: 5 minutes, or a quarter of a judged span under 20 minutes)."""
        arrival = np.asarray(arrival_s)[judged]
        span = float(arrival.max() - start_s) if arrival.size else 0.0
        w = float(window_s) if window_s else default_window_s(span)
        index, _ = _windows(arrival, w, start_s)
        counts = np.bincount(index, minlength=int(index.max()) + 1 if index.size else 0)
        return cls(index, counts, float(start_s), w, float(arrival.max()) if arrival.size else float(start_s))

    def group(self, first: int, last: int) -> dict:
        """Windows first..last as one: where they start and end, their requests, how many merged."""
        end = self.last_arrival_s if last == self.counts.size - 1 else self.start_s + (last + 1) * self.window_s
        return {"window_start_s": self.start_s + first * self.window_s, "window_end_s": end,
                "requests": int(self.counts[first:last + 1].sum()), "windows_merged": last - first + 1}


def windows_of(report, window_s: float | None = None) -> Windows:
    """`report`'s judged requests' windows."""
    return Windows.of(report.arrival_s, report.judged, report.judged_start_s, window_s)


def worst_windows(windows: Windows, values: dict, ok: np.ndarray, slo: SLO, min_requests: int) -> dict:
    """Each objective's percentile in each group of windows (merged to hold enough requests) over
    the requests `ok` marks, `values[attr]` per judged request: the binding group (the worst ratio
    to its limit: the earliest group, then the first objective, on a tie), each objective's worst
    value, how the windows were grouped, and how many (objective, group) values there were."""
    if isinstance(min_requests, bool) or not isinstance(min_requests, (int, np.integer)) or min_requests < 1:
        raise ConfigError(f"min_requests (--min-window-requests) must be a whole number >= 1, got {min_requests!r}")
    candidates, grouping = [], {}
    for order, (name, p, limit, attr) in enumerate(slo.objectives()):
        need = min_requests_for(p, min_requests)
        group = merge_windows(windows.counts, need)
        wins, got = window_percentiles(group[windows.index][ok], np.asarray(values[attr])[ok], p)
        for g, v in zip(wins, got):
            members = np.flatnonzero(group == g)
            window = windows.group(int(members[0]), int(members[-1]))
            candidates.append((-float(v) / limit, int(members[0]), order, name, float(v), limit, window))
        grouping[name] = _grouping_text(windows.counts, group, need, windows.window_s)
    worst_of = {}
    for _, _, _, name, value, _, _ in candidates:
        worst_of[name] = max(worst_of.get(name, value), value)
    binding = None
    if candidates:
        neg, _, _, name, value, limit, window = min(candidates, key=lambda c: c[:3])
        binding = {"ratio": -neg, "objective": name, "value_s": value, "limit_s": limit, **window}
    return {"binding": binding, "worst_window_s": worst_of, "grouping": grouping, "values": len(candidates)}


def judge(report, slo: SLO, window_s: float | None = None, min_requests: int = MIN_WINDOW_REQUESTS) -> dict:
    """Does `report` meet `slo` in every window of its judged span? (JSON-ready: meets, the
    binding window with its requests, each objective's worst window value, goodput, attainment.)

    Windows with fewer than `min_requests` judged requests (ten times as many for a p99) are merged
    with their neighbours; when the whole judged span holds fewer, its request-level percentile is
    the one judged, and `grouping` says so."""
    judged = report.judged
    windows = windows_of(report, window_s)
    values = {attr: getattr(report, attr)[judged] for _, _, _, attr in slo.objectives()}
    worst = worst_windows(windows, values, report.counted[judged], slo, min_requests)
    binding = worst["binding"]
    unserved = report.num_requests - report.num_finished
    good = _good(report, slo)
    dur = report.duration_s
    judged_n = int(judged.sum())
    return {"meets": bool(binding is not None and binding["ratio"] <= 1.0 and unserved == 0), "window_s": windows.window_s,
            "windows": worst["values"], "min_requests": min_requests, "grouping": worst["grouping"],
            "judged_requests": judged_n, "judged_start_s": windows.start_s,
            "binding": binding, "worst_window_s": worst["worst_window_s"],
            "unserved_requests": int(unserved),
            "goodput_per_s": good / dur if dur > 0 else None,
            "attainment": good / judged_n if judged_n else None}


def _grouping_text(counts: np.ndarray, group: np.ndarray, need: int, window_s: float) -> str:
    """How one objective's windows were grouped, in words."""
    total = int(counts.sum())
    n = int(group.max()) + 1 if group.size else 0
    length = (f"{window_s / 3600:g}-hour" if window_s >= 3600 and window_s % 3600 == 0 else
              f"{window_s / 60:g}-minute" if window_s >= 60 and window_s % 60 == 0 else f"{window_s:g} s")
    if n <= 1 and total < need:
        return (f"the whole judged span as one window: its {total:,} requests are fewer than the {need:,} a window "
                "needs, so the request-level percentile over the span is judged")
    if n == group.size:
        return f"{n:,} {length} windows, each with at least {need:,} requests"
    return (f"{group.size:,} {length} windows merged with their neighbours into {n:,}, each with at least {need:,} "
            "requests")


def _good(report, slo: SLO) -> int:
    """Finished judged requests meeting every per-request objective (TTFT, TPOT and end to end)."""
    ok = report.counted.copy()
    for _, _, limit, attr in slo.objectives():
        values = getattr(report, attr)
        ok &= np.isnan(values) | (values <= limit)
    return int(ok.sum())
