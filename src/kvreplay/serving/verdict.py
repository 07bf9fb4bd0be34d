"""Does a simulated deployment keep up with its load? Judged per time window, from the queue.

A run keeps up when, in every window of arrivals (windows with fewer than 50 judged requests
merged with their neighbours, as the plan's SLO windows are), the 90th percentile of the requests' queueing
delay (first schedule - arrival) stays within the service time of the median request (first
schedule to last token), or 1 s if that is shorter, and the engine finishes within max(60 s, 10% of
the arrival span) of the last arrival. A whole-trace rule alone misses bursts: a queue that drains
by the end of the trace can still hold requests for hours in its busiest window.

Only the judged requests count: those arriving after the run's warm-up (warmup.py), whose windows
start where the warm-up ends. The window is 5 minutes, or a quarter of the judged span when it is
shorter than 20 minutes (never under 1 s). With the calibrated roofline's band, the run keeps up
only when its pessimistic end does (the same run with every step at the band's high end); when only
the centre does, the verdict says so (`banded`). When a run does not keep up, the verdict names its worst window and
estimates what would: the load scale, or the instance count, at which the busiest window's work
(prompt tokens not hit + output tokens arriving in it) fits in 90% of what the instances processed
per busy second over the run; when that window fits on average but queues within it (a burst
shorter than the window), the scale is its p90 queueing over the allowance. The estimate is a first
guess to sweep around, and says so.
"""

from __future__ import annotations

import math

import numpy as np

from .stats import nearest_rank, window_percentiles

WINDOW_S = 300.0
MIN_QUEUE_S = 1.0
TARGET_BUSY = 0.9
#: a window's p90 binds only over this many judged requests (its 5 slowest above it); fewer are
#: merged with their neighbours (slo.py holds the plan's SLO windows to the same rule)
MIN_WINDOW_REQUESTS = 50


def backlog_s(report) -> float:
    """How long after the last arrival the engine kept working (seconds)."""
    ok = report.finished
    if not ok.any():
        return 0.0
    return max(0.0, float(report.finish_s[ok].max() - report.arrival_s.max()))


def default_window_s(span_s: float) -> float:
    return WINDOW_S if span_s >= 4 * WINDOW_S else max(span_s / 4, 1.0)


def _windows(arrival_s: np.ndarray, window_s: float, start_s: float | None = None) -> tuple[np.ndarray, float]:
    """Each arrival's window (the last one closed at the last arrival; when that leaves it under
    half a window, it joins the one before) and the first's start (`start_s`, default the first
    arrival)."""
    if not arrival_s.size:
        return np.zeros(0, dtype=np.int64), 0.0 if start_s is None else float(start_s)
    t0 = float(arrival_s.min()) if start_s is None else float(start_s)
    last = max(math.ceil((float(arrival_s.max()) - t0) / window_s) - 1, 0)
    if last >= 1 and float(arrival_s.max()) - (t0 + last * window_s) < window_s / 2:
        last -= 1  # a last window under half a window joins the one before it
    return np.minimum(np.floor((arrival_s - t0) / window_s).astype(np.int64), last), t0


def merge_windows(counts: np.ndarray, need: int) -> np.ndarray:
    """Each window's group: consecutive windows merged until a group holds `need` requests (the
    last, short group joins the one before it; everything is one group when all hold fewer)."""
    group = np.zeros(counts.size, dtype=np.int64)
    g, held = 0, 0
    for k, c in enumerate(counts):
        group[k] = g
        held += int(c)
        if held >= need and k < counts.size - 1:
            g, held = g + 1, 0
    if g > 0 and held < need:  # the trailing group is short: it joins the previous one
        group[group == g] = g - 1
    return group


