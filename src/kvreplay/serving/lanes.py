"""Load as concurrency: N lanes, each running the trace's sessions one after another (docs/sessions.md,
"Concurrent sessions"), as load generators hold a number of users (vllm bench serve
--max-concurrency, inference-perf's concurrency, AISimulate's lanes).

The draw: the trace's S sessions in a seeded random order (numpy's default_rng permutation), again
in a new order when they run out, until there are three sessions per lane and every session was
drawn at least once: D = N x max(3, ceil(S / N)) draws. The first N start at once, each at a
seeded uniform time within the requests' mean think time (so the lanes do not all send at the
same instant); the others wait in draw order, and whenever a session's last request ends, its
lane starts the next one at that moment (no pause between sessions). The judged span ends when
the queue has run dry and the first lane goes idle (simulate: a closed run's steady state).

With open arrivals (``--sessions N --arrivals open``: what a replayer that ignores the answers
sends for the same N users), each request is sent at its recorded offset from its session's first
request, and a lane starts its next session at the previous one's last recorded send: the
schedule the recorded server would have produced, whatever the simulated one does.

A session drawn again is a new user with the same behaviour: the blocks only its session holds
get fresh ids in every copy after the first (a copy never hits another's private prefix), while
blocks other sessions share too (a system prompt, a tool list) keep theirs. Within a session,
requests keep their links and think times; a request of a session that waits for nothing but is
not its first (a subagent the trace cannot tie to a spawner) waits for the session's first
request, its think time its recorded offset from it.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ..trace.dependencies import Dependencies
from ..trace.model import Trace, ragged_take
from ..trace.sessions import session_of

MIN_SESSIONS_PER_LANE = 3
MAX_LANES = 1_000_000


def check_sessions(sessions) -> int:
    if isinstance(sessions, bool) or not isinstance(sessions, (int, np.integer)) or not 1 <= sessions <= MAX_LANES:
        raise ConfigError(f"sessions (--sessions) must be a whole number of concurrent sessions from 1 to "
                          f"{MAX_LANES:,}, got {sessions!r}")
    return int(sessions)


def draw_order(num_sessions: int, lanes: int, seed: int) -> np.ndarray:
    """The sessions drawn, in draw order (module docstring)."""
    total = lanes * max(MIN_SESSIONS_PER_LANE, math.ceil(num_sessions / lanes))
    rng = np.random.default_rng([seed, 104729])  # (its own stream)
    rounds = math.ceil(total / num_sessions)
    return np.concatenate([rng.permutation(num_sessions) for _ in range(rounds)])[:total]


def build(trace: Trace, links: Dependencies, delay_s: np.ndarray, on_send: np.ndarray, think_s: np.ndarray, lanes: int,
          seed: int, info: dict) -> dict:
    """`lanes` concurrent sessions drawn from `trace`'s (its links with their delays, and each
    request's think time): closed.ClosedLoop's fields."""
    lanes = check_sessions(lanes)
    n = len(trace)
    if n == 0:
        raise ConfigError("the trace has no requests to draw sessions from")
    session = session_of(links, trace.session)
    S = int(session.max()) + 1
    members = np.argsort(session, kind="stable")  # each session's requests in trace order
    starts = np.zeros(S + 1, dtype=np.int64)
    np.cumsum(np.bincount(session, minlength=S), out=starts[1:])
    local = np.empty(n, dtype=np.int64)
    local[members] = np.arange(n) - starts[session[members]]
    draws = draw_order(S, lanes, seed)
    D = draws.size
    sizes = starts[draws + 1] - starts[draws]
    first = np.zeros(D + 1, dtype=np.int64)
    np.cumsum(sizes, out=first[1:])
    draw_of = np.repeat(np.arange(D), sizes)
    order = members[starts[draws][draw_of] + (np.arange(int(first[-1])) - first[draw_of])]  # original request
    m = order.size
    # links: within the draw's copy of its session
    offsets, index = ragged_take(links.offsets, order)
    owner = np.repeat(np.arange(m), np.diff(offsets))
    after = first[draw_of][owner] + local[links.after[index]]
    think = np.asarray(think_s, dtype=np.float64)[order].copy()
    ts = np.asarray(trace.timestamp, dtype=np.float64)[order] / 1000.0
    # a session's other roots wait for its first request's send, their recorded offset from it
    lead = first[:-1]  # each draw's first request (its session's first in trace order)
    other = np.flatnonzero((np.diff(offsets) == 0) & (np.arange(m) != lead[draw_of]))
    offset_s = np.maximum(ts[other] - ts[lead[draw_of[other]]], 0.0)
    think[lead] = np.where(np.arange(D) < lanes, np.nan, 0.0)  # (a queued session starts when its lane frees)
    all_owner, all_after = np.r_[owner, other], np.r_[after, lead[draw_of[other]]]
    all_delay = np.r_[np.asarray(delay_s, dtype=np.float64)[index], offset_s]
    all_send = np.r_[np.asarray(on_send, dtype=bool)[index], np.ones(other.size, dtype=bool)]
    by = np.argsort(all_owner, kind="stable")
    new_offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(all_owner, minlength=m), out=new_offsets[1:])
    run_links = Dependencies(new_offsets, all_after[by], think * 1000.0, links.rule, all_delay[by] * 1000.0,
                             all_send[by])
    waiting_think = think[~np.isnan(think) & (np.diff(new_offsets) > 0)]
    mean_think = float(np.mean(waiting_think)) if waiting_think.size else 0.0
    start = np.full(m, np.nan)
    starters = lead[:min(lanes, D)]
    start[starters] = np.random.default_rng([seed, 1299709]).uniform(0.0, mean_think, size=starters.size)
    queued = lead[starters.size:].astype(np.int64)
    copies = D - len(np.unique(draws))
    info = dict(info, lanes=lanes, draws=int(D), trace_sessions=S, copies=int(copies), seed=seed,
                draw_text=(f"{lanes:,} concurrent sessions: {D:,} draws of the trace's {S:,} sessions (seeded "
                           f"permutations, seed {seed}; {copies:,} copies with fresh ids for the blocks only their "
                           f"session holds); the first {starters.size:,} start within {mean_think:.3g} s (the mean "
                           "think time), each of the others when a session ends"))
    return dict(trace=_copies(trace, order, draws, draw_of, session), links=run_links, delay_s=all_delay[by],
                on_send=all_send[by], think_s=think, start_s=start, session=draw_of.astype(np.int64), info=info,
                lanes=lanes, queued=queued)


def open_schedule(start_s: np.ndarray, session: np.ndarray, timestamp_ms: np.ndarray, queued: np.ndarray,
                  lanes: int) -> np.ndarray:
    """Send times of the lanes' requests without waiting for answers (module docstring): each at its
    recorded offset from its session's first, each queued session on the lane its recorded
    schedule frees first."""
    import heapq

    ts = np.asarray(timestamp_ms, dtype=np.float64) / 1000.0
    D = int(session.max()) + 1 if session.size else 0
    first = np.full(D, np.inf)
    np.minimum.at(first, session, ts)
    last = np.full(D, -np.inf)
    np.maximum.at(last, session, ts)
    begin = np.zeros(D)
    starters = np.flatnonzero(~np.isnan(start_s))
    free = []
    for i in starters.tolist():
        begin[session[i]] = start_s[i]
        heapq.heappush(free, (start_s[i] + last[session[i]] - first[session[i]], int(session[i])))
    for i in queued.tolist():
        t, _ = heapq.heappop(free)
        d = int(session[i])
        begin[d] = t
        heapq.heappush(free, (t + last[d] - first[d], d))
    return begin[session] + ts - first[session]


def _copies(trace: Trace, order: np.ndarray, draws: np.ndarray, draw_of: np.ndarray, session: np.ndarray) -> Trace:
    """The drawn requests as a trace: a copy after a session's first draw gets fresh ids for the
    blocks only its session holds; ids dense again; sessions are the draws."""
    offsets, index = ragged_take(trace.offsets, order)
    blocks = trace.blocks[index].astype(np.int64)
    U = max(int(trace.num_blocks), 1)
    owner_session = np.repeat(session, np.diff(trace.offsets))
    pairs = np.unique(trace.blocks.astype(np.int64) * (int(session.max()) + 1) + owner_session)
    holders = np.bincount(pairs // (int(session.max()) + 1), minlength=U)
    private = holders[blocks] == 1
    seen_before = np.zeros(draws.size, dtype=bool)
    _, first_draw = np.unique(draws, return_index=True)
    seen_before[:] = True
    seen_before[first_draw] = False
    block_draw = np.repeat(draw_of, np.diff(offsets))
    renamed = private & seen_before[block_draw]
    blocks[renamed] += U * (block_draw[renamed] + 1)
    values, dense = np.unique(blocks, return_inverse=True)
    if values.size > np.iinfo(np.int32).max:
        raise ConfigError("too many distinct blocks in the drawn sessions (more than 2**31)")
    return Trace(offsets=offsets, blocks=dense.reshape(-1).astype(np.int32), input_length=trace.input_length[order],
                 output_length=trace.output_length[order], timestamp=trace.timestamp[order],
                 num_blocks=int(values.size), block_size=trace.block_size, source=trace.source, format=trace.format,
                 session=draw_of.astype(np.int64))
