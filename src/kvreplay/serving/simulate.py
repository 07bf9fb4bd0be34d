"""``kvreplay.simulate``: engine instances serving a trace in simulated time.

Builds the instance kernel's inputs (instance.py), runs it and returns a SimReport (report.py).
The rules (arrivals, schedulers, the pool, time) are in docs/serving.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import jit
from ..errors import ConfigError
from ..policies.registry import get_policy
from ..trace.model import Trace, resolve_block_size
from ..engine.replay import as_trace, check_capacity
from . import instance
from .instance import (C_BLOCK_SIZE, C_CAPACITY, C_CHUNK_SIZE, C_CHUNKED, C_LPM, C_LPM_FCFS_ABOVE,
                       C_MAX_BATCHED, C_MAX_PREFILL, C_MAX_SEQS, C_ONE_AT_A_TIME, C_OUTPUT_KV, C_PRECHECK,
                       C_PREFILL, C_PROMPT_IDS, C_ROUTER, C_TIER_OVERLAP, C_WINDOW, F_CLIP_MAX_NEW, F_RATIO_DECAY, F_RATIO_INIT, F_RATIO_MIN, NUM_CFG, NUM_COUNTERS,
                       NUM_FCFG, NUM_SERIES)
from ..policies.base import with_eviction_log
from .report import SimReport
from ..engine.tiers import Pools
from .router import FIXED, ROUTER_DYNAMO, ROUTER_FIXED, ROUTER_SGLANG, ROUTERS, router_config, router_kind
from .timing import KIND_INSTANT, TimeModel, load_time_model, packed, roofline_window

#: Policies whose start is all or nothing inside the policy (vllm, radix): the kernel asks them;
#: for every other policy it checks first that the start fits beside the held blocks.
REQUEST_LEVEL = ("vllm", "radix")
ENGINE_STYLES = ("vllm", "sglang")
#: Engine-faithful default policy per engine style.
STYLE_POLICY = {"vllm": "vllm", "sglang": "radix"}
SERIES_POINTS = 4096


@dataclass(frozen=True)
class Scheduler:
    """Scheduler settings (docs/serving.md, "Schedulers", gives each default's source)."""

    style: str = "vllm"
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    chunked_prefill: bool = True
    # SGLang only
    schedule_policy: str = "fcfs"  # fcfs | lpm
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    lpm_fcfs_above: int = 128  # SGLang falls back from lpm to fcfs above this many waiting requests
    init_new_token_ratio: float = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness 1.0
    min_new_token_ratio: float = 0.7 * 0.14  # x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
    new_token_ratio_decay: float = (0.7 - 0.7 * 0.14) / 600  # over SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
    clip_max_new_tokens: int = 4096

    def __post_init__(self):
        if self.style not in ENGINE_STYLES:
            raise ConfigError(f"unknown engine style {self.style!r} (known: {', '.join(ENGINE_STYLES)})")
        for name in ("max_num_batched_tokens", "max_num_seqs", "chunked_prefill_size", "max_prefill_tokens",
                     "clip_max_new_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, got {v!r}")
        if self.schedule_policy not in ("fcfs", "lpm"):
            raise ConfigError(f"unknown SGLang schedule policy {self.schedule_policy!r} (known: fcfs, lpm)")

    def to_dict(self) -> dict:
        out = {"style": self.style, "max_num_batched_tokens": self.max_num_batched_tokens,
               "max_num_seqs": self.max_num_seqs, "chunked_prefill": self.chunked_prefill}
        if self.style == "sglang":
            out.update(schedule_policy=self.schedule_policy, chunked_prefill_size=self.chunked_prefill_size,
                       max_prefill_tokens=self.max_prefill_tokens, lpm_fcfs_above=self.lpm_fcfs_above,
                       init_new_token_ratio=self.init_new_token_ratio, min_new_token_ratio=self.min_new_token_ratio,
                       new_token_ratio_decay=self.new_token_ratio_decay)
        return out


def arrivals(trace: Trace, *, speedup: float | None = None, rate: float | None = None, seed: int = 0) -> np.ndarray:
    """Arrival times in seconds, in trace order: the trace's timestamps (ms) shifted so the first
    is 0 and divided by `speedup`, or a Poisson process of `rate` requests/s (seeded) in trace order."""
    n = len(trace)
    if rate is not None and speedup is not None:
        raise ConfigError("give --speedup (scale the trace's timestamps) or --rate (Poisson arrivals), not both")
    if rate is not None:
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0 or rate == float("inf"):
            raise ConfigError(f"rate must be a positive number of requests per second, got {rate!r}")
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
        if n:
            gaps[0] = 0.0
        return np.cumsum(gaps)
    speedup = 1.0 if speedup is None else speedup
    if isinstance(speedup, bool) or not isinstance(speedup, (int, float)) or not speedup > 0 or speedup == float("inf"):
        raise ConfigError(f"speedup must be a positive number, got {speedup!r}")
    ts = np.asarray(trace.timestamp, dtype=np.float64)
    if not n:
        return ts
    return (ts - ts.min()) / 1000.0 / speedup


def decode_blocks(trace: Trace, block_size: int, output_kv: bool) -> np.ndarray:
    """Per request: the decode blocks its outputs need beyond its prompt's (instance.extra_blocks
    at its last token: L + max(O, 1) - 1 tokens in KV); none without output KV."""
    if not output_kv:
        return np.zeros(len(trace), dtype=np.int64)
    L = np.asarray(trace.input_length, dtype=np.int64)
    outputs = np.maximum(np.asarray(trace.output_length, dtype=np.int64), 1)
    return np.maximum((L + outputs - 1 + block_size - 1) // block_size - (L + block_size - 1) // block_size, 0)


def decode_trace(trace: Trace, block_size: int, output_kv: bool) -> tuple[Trace, np.ndarray]:
    """`trace` with each request's decode ids after its prompt blocks (instance.py's layout), and
    the prompt block counts P."""
    P = np.diff(trace.offsets)
    L = np.asarray(trace.input_length, dtype=np.int64)
    D = decode_blocks(trace, block_size, output_kv)
    total = P + D
    offsets = np.zeros(len(trace) + 1, dtype=np.int64)
    np.cumsum(total, out=offsets[1:])
    blocks = np.empty(int(offsets[-1]), dtype=np.int32)
    if blocks.size and trace.num_blocks + int(D.sum()) > np.iinfo(np.int32).max:
        raise ConfigError("too many blocks for one simulation (more than 2**31 ids with the decode blocks)")
    # prompt blocks: each request's run, shifted by the decode blocks before it
    shift = np.repeat(offsets[:-1] - trace.offsets[:-1], P)
    blocks[np.arange(trace.num_accesses) + shift] = trace.blocks
    # decode ids: fresh, numbered after every prompt id
    dec_pos = np.repeat(offsets[:-1] + P, D) + (np.arange(int(D.sum())) - np.repeat(np.cumsum(D) - D, D))
    blocks[dec_pos] = trace.num_blocks + np.arange(int(D.sum()), dtype=np.int64)
    ext = Trace(offsets=offsets, blocks=blocks, input_length=L, output_length=trace.output_length,
                timestamp=trace.timestamp, num_blocks=trace.num_blocks + int(D.sum()), block_size=block_size,
                source=trace.source, format=trace.format)
    return ext, P.astype(np.int64)


@dataclass
class RawRun:
    """What the kernel returned, in trace order."""

    arrival_s: np.ndarray
    scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    hit_tokens: np.ndarray
    hit_blocks: np.ndarray
    preemptions: np.ndarray
    computed_tokens: np.ndarray
    status: np.ndarray
    counters: dict
    series: np.ndarray
    end_s: float
    policy_counters: dict = field(default_factory=dict)
    itl: np.ndarray | None = None
    instance: np.ndarray | None = None  # per request: the instance that served it
    per_instance: list = field(default_factory=list)  # per instance: its counters
    tier_hits: np.ndarray | None = None  # per request: hit blocks per tier below HBM, then 1 + the last one's tier
    tier_totals: list = field(default_factory=list)  # per tier: demoted, promoted, evicted, resident blocks
    decode_instance: np.ndarray | None = None  # disaggregated: per request, its decode instance (-1: none)


def resolve_tiers(tiers, global_store, *, block_size: int, model=None, kv_dtype: str = "bf16"):
    """(tiers below HBM, the HBM pool if --tiers gave it, bytes per block or None): the model
    turns sizes in bytes into blocks (engine/tiers.py)."""
    from ..engine.tiers import resolve_tiers as resolve

    block_bytes = None
    if model is not None:
        from ..analysis.models import kv_bytes_per_token

        block_bytes = int(kv_bytes_per_token(model, kv_dtype)) * block_size
    out, hbm = resolve(tiers, global_store, block_size=block_size, block_bytes=block_bytes)
    return out, hbm, block_bytes


def tier_summary(tiers, tier_hits, hit_tokens, hit_blocks, block_size, status, prompt_tokens, totals, block_bytes,
                 copies, overlap, load_us) -> dict:
    """Hit tokens per tier at first schedule (HBM first), over the finished requests."""
    from ..engine.tiers import split_by_tier, tier_rows
    from .instance import FINISHED

    ok = status == FINISHED
    per_request = split_by_tier(tiers, tier_hits, hit_blocks, hit_tokens, block_size)
    return {"copies": copies, "overlap": overlap, "load_s": load_us / 1e6, "block_bytes": block_bytes,
            "tiers": tier_rows(tiers, per_request, ok, prompt_tokens, totals, block_bytes),
            "tokens_per_tier": per_request}


#: The most memory the kv-aware and sglang routers may take for their per-instance block tables.
TRACK_BYTES = 4 << 30

#: Policies whose compiled state grows with every pin_request (radix: nodes and an arena;
#: belady: heap entries), sized by the trace it is built from.
SIZED_PER_CALL = ("radix", "belady")


def _roomier(ext: Trace, calls: int, positions: int) -> Trace:
    """`ext` with dummy requests appended (block 0, never run) so that a policy state built from
    it has room for `calls` pin_request calls and `positions` positions."""
    extra_requests = max(0, calls - len(ext))
    extra_positions = max(extra_requests, positions - ext.num_accesses)
    lengths = np.ones(extra_requests, dtype=np.int64)
    if extra_requests:
        lengths[-1] += extra_positions - extra_requests
    offsets = np.concatenate([ext.offsets, ext.offsets[-1] + np.cumsum(lengths)])
    blocks = np.concatenate([ext.blocks, np.zeros(int(lengths.sum()), dtype=np.int32)])
    pad = lambda a: np.concatenate([np.asarray(a), np.ones(extra_requests, dtype=np.asarray(a).dtype)])  # noqa: E731
    return Trace(offsets=offsets, blocks=blocks, input_length=pad(ext.input_length),
                 output_length=pad(ext.output_length), timestamp=pad(ext.timestamp),
                 num_blocks=max(1, ext.num_blocks), block_size=ext.block_size, source=ext.source, format=ext.format)


def run_once(trace: Trace, *, policy: str, capacity: int, block_size: int, time_model: TimeModel,
             scheduler: Scheduler, arrival_s: np.ndarray, output_kv: bool = True, params: dict | None = None,
             instances: int = 1, router: str = "round-robin", assigned: np.ndarray | None = None,
             rcfg: np.ndarray | None = None, tiers: list | None = None, tier_copies: str = "move",
             tier_overlap: bool = False, block_bytes: int | None = None, prefill_instances: int = 0,
             transfer_s: np.ndarray | None = None) -> RawRun:
    """`instances` identical instances over `trace` with these arrivals, behind `router` (fixed
    routers: `assigned` gives each request's instance): the kernel's raw outputs in trace order."""
    if not jit.HAVE_NUMBA:
        raise ConfigError("the serving simulator needs numba (pip install numba)")
    from numba import typed

    spec = get_policy(policy)
    params = spec.resolve(params or {})
    n = len(trace)
    N = instances
    kind = router_kind(router)
    if rcfg is None:
        rcfg = router_config(router, capacity=capacity)
    if assigned is None:
        assigned = np.zeros(n, dtype=np.int64)
    order = np.argsort(arrival_s, kind="stable")
    sorted_trace = trace.take(order) if n and np.any(order != np.arange(n)) else trace
    ext, P = decode_trace(sorted_trace, block_size, output_kv)
    handles = np.zeros(ext.num_accesses + n + 1, dtype=np.int64)
    tm = packed(time_model)
    cfg = np.zeros(NUM_CFG, dtype=np.int64)
    cfg[C_MAX_BATCHED] = scheduler.max_num_batched_tokens
    cfg[C_MAX_SEQS] = scheduler.max_num_seqs
    cfg[C_CHUNKED] = int(scheduler.chunked_prefill)
    cfg[C_CAPACITY] = capacity
    cfg[C_BLOCK_SIZE] = block_size
    cfg[C_PRECHECK] = int(spec.name not in REQUEST_LEVEL)
    cfg[C_ONE_AT_A_TIME] = int(tm[0] == KIND_INSTANT)
    cfg[C_OUTPUT_KV] = int(output_kv)
    cfg[C_LPM] = int(scheduler.schedule_policy == "lpm")
    cfg[C_CHUNK_SIZE] = scheduler.chunked_prefill_size
    cfg[C_LPM_FCFS_ABOVE] = scheduler.lpm_fcfs_above
    cfg[C_MAX_PREFILL] = scheduler.max_prefill_tokens
    cfg[C_WINDOW] = roofline_window(tm)
    cfg[C_ROUTER] = kind
    cfg[C_PROMPT_IDS] = max(1, trace.num_blocks)
    if kind in (ROUTER_DYNAMO, ROUTER_SGLANG) and N * max(1, trace.num_blocks) * 4 > TRACK_BYTES:
        raise ConfigError(f"router {router!r} tracks each instance's blocks: {N} instances x {trace.num_blocks:,} block "
                          f"ids take {N * trace.num_blocks * 4 / 2**30:.1f} GiB (more than {TRACK_BYTES / 2**30:.0f} GiB); "
                          "use fewer instances, or the mooncake or least-loaded router")
    cfg[C_TIER_OVERLAP] = int(tier_overlap)
    cfg[C_PREFILL] = prefill_instances
    xfer = np.zeros(n, dtype=np.float64) if transfer_s is None else np.ascontiguousarray(np.asarray(transfer_s)[order])
    decode_of = np.full(n, -1, dtype=np.int64)
    tiers = list(tiers or [])
    tier_hits = np.zeros((n + 1, len(tiers) + 1), dtype=np.int64)
    log_size = capacity + int(np.diff(ext.offsets).max(initial=0)) + 1
    fcfg = np.zeros(NUM_FCFG, dtype=np.float64)
    fcfg[F_RATIO_INIT] = scheduler.init_new_token_ratio
    fcfg[F_RATIO_MIN] = scheduler.min_new_token_ratio
    fcfg[F_RATIO_DECAY] = scheduler.new_token_ratio_decay
    fcfg[F_CLIP_MAX_NEW] = scheduler.clip_max_new_tokens
    arr_sorted = np.ascontiguousarray(arrival_s[order], dtype=np.float64)
    assigned_sorted = np.ascontiguousarray(np.asarray(assigned, dtype=np.int64)[order])
    L = np.asarray(sorted_trace.input_length, dtype=np.int64)
    O = np.asarray(sorted_trace.output_length, dtype=np.int64)
    sched = np.full(n, np.nan)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    hit_tokens = np.zeros(n, dtype=np.int64)
    hit_blocks = np.zeros(n, dtype=np.int64)
    preempts = np.zeros(n, dtype=np.int64)
    computed = np.zeros(n, dtype=np.int64)
    status = np.zeros(n, dtype=np.int8)
    inst_of = np.zeros(n, dtype=np.int64)
    counters = np.zeros((N, NUM_COUNTERS), dtype=np.int64)
    series = np.zeros((SERIES_POINTS, NUM_SERIES), dtype=np.float64)
    series_meta = np.zeros(2, dtype=np.int64)
    itl = np.zeros(instance.ITL_HEAD + instance.ITL_BINS, dtype=np.float64)
    # radix and belady allocate per pin_request call and per position pinned: size each
    # instance's state for its requests, their decode blocks and one recomputation of each (a
    # state-aware router's share is unknown before the run: twice an even share), and run again
    # with twice the room for an instance that needed more (the run is deterministic)
    lengths = np.diff(ext.offsets)
    dec = lengths - P
    share = 1.0 if kind == ROUTER_FIXED or N == 1 else min(1.0, 2.0 / N)
    calls = np.empty(N, dtype=np.int64)
    positions = np.empty(N, dtype=np.int64)
    for k in range(N):
        mine = assigned_sorted == k if kind == ROUTER_FIXED else slice(None)
        calls[k] = int(2 * share * (len(L[mine]) + dec[mine].sum())) + 8
        positions[k] = int(2 * share * lengths[mine].sum()) + 8
    while True:
        states = typed.List()
        for k in range(N):
            sizing = ext if spec.name not in SIZED_PER_CALL else _roomier(ext, int(calls[k]), int(positions[k]))
            state = (spec.held_state or spec.make_state)(capacity, sizing, **params)
            states.append(with_eviction_log(state, log_size) if tiers else state)
        pools = Pools(tiers, N, ext.num_blocks, block_bytes=block_bytes, copies=tier_copies)
        tier_hits.fill(0)
        for a in (sched, first, finish):
            a.fill(np.nan)
        for a in (hit_tokens, hit_blocks, preempts, computed, status, counters, series, series_meta, handles, itl,
                  inst_of):
            a.fill(0)
        decode_of.fill(-1)
        if spec.name in SIZED_PER_CALL:
            counters[:, instance.K_MAX_PIN_CALLS], counters[:, instance.K_MAX_POSITIONS] = calls, positions
        else:
            counters[:, instance.K_MAX_PIN_CALLS] = counters[:, instance.K_MAX_POSITIONS] = -1
        args = (ext.offsets, ext.blocks, P, L, O, arr_sorted, states, handles, tm, cfg, fcfg, rcfg, assigned_sorted,
                inst_of, sched, first, finish, hit_tokens, hit_blocks, preempts, computed, status, counters, series,
                series_meta, itl, pools.arrays, tier_hits, xfer, decode_of)
        kernel = instance.run_sglang if scheduler.style == "sglang" else instance.run_vllm
        jit.ensure_compiled(kernel, args, f"the {scheduler.style}-style serving simulator for {spec.name}")
        end = kernel(*args)
        stuck = counters[:, instance.K_STUCK]
        if stuck.any():
            from ..errors import InvariantError

            raise InvariantError(f"the simulator stalled with {int(stuck.sum())} running requests "
                                 "that can no longer be scheduled")
        short = counters[:, instance.K_OUT_OF_ROOM] != 0
        if not short.any():
            break
        calls[short] *= 2
        positions[short] *= 2
    policy_counters = {}
    for st in states:
        for key, value in spec.read_state(st)[1].items():
            policy_counters[key] = policy_counters.get(key, 0) + value
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    back = lambda a: a[inv]  # noqa: E731 - sorted order back to trace order
    per_instance = [dict(zip(instance.COUNTER_NAMES, row.tolist())) for row in counters]
    peaks = {"peak_held_blocks", "peak_running", "peak_waiting", "max_pin_calls", "max_positions"}
    merged = {key: (max if key in peaks else sum)(c[key] for c in per_instance) for key in instance.COUNTER_NAMES}
    return RawRun(
        arrival_s=np.asarray(arrival_s, dtype=np.float64), scheduled_s=back(sched), first_token_s=back(first),
        finish_s=back(finish), hit_tokens=back(hit_tokens), hit_blocks=back(hit_blocks), preemptions=back(preempts),
        computed_tokens=back(computed), status=back(status), counters=merged,
        series=series[:series_meta[0]].copy(), end_s=float(end), policy_counters=policy_counters, itl=itl,
        instance=back(inst_of), per_instance=per_instance, tier_hits=tier_hits[:n][inv], decode_instance=back(decode_of),
        tier_totals=[pools.totals(t) for t in range(len(tiers))],
    )


def resolve_capacity(capacity, *, model=None, gpu=None, tp: int = 1, block_size: int = 16,
                     gpu_memory_utilization: float = 0.9) -> tuple[int, dict]:
    """The pool in blocks and where it came from: `capacity` as given, else what is left of the
    GPUs' memory after the weights (timing.kv_capacity, as vLLM sizes its pool)."""
    if capacity is not None:
        capacity = check_capacity(capacity)
        source = {"kind": "given"}
        if gpu is not None and model is not None:
            # say how the given pool compares with what the GPUs hold (a pool no GPU has is a what-if)
            from .timing import kv_capacity

            try:
                fits = kv_capacity(model, gpu, tp, block_size, gpu_memory_utilization).blocks
            except ConfigError:  # the weights leave no room: the given pool is a what-if
                fits = 0
            source.update(gpu_memory_blocks=int(fits), gpu=str(gpu), model=str(model), tp=tp)
        return capacity, source
    if gpu is None or model is None:
        raise ConfigError("give the KV pool: --capacity BLOCKS, or --gpu NAME --model NAME (the memory left after "
                          "the weights, as vLLM sizes it)")
    from .timing import kv_capacity

    kv = kv_capacity(model, gpu, tp, block_size, gpu_memory_utilization)  # ConfigError when nothing is left
    return int(kv.blocks), {"kind": "gpu_memory", **kv.to_dict()}


def simulate(trace, policy: str | None = None, capacity: int | None = None, block_size: int | None = None, *,
             engine_style: str = "vllm", time_model="instant", model=None, gpu=None, tp: int = 1,
             gpu_memory_utilization: float = 0.9, speedup: float | None = None, rate: float | None = None,
             seed: int = 0, scheduler: Scheduler | None = None, slo_ttft_ms: float | None = None,
             slo_tpot_ms: float | None = None, output_kv: bool = True, compare_sequential: bool = True,
             check: bool = True, instances: int = 1, router: str = "round-robin", router_lag_ms: float = 0.0,
             router_options: dict | None = None, tiers=None, global_store=None, tier_copies: str = "move",
             tier_overlap: bool = False, kv_dtype: str = "bf16", prefill_instances: int | None = None,
             decode_instances: int | None = None, kv_link: str | None = None, **params):
    """Serve `trace` on one simulated engine instance (or `instances` identical ones behind
    `router`: one of router.ROUTERS) and return a SimReport.

    policy: the prefix cache's policy (default: vllm for engine_style "vllm", radix for "sglang").
    capacity: the KV pool in blocks (running requests and the prefix cache share it); default:
        what `gpu` x `tp` have left after `model`'s weights at `gpu_memory_utilization`.
    time_model: "instant", "roofline" (needs model and gpu), a Dynamo profile "FILE.npz", a
        polynomial "FILE.json", or a TimeModel.
    speedup / rate: arrivals: the trace's timestamps divided by `speedup`, or a Poisson process of
        `rate` requests/s (seeded by `seed`).
    scheduler: a Scheduler (its style must match engine_style); default: engine_style's defaults.
    output_kv: generated tokens fill KV blocks (False: only prompts take room, as the sequential
        replay assumes).
    compare_sequential: also replay the trace sequentially (same policy, capacity) for comparison.
    instances / router / router_lag_ms / router_options: a cluster (see router.py).
    tiers: tiers below HBM ("dram=64GiB@64GB/s,ssd=2TiB@7GB/s", "hbm=..." sets the pool; or a
        list of tiers.Tier); global_store: "SIZE@BANDWIDTH", a tier every instance shares;
        tier_copies "move" | "keep"; tier_overlap: loads overlap compute (tiers.py).
    prefill_instances / decode_instances / kv_link: prefill/decode disaggregation (vLLM style): the
        router sends requests to prefill instances; after its first token a request's KV crosses
        `kv_link` ("25GB/s": its prompt's KV bytes / bandwidth; none: at once) to the least loaded
        decode instance, which decodes the rest.
    """
    from ..engine.replay import replay

    trace = as_trace(trace)
    if engine_style not in ENGINE_STYLES:
        raise ConfigError(f"unknown engine style {engine_style!r} (known: {', '.join(ENGINE_STYLES)})")
    for name, value in (("slo_ttft_ms", slo_ttft_ms), ("slo_tpot_ms", slo_tpot_ms)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ConfigError(f"{name} must be a positive number of milliseconds, got {value!r}")
    policy = policy or STYLE_POLICY[engine_style]
    spec = get_policy(policy)
    block_size = resolve_block_size(block_size, trace)
    if scheduler is None:
        scheduler = Scheduler(style=engine_style)
    elif scheduler.style != engine_style:
        raise ConfigError(f"the scheduler's style {scheduler.style!r} differs from engine_style {engine_style!r}")
    tier_list, hbm, block_bytes = resolve_tiers(tiers, global_store, block_size=block_size, model=model,
                                                kv_dtype=kv_dtype)
    if any(t.bandwidth for t in tier_list) and block_bytes is None:
        raise ConfigError("a tier's bandwidth needs the model's KV bytes per block: give --model")
    if hbm is not None:
        if capacity is not None and capacity != hbm:
            raise ConfigError(f"the pool is given twice: capacity {capacity} and --tiers hbm={hbm}")
        capacity = hbm
    if spec.capacity == "ignored":
        # an unbounded pool: every prompt block and every decode block fits
        num_ids = trace.num_blocks + int(decode_blocks(trace, block_size, output_kv).sum())
        capacity, source = max(1, num_ids), {"kind": "unbounded"}
    else:
        capacity, source = resolve_capacity(capacity, model=model, gpu=gpu, tp=tp, block_size=block_size,
                                            gpu_memory_utilization=gpu_memory_utilization)
    tm = load_time_model(time_model, model=model, gpu=gpu, tp=tp)
    arrival_s = arrivals(trace, speedup=speedup, rate=rate, seed=seed)
    disagg = prefill_instances is not None or decode_instances is not None
    transfer_s = None
    if disagg:
        for name, value in (("prefill_instances", prefill_instances), ("decode_instances", decode_instances)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1 (disaggregation needs both), got {value!r}")
        if instances not in (1, prefill_instances + decode_instances):
            raise ConfigError(f"instances {instances} differs from prefill + decode instances "
                              f"({prefill_instances} + {decode_instances})")
        if engine_style != "vllm":
            raise ConfigError("prefill/decode disaggregation is simulated with the vLLM-style scheduler")
        instances = prefill_instances + decode_instances
        transfer_s = np.zeros(len(trace))
        if kv_link is not None:
            from ..engine.tiers import parse_bandwidth

            if block_bytes is None:
                raise ConfigError("the KV link's transfer time needs the model's KV bytes: give --model")
            bw = parse_bandwidth(kv_link)
            per_token = block_bytes / block_size
            transfer_s = np.asarray(trace.input_length, dtype=np.float64) * per_token / bw
    elif kv_link is not None:
        raise ConfigError("--kv-link applies to prefill/decode disaggregation: add --prefill-instances and "
                          "--decode-instances")
    routed = prefill_instances if disagg else instances
    kind = router_kind(router) if routed > 1 else ROUTER_FIXED
    assigned = (route(trace, arrival_s, routed, router if router in FIXED else "round-robin", seed)
                if kind == ROUTER_FIXED else None)
    rcfg = router_config(router, capacity=capacity, lag_ms=router_lag_ms, options=router_options, seed=seed)
    raw = run_once(trace, policy=spec.name, capacity=capacity, block_size=block_size, time_model=tm,
                   scheduler=scheduler, arrival_s=arrival_s, output_kv=output_kv, params=params,
                   instances=instances, router=router if instances > 1 else "round-robin", assigned=assigned,
                   rcfg=rcfg, tiers=tier_list, tier_copies=tier_copies, tier_overlap=tier_overlap,
                   block_bytes=block_bytes, prefill_instances=prefill_instances if disagg else 0,
                   transfer_s=transfer_s)
    instance_of = raw.instance
    sequential = None
    sequential_evictions = None
    if compare_sequential and any(t.shared for t in tier_list):
        compare_sequential = False  # a store shared by instances has no sequential counterpart per instance
    if compare_sequential:
        # each instance's requests through its own cache (and tiers), one at a time (N replays for N instances)
        tier_args = dict(tiers=tier_list, tier_copies=tier_copies) if tier_list else {}
        hits = 0
        evictions = []
        for k in range(instances):
            sub = trace if instances == 1 else trace.take(np.flatnonzero(instance_of == k))
            seq_k = replay(sub, spec.name, None if spec.capacity == "ignored" else capacity, block_size, **tier_args,
                           **params)
            hits += int(seq_k.hit_tokens.sum())
            evictions.append(seq_k.counters.get("evictions"))
        prompt = int(np.asarray(trace.input_length).sum())
        sequential = hits / prompt if prompt else 0.0
        # (decode instances evict too, and have no sequential counterpart)
        sequential_evictions = None if None in evictions or disagg else sum(evictions)
    arrival_info = ({"kind": "poisson", "rate_per_s": rate, "seed": seed} if rate is not None
                    else {"kind": "trace", "speedup": 1.0 if speedup is None else speedup})
    report = SimReport(
        policy=spec.name, params=spec.resolve(params), capacity_blocks=capacity, block_size=block_size,
        scheduler=scheduler.to_dict(), time_model=tm.describe(), arrivals=arrival_info, output_kv=output_kv,
        trace_source=trace.source, arrival_s=raw.arrival_s, scheduled_s=raw.scheduled_s,
        first_token_s=raw.first_token_s, finish_s=raw.finish_s,
        prompt_tokens=np.asarray(trace.input_length, dtype=np.int64), hit_tokens=raw.hit_tokens,
        output_tokens=np.maximum(np.asarray(trace.output_length, dtype=np.int64), 1), preemptions=raw.preemptions,
        status=raw.status, counters=raw.counters, policy_counters=raw.policy_counters, series=raw.series,
        end_s=raw.end_s, itl_histogram=raw.itl, sequential_hit_rate=sequential, sequential_evictions=sequential_evictions,
        capacity_source=source, instances=instances, router=router if instances > 1 else None,
        instance=instance_of if instances > 1 else None,
        instance_busy_s=[c["busy_us"] / 1e6 for c in raw.per_instance], router_lag_ms=router_lag_ms,
        prefill_instances=prefill_instances if disagg else None,
        decode_instance=raw.decode_instance if disagg else None,
        tiers=tier_summary(tier_list, raw.tier_hits, raw.hit_tokens, raw.hit_blocks, block_size, raw.status,
                           np.asarray(trace.input_length), raw.tier_totals, block_bytes, tier_copies, tier_overlap,
                           raw.counters.get("load_us", 0)) if tier_list else None,
        slo_ttft_s=None if slo_ttft_ms is None else slo_ttft_ms / 1000.0,
        slo_tpot_s=None if slo_tpot_ms is None else slo_tpot_ms / 1000.0,
    )
    if check:
        report.check_invariants()
        _check_tokens(report, raw)
    return report



def route(trace: Trace, arrival_s: np.ndarray, instances: int, router: str, seed: int = 0) -> np.ndarray:
    """The instance (0..instances-1) of each request, in trace order.

    round-robin: the k-th arrival (stable by time) goes to k mod N, as Dynamo's round_robin;
    random: uniformly at random, seeded; session: by the trace's session id (sid mod N), or
    without sessions by the request's first block id (mod N), so a conversation's turns, which
    share their first block, stay on one instance.
    """
    if isinstance(instances, bool) or not isinstance(instances, (int, np.integer)) or instances < 1:
        raise ConfigError(f"instances must be a whole number >= 1, got {instances!r}")
    if router not in ROUTERS:
        raise ConfigError(f"unknown router {router!r} (known: {', '.join(ROUTERS)})")
    if router not in FIXED:
        raise ConfigError(f"router {router!r} reads the instances' state: it routes during the run, not before")
    n = len(trace)
    if instances == 1:
        return np.zeros(n, dtype=np.int64)
    if router == "round-robin":
        out = np.empty(n, dtype=np.int64)
        out[np.argsort(arrival_s, kind="stable")] = np.arange(n) % instances
        return out
    if router == "random":
        return np.random.default_rng(seed).integers(0, instances, size=n).astype(np.int64)
    if trace.session is not None:
        return np.asarray(trace.session, dtype=np.int64) % instances
    lengths = np.diff(trace.offsets)
    first = np.where(lengths > 0, trace.blocks[np.minimum(trace.offsets[:-1], max(len(trace.blocks) - 1, 0))], 0)
    return first.astype(np.int64) % instances


def _check_tokens(report, raw: RawRun) -> None:
    """Tokens are conserved: every finished request computed its prompt's misses, one token per
    output after the first, and whatever its preemptions made it recompute."""
    from ..errors import InvariantError

    ok = report.finished & (report.preemptions == 0)
    want = np.maximum(report.prompt_tokens[ok] - report.hit_tokens[ok], 1) + report.output_tokens[ok] - 1
    got = raw.computed_tokens[ok]
    if np.any(got != want):
        i = int(np.flatnonzero(ok)[np.flatnonzero(got != want)[0]])
        raise InvariantError(f"request {i}: computed {int(raw.computed_tokens[i])} tokens, expected "
                             f"{int(max(report.prompt_tokens[i] - report.hit_tokens[i], 1) + report.output_tokens[i] - 1)}")
    total = int(raw.computed_tokens.sum())
    if total != raw.counters["prefill_tokens"] + raw.counters["decode_tokens"]:
        raise InvariantError("the steps' tokens do not add up to the requests' tokens")


def backlog_s(report) -> float:
    """How long after the last arrival the instance kept working (seconds): a queue that cannot
    keep up shows as a backlog that grows with the trace."""
    ok = report.finished
    if not ok.any():
        return 0.0
    return max(0.0, float(report.finish_s[ok].max() - report.arrival_s.max()))


def is_unstable(report) -> bool:
    """The instance could not keep up: it finished more than max(60 s, 10% of the arrival span)
    after the last arrival (docs/serving.md, "Reading the results")."""
    span = float(report.arrival_s.max() - report.arrival_s.min()) if report.arrival_s.size else 0.0
    return backlog_s(report) > max(60.0, 0.1 * span)


def load_sweep(trace, *, speedups=None, rates=None, policies=None, capacities=None, instances=None, routers=None,
               tiers=None, jobs: int = 1, executor: str = "local", ray_address: str | None = None, progress=None,
               **options) -> list[dict]:
    """simulate() over the grid policies x capacities x instances x routers x tiers x loads (trace
    timestamps / speedup, or Poisson rates): one tidy row per run (sweep_row). The runs go to
    `executor` ("local": a pool of `jobs` processes, "threads", or "ray"; analysis/executors.py):
    the rows, in grid order, are the same wherever they ran. `options` go to simulate()."""
    from itertools import product

    from ..analysis.executors import Task, run

    if (speedups is None) == (rates is None):
        raise ConfigError("give the loads as speedups or as rates (one of the two)")
    trace = as_trace(trace)
    loads = [("speedup", float(x)) for x in speedups] if speedups is not None else [("rate", float(x)) for x in rates]
    policies = policies or [options.pop("policy", None)]
    capacities = capacities or [options.pop("capacity", None)]
    instances = instances or [options.pop("instances", 1)]
    routers = routers or [options.pop("router", "round-robin")]
    tiers = tiers or [options.pop("tiers", None)]
    tasks = []
    for policy, capacity, n, router, tier in product(policies, capacities, instances, routers, tiers):
        for k, (kind, value) in enumerate(loads):
            opts = dict(options, policy=policy, capacity=capacity, instances=n, router=router, tiers=tier,
                        speedup=value if kind == "speedup" else None, rate=value if kind == "rate" else None,
                        # the sequential replay does not depend on the load: once per group
                        compare_sequential=k == 0 and options.get("compare_sequential", True))
            tasks.append(Task(kind="call", trace=0, options=tuple(sorted(opts.items())), function=sweep_row))
    rows = [out[0] for out in run(tasks, [trace], executor=executor, jobs=jobs, ray_address=ray_address,
                                  progress=progress)]
    for g in range(0, len(rows), len(loads)):
        for row in rows[g:g + len(loads)]:
            row["sequential_hit_rate"] = rows[g]["sequential_hit_rate"]
    return rows


def sweep_row(trace, options: dict) -> dict:
    """One run of a sweep as a row: load, configuration, TTFT, hit rates, throughput, stability."""
    r = simulate(trace, **options)
    s = r.summary()
    ttft = s["latency_s"]["ttft"]
    kind = "speedup" if options.get("rate") is None else "rate"
    tiers = r.tiers["tiers"] if r.tiers is not None else None
    return {
        "load_kind": kind, "load": float(options["rate"] if kind == "rate" else (options.get("speedup") or 1.0)),
        "policy": r.policy, "capacity_blocks": r.capacity_blocks, "instances": r.instances,
        "router": r.router or "-", "tiers": options.get("tiers") or "none",
        "ttft_p50_s": ttft["p50"], "ttft_p90_s": ttft["p90"], "ttft_p99_s": ttft["p99"],
        "tpot_p50_s": s["latency_s"]["tpot"]["p50"], "hit_rate": s["hit_rate"],
        "hbm_hit_rate": tiers[0]["hit_rate"] if tiers else s["hit_rate"],
        "sequential_hit_rate": r.sequential_hit_rate, "requests_per_s": s["throughput"]["requests_per_s"],
        "goodput_per_s": s["goodput"]["requests_per_s"], "preemptions": s["preemptions"],
        "peak_running": s["peak_running_requests"], "load_balance": r.load_balance() if r.instances > 1 else 1.0,
        "stable": not is_unstable(r), "backlog_s": backlog_s(r), "finished": s["finished"], "rejected": s["rejected"],
    }


def serving_section(trace, *, gpu, model, tp: int = 1, time_model="roofline", speedups=(0.25, 0.5, 1.0),
                    policy: str = "vllm", block_size: int | None = None, gpu_memory_utilization: float = 0.9) -> dict:
    """What `kvreplay report --gpu` shows: a load sweep of one instance whose pool is what the GPUs
    hold after the weights, with the engine-faithful policy (JSON-ready)."""
    rows = load_sweep(trace, speedups=list(speedups), policies=[policy], capacities=[None], gpu=gpu, model=model,
                      tp=tp, time_model=time_model, block_size=block_size,
                      gpu_memory_utilization=gpu_memory_utilization)
    bs = resolve_block_size(block_size, trace)
    _, source = resolve_capacity(None, model=model, gpu=gpu, tp=tp, block_size=bs,
                                 gpu_memory_utilization=gpu_memory_utilization)
    tm = load_time_model(time_model, model=model, gpu=gpu, tp=tp)
    return {"rows": rows, "capacity_source": source, "time_model": tm.describe(),
            "scheduler": Scheduler().to_dict(), "policy": policy, "block_size": bs}
