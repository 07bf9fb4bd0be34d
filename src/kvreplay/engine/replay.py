"""`replay()`: one trace, one policy, one capacity -> Report."""

from __future__ import annotations

import os
from dataclasses import dataclass

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
    kv_groups: a hybrid model's KV cache groups (hybrid.coordinator.Group, in vLLM's group order;
        catalog.kv_groups.layout(model, block_size).groups), for policy "vllm": vLLM's hybrid
        manager, whose hit is the longest prefix every group can serve (hybrid/coordinator.py);
        capacity is then in block ids of the shared pool. For policy "radix": SGLang 0.5.23's
        UnifiedRadixCache (hybrid/unified_radix.py; compiled: unified_radix.c), capacity its
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
    options = ReplayOptions(engine=engine, warmup_fraction=warmup_fraction, check=check, tiers=tiers,
                            tier_copies=tier_copies, tier_block_bytes=tier_block_bytes, kv_groups=kv_groups,
                            kv_retention=kv_retention, prefill_chunk=prefill_chunk, miss_account=miss_account,
                            block_content=block_content, stranded_samples=stranded_samples)
    return replay_with(trace, policy, capacity, block_size, options, params)


@dataclass(frozen=True, eq=False)
class ReplayOptions:
    """replay()'s keyword options beside the policy, its capacity and parameters (see replay)."""

    engine: str | None = None
    warmup_fraction: float = 0.0
    check: bool = True
    tiers: object = None
    tier_copies: str = "move"
    tier_block_bytes: int | None = None
    kv_groups: object = None
    kv_retention: int | None = 0
    prefill_chunk: int = 8192
    miss_account: bool = True
    block_content: object = None
    stranded_samples: int = account.NUM_STRANDED_SAMPLES


@dataclass
class _Run:
    """What one engine's replay left: per-request hits, the cache at the end, and the extras its
    report carries (the hybrid semantics, the miss account or its recording, the tiers)."""

    hit_blocks: np.ndarray
    hit_tokens: np.ndarray
    final: int
    counters: dict
    mask: np.ndarray  # resident blocks at the end (none counted with tiers or hybrid semantics)
    engine: str
    hybrid: dict | None = None
    recorded: object = None  # what the miss account's replay recorded (engine/account.py)
    misses: object = None  # or vLLM's hybrid manager's account (engine/misses.hybrid_account)
    tiers: dict | None = None


def replay_with(trace, policy: str, capacity: int | None, block_size: int | None, options: ReplayOptions,
                params: dict) -> Report:
    """replay() with its keyword options packed in `options` and its policy parameters in `params`."""
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
    warmup = warmup_count(len(trace), options.warmup_fraction)
    engine = _engine_for(spec, options)
    if options.kv_groups is not None:
        run = _run_hybrid(trace, spec, capacity, block_size, engine, warmup, options)
    elif options.tiers is not None:
        run = _run_tiers(trace, spec, capacity, block_size, params, engine, warmup, options)
    elif engine == "compiled":
        run = _run_compiled(trace, spec, capacity, block_size, params, options)
    else:
        run = _run_reference(trace, spec, capacity, block_size, params, options)
    report = Report(
        policy=spec.name, params=params, block_size=block_size, cache_capacity_blocks=capacity,
        prompt_tokens=np.asarray(trace.input_length), hit_tokens=run.hit_tokens, hit_blocks=run.hit_blocks,
        final_cache_blocks=run.final, counters=run.counters, stranded_blocks=stranded_blocks(trace, run.mask),
        sizes=sizes, warmup_requests=warmup, engine=run.engine,
        trace_source=trace.source, invalid_records=trace.invalid_records,
        block_size_mismatches=block_size_mismatches(trace, block_size),
        oversize_requests=0 if unbounded else oversize_requests(trace, block_size, capacity, warmup),
    )
    report.kv_semantics = {"semantics": "hybrid", **run.hybrid} if run.hybrid else None
    if run.recorded is not None:
        report.misses = misses.from_recorded(run.recorded, trace, block_size, warmup, capacity,
                                             namespaces=options.block_content is not None)
    report.misses = run.misses if run.misses is not None else report.misses
    if run.tiers is not None:
        report.tiers = run.tiers
    if options.check:
        report.check_invariants(trace)
        if report.misses is not None:
            report.misses.check(report.hit_tokens, report.prompt_tokens, f"{spec.name} at capacity {capacity}")
    return report


def _engine_for(spec, options: ReplayOptions) -> str:
    """The engine that runs `spec` (the reference one for a policy without compiled operations: the
    report says which ran); a ConfigError for options that do not go together."""
    engine = resolve_engine(options.engine)
    if engine == "compiled" and not spec.native:
        engine = "reference"  # a policy with the reference engine only (the report says which ran)
    if options.tiers is not None and not spec.native:
        raise ConfigError(f"policy {spec.name!r} has no compiled operations for tiers")
    if options.tiers is not None and spec.caches_at_release:
        raise ConfigError(f"policy {spec.name!r} caches a request's blocks when it stores them, which the tiers "
                          "below the cache do not model (trtllm has its own host pool: host_blocks)")
    if options.block_content is not None and not options.miss_account:
        raise ConfigError("block_content is for the miss account's namespace cause: drop it or keep miss_account")
    return engine


