"""Routers: which instance serves an arriving request (docs/serving.md, "Routers", cites each rule).

Two kinds:

- **Fixed by the trace** (round-robin, random, session): the choice never reads an instance, so
  it is computed before the run (simulate.route) and N instances are N independent simulations
  of the requests each receives.
- **State-aware** (least-loaded and the cache-aware presets): the compiled loop (instance.py)
  asks ``pick_instance`` at each arrival, with what the router knows of every instance:

  - ``view`` columns (V_*): what the router tracks itself, always current (requests in flight,
    prompt tokens routed and not yet prefilled, prompt blocks of requests in flight: Dynamo's
    ``ActiveSequences`` style bookkeeping; Mooncake's predicted queue time), and what instances
    report (running, waiting, blocks held). With ``--router-lag-ms`` the reported columns come
    from a snapshot taken every lag ms (the state at k x lag), as routers scrape metrics.
  - ``overlap``: per instance, the blocks of the request's longest cached prefix there, by the
    sequential replay's own prefix scan: the router's index of KV events is exact and immediate
    (Dynamo applies events at the end of each forward pass; kvreplay caches a prompt when it is
    admitted: docs/serving.md says what this changes).

Ties go to the lowest instance index, so runs are deterministic.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..jit import HAVE_NUMBA, helper
from .timing import AGG_KEYS_FULL, AGG_PREFILL_CACHED, AGG_PREFILL_NEW, AGG_PREFILL_REQS, AGG_TOUCHED_FULL

# routers computed before the run
FIXED = ("round-robin", "random", "session")
# routers that read the instances' state, by kernel code
ROUTER_FIXED, ROUTER_LEAST_LOADED, ROUTER_DYNAMO, ROUTER_SGLANG, ROUTER_LLMD, ROUTER_MOONCAKE = range(6)
STATE_AWARE = {"least-loaded": ROUTER_LEAST_LOADED, "kv-aware": ROUTER_DYNAMO, "dynamo": ROUTER_DYNAMO,
               "sglang": ROUTER_SGLANG, "llm-d": ROUTER_LLMD, "mooncake": ROUTER_MOONCAKE}
ROUTERS = FIXED + tuple(STATE_AWARE)

# view columns: the router's own bookkeeping, then what instances report
(V_REQUESTS, V_PREFILL_TOKENS, V_BLOCKS, V_QUEUE_S, V_RUNNING, V_WAITING, V_HELD) = range(7)
NUM_VIEW = 7

# rcfg (float64) slots
(R_LAG_S, R_PREFILL_SCALE, R_SG_ABS, R_SG_REL, R_SG_CACHE, R_LLMD_PREFIX, R_LLMD_KV, R_LLMD_QUEUE,
 R_CAPACITY, R_SEED) = range(10)
NUM_RCFG = 10

#: Each preset's parameters and defaults (docs/serving.md gives their sources).
DEFAULTS = {
    "kv-aware": {"prefill_load_scale": 1.0},
    "sglang": {"balance_abs_threshold": 64.0, "balance_rel_threshold": 1.5, "cache_threshold": 0.3},
    "llm-d": {"prefix_weight": 3.0, "kv_cache_weight": 2.0, "queue_weight": 2.0},
}
DEFAULTS["dynamo"] = DEFAULTS["kv-aware"]


def router_config(router: str, *, capacity: int, lag_ms: float = 0.0, options: dict | None = None,
                  seed: int = 0) -> np.ndarray:
    """The kernel's router settings (rcfg) and its kind, checked."""
    if router not in ROUTERS:
        raise ConfigError(f"unknown router {router!r} (known: {', '.join(ROUTERS)})")
    if isinstance(lag_ms, bool) or not isinstance(lag_ms, (int, float)) or not 0 <= lag_ms < float("inf"):
        raise ConfigError(f"router lag must be a number of milliseconds >= 0, got {lag_ms!r}")
    options = dict(options or {})
    known = DEFAULTS.get(router, {})
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"router {router}: unknown option {unknown[0]!r} (options: {', '.join(known) or 'none'})")
    values = {**known, **options}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
            raise ConfigError(f"router {router}: {name} must be a number >= 0, got {value!r}")
    rcfg = np.zeros(NUM_RCFG, dtype=np.float64)
    rcfg[R_LAG_S] = lag_ms / 1000.0
    rcfg[R_CAPACITY] = capacity
    rcfg[R_SEED] = seed
    rcfg[R_PREFILL_SCALE] = values.get("prefill_load_scale", 1.0)
    rcfg[R_SG_ABS] = values.get("balance_abs_threshold", 0.0)
    rcfg[R_SG_REL] = values.get("balance_rel_threshold", 0.0)
    rcfg[R_SG_CACHE] = values.get("cache_threshold", 0.0)
    rcfg[R_LLMD_PREFIX] = values.get("prefix_weight", 0.0)
    rcfg[R_LLMD_KV] = values.get("kv_cache_weight", 0.0)
    rcfg[R_LLMD_QUEUE] = values.get("queue_weight", 0.0)
    return rcfg


