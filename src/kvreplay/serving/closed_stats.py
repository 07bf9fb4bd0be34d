"""A closed-loop run's figures (docs/sessions.md, "What a closed run reports"): sessions, turns,
think time and Little's law, over the judged span (the requests arriving after the warm-up).

- A **turn** is a request; its number is its rank in its session by arrival (1 = the session's
  first). Per-turn TTFT is each turn's time to first token, by turn number.
- A **session's time** runs from its first request's send to its last answer's end, for the
  sessions whose first request is judged and whose every request finished.
- **Turns per minute**: finished judged requests per minute of the judged span (the whole system).
- **Think share**: the sessions' think time (sum over their requests that wait) over their time.
- **Little's law**: over the judged span [a, b], each request's cycle runs from when what it waits
  for ended (its ready time; a request that waits for nothing: its send) to its last token. With
  throughput X (finished judged requests / (b - a)), mean response time R (send to last token) and
  mean think time Z (ready to send) of the requests that finish in it, X (R + Z) must equal the
  time-average number of open cycles, L, measured from the cycles themselves, within the sampling
  error of a finite span: its ends cut the cycles in progress there, on average E[C^2] / (2 E[C])
  of each cycle C at each end, so the two may differ by about E[C^2] / (E[C] (b - a)) of L. With N
  concurrent sessions the sessions open on average (each from its first send to its last answer's
  end) must be N over the steady span, and L is N plus the subagents running beside the agent
  that spawned them.

With N concurrent sessions the judged span ends at the steady state's end: when every drawn
session has started and the first one after that ends, a lane goes idle (steady_until).
"""

from __future__ import annotations

import numpy as np

from .stats import latency_stats, nearest_rank

TURN_BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, None))


def arrival_info(loop) -> dict:
    """The report's arrivals: closed, with how the links, think times, starts and draws were found."""
    out = {"kind": "closed" if loop.open_arrival_s is None else "open_sessions", "sessions": loop.lanes,
           "links": loop.info["links"]["text"],
           "links_source": loop.info["links"]["source"], "think": loop.info["think"]["text"],
           "think_counts": {k: loop.info["think"][k] for k in ("recorded", "estimated", "drawn", "clamped")}}
    if loop.info["links"]["source"] == "inferred":
        out["inferred"] = {k: v for k, v in loop.info["links"].items() if k not in ("source", "text")}
    for key in ("starts", "draw_text"):
        if key in loop.info:
            out["starts" if key == "starts" else "draws"] = loop.info[key]
    return out


def per_request(loop) -> dict:
    """What the report keeps per request of a closed loop (trace order)."""
    return {"session": np.asarray(loop.session, dtype=np.int64), "think_s": np.asarray(loop.think_s, dtype=np.float64),
            "lanes": loop.lanes, "queued": loop.queued, "after_offsets": loop.links.offsets, "after": loop.links.after,
            "delay_s": loop.delay_s, "on_send": loop.on_send, "followed": loop.open_arrival_s is None}


