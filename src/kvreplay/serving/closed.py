"""Closed-loop arrivals (docs/sessions.md): what each request waits for, its think time, and the
arrays the compiled loop's release mechanism reads (kernel/release.c).

A request is sent when every request it waits for has ended (its last output token: finished,
rejected or refused), plus its think time. Where the links come from, in order:

1. the trace's own (trace/dependencies.py: Claude Code's streams and subagents, Bailian's parent
   chats);
2. its sessions, each request after its session's previous one (in trace order);
3. else inferred from prefix extension (trace/sessions.py), and said how many were attached.

Think times: ``--think-time DIST`` draws them (think.py); else the trace's recorded ones (Claude
Code: the send time minus the latest predecessor's end, t + api_time); where the trace records no
end (Bailian, Mooncake, sessions without times), the recorded gap after the latest predecessor's
send minus that predecessor's service time on the simulated deployment alone (floors.py's
end-to-end bound): on an idle deployment the sessions then keep their recorded pace, and queueing
slows them. A think time is never negative (a shorter gap is served at once, and counted).

Requests that wait for nothing start at their recorded times (shifted so the first is 0, divided
by --speedup), or, with ``sessions=N`` (lanes.py), N lanes each run the trace's sessions one after
another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..trace.dependencies import Dependencies
from ..trace.model import Trace
from ..trace.sessions import infer_links
from .think import ThinkTime

OPEN, CLOSED = "open", "closed"
#: formats whose default is the closed loop: their files record think times (send times are the
#: recording server's product); the others replay their timestamps
CLOSED_BY_DEFAULT = ("claude-code", "agentic-mooncake")


def default_arrivals(trace: Trace) -> str:
    """"closed" for a trace whose format records its think times, else "open"."""
    return CLOSED if trace.format in CLOSED_BY_DEFAULT else OPEN


def check_arrivals(value, trace: Trace) -> str:
    if value is None:
        return default_arrivals(trace)
    if value not in (OPEN, CLOSED):
        raise ConfigError(f"arrivals (--arrivals) must be open or closed, got {value!r}")
    return value


def links_of(trace: Trace, block_size: int) -> tuple[Dependencies, dict]:
    """What each request waits for, and where that came from ({"source", "text", ...})."""
    if trace.dependencies is not None:
        d = trace.dependencies
        waiting = int((~d.roots()).sum())
        return d, {"source": "trace", "text": f"{d.rule or 'the trace'} ({waiting:,} of {len(trace):,} requests wait)"}
    if trace.session is not None:
        d = Dependencies.chains(trace.session, "each request follows its session's previous one (trace order)")
        return d, {"source": "sessions", "text": f"{d.rule} ({trace.num_sessions:,} sessions)"}
    d, stats = infer_links(trace, block_size)
    return d, {"source": "inferred", **stats}


def think_times(trace: Trace, links: Dependencies, dist: ThinkTime | None, seed: int,
                service_s: np.ndarray | None) -> tuple[np.ndarray, dict]:
    """Seconds from each waiting request's last predecessor's end to its send (NaN for a request
    that waits for nothing), and how they were found. `service_s`: each request's service time
    on the deployment alone (for the gaps the trace records without an end)."""
    n = len(trace)
    waiting = ~links.roots()
    think = np.full(n, np.nan)
    if links.delay_ms is not None:  # (a request whose every link carries its delay needs no think time)
        owner = np.repeat(np.arange(n), np.diff(links.offsets))
        open_links = np.bincount(owner, weights=np.isnan(links.delay_ms), minlength=n)
        waiting &= open_links > 0
    if dist is not None:
        think[waiting] = dist.draw(n, seed)[waiting]
        return think, {"drawn": int(waiting.sum()), "recorded": 0, "estimated": 0, "clamped": 0,
                       "text": f"drawn: {dist.text()} (seed {seed})"}
    recorded = waiting & np.isfinite(links.think_ms)
    think[recorded] = links.think_ms[recorded] / 1000.0
    missing = np.flatnonzero(waiting & ~recorded)
    clamped = 0
    if missing.size:
        ts = np.asarray(trace.timestamp, dtype=np.float64) / 1000.0
        owner = np.repeat(np.arange(n), np.diff(links.offsets))
        pick = np.lexsort((ts[links.after], owner))  # per request, its latest-sent predecessor last
        last = np.r_[owner[pick][1:] != owner[pick][:-1], True]
        latest = np.full(n, -1, dtype=np.int64)
        latest[owner[pick][last]] = links.after[pick][last]
        p = latest[missing]
        service = np.zeros(missing.size) if service_s is None else service_s[p]
        gap = ts[missing] - ts[p] - service
        clamped = int((gap < 0).sum())
        think[missing] = np.maximum(gap, 0.0)
    parts = []
    if recorded.any():
        parts.append(f"{int(recorded.sum()):,} recorded in the trace")
    if missing.size:
        parts.append(f"{missing.size:,} estimated as the recorded gap after the predecessor's send minus its service "
                     f"time on this deployment alone ({clamped:,} shorter than that: 0)")
    return think, {"drawn": 0, "recorded": int(recorded.sum()), "estimated": int(missing.size), "clamped": clamped,
                   "text": "; ".join(parts) or "no request waits"}


@dataclass(frozen=True)
class ClosedLoop:
    """A closed-loop run's requests and what each waits for (positions in `trace`)."""

    trace: Trace  # the requests served: the trace's, or the lanes' draws of its sessions
    links: Dependencies
    delay_s: np.ndarray  # per link: seconds from its firing (its predecessor's end, or send) to the request's send
    on_send: np.ndarray  # per link: fires on its predecessor's send (else on its end)
    think_s: np.ndarray  # per request: its think time (NaN: none: it waits for nothing, or only on sends)
    start_s: np.ndarray  # per request that waits for nothing: its send time (NaN for the others)
    session: np.ndarray  # per request: its session (a draw, with lanes)
    info: dict  # how the links, think times and (with lanes) the draws were found: texts and counts
    lanes: int | None = None  # N concurrent sessions (lanes.py), or None: the trace's sessions at their times
    #: with lanes: the first requests of the sessions beyond the first N, in draw order; each waits
    #: for a lane (a session's end) besides its links
    queued: np.ndarray | None = None
    #: N sessions sent open-loop (lanes.open_schedule): each request's send time; the links are then
    #: only counted (how many requests were sent before what they wait for ended), not followed
    open_arrival_s: np.ndarray | None = None

    def waits(self) -> np.ndarray:
        """Per request: what it waits for (its links, and a lane when it is queued)."""
        w = np.diff(self.links.offsets).astype(np.int64)
        if self.queued is not None:
            w[self.queued] += 1
        return w

    def kernel_arrays(self, delay_s=0.0) -> dict:
        """The compiled loop's inputs in this trace's order: arrival (the send time of a request
        that waits for nothing), waits, next_offsets / next_ids (who waits for each request),
        think_s, and with lanes each request's session and the lane queue; `delay_s` (what the host
        adds before a request reaches the engine, timing/host.py: a number, or one per request) is
        added to every arrival, to every link into the request it delays, and to a queued session's
        first request when its lane takes it (lane_delay_s); a link that fires on a request's send
        fires on its client's, send_delay_s before the engine sees it."""
        n = len(self.trace)
        delay_s = np.broadcast_to(np.asarray(delay_s, dtype=np.float64), (n,))
        owner = np.repeat(np.arange(n), np.diff(self.links.offsets))
        by = np.lexsort((owner, self.links.after))
        counts = np.bincount(self.links.after, minlength=n)
        next_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=next_offsets[1:])
        waits = self.waits()
        lanes = self.queued is not None
        return {"arrival": np.where(waits == 0, np.nan_to_num(self.start_s) + delay_s, 0.0),
                "waits": waits, "next_offsets": next_offsets, "next_ids": owner[by].astype(np.int64),
                "next_delay_s": self.delay_s[by] + delay_s[owner[by]], "next_on_send": self.on_send[by].astype(np.int8),
                "session": np.asarray(self.session, dtype=np.int64) if lanes else np.zeros(0, dtype=np.int64),
                "lane_queue": self.queued if lanes else np.zeros(0, dtype=np.int64),
                "lane_delay_s": delay_s[self.queued] if lanes else np.zeros(0, dtype=np.float64),
                "send_delay_s": np.array(delay_s, dtype=np.float64)}