def router_kind(router: str) -> int:
    return STATE_AWARE.get(router, ROUTER_FIXED)


def pick_instance(kind, rcfg, view, overlap, depth, fetch, prompt_blocks, prompt_tokens, block_size, tm, agg):
    """The instance a state-aware router sends the request to. `overlap[q]`: the request's
    leading blocks instance q holds, as this router sees them (its GPU cache for kv-aware and
    llm-d; with its tiers and the global store for mooncake; what was routed there for sglang);
    `depth[q]`: its leading blocks already in flight on q (kv-aware); `fetch[q]`: the time to
    load the part of that prefix below HBM (mooncake), or the credit for the blocks found in the
    tiers past the GPU prefix (kv-aware: 0.75 a block in the first tier, 0.25 below, 0.5 in a
    global store). `agg`: scratch for the time model."""
    N = view.shape[0]
    best = 0
    if kind == ROUTER_LEAST_LOADED:
        # fewest requests in flight (routed, not finished); ties: the lowest index
        for q in range(1, N):
            if view[q, V_REQUESTS] < view[best, V_REQUESTS]:
                best = q
        return best
    if kind == ROUTER_DYNAMO:
        # Dynamo's KV router (kv-router selector/default.rs worker_logit, defaults of 1.6.1):
        # prefill_load_scale x max(0, (prefill tokens in flight + prompt tokens) / block size -
        # overlap - tier credits) + (unique prompt blocks in flight + this prompt's full blocks
        # not yet in flight);
        # the lowest cost, ties at random (seeded here, unseeded in Dynamo)
        full = prompt_tokens // block_size
        full = full if full < prompt_blocks else prompt_blocks
        best_cost = np.inf
        ties = 0
        for q in range(N):
            ov = overlap[q] if overlap[q] < full else full
            prefill = (view[q, V_PREFILL_TOKENS] + prompt_tokens) / block_size - ov - fetch[q]
            cost = rcfg[R_PREFILL_SCALE] * (prefill if prefill > 0 else 0.0) + view[q, V_BLOCKS] + full - depth[q]
            best_cost, best, ties = _lowest(cost, q, best_cost, best, ties)
        return best
    if kind == ROUTER_SGLANG:
        # SGLang's cache-aware router (sgl-model-gateway policies/cache_aware.rs, launcher
        # defaults): when the load (requests in flight) is imbalanced, max - min above the absolute
        # threshold and max above the relative threshold x min, the least loaded; else the
        # instance with the longest match in the tree of routed prompts if the match ratio is
        # above cache_threshold; else the least loaded
        lo = 0
        hi = 0
        for q in range(1, N):
            if view[q, V_REQUESTS] < view[lo, V_REQUESTS]:
                lo = q
            if view[q, V_REQUESTS] > view[hi, V_REQUESTS]:
                hi = q
        mx = view[hi, V_REQUESTS]
        mn = view[lo, V_REQUESTS]
        if mx - mn > rcfg[R_SG_ABS] and mx > rcfg[R_SG_REL] * mn:
            return lo
        for q in range(1, N):
            if overlap[q] > overlap[best]:
                best = q
        if prompt_blocks > 0 and overlap[best] / prompt_blocks > rcfg[R_SG_CACHE]:
            return best
        return lo
    if kind == ROUTER_LLMD:
        # llm-d's scheduler (GIE scorers, weights prefix 3 / queue 2 / kv-cache 2): precise prefix
        # score (leading blocks cached there, min-max normalised over the instances that hold any;
        # none: 0), queue score (waiting requests, min-max normalised, inverted), KV score
        # (1 - blocks in use / pool); the highest weighted sum, ties at random
        qmin = view[0, V_WAITING]
        qmax = view[0, V_WAITING]
        omin = -1
        omax = -1
        for q in range(N):
            w = view[q, V_WAITING]
            qmin = w if w < qmin else qmin
            qmax = w if w > qmax else qmax
            if overlap[q] > 0:
                omin = overlap[q] if omin < 0 or overlap[q] < omin else omin
                omax = overlap[q] if overlap[q] > omax else omax
        best_cost = np.inf
        ties = 0
        for q in range(N):
            prefix = 0.0
            if overlap[q] > 0:
                prefix = 1.0 if omax == omin else (overlap[q] - omin) / (omax - omin)
            kv = 1.0 - view[q, V_HELD] / rcfg[R_CAPACITY]
            queue = 1.0 if qmax == qmin else (qmax - view[q, V_WAITING]) / (qmax - qmin)
            score = rcfg[R_LLMD_PREFIX] * prefix + rcfg[R_LLMD_KV] * kv + rcfg[R_LLMD_QUEUE] * queue
            best_cost, best, ties = _lowest(-score, q, best_cost, best, ties)  # the highest score
        return best
    # ROUTER_MOONCAKE: Mooncake's Conductor (FAST'25 Algorithm 1): the least estimated TTFT =
    # the predicted prefill times of the requests queued there + the time to load the prefix it
    # reaches (its tiers; the global store, which any instance reads) + this prompt's prefill
    # after that prefix
    best_t = np.inf
    for q in range(N):
        t = view[q, V_QUEUE_S] + fetch[q] + prefill_estimate(tm, agg, prompt_tokens, overlap[q] * block_size)
        if t < best_t:
            best_t = t
            best = q
    return best


