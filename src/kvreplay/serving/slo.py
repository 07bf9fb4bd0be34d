"""Service-level objectives judged where they bind (`kvreplay plan`): TTFT p90, TPOT p90 and
end-to-end p99 over every window of arrivals, not only over the whole trace.

A run meets its SLOs when every window with requests meets each objective (nearest-rank
percentiles over the window's finished requests) and no request was rejected or refused (a
request the deployment cannot serve at all is a miss, not an exclusion). The binding window is
the one whose worst objective is closest to, or furthest past, its limit. Goodput is the finished
requests meeting every objective per second of the run; attainment their share of all requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..units import seconds_arg
from .stats import window_percentiles
from .verdict import _windows, default_window_s


@dataclass(frozen=True)
class SLO:
    """Limits in seconds (None: not asked for): numbers of seconds, or strings with their unit
    ("2s", "50ms"; a string without one is refused, as units.parse_duration says)."""

    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    e2e_p99_s: float | None = None

    def __post_init__(self):
        for name in ("ttft_p90_s", "tpot_p90_s", "e2e_p99_s"):
            value = getattr(self, name)
            if value is not None:
                seconds = seconds_arg(value, f"SLO {name}")
                if not 0 < seconds < float("inf"):
                    raise ConfigError(f"SLO {name} must be a positive finite duration, got {value!r}")
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


def judge(report, slo: SLO, window_s: float | None = None) -> dict:
    """Does `report` meet `slo` in every window? (JSON-ready: meets, the binding window, its
    objective and value, each objective's worst window value, goodput and attainment.)"""
    arrival = report.arrival_s
    span = float(arrival.max() - arrival.min()) if arrival.size else 0.0
    w = float(window_s) if window_s else default_window_s(span)
    ok = report.finished
    index, t0 = _windows(arrival, w)
    windows = int(np.unique(index[ok]).size)
    # every window's percentile of each objective; the worst ratio binds (the earliest window,
    # then the first objective, on a tie)
    candidates = []
    for order, (name, p, limit, attr) in enumerate(slo.objectives()):
        wins, values = window_percentiles(index[ok], getattr(report, attr)[ok], p)
        candidates += [(-float(v) / limit, int(k), order, name, float(v), limit) for k, v in zip(wins, values)]
    worst_of = {}  # each objective's worst window value
    for _, _, _, name, value, _ in candidates:
        worst_of[name] = max(worst_of.get(name, value), value)
    worst = {"ratio": -1.0}
    if candidates:
        neg, k, _, name, value, limit = min(candidates)
        worst = {"ratio": -neg, "objective": name, "value_s": value, "limit_s": limit, "window_start_s": t0 + k * w}
    unserved = report.num_requests - report.num_finished
    good = _good(report, slo)
    dur = report.duration_s
    return {"meets": bool(worst["ratio"] <= 1.0 and unserved == 0 and windows > 0), "window_s": w, "windows": windows,
            "binding": worst if worst["ratio"] >= 0 else None, "worst_window_s": worst_of,
            "unserved_requests": int(unserved),
            "goodput_per_s": good / dur if dur > 0 else None,
            "attainment": good / report.num_requests if report.num_requests else None}


def _good(report, slo: SLO) -> int:
    """Finished requests meeting every per-request objective (TTFT, TPOT and end to end)."""
    ok = report.finished.copy()
    for _, _, limit, attr in slo.objectives():
        values = getattr(report, attr)
        ok &= np.isnan(values) | (values <= limit)
    return int(ok.sum())
