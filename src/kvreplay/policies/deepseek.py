"""deepseek: DeepSeek's API context cache on disk, as its public documentation describes it.

There is no code to check this against: it is a model of DeepSeek's description
(api-docs.deepseek.com/guides/kv_cache, "Context Caching", read 2026-12; the background seed
003 summarizes it). The documented rules, and how a hash-id trace maps onto them:

- **Prefix units.** The cache holds *prefix units*: complete prefixes of earlier prompts, each
  independent ("a subsequent request can only hit the cache if it fully matches a cache prefix
  unit"). Storage is in 64-token units (``unit``); nothing under 64 tokens is cached. A trace's
  hash id of block j names the prefix ``[0, (j + 1) * block_size)`` (ids are chained), so a unit is
  keyed by the id of its last block.
- **Hit.** The longest *ready* unit that is a prefix of the request, from token 0: the largest
  ``e <= floor(L / block_size)`` whose block ``e - 1`` ends a ready unit; the hit is ``e *
  block_size`` tokens. Nothing else hits: a prompt that shares 10,000 tokens with an earlier one
  but diverges before any unit boundary of it hits nothing (the docs' example 2: ``A + B`` then
  ``A + C`` misses).
- **When units are persisted** (each request, after its hit, at the request's time):
  1. *end of input*: the unit of the prompt's first ``floor(L / 64) * 64`` tokens;
  2. *common prefix*: the longest prefix this request shares with the prompts seen before it
     (their ids, while within ``ttl`` of their last sight), when it is longer than the hit and
     ends no unit yet (the docs' example 2: ``A + C`` after ``A + B`` persists ``A``, which ``A + D``
     then hits);
  3. *fixed intervals*: a unit every ``interval`` tokens of the prompt, so that a long prefix is
     cacheable before it reaches an end. The docs give no interval: 4,096 tokens is this model's
     assumption (``deepseek:interval=N``).
  A unit that already exists is refreshed instead.
- **Construction delay.** "Cache construction takes seconds": a unit is ready ``delay`` seconds
  after the request that persisted it (default 5 s, an assumption within "seconds").
  ``construction_misses`` counts requests whose longest matching unit was not ready yet.
- **TTL.** "Unused entries are cleared, usually within a few hours to a few days": a unit not hit
  or persisted again for ``ttl`` seconds is gone (default 14,400 s, 4 hours, the low end).
- **No capacity.** The disk is not modelled as full: capacity is ignored, as for ``infinite``.

What a hash-id trace cannot give, and what this model does instead:
- *End of output* (the docs' second unit per request: prompt plus the model's answer). A trace
  has no ids for generated tokens, and whether a later prompt continues this answer cannot be
  known from ids, so this unit is not modelled: a multi-turn request hits the previous turn's
  prompt, not its answer (a few percent of a long conversation's tokens). Units inside long
  outputs likewise.
- *Block granularity.* Units end on 64-token boundaries, ids on block boundaries. With block size
  64 or a divisor of it (token logs hashed by ``kvreplay hash --block-size 64``) the model is
  exact; with a multiple of 64 (Mooncake's 512) a unit is known to the last whole block it covers,
  so a hit is rounded down to the block size (at most ``block_size - 64`` tokens under DeepSeek's).
  Other block sizes are refused.
- *Sliding-window models.* The docs' rules are for DeepSeek's current (sliding-window) models;
  the older "any repeated prefix hits" behaviour of the 2024 docs is ``lru`` without a capacity.

Time is the trace's, as for ``ttl``: request i happens at the running maximum of the timestamps
(ms) up to it. The replay serves requests in trace order (the hit limit is the next request's).

Resident (what the prefix scan and the end-of-replay statistics see): a block inside a live
unit's prefix. The hit limit is the longest ready unit within the request's run of resident
blocks (a unit's prefix is resident while the unit lives), so the scan stops exactly there and the
hit is that unit. A unit is keyed by its last block's id alone, which names the whole prefix
because trace ids are chained hashes (the spec's premise).

Counters: ``units`` (persisted: ``input_units`` + ``common_prefix_units`` + ``interval_units``),
``unit_hits`` (requests that hit a unit), ``construction_misses``.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..errors import ConfigError
from ..units import Seconds
from .base import Param, PolicySpec, RequestOnlyPolicy, hold_arrays, in_range, meta_slots

UNIT = 64  # DeepSeek's storage unit, tokens
COUNTERS = ("units", "input_units", "common_prefix_units", "interval_units", "unit_hits", "construction_misses")


def check_block_size(block_size: int) -> None:
    """The block sizes a 64-token unit maps onto: a divisor of 64 or a multiple of it."""
    if UNIT % block_size and block_size % UNIT:
        raise ConfigError(f"deepseek: block size {block_size} is neither a divisor nor a multiple of DeepSeek's "
                          f"{UNIT}-token storage unit, so its units cannot be placed on the trace's blocks (hash the "
                          f"token log with --block-size {UNIT}, or use a block size that divides or is divided by {UNIT})")


def unit_blocks(tokens: int, block_size: int) -> int:
    """The blocks a unit of the first `tokens` tokens (rounded down to 64) is known by."""
    return tokens // UNIT * UNIT // block_size


class DeepSeek(RequestOnlyPolicy):
    """Reference: dicts from block id to times (ms)."""

    def __init__(self, capacity: int, trace=None, interval: int = 4096, delay: float = 5.0, ttl: float = 14400.0):
        self.interval, self.delay_ms, self.ttl_ms = interval, delay * 1000.0, ttl * 1000.0
        self.offsets = trace.offsets.tolist() if trace is not None else [0]
        self.blocks = trace.blocks.tolist() if trace is not None else []
        self.times = trace.timestamp.tolist() if trace is not None else []
        self.now = self.times[0] if self.times else 0.0
        self.cursor = 0  # the next request (requests come in trace order)
        self.ready: dict = {}  # unit (its last block's id) -> when it is ready (ms)
        self.last: dict = {}  # unit -> its last persist or hit (ms)
        self.cover: dict = {}  # block -> the last time a unit containing it was persisted or hit (ms)
        self.seen: dict = {}  # block -> the last time a prompt contained it (ms)
        self.stats = dict.fromkeys(COUNTERS, 0)

    def _live(self, table: dict, b) -> bool:
        t = table.get(b)
        return t is not None and self.now - t <= self.ttl_ms

    def resident(self, b) -> bool:
        return self._live(self.cover, b)

    def _request(self) -> list:
        i = self.cursor
        return self.blocks[self.offsets[i]:self.offsets[i + 1]] if i + 1 < len(self.offsets) else []

    def _hit(self, ids: list, input_length: int, block_size: int) -> tuple[int, bool]:
        """(the longest ready unit, in blocks; whether a longer live unit was not ready yet)."""
        check_block_size(block_size)
        step = max(1, UNIT // block_size)  # units end on 64-token boundaries
        top = min(len(ids), unit_blocks(input_length, block_size))
        run = 0  # a unit's prefix is resident while it lives: no unit ends past the resident run
        while run < top and self.resident(ids[run]):
            run += 1
        building = False
        for e in range(run // step * step, 0, -step):
            if self._live(self.last, ids[e - 1]):
                if self.ready[ids[e - 1]] <= self.now:
                    return e, building
                building = True
        return 0, building

    def hit_limit(self, num_blocks: int, input_length: int, block_size: int) -> int:
        ids = self._request()
        if len(ids) != num_blocks:
            raise ConfigError("deepseek replays requests in trace order, one after another")
        return self._hit(ids, input_length, block_size)[0]

    def _persist(self, ids: list, e: int, kind: str | None) -> None:
        """Unit ids[:e] persisted now (kind: a new one's counter), or refreshed when it lives."""
        if e <= 0:
            return
        key = ids[e - 1]
        if not self._live(self.last, key):
            self.ready[key] = self.now + self.delay_ms
            self.stats["units"] += 1
            self.stats[kind] += 1
        self.last[key] = self.now

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        hit, building = self._hit(blocks, input_length, block_size)  # (= hits: the scan stops at the unit)
        self.stats["unit_hits"] += hit > 0
        self.stats["construction_misses"] += building
        self._persist(blocks, hit, None)  # the hit unit lives on (it exists: no counter)
        step = max(1, UNIT // block_size)
        top = min(len(blocks), unit_blocks(input_length, block_size))
        common = 0
        while common < top and self._live(self.seen, blocks[common]):
            common += 1
        common = common // step * step
        if common > hit and not self._live(self.last, blocks[common - 1]):
            self._persist(blocks, common, "common_prefix_units")
        per = unit_blocks(self.interval, block_size)
        for e in range(per, top, per) if per else ():
            self._persist(blocks, e, "interval_units")
        self._persist(blocks, top, "input_units")
        for b in blocks[:top]:  # every unit persisted or hit now is a prefix of the first top blocks
            self.seen[b] = self.cover[b] = self.now
        self._tick(request)

    def _tick(self, request: int) -> None:
        self.cursor = request + 1
        if request + 1 < len(self.times):
            self.now = max(self.now, self.times[request + 1])

    def size(self) -> int:
        return sum(1 for b in self.cover if self.resident(b))

    def resident_blocks(self):
        return [b for b in self.cover if self.resident(b)]

    def counters(self) -> dict:
        return dict(self.stats)


# ---- compiled engine (deepseek.c): the same tables as arrays over block ids, -inf for never ----

META = meta_slots("deepseek")
CURSOR, INTERVAL, UNITS, INPUT_UNITS, COMMON_PREFIX_UNITS, INTERVAL_UNITS, UNIT_HITS, CONSTRUCTION_MISSES = (
    META.CURSOR, META.INTERVAL, META.UNITS, META.INPUT_UNITS, META.COMMON_PREFIX_UNITS, META.INTERVAL_UNITS,
    META.UNIT_HITS, META.CONSTRUCTION_MISSES)
TTL_MS, DELAY_MS, NOW = 0, 1, 2  # slots of `clock`
DeepSeekState = namedtuple("DeepSeekState", ["offsets", "ids", "times", "ready", "last", "cover", "seen", "clock",
                                             "meta", "pins", "hold"])


def make_state(capacity: int, trace, interval: int = 4096, delay: float = 5.0, ttl: float = 14400.0) -> DeepSeekState:
    n = trace.num_blocks
    times = np.array(trace.timestamp, dtype=np.float64)
    never = lambda: np.full(n, -np.inf)  # noqa: E731
    meta = np.zeros(len(META), dtype=np.int64)
    meta[META.INTERVAL] = interval
    return DeepSeekState(
        offsets=np.array(trace.offsets, dtype=np.int64), ids=np.array(trace.blocks, dtype=np.int32), times=times,
        ready=never(), last=never(), cover=never(), seen=never(),
        clock=np.array([ttl * 1000.0, delay * 1000.0, times[0] if times.size else 0.0]), meta=meta,
        **hold_arrays(trace.num_blocks))


def resident_mask(state: DeepSeekState) -> np.ndarray:
    return state.clock[NOW] - state.cover <= state.clock[TTL_MS]


def read_state(state: DeepSeekState) -> tuple[int, dict]:
    m = state.meta
    counters = {name: int(m[getattr(META, name.upper())]) for name in COUNTERS}
    return int(np.count_nonzero(resident_mask(state))), counters


def _unit_multiple(value):
    return None if value >= UNIT and value % UNIT == 0 else f"must be a multiple of {UNIT} tokens"


def notes(report) -> list[str]:
    """DeepSeek's usage fields, and what the model is (docs/policies.md, "DeepSeek's API cache")."""
    usage = report.summary()["usage"]
    lines = [f"usage     prompt_cache_hit_tokens={usage['prompt_cache_hit_tokens']:,}, prompt_cache_miss_tokens="
             f"{usage['prompt_cache_miss_tokens']:,} (as DeepSeek's API reports them, summed over the window)",
             "model     DeepSeek's disk cache as its docs describe it (no code to check against): a hit must match a "
             "whole 64-token prefix unit, persisted at a prompt's end, at common prefixes and every "
             f"{report.params['interval']:,} tokens, ready {report.params['delay']:g} s later, gone "
             f"{report.params['ttl']:g} s after its last use; the disk is not modelled as full (no capacity); "
             "units at the end of outputs are not modelled (a trace has no ids for them)"]
    if report.block_size > 64:
        lines.append(f"note      units end on 64-token boundaries, this trace's ids on {report.block_size}-token "
                     f"blocks: each hit is rounded down to the block (up to {report.block_size - 64} tokens under "
                     "DeepSeek's); token logs hashed at --block-size 64 give it exactly")
    return lines


def usage(report) -> dict:
    """The usage fields DeepSeek's API returns, summed over the window (the JSON report's "usage")."""
    return {"usage": {"prompt_cache_hit_tokens": report.total_hit_tokens,
                      "prompt_cache_miss_tokens": report.total_prompt_tokens - report.total_hit_tokens}}


POLICY = PolicySpec(
    name="deepseek",
    native="deepseek",
    summary="DeepSeek API's disk context cache (a model of its docs): 64-token prefix units persisted at each "
            "prompt's end, at common prefixes and every interval tokens; a hit must match a whole unit; ready after "
            "delay s, gone ttl s after its last use",
    reference=DeepSeek,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    params=(Param("interval", 4096, int, "tokens between the fixed-interval units of a long prompt (an assumption: "
                  "the docs give none)", _unit_multiple),
            Param("delay", 5.0, Seconds, "seconds before a persisted unit can be hit (the docs: 'seconds')",
                  in_range(lo=0)),
            Param("ttl", 14400.0, Seconds, "seconds an unused unit lives (the docs: 'a few hours to a few days')",
                  in_range(lo=0, lo_open=True))),
    capacity="ignored",
    check_block_size=check_block_size,
    not_served=("DeepSeek's API serves from servers whose scheduler and hardware are not public, so the "
                "simulator has no model of them; `kvreplay run --policy deepseek` gives its cache's hits and cost"),
    notes=notes,
    report_fields=usage,
)