def session_spans(session: np.ndarray, arrival_s: np.ndarray, finish_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per session: its first send, and its last answer's end (NaN when one of its requests did
    not finish)."""
    S = int(session.max()) + 1 if session.size else 0
    first = np.full(S, np.inf)
    np.minimum.at(first, session, arrival_s)
    last = np.full(S, -np.inf)
    np.maximum.at(last, session, np.where(np.isnan(finish_s), np.inf, finish_s))
    return first, np.where(np.isinf(last), np.nan, last)


def steady_until(closed: dict, arrival_s: np.ndarray, finish_s: np.ndarray) -> float | None:
    """With lanes: when the steady state ends (every drawn session started, and the first session
    that ends after that leaves its lane idle); None without lanes, or when the run never got there."""
    if not closed.get("lanes"):
        return None
    first, last = session_spans(closed["session"], arrival_s, finish_s)
    started = float(np.max(first)) if first.size else 0.0
    ends = last[~np.isnan(last) & (last >= started)]
    return float(ends.min()) if ends.size else None


def _fired(report) -> np.ndarray:
    """Per link: when it fired (its predecessor's end, or its send for a link that fires on it; NaN
    when that predecessor never finished)."""
    c = report.closed
    return np.where(c["on_send"], report.arrival_s[c["after"]], report.finish_s[c["after"]])


def ready_s(report) -> np.ndarray:
    """Per request: when what it waits for released it (the latest of its links' firings; NaN when
    a predecessor did not finish), or its send time when it waits for nothing (or for a lane)."""
    c = report.closed
    n = report.num_requests
    counts = np.diff(c["after_offsets"])
    out = np.asarray(report.arrival_s, dtype=np.float64).copy()
    if c["after"].size:
        fired = _fired(report)
        owner = np.repeat(np.arange(n), counts)
        latest = np.full(n, -np.inf)
        np.maximum.at(latest, owner, np.where(np.isnan(fired), np.inf, fired))
        waiting = counts > 0
        out[waiting] = np.where(np.isinf(latest[waiting]), np.nan, latest[waiting])
    return out


def turn_numbers(report) -> np.ndarray:
    """Each request's rank in its session by arrival (1-based)."""
    session = report.closed["session"]
    order = np.lexsort((np.arange(session.size), report.arrival_s, session))
    first = np.r_[True, session[order][1:] != session[order][:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    turn = np.empty(session.size, dtype=np.int64)
    turn[order] = np.arange(order.size) - start + 1
    return turn


def summary(report) -> dict:
    """The closed section of a SimReport's summary (module docstring)."""
    c = report.closed
    ok = report.counted
    session = c["session"]
    arrival, finish = report.arrival_s, report.finish_s
    dur = report.duration_s
    S = int(session.max()) + 1 if session.size else 0
    first, last = session_spans(session, arrival, np.where(report.finished, finish, np.nan))
    done = ~np.isnan(last)
    judged_sessions = (first >= report.judged_start_s) & (first < (report.judged_until_s or np.inf))
    complete = judged_sessions & done
    times = (last - first)[complete]
    think = np.nan_to_num(c["think_s"])
    think_sum = np.bincount(session, weights=np.where(np.isnan(c["think_s"]), 0.0, think), minlength=S)[complete]
    turns = np.bincount(session, minlength=S)[complete]
    turn = turn_numbers(report)
    by_turn = []
    for lo, hi in TURN_BUCKETS:
        mine = ok & (turn >= lo) & (turn <= (hi if hi is not None else turn.max(initial=0)))
        v = np.sort(report.ttft_s[mine])
        by_turn.append({"turns": f"{lo}" if lo == hi else (f"{lo}+" if hi is None else f"{lo}-{hi}"),
                        "requests": int(mine.sum()), "ttft_p50_s": nearest_rank(v, 50), "ttft_p90_s": nearest_rank(v, 90)})
    band = None
    runs = (report.band or {}).get("runs") or {}
    if runs:  # the same figures at the time model's band ends (their own arrivals: the loop follows the steps)
        band = {}
        for end in ("low", "high"):
            other = summary(runs[end]) if runs[end].closed is not None else None
            band[end] = None if other is None else {"session_time_s": other["session_time_s"],
                                                    "turns_per_minute": other["turns_per_minute"]}
    return {
        "lanes": c["lanes"],
        "band": band,
        "sessions": {"judged": int(judged_sessions.sum()), "complete": int(complete.sum()),
                     "unfinished": int((judged_sessions & ~done).sum()), "of": S},
        "session_time_s": latency_stats(times),
        "turns_per_session": latency_stats(turns.astype(np.float64)),
        "ttft_by_turn": by_turn,
        "turns_per_minute": None if not dur else 60.0 * int(ok.sum()) / dur,
        "turns_per_minute_per_session": (None if not dur or not c["lanes"] else 60.0 * int(ok.sum()) / dur / c["lanes"]),
        "think_share": float(think_sum.sum() / times.sum()) if times.size and times.sum() > 0 else None,
        "littles_law": littles_law(report),
        "sent_early": sent_early(report),
    }


def sent_early(report) -> dict | None:
    """The open loop's fiction, counted: judged requests sent before what they wait for released
    them (their previous answer had not ended, or the think time had not passed). None when the
    loop was followed (closed: never)."""
    c = report.closed
    if c.get("followed", True):
        return None
    n = report.num_requests
    owner = np.repeat(np.arange(n), np.diff(c["after_offsets"]))
    fired = _fired(report)
    due = np.full(n, -np.inf)
    np.maximum.at(due, owner, np.where(np.isnan(fired), -np.inf, fired + c["delay_s"]))
    waiting = (np.diff(c["after_offsets"]) > 0) & report.judged
    early = waiting & (report.arrival_s < due - 1e-9)
    before_end = np.zeros(n, dtype=bool)
    np.logical_or.at(before_end, owner, ~c["on_send"] & ~np.isnan(fired) & (report.arrival_s[owner] < fired))
    return {"requests": int(waiting.sum()), "early": int(early.sum()), "before_answer": int((before_end & waiting).sum()),
            "text": f"{int(early.sum()):,} of {int(waiting.sum()):,} judged requests that follow another were sent "
                    f"before it released them ({int((before_end & waiting).sum()):,} before the answer they follow "
                    "had even ended): a client that waits for its answers could not have sent them"}


def littles_law(report) -> dict | None:
    """X (R + Z) against the measured time-average of open cycles over the judged span (module
    docstring); None without a span."""
    a = report.judged_start_s
    b = report.judged_until_s if report.judged_until_s is not None else a + report.duration_s
    dur = b - a
    arrival, finish = report.arrival_s, report.finish_s
    done = report.finished & (finish >= a) & (finish <= b)
    if not done.any() or dur <= 0:
        return None
    ready = ready_s(report)
    X = int(done.sum()) / dur
    R = float(np.mean(finish[done] - arrival[done]))
    Z = float(np.mean((arrival - ready)[done]))
    valid = ~np.isnan(ready) & ~np.isnan(finish)
    L = float(np.sum(np.clip(finish[valid], a, b) - np.clip(ready[valid], a, b)) / dur)
    predicted = X * (R + Z)
    cycle = (finish - ready)[done]
    # the span's ends cut the cycles in progress there: on average E[C^2] / (2 E[C]) of each (the
    # inspection paradox), at each end, over L of them
    boundary = float(np.mean(cycle ** 2) / np.mean(cycle) / dur) if np.mean(cycle) > 0 else 0.0
    out = {"throughput_per_s": X, "response_s": R, "think_s": Z, "predicted_concurrency": predicted,
           "measured_concurrency": L, "relative_difference": (predicted - L) / L if L > 0 else None,
           "boundary_share": boundary, "span_s": dur, "span_start_s": a}
    tolerance = max(out["boundary_share"], 0.01)
    out["holds"] = out["relative_difference"] is not None and abs(out["relative_difference"]) <= tolerance
    lanes = report.closed["lanes"]
    text = f"X (R + Z) = {X:.4g}/s x ({R:.4g} s + {Z:.4g} s) = {predicted:.4g}; measured open cycles {L:.4g}"
    if lanes:
        first, last = session_spans(report.closed["session"], arrival, finish)
        busy = float(np.sum(np.clip(np.nan_to_num(last, nan=b), a, b) - np.clip(first, a, b)) / dur)
        out.update(lanes=lanes, sessions_open=busy, beside=L - busy, lanes_relative_difference=(busy - lanes) / lanes)
        out["holds"] = out["holds"] and abs(busy - lanes) / lanes <= tolerance
        text += (f" = {busy:.4g} sessions open on average (of {lanes})" + (
            f" + {L - busy:.3g} subagents beside their agent" if L - busy > 1e-9 * L else ""))
    out["tolerance"] = tolerance
    out["text"] = text + (f"; they differ by {100 * abs(out['relative_difference'] or 0):.2g}%, "
                          + ("within" if out["holds"] else "beyond") + f" the sampling error of a span this long "
                          f"({100 * tolerance:.2g}%: the cycles its ends cut)")
    return out


def check(report) -> None:
    """The closed loop's rule: a request is never sent before what it waits for has ended (or been
    sent, for a link that fires on the send), and is sent at the latest of its links' firings plus
    their delays (where every predecessor finished; the others were rejected or refused)."""
    from ..errors import InvariantError

    c = report.closed
    if not c["after"].size or not c.get("followed", True):
        return
    n = report.num_requests
    owner = np.repeat(np.arange(n), np.diff(c["after_offsets"]))
    fired = _fired(report)
    sent = report.arrival_s[owner]
    eps = 1e-9 * np.maximum(1.0, np.abs(sent))
    early = np.flatnonzero(~np.isnan(fired) & (sent < fired + c["delay_s"] - eps))
    if early.size:
        k = early[0]
        raise InvariantError(f"request {int(owner[k])} was sent at {sent[k]:.9g} s, before request "
                             f"{int(c['after'][k])} it waits for {'was sent' if c['on_send'][k] else 'ended'} "
                             f"({fired[k]:.9g} s) and its delay ({c['delay_s'][k]:.9g} s) passed")
    due = np.full(n, -np.inf)
    np.maximum.at(due, owner, np.where(np.isnan(fired), np.inf, fired + c["delay_s"]))
    waiting = np.isfinite(due) & (np.diff(c["after_offsets"]) > 0)
    if c.get("queued") is not None:
        waiting[c["queued"]] = False  # (also waited for a lane)
    off = np.flatnonzero(np.abs(report.arrival_s[waiting] - due[waiting]) > 1e-9 * np.maximum(1.0, np.abs(due[waiting])))
    if off.size:
        i = int(np.flatnonzero(waiting)[off[0]])
        raise InvariantError(f"request {i} was sent at {report.arrival_s[i]:.9g} s, not when its links released it "
                             f"({due[i]:.9g} s)")