def check_options(trace: Trace, arrivals=None, *, sessions=None, think_time=None, speedup=None, rate=None):
    """(the arrivals, "open" or "closed"; the think-time distribution or None), refusing what does
    not go together (each error names its flag)."""
    from .lanes import check_sessions
    from .think import parse

    if sessions is not None:
        check_sessions(sessions)
        mode = OPEN if arrivals == OPEN else CLOSED  # (open: the same users, sent at their recorded times)
    else:
        mode = check_arrivals(arrivals, trace)
    dist = parse(think_time)
    if mode == OPEN:
        if dist is not None:
            raise ConfigError("think_time (--think-time) applies to closed-loop arrivals: add --arrivals closed")
        if sessions is not None and (rate is not None or speedup is not None):
            raise ConfigError("with sessions (--sessions) the load is the number of concurrent sessions: drop "
                              "--speedup / --rate")
        return mode, None
    if rate is not None:
        raise ConfigError("rate (--rate) makes Poisson arrivals, an open loop: closed-loop sessions start at their "
                          "recorded times (--speedup scales them) or run as --sessions N concurrent ones")
    if sessions is not None and speedup is not None:
        raise ConfigError("with sessions (--sessions) the load is the number of concurrent sessions: drop --speedup")
    return mode, dist


def build(trace: Trace, arrivals=None, *, sessions=None, think_time=None, seed: int = 0, speedup=None, rate=None,
          block_size: int, time_model=None, chunk: int | None = None) -> ClosedLoop | None:
    """The closed loop a run serves (None: the open loop): `arrivals` "open" / "closed" (None: the
    trace format's default), `sessions` N concurrent sessions (lanes.py; implies closed),
    `think_time` "trace" / a distribution (think.py), `speedup` the sessions' start times divided by
    it (the trace's own sessions), `time_model` the deployment's (the service estimate of
    think_times), `chunk` its prefill chunk."""
    from . import lanes

    mode, dist = check_options(trace, arrivals, sessions=sessions, think_time=think_time, speedup=speedup, rate=rate)
    if mode == OPEN and sessions is None:
        return None
    links, how = links_of(trace, block_size)
    service = None
    owner = np.repeat(np.arange(len(trace)), np.diff(links.offsets))
    on_send = links.link_on_send()
    has_own = np.zeros(links.num_links, dtype=bool) if links.delay_ms is None else np.isfinite(links.delay_ms)
    unknown = np.isnan(links.think_ms[owner]) & ~on_send & ~has_own  # links whose delay is a think time not recorded
    if dist is None and time_model is not None and unknown.any():
        from .floors import request_floors

        ts = np.asarray(trace.timestamp, dtype=np.float64) / 1000.0
        service = request_floors(trace, ts, time_model, time_model, block_size=block_size, chunk=chunk).e2e_s
    think_s, think_info = think_times(trace, links, dist, seed, service)
    info = {"links": how, "think": think_info}
    own = np.nan_to_num(links.link_delay_ms()) / 1000.0
    # a link that fires on an end waits the request's think time (recorded, estimated or drawn) unless
    # it carries its own delay (and no distribution replaces it); one that fires on a send keeps its gap
    delay_s = np.nan_to_num(np.where(on_send | (has_own & (dist is None)), own, think_s[owner]))
    if sessions is not None:
        fields = lanes.build(trace, links, delay_s, on_send, think_s, sessions, seed, info)
        if mode == OPEN:
            fields["open_arrival_s"] = lanes.open_schedule(fields["start_s"], fields["session"],
                                                           fields["trace"].timestamp, fields["queued"], sessions)
        return ClosedLoop(**fields)
    from ..trace.sessions import session_of

    speedup = 1.0 if speedup is None else speedup
    if isinstance(speedup, bool) or not isinstance(speedup, (int, float)) or not 0 < speedup < float("inf"):
        raise ConfigError(f"speedup must be a positive number, got {speedup!r}")
    ts = np.asarray(trace.timestamp, dtype=np.float64)
    start = (ts - ts.min()) / 1000.0 / speedup if ts.size else ts
    roots = links.roots()
    info["starts"] = (f"sessions start at their recorded times" + (f" / {speedup:g}" if speedup != 1 else ""))
    return ClosedLoop(trace=trace, links=links, delay_s=delay_s, on_send=on_send, think_s=think_s,
                      start_s=np.where(roots, start, np.nan), session=session_of(links, trace.session), info=info)