def _run_hybrid(trace, spec, capacity: int, block_size: int, engine: str, warmup: int, options: ReplayOptions) -> _Run:
    """A hybrid model's layer groups (kv_groups): vLLM's hybrid manager or SGLang's tree."""
    if options.tiers is not None:
        raise ConfigError("kv_groups (hybrid semantics) and tiers do not go together yet (kv_semantics='full' "
                          "replays every layer as full attention, with tiers)")
    in_full = np.zeros(trace.num_accesses, dtype=np.int8) if options.miss_account and spec.group_miss_account else None
    hit_blocks, counters, final, engine, hybrid = _replay_hybrid(trace, spec, capacity, options.kv_groups, block_size,
                                                                 engine, options.kv_retention, options.prefill_chunk,
                                                                 in_full)
    hit_tokens = np.minimum(hit_blocks * block_size, np.asarray(trace.input_length, dtype=np.int64))
    account_ = None
    if in_full is not None:
        account_ = misses.hybrid_account(trace, block_size, hit_blocks, in_full, warmup, capacity)
    mask = np.zeros(trace.num_blocks, dtype=bool)  # (stranded blocks are per group: not counted)
    return _Run(hit_blocks, hit_tokens, final, counters, mask, engine, hybrid=hybrid, misses=account_)


def _run_tiers(trace, spec, capacity: int, block_size: int, params: dict, engine: str, warmup: int,
               options: ReplayOptions) -> _Run:
    """Memory tiers below the cache: evicted blocks demoted, hit tokens split per tier."""
    from .tiers import replay_tiers, resolve_tiers, split_by_tier, tier_rows

    tier_list, hbm = resolve_tiers(options.tiers, None, block_size=block_size, block_bytes=options.tier_block_bytes)
    if hbm is not None and hbm != capacity:
        raise ConfigError(f"the cache is given twice: capacity {capacity} and tiers hbm={hbm}")
    if any(t.shared for t in tier_list):
        raise ConfigError("a global store is shared by instances: use kvreplay simulate --global-store")
    hit_blocks, hit_tokens, tier_hits, counters, final, totals = replay_tiers(
        trace, spec, capacity, params, tier_list, block_size, engine, options.tier_copies)
    mask = np.zeros(trace.num_blocks, dtype=bool)  # (stranded blocks are not counted with tiers)
    per_request = split_by_tier(tier_list, tier_hits, hit_blocks, hit_tokens, block_size)
    measured = np.arange(len(trace)) >= warmup
    tiers = {"copies": options.tier_copies,
             "tiers": tier_rows(tier_list, per_request, measured, trace.input_length, totals),
             "tokens_per_tier": per_request}
    return _Run(hit_blocks, hit_tokens, final, counters, mask, engine, tiers=tiers)


def _run_compiled(trace, spec, capacity: int, block_size: int, params: dict, options: ReplayOptions) -> _Run:
    """The compiled engine (C), recording the miss account as it goes unless told not to."""
    n = len(trace)
    if options.miss_account:  # its stranded samples' chain order (kept per trace), before the replay's arrays
        account.chain_order(trace)
    hit_blocks, hit_tokens = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    state = spec.make_state(capacity, trace, **params)
    recorded = None
    if options.miss_account:
        recorded, state = account.replay_compiled(spec, state, trace, block_size, hit_blocks, hit_tokens,
                                                  capacity=capacity, content=options.block_content,
                                                  stranded_samples=options.stranded_samples)
    else:
        driver.replay_state(spec, state, trace.offsets, trace.blocks, trace.input_length, block_size, hit_blocks,
                            hit_tokens)
    final, counters = spec.read_state(state)
    return _Run(hit_blocks, hit_tokens, final, counters, spec.resident_mask(state), "compiled", recorded=recorded)


def _run_reference(trace, spec, capacity: int, block_size: int, params: dict, options: ReplayOptions) -> _Run:
    """The reference engine (plain Python over the policy object), the readable oracle."""
    n = len(trace)
    hit_blocks, hit_tokens = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    cache = spec.reference(capacity, trace, **params)
    recorded = None
    if options.miss_account:
        recorded = account.replay_reference(trace, block_size, cache, hit_blocks, hit_tokens,
                                            content=options.block_content, stranded_samples=options.stranded_samples)
    else:
        driver.replay_reference(trace.offsets, trace.blocks, trace.input_length, block_size, cache, hit_blocks,
                                hit_tokens)
    final, counters = cache.size(), cache.counters()
    mask = np.zeros(trace.num_blocks, dtype=bool)
    mask[list(cache.resident_blocks())] = True
    return _Run(hit_blocks, hit_tokens, final, counters, mask, "reference", recorded=recorded)


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

