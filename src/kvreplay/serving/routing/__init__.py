"""Routers: which instance serves an arriving request (docs/clusters.md, "Routers", cites each rule).

Two kinds:

- **Fixed by the trace** (round-robin, random, session): the choice never reads an instance, so
  it is made before the run (:func:`route`, a function each in :data:`FIXED`) and N instances are N
  independent simulations of the requests each receives.
- **State-aware** (least-loaded and the cache-aware presets): the compiled loop asks the router
  at each arrival. Each is one C file here (router.h gives the interface: what it looks at on each
  instance, its rule, its bookkeeping) and one line in registry.c; its name, aliases and
  parameters with their defaults come from there (:func:`state_aware`).

Ties go to the lowest instance index, or at random (kv-aware, llm-d: seeded, so runs repeat).
"""

from __future__ import annotations

from typing import NamedTuple

import ctypes
from functools import lru_cache

import numpy as np

from ... import native
from ...errors import ConfigError


def _round_robin(trace, arrival_s, instances, seed):
    """the k-th arrival (stable by time) goes to k mod N, as Dynamo's round_robin"""
    out = np.empty(len(trace), dtype=np.int64)
    out[np.argsort(arrival_s, kind="stable")] = np.arange(len(trace)) % instances
    return out


def _random(trace, arrival_s, instances, seed):
    """uniformly at random, seeded"""
    return np.random.default_rng(seed).integers(0, instances, size=len(trace)).astype(np.int64)


def _session(trace, arrival_s, instances, seed):
    """by the trace's session id (sid mod N), or without sessions by the request's first block id
    (mod N), so a conversation's turns, which share their first block, stay on one instance"""
    if trace.session is not None:
        return np.asarray(trace.session, dtype=np.int64) % instances
    lengths = np.diff(trace.offsets)
    first = np.where(lengths > 0, trace.blocks[np.minimum(trace.offsets[:-1], max(len(trace.blocks) - 1, 0))], 0)
    return first.astype(np.int64) % instances


#: Routers made before the run: name -> function(trace, arrival_s, instances, seed) -> instances.
FIXED = {"round-robin": _round_robin, "random": _random, "session": _session}


@lru_cache(maxsize=None)
def state_aware() -> dict:
    """The routers the compiled loop asks at each arrival: {name: (index, {parameter: default})},
    aliases included, from the core's registry (serving/routing/registry.c); none without the core
    (there is no simulator then)."""
    if not native.available():
        return {}
    count = native.function("kv_router_count", ctypes.c_int64)()
    out = {}
    for k in range(count):
        text = lambda fn: native.function(fn, ctypes.c_char_p, ctypes.c_int64)(k).decode()  # noqa: E731
        params = {}
        for item in text("kv_router_params").split():
            name, _, value = item.partition("=")
            params[name] = float(value)
        for name in [text("kv_router_name"), *text("kv_router_aliases").split()]:
            out[name] = (k, params)
    return out


def names() -> tuple[str, ...]:
    """Every router name, fixed ones first."""
    return tuple(FIXED) + tuple(state_aware())


def check(router: str) -> str:
    if router not in names():
        raise ConfigError(f"unknown router {router!r} (known: {', '.join(names())})")
    return router


def parameters(router: str, options: dict | None = None) -> np.ndarray:
    """A state-aware router's parameters in the order its rule reads them: its defaults, with
    `options` ({name: number >= 0}) set; an unknown name is an error naming the known ones."""
    check(router)
    defaults = state_aware()[router][1] if router in state_aware() else {}
    options = dict(options or {})
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ConfigError(f"router {router}: unknown option {unknown[0]!r} (options: {', '.join(defaults) or 'none'})")
    values = {**defaults, **options}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
            raise ConfigError(f"router {router}: {name} must be a number >= 0, got {value!r}")
    return np.array([float(values[name]) for name in defaults] or [0.0], dtype=np.float64)


def route(trace, arrival_s: np.ndarray, instances: int, router: str, seed: int = 0) -> np.ndarray:
    """The instance (0..instances-1) of each request under a fixed router, in trace order."""
    if isinstance(instances, bool) or not isinstance(instances, (int, np.integer)) or instances < 1:
        raise ConfigError(f"instances must be a whole number >= 1, got {instances!r}")
    check(router)
    if router not in FIXED:
        raise ConfigError(f"router {router!r} reads the instances' state: it routes during the run, not before")
    if instances == 1:
        return np.zeros(len(trace), dtype=np.int64)
    return FIXED[router](trace, arrival_s, instances, seed)


class Prompt(NamedTuple):
    """The request a router's rule places: its prompt's blocks and tokens, and the block size."""

    blocks: int
    tokens: int
    block_size: int


def rule(router: str, view, overlap, prompt: Prompt, *, depth=None, fetch=None, time_model: np.ndarray,
         capacity: float = 100.0, seed: int = 0, options=None) -> int:
    """A state-aware router's rule on given inputs (for tests that work it by hand): view (a row
    per instance of the kernel's view columns), overlap / depth / fetch per instance."""
    prompt_blocks, prompt_tokens, block_size = prompt
    index = state_aware()[router][0]
    view = np.ascontiguousarray(view, dtype=np.float64)
    n = view.shape[0]
    overlap = np.ascontiguousarray(overlap, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64) if depth is None else np.ascontiguousarray(depth, dtype=np.int64)
    fetch = np.zeros(n) if fetch is None else np.ascontiguousarray(fetch, dtype=np.float64)
    params = parameters(router, options)
    tm = np.ascontiguousarray(time_model, dtype=np.float64)
    p, i, d = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    fn = native.function("kv_route_rule", ctypes.c_int64, i, p, p, p, p, p, i, i, i, i, p, d, i)
    return int(fn(index, params.ctypes.data, view.ctypes.data, overlap.ctypes.data, depth.ctypes.data,
                  fetch.ctypes.data, n, prompt_blocks, prompt_tokens, block_size, tm.ctypes.data, capacity, seed))
