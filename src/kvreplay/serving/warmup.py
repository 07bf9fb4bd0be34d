"""The warm-up: the first part of a run's arrivals, served but not judged (docs/plan.md, "Warm-up").

A production server's prefix cache is warm and its queues are in their steady state; a simulation
starts empty. So the judged span starts `seconds` after the first arrival: every request that
arrives before it is served in the same run (it fills the cache, holds blocks, queues), and no
figure counts it. A judged request can only profit from requests that arrived before it, the
trace's own past, never from its own future.

How long (`--warmup`):

- ``auto`` (what plan, and simulate and report on the command line, use): the time within which
  90% of the trace's prefix reuse looks back. For each request that an infinite cache would hit
  (its longest run of leading blocks that earlier arrivals touched), the lookback is the age of
  the oldest of those blocks' last use; the warm-up is the hit-token-weighted 90th percentile of
  the lookbacks. A request judged after it finds the history behind at least 90% of the hit
  tokens reused at the start of the judged span already served. At most half the arrival span,
  so that half is judged; 0 when nothing is reused (there is nothing to warm).
- a fraction in [0, 1): that share of the arrival span (``0.2``);
- a duration with its unit: ``10m``, ``600s``, ``1h`` (of simulated arrival time, so at
  ``--speedup 2`` it covers twice the requests it covers at 1);
- ``0`` (``--cold-start``): nothing is warm-up; every request is judged from an empty cache.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..units import parse_duration

AUTO = "auto"
LOOKBACK_QUANTILE = 0.9
MAX_SHARE = 0.5
_UNIT = re.compile(r"^\s*[0-9.]+(?:e[-+]?[0-9]+)?\s*[a-zµ]+\s*$")  # a number and a unit
NAMED = "warmup (--warmup): "  # how its errors name it (the command line drops this for its own)


@dataclass(frozen=True)
class Warmup:
    """A resolved warm-up: judged requests arrive at least `seconds` after the first arrival."""

    seconds: float
    spec: str  # as asked: "auto", "0.2", "10m", "0"
    text: str  # how the seconds were chosen, for every output

    @property
    def cold(self) -> bool:
        return self.seconds <= 0.0

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "spec": self.spec, "text": self.text}


def parse(value) -> tuple[str, float | None]:
    """("auto", None), ("fraction", f) or ("seconds", s) from `value` (None: cold, 0 s). A bare
    number is a fraction below 1; a duration needs its unit (units.parse_duration). ConfigError
    naming --warmup otherwise."""
    if value is None:
        return "seconds", 0.0
    if isinstance(value, bool):
        raise ConfigError(f"{NAMED}must be auto, a fraction in [0, 1) or a duration such as 10m, got {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        text = repr(float(value))
    else:
        text = str(value).strip().lower()
    if text == AUTO:
        return AUTO, None
    try:
        number = float(text)
    except ValueError:
        if not _UNIT.match(text):
            raise ConfigError(f"{NAMED}must be auto, a fraction in [0, 1) or a duration such as 10m, got "
                              f"{value!r}") from None
        return "seconds", parse_duration(text, NAMED.removesuffix(": "))
    if number == 0:
        return "seconds", 0.0
    if not 0.0 < number < 1.0:
        raise ConfigError(f"{NAMED}{str(value).strip()} what? a bare number is a fraction of the arrival span, in "
                          f"[0, 1); a duration takes its unit: {str(value).strip()}s or {str(value).strip()}ms")
    return "fraction", number


def spec_text(value) -> str:
    """The warm-up as asked, normalised (what a plan's cache key and its outputs name)."""
    kind, x = parse(value)
    if kind == AUTO:
        return AUTO
    if kind == "fraction":
        return f"{x:g}"
    return "0" if x == 0 else f"{x:g}s"


def resolve(value, trace, arrival_s: np.ndarray, block_size: int | None = None) -> Warmup:
    """The warm-up's seconds for `trace` arriving at `arrival_s` (seconds, trace order), its
    blocks of `block_size` tokens (default: the trace's, else 512)."""
    kind, x = parse(value)
    spec = spec_text(value)
    span = float(arrival_s.max() - arrival_s.min()) if arrival_s.size else 0.0
    if kind == "seconds":
        if x == 0:
            return Warmup(0.0, spec, "none: every request is judged, from an empty cache (cold start)")
        if x >= span:
            raise ConfigError(f"{NAMED}{value!r}: {x:g} s is not shorter than the arrival span "
                              f"({span:g} s), so no request would be judged")
        return Warmup(x, spec, f"the first {_seconds(x)} of arrivals (--warmup {spec})")
    if kind == "fraction":
        return Warmup(x * span, spec, f"the first {100 * x:g}% of the arrival span, {_seconds(x * span)} (--warmup {spec})")
    lookback = reuse_lookback_s(trace, arrival_s, LOOKBACK_QUANTILE, block_size)
    if lookback is None:
        return Warmup(0.0, spec, "none (auto: no request reuses an earlier one's prefix, so there is nothing to warm)")
    seconds = min(lookback, MAX_SHARE * span)
    why = (f"auto: {100 * LOOKBACK_QUANTILE:g}% of the prefix reuse, by hit tokens, looks back at most "
           f"{_seconds(lookback)}")
    if seconds < lookback:
        why += f"; capped at half the arrival span, {_seconds(seconds)}"
    return Warmup(seconds, spec, f"the first {_seconds(seconds)} of arrivals ({why})")


class JudgedSpan:
    """The judged requests of a run, for a class with `arrival_s`, `warmup_s`, `judged_until_s` and
    `finished` (a SimReport, a plan's Run)."""

    @property
    def judged(self) -> np.ndarray:
        """The requests every summary figure counts: those arriving after the warm-up."""
        return judged_mask(self.arrival_s, self.warmup_s, self.judged_until_s)

    @property
    def counted(self) -> np.ndarray:
        """Finished judged requests: what the latencies, hit rates and token totals are over."""
        return self.finished & self.judged

    @property
    def judged_start_s(self) -> float:
        """When the judged span starts (the first arrival + the warm-up)."""
        return (float(self.arrival_s.min()) if self.arrival_s.size else 0.0) + self.warmup_s


def judged_mask(arrival_s: np.ndarray, seconds: float, until_s: float | None = None) -> np.ndarray:
    """The requests a run judges: those arriving `seconds` or more after the first arrival (and,
    for a closed loop of N concurrent sessions, before `until_s`: its steady state's end)."""
    mask = np.ones(arrival_s.size, dtype=bool)
    if arrival_s.size and seconds > 0:
        mask = arrival_s >= float(arrival_s.min()) + seconds
    if until_s is not None:
        mask &= arrival_s < until_s
    return mask


def reuse_lookback_s(trace, arrival_s: np.ndarray, quantile: float = LOOKBACK_QUANTILE,
                     block_size: int | None = None) -> float | None:
    """The hit-token-weighted `quantile` of each request's lookback under an infinite cache (None
    when no request hits). A request's lookback is its arrival minus the latest earlier arrival
    that touched the oldest-touched of its hit blocks (earlier_prefix); its weight is its hit
    tokens, min(k x block size, prompt length)."""
    k, oldest = earlier_prefix(trace, arrival_s)
    block_size = block_size or trace.block_size or 512
    hit = np.minimum(k * block_size, np.asarray(trace.input_length, dtype=np.int64))
    hits = (k > 0) & (hit > 0)
    if not hits.any():
        return None
    lookback = np.asarray(arrival_s, dtype=np.float64)[hits] - oldest[hits]
    weight = hit[hits].astype(np.float64)
    o = np.argsort(lookback, kind="stable")
    cum = np.cumsum(weight[o])
    at = int(np.searchsorted(cum, quantile * cum[-1]))
    return float(lookback[o][min(at, o.size - 1)])


def earlier_prefix(trace, arrival_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per request: k, its longest run of leading blocks that requests arriving before it touched
    (an infinite cache's hit; requests in arrival order, ties in trace order), and the oldest of
    those blocks' last use before it (its arrival time; inf when k = 0). Vectorised: accesses are
    grouped by block in arrival order, so each access finds the last earlier request's arrival."""
    n = len(trace)
    offsets = np.asarray(trace.offsets, dtype=np.int64)
    blocks = np.asarray(trace.blocks, dtype=np.int64)
    lengths = np.diff(offsets)
    k = np.zeros(n, dtype=np.int64)
    oldest = np.full(n, np.inf)
    if n < 2 or not blocks.size:
        return k, oldest
    order = np.argsort(arrival_s, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    request = np.repeat(np.arange(n), lengths)  # each access's request
    local = np.arange(blocks.size) - np.repeat(offsets[:-1], lengths)  # its position in the request
    req_rank = rank[request]
    by = np.lexsort((local, req_rank, blocks))
    b, rr = blocks[by], req_rank[by]
    same_block = np.r_[False, b[1:] == b[:-1]]
    new_rank = ~np.r_[False, (b[1:] == b[:-1]) & (rr[1:] == rr[:-1])]  # the first access of its request
    prev_time = np.full(by.size, np.nan)
    ranked_time = np.asarray(arrival_s, dtype=np.float64)[order]
    lead = np.flatnonzero(new_rank & same_block)  # the previous access belongs to an earlier request
    prev_time[lead] = ranked_time[rr[lead - 1]]
    first_of = np.maximum.accumulate(np.where(new_rank, np.arange(by.size), 0))
    prev_time = prev_time[first_of]  # a request's later accesses of a block repeat its first's
    last_used = np.empty(blocks.size)
    last_used[by] = prev_time
    seen = ~np.isnan(last_used)
    nonempty = lengths > 0
    starts = offsets[:-1][nonempty]
    first_unseen = np.where(seen, np.iinfo(np.int64).max, local)
    k[nonempty] = np.minimum(np.minimum.reduceat(first_unseen, starts), lengths[nonempty])
    use = np.where(local < k[request], last_used, np.inf)
    oldest[nonempty] = np.minimum.reduceat(use, starts)
    return k, oldest


def _seconds(x: float) -> str:
    return f"{x:,.0f} s" if x >= 10 else f"{x:,.3g} s"