def _groups(report, window_s: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Per judged request, its window group (windows merged to MIN_WINDOW_REQUESTS judged
    requests); per group, its first window; and the judged span's start."""
    judged = report.judged
    index, t0 = _windows(report.arrival_s[judged], window_s, report.judged_start_s)
    counts = np.bincount(index, minlength=int(index.max()) + 1 if index.size else 0)
    group = merge_windows(counts, MIN_WINDOW_REQUESTS)
    first = np.array([int(np.flatnonzero(group == g)[0]) for g in range(int(group.max()) + 1)] if group.size else [],
                     dtype=np.int64)
    return group[index], first, t0


def _worst_window_p90(index: np.ndarray, queue: np.ndarray) -> tuple[float, int]:
    """The largest nearest-rank p90 of `queue` over the windows in `index`, and its window (the
    first on a tie)."""
    wins, p90 = window_percentiles(index, queue, 90)
    best = int(np.argmax(p90))
    return float(p90[best]), int(wins[best])


def keeps_up(report, window_s: float | None = None) -> dict:
    """The verdict (JSON-ready): keeps_up, the window, the worst window's p90 queueing delay and
    its start, the allowance it was held to, the backlog, and (when it does not keep up) a fix."""
    ok = report.counted
    arrival = report.arrival_s
    start = report.judged_start_s
    span = float(arrival.max() - start) if arrival.size else 0.0
    w = float(window_s) if window_s else default_window_s(span)
    backlog, backlog_limit = backlog_s(report), max(60.0, 0.1 * span)
    out = {"window_s": w, "backlog_s": backlog, "backlog_limit_s": backlog_limit, "worst_window_start_s": None,
           "worst_queue_p90_s": 0.0, "allowed_queue_s": MIN_QUEUE_S, "fix": None}
    if not ok.any():
        out.update(keeps_up=False, reason="no request finished")
        return out
    queue = (report.scheduled_s - arrival)[ok]
    service = np.sort((report.finish_s - report.scheduled_s)[ok])
    allowed = max(nearest_rank(service, 50), MIN_QUEUE_S)
    group, first, t0 = _groups(report, w)
    worst, worst_g = _worst_window_p90(group[ok[report.judged]], queue)
    out.update(allowed_queue_s=allowed, worst_queue_p90_s=worst, worst_window_start_s=t0 + int(first[worst_g]) * w,
               worst_window_requests=int((group == worst_g).sum()))
    queue_ok, drained = worst <= allowed, backlog <= backlog_limit
    out["keeps_up"] = bool(queue_ok and drained)
    if out["keeps_up"]:
        out["reason"] = "every window's p90 queueing delay is within the allowance and the queue drains"
        return out
    out["reason"] = ("queueing" if not queue_ok else "") + (" and " if not (queue_ok or drained) else "") + \
        ("backlog" if not drained else "")
    out["fix"] = _fix(report, w, worst, allowed)
    return out


def banded(report) -> dict:
    """The verdict (keeps_up) of `report`, held to its band: with a band, `keeps_up` is the
    pessimistic run's, `centre_keeps_up` the centre's, and `only_at_centre` says when they
    differ; `judged_at` names the run that decided (the figures are the centre run's, the
    pessimistic run's worst window and backlog are under `high`)."""
    v = keeps_up(report)
    runs = (report.band or {}).get("runs") if getattr(report, "band", None) else None
    if not runs or "high" not in runs:
        v.update(centre_keeps_up=v["keeps_up"], only_at_centre=False, judged_at="centre (no band)", high=None)
        return v
    high = keeps_up(runs["high"])
    centre = v["keeps_up"]
    v.update(centre_keeps_up=centre, keeps_up=bool(centre and high["keeps_up"]),
             only_at_centre=bool(centre and not high["keeps_up"]), judged_at="pessimistic end of the band",
             high={k: high[k] for k in ("keeps_up", "reason", "worst_queue_p90_s", "worst_window_start_s",
                                        "allowed_queue_s", "backlog_s")})
    if v["only_at_centre"]:
        v["reason"] = f"only at the band's centre: its pessimistic end does not keep up ({high['reason']})"
        v["fix"] = high["fix"]  # (estimated from the pessimistic run's queue; the CLI checks it by a run)
    return v


def _fix(report, window_s: float, worst_queue_s: float, allowed_s: float) -> dict | None:
    """The load scale and instance count estimated to keep up (None when the run gives no rate).

    When the busiest window's work exceeds TARGET_BUSY of the instances' measured rate, scale by
    that excess; when it fits on average but queues within the window (a burst shorter than the
    window), scale by the worst window's p90 queueing over its allowance."""
    ok = report.counted
    work = (np.maximum(report.prompt_tokens - report.hit_tokens, 0) + np.maximum(report.output_tokens, 1))[ok]
    busy = [b for b in report.instance_busy_s if b]
    busy_total = float(sum(busy)) if busy else report.duration_s * report.instances
    if busy_total <= 0 or work.sum() <= 0:
        return None
    rate = float(work.sum()) / busy_total  # tokens per busy second of one instance
    group, first, t0 = _groups(report, window_s)
    per_group = np.bincount(group[ok[report.judged]], weights=work.astype(np.float64), minlength=first.size)
    last_arrival = float(report.arrival_s[report.judged].max())
    ends = np.minimum(np.r_[first[1:], 10 ** 18] * window_s + t0, max(last_arrival, t0 + window_s))
    seconds = np.maximum(ends - (t0 + first * window_s), window_s)  # (a group is at least one window long)
    density = per_group / seconds
    peak_k = int(np.argmax(density))
    need = float(density[peak_k]) / (rate * report.instances)
    factor = need / TARGET_BUSY if need > TARGET_BUSY else max(worst_queue_s / allowed_s, 1.0)
    scale = 1.0 / factor
    arrivals = report.arrivals or {}
    load = None
    if arrivals.get("kind") == "poisson":
        load = {"flag": "--rate", "value": float(arrivals["rate_per_s"]) * scale}
    elif arrivals.get("kind") == "trace":
        load = {"flag": "--speedup", "value": float(arrivals.get("speedup", 1.0)) * scale}
    elif arrivals.get("kind") in ("closed", "open_sessions") and arrivals.get("sessions"):
        load = {"flag": "--sessions", "value": max(1, math.floor(arrivals["sessions"] * scale))}
    instances = max(report.instances + 1, math.ceil(report.instances * factor))
    return {"load_scale": scale, "load": load, "instances": instances,
            "busiest_window_start_s": t0 + int(first[peak_k]) * window_s,
            "busiest_window_utilisation": need, "basis": "work" if need > TARGET_BUSY else "queueing"}