def _lowest(cost, q, best_cost, best, ties):
    """One step of picking the lowest cost with ties broken uniformly at random (reservoir
    sampling over the tied instances, as Dynamo's selector and llm-d's shuffled picker do):
    (best cost, best instance, ties so far) after instance q."""
    if cost < best_cost:
        return cost, q, 1
    if cost == best_cost:
        ties += 1
        if np.random.randint(0, ties) == 0:
            return cost, q, ties
    return best_cost, best, ties


def prefill_estimate(tm, agg, prompt_tokens, cached):
    """The time model's prefill time of a prompt with `cached` tokens cached (the last token is
    always computed)."""
    if cached >= prompt_tokens:
        cached = prompt_tokens - 1 if prompt_tokens > 0 else 0
    return _prefill_seconds(tm, agg, prompt_tokens - cached, cached)


def _prefill_seconds(tm, agg, new, cached):
    """The time model's step time for one prefill of `new` tokens after `cached` ones (0 for none)."""
    if new <= 0:
        return 0.0
    agg[:] = 0.0
    agg[AGG_PREFILL_REQS] = 1
    agg[AGG_PREFILL_NEW] = new
    agg[AGG_PREFILL_CACHED] = cached
    agg[AGG_KEYS_FULL] = new * cached + new * (new + 1) / 2
    agg[AGG_TOUCHED_FULL] = cached + new
    return step_seconds(tm, agg)


if HAVE_NUMBA:
    from .timing import step_seconds

    _prefill_seconds = helper(_prefill_seconds, inline=False)
    prefill_estimate = helper(prefill_estimate, inline=False)
    _lowest = helper(_lowest)
    pick_instance = helper(pick_instance, inline=False)
else:  # pragma: no cover - the simulator needs numba
    from .timing import step_seconds
