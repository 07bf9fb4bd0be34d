"""`replay()`: one trace, one policy, one capacity -> Report."""

from __future__ import annotations

import os

import numpy as np

from .. import native
from ..errors import ConfigError
from .report import Report
from ..policies.registry import get_policy
from ..trace import Trace, load_trace
from ..trace.model import block_size_mismatches, resolve_block_size
from . import account, driver, misses

ENGINES = ("compiled", "reference")


def resolve_engine(engine: str | None) -> str:
    """The engine to run: "compiled" (C) or "reference" (plain Python). None: the compiled one where
    the core is built, else the reference one (native.use_core says so once). "compiled" asked
    for by name without the core is a ConfigError, never quietly the other engine."""
    if engine is None:
        return "compiled" if native.use_core() else "reference"
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    if engine == "compiled":
        native.require("the compiled engine (engine='compiled', --engine compiled)")
    return engine


def stranded_blocks(trace: Trace, mask: np.ndarray) -> int:
    """Resident blocks that no request can reach, an earlier block of their chain not being
    resident (see Report.stranded_blocks)."""
    return account.stranded(trace, mask)


def oversize_requests(trace: Trace, block_size: int, capacity: int, warmup: int) -> int:
    """Requests after the warm-up whose prompt needs more than `capacity` blocks."""
    need = -(-np.asarray(trace.input_length[warmup:], dtype=np.int64) // block_size)
    return int(np.count_nonzero(need > capacity))


def check_capacity(capacity) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ConfigError(f"capacity must be a positive whole number of blocks, got {capacity!r}")
    if capacity > 2**62:
        raise ConfigError(f"capacity {capacity:,} blocks is beyond any cache (at most 2**62)")
    return int(capacity)


def warmup_count(num_requests: int, warmup_fraction: float) -> int:
    """floor(F * N): the first requests that only warm the cache."""
    if isinstance(warmup_fraction, bool) or not isinstance(warmup_fraction, (int, float, np.integer, np.floating)) \
            or not 0.0 <= warmup_fraction < 1.0:
        raise ConfigError(f"warmup fraction must be in [0, 1), got {warmup_fraction!r}")
    return int(np.floor(warmup_fraction * num_requests))


def as_trace(trace) -> Trace:
    if isinstance(trace, Trace):
        return trace
    if not isinstance(trace, (str, os.PathLike)):
        raise ConfigError(f"trace must be a Trace or a path to a trace file, got {type(trace).__name__} {trace!r}")
    return load_trace(os.fspath(trace))


def replay(
    trace,
    policy: str = "s3fifo",
    capacity: int | None = 4096,
    block_size: int | None = None,
    *,
    engine: str | None = None,
    warmup_fraction: float = 0.0,
    check: bool = True,
    tiers=None,
    tier_copies: str = "move",
    tier_block_bytes: int | None = None,
    kv_groups=None,
    kv_retention: int | None = 0,
    prefill_chunk: int = 8192,
    miss_account: bool = True,
    block_content=None,
    stranded_samples: int = account.NUM_STRANDED_SAMPLES,
    **params,
) -> Report:
    """Replay `trace` through a prefix cache and return a :class:`Report`.

    trace: a Trace or a path to a trace file.
    policy: a registered policy name (case-insensitive): "s3fifo", "lru", "fifo".
    capacity: cache size in blocks (None: unbounded, for policies where that makes sense).
    block_size: tokens per block; default: the size the trace declares, else 512.
    engine: "compiled" (C) or "reference" (plain Python, the readable oracle); None (default): the
        compiled one, or the reference one where the compiled core is not installed.
    warmup_fraction: the first floor(F * N) requests warm the cache but are not counted.
    check: verify the spec's invariants (cheap; on by default).
    tiers: memory tiers below the cache, which is then HBM ("dram=64000,ssd=2TiB:fifo": sizes in
        blocks, or in bytes with `tier_block_bytes`, the KV bytes of one block; or a list of
        engine.tiers.Tier): evicted blocks are demoted, a hit prefix runs through every tier, and
        the report splits hit tokens per tier (docs/clusters.md, "Tiers"). tier_copies: "move"
        (default) or "keep".
    kv_groups: a hybrid model's KV cache groups (policies.hybrid.Group, in vLLM's group order;
        catalog.kv_groups.layout(model, block_size).groups), for policy "vllm": vLLM's hybrid
        manager, whose hit is the longest prefix every group can serve (policies/hybrid.py);
        capacity is then in block ids of the shared pool. For policy "radix": SGLang 0.5.23's
        UnifiedRadixCache (policies/radix_hybrid.py; compiled: radix_hybrid.c), capacity its
        full-attention pool in pages, the sliding-window pool 0.8 of it. kv_retention: vLLM's
        prefix_cache_retention_interval (0, its default: sliding-window and Mamba groups cache
        only what a hit at a prompt's end or a shared-prefix junction needs; None: every block).
        prefill_chunk: tokens per prefill step (vLLM's max_num_batched_tokens).
    miss_account: also say why every missed token missed (Report.misses, engine/misses.py; not
        with tiers, nor SGLang's hybrid tree; vLLM's hybrid manager adds the layer-groups cause). block_content: for the namespace cause, each block id's content id without
        its namespace (blocks of one content under two namespaces share one); None: the trace has
        no namespaces. stranded_samples: how many times, evenly over the trace, the account counts
        the cache's stranded blocks (0: only at the end).
    **params: policy parameters (e.g. small_ratio=0.1, max_freq=3, ghost_freq=0 for s3fifo).
    """
    trace = as_trace(trace)
    spec = get_policy(policy)
    unbounded = spec.capacity == "ignored" or (capacity is None and spec.capacity == "optional")
    if unbounded:
        capacity = max(1, trace.num_blocks)  # unbounded: no cache can hold more than every block
    capacity = check_capacity(capacity)
    block_size = resolve_block_size(block_size, trace)
    spec.check_block_size(block_size)
    params = spec.resolve(params)
    sizes = spec.sizes(capacity, **params)
    warmup = warmup_count(len(trace), warmup_fraction)
    engine = resolve_engine(engine)
    if engine == "compiled" and not spec.native:
        engine = "reference"  # a policy with the reference engine only (the report says which ran)
    if tiers is not None and not spec.native:
        raise ConfigError(f"policy {spec.name!r} has no compiled operations for tiers")
    if tiers is not None and spec.caches_at_release:
        raise ConfigError(f"policy {spec.name!r} caches a request's blocks when it stores them, which the tiers "
                          "below the cache do not model (trtllm has its own host pool: host_blocks)")
    n = len(trace)
    hit_blocks = np.zeros(n, dtype=np.int64)
    hit_tokens = np.zeros(n, dtype=np.int64)
    tier_list = None
    hybrid = None
    recorded = None  # what the miss account's replay recorded (engine/account.py)
    hybrid_misses = None  # or vLLM's hybrid manager's account (engine/misses.hybrid_account)
    if block_content is not None and not miss_account:
        raise ConfigError("block_content is for the miss account's namespace cause: drop it or keep miss_account")
    if kv_groups is not None:
        if tiers is not None:
            raise ConfigError("kv_groups (hybrid semantics) and tiers do not go together yet (kv_semantics='full' "
                              "replays every layer as full attention, with tiers)")
        in_full = np.zeros(trace.num_accesses, dtype=np.int8) if miss_account and spec.group_miss_account else None
        hit_blocks, counters, final, engine, hybrid = _replay_hybrid(trace, spec, capacity, kv_groups,
                                                                     block_size, engine, kv_retention, prefill_chunk,
                                                                     in_full)
        hit_tokens = np.minimum(hit_blocks * block_size, np.asarray(trace.input_length, dtype=np.int64))
        if in_full is not None:
            hybrid_misses = misses.hybrid_account(trace, block_size, hit_blocks, in_full, warmup, capacity)
        mask = np.zeros(trace.num_blocks, dtype=bool)  # (stranded blocks are per group: not counted)
    elif tiers is not None:
        from .tiers import replay_tiers, resolve_tiers

        tier_list, hbm = resolve_tiers(tiers, None, block_size=block_size, block_bytes=tier_block_bytes)
        if hbm is not None and hbm != capacity:
            raise ConfigError(f"the cache is given twice: capacity {capacity} and tiers hbm={hbm}")
        if any(t.shared for t in tier_list):
            raise ConfigError("a global store is shared by instances: use kvreplay simulate --global-store")
        hit_blocks, hit_tokens, tier_hits, counters, final, totals = replay_tiers(
            trace, spec, capacity, params, tier_list, block_size, engine, tier_copies)
        mask = np.zeros(trace.num_blocks, dtype=bool)  # (stranded blocks are not counted with tiers)
    elif engine == "compiled":
        state = spec.make_state(capacity, trace, **params)
        if miss_account:
            recorded, state = account.replay_compiled(spec, state, trace, block_size, hit_blocks, hit_tokens,
                                                      capacity=capacity, content=block_content,
                                                      stranded_samples=stranded_samples)
        else:
            driver.replay_state(spec, state, trace.offsets, trace.blocks, trace.input_length, block_size, hit_blocks,
                                hit_tokens)
        final, counters = spec.read_state(state)
        mask = spec.resident_mask(state)
    else:
        cache = spec.reference(capacity, trace, **params)
        if miss_account:
            recorded = account.replay_reference(trace, block_size, cache, hit_blocks, hit_tokens, content=block_content,
                                                stranded_samples=stranded_samples)
        else:
            driver.replay_reference(trace.offsets, trace.blocks, trace.input_length, block_size, cache, hit_blocks,
                                    hit_tokens)
        final, counters = cache.size(), cache.counters()
        mask = np.zeros(trace.num_blocks, dtype=bool)
        mask[list(cache.resident_blocks())] = True
    report = Report(
        policy=spec.name, params=params, block_size=block_size, cache_capacity_blocks=capacity,
        prompt_tokens=np.asarray(trace.input_length), hit_tokens=hit_tokens, hit_blocks=hit_blocks,
        final_cache_blocks=final, counters=counters, stranded_blocks=stranded_blocks(trace, mask), sizes=sizes, warmup_requests=warmup, engine=engine,
        trace_source=trace.source, invalid_records=trace.invalid_records,
        block_size_mismatches=block_size_mismatches(trace, block_size),
        oversize_requests=0 if unbounded else oversize_requests(trace, block_size, capacity, warmup),
    )
    report.kv_semantics = {"semantics": "hybrid", **hybrid} if hybrid else None
    if recorded is not None:
        report.misses = misses.from_recorded(recorded, trace, block_size, warmup, capacity,
                                             namespaces=block_content is not None)
    report.misses = hybrid_misses if hybrid_misses is not None else report.misses
    if tier_list is not None:
        from .tiers import split_by_tier, tier_rows

        per_request = split_by_tier(tier_list, tier_hits, hit_blocks, hit_tokens, block_size)
        measured = np.arange(n) >= warmup
        report.tiers = {"copies": tier_copies,
                        "tiers": tier_rows(tier_list, per_request, measured, trace.input_length, totals),
                        "tokens_per_tier": per_request}
    if check:
        report.check_invariants(trace)
        if report.misses is not None:
            report.misses.check(report.hit_tokens, report.prompt_tokens, f"{spec.name} at capacity {capacity}")
    return report


def _replay_hybrid(trace, spec, capacity: int, groups, block_size: int, engine: str, retention,
                   chunk: int, in_full=None):
    """Hybrid semantics: the policy's replay over layer groups (PolicySpec.replay_groups: vLLM's
    hybrid manager for vllm, SGLang's UnifiedRadixCache for radix), compiled or reference:
    (hit blocks, counters, resident count, the engine that ran, the report's kv_semantics)."""
    if spec.replay_groups is None:
        raise ConfigError(f"kv_groups (hybrid semantics) are vLLM's hybrid manager (policy vllm) or SGLang's "
                          f"UnifiedRadixCache (policy radix), not {spec.name} (kv_semantics='full' replays every layer "
                          "as full attention)")
    hits, counters, final, about = spec.replay_groups(trace, capacity, groups, block_size, engine, retention, chunk,
                                                      in_full)
    return hits, counters, final, engine, {"groups": [vars(g) for g in groups], "prefill_chunk": chunk, **about}

