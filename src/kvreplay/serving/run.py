"""One simulation run: a trace, its arrivals and every setting turned into the compiled loop's
inputs (serving/kernel), run, and read back as a RawRun in trace order.

Each instance's policy state is sized by the block ids routed to it (the kernel gives every
instance its own compact ids): exactly, for routers fixed before the run; for state-aware
routers, an estimate that a run which outgrows it doubles, running again (the run is
deterministic, so the result is the same). radix and belady also grow with every pin_request, and
are sized the same way (docs/scaling.md, "Memory").
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, field, replace

import numpy as np

from .. import native
from ..errors import ConfigError, InvariantError
from ..policies.base import with_eviction_log
from ..policies.registry import get_policy
from ..trace.model import Trace
from . import kernel, routing
from .timing import KIND_INSTANT, TimeModel, packed, roofline_window
from .timing.host import NONE as NO_HOST
from .timing.host import HostTerms
from .dataparallel import DP_SYNC_INTERVAL
from .styles import ENGINE_STYLES

#: True: routers scan every instance for every prompt on its own, through its ids and its cache, as
#: before the bits (the reference tests/serving/test_scaling.py holds the bits to)
REFERENCE_SCANS = False
SERIES_POINTS = 4096
PREFILL_ONLY = -1  # sim.h's PREFILL_ONLY: the kernel's O of SGLang's prefill-only request
ITL_BINS = 23100  # up to 1e-6 s x 1.001^23099, about 1e4 s; longer gaps count in the last bin
#: Counters that are peaks (the cluster's is the largest instance's), not sums.
PEAKS = {"peak_held_blocks", "peak_running", "peak_waiting", "max_pin_calls", "max_positions"}


def _chunked(scheduler) -> int:
    """cfg CHUNKED: 0/1 (vLLM, SGLang); TensorRT-LLM's 0 (no chunked context), 1 first come first
    served, 2 equal progress (kernel/trtllm.c)."""
    if scheduler.style != "trtllm" or not scheduler.chunked_prefill:
        return int(scheduler.chunked_prefill)
    return 1 + ("first_come_first_served", "equal_progress").index(scheduler.context_chunking_policy)


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
    id_spaces: list = field(default_factory=list)  # per instance: the ids its state held (its compact id space)
    runs: int = 1  # kernel runs it took (a state that outgrew its estimate runs again)
    spec_accepted_at: np.ndarray | None = None  # speculative decoding: verifications that accepted position p


class Sizing:
    """What a policy's make_state reads of a trace, with `num_blocks` set to an instance's id
    space: the positions (offsets, blocks: the trace's ids, for belady's next uses and lfu's
    counts), the timestamps (ttl), the requests."""

    def __init__(self, trace: Trace, num_blocks: int):
        self.offsets, self.blocks, self.timestamp = trace.offsets, trace.blocks, trace.timestamp
        self.input_length, self.output_length = trace.input_length, trace.output_length
        self.num_blocks = max(1, int(num_blocks))
        self.num_accesses = trace.num_accesses
        self._n = len(trace)

    def __len__(self) -> int:
        return self._n


def decode_trace(trace: Trace, block_size: int, output_kv: bool, lookahead: int = 0) -> tuple[Trace, np.ndarray]:
    """`trace` with each request's decode ids after its prompt blocks (the kernel's layout), and
    the prompt block counts P."""
    P = np.diff(trace.offsets)
    L = np.asarray(trace.input_length, dtype=np.int64)
    D = decode_blocks(trace, block_size, output_kv, lookahead)
    offsets = np.zeros(len(trace) + 1, dtype=np.int64)
    np.cumsum(P + D, out=offsets[1:])
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


def hashed_prompts(trace: Trace, block_size: int) -> Trace:
    """`trace` as vLLM's pool sees it: a prompt's blocks are its ceil(L / bs) blocks, the full ones
    under the trace's ids and the partial last one under an id no block has (vLLM hashes a block
    only once it is full: when outputs fill it, its tokens are the request's own). A prompt with
    fewer ids than full blocks gets fresh ids for the rest."""
    L = np.asarray(trace.input_length, dtype=np.int64)
    P = np.diff(trace.offsets)
    known = np.minimum(P, L // block_size)
    want = -(-L // block_size)
    if np.array_equal(known, want) and np.array_equal(P, want):
        return trace
    offsets = np.zeros(len(trace) + 1, dtype=np.int64)
    np.cumsum(want, out=offsets[1:])
    blocks = np.empty(int(offsets[-1]), dtype=np.int32)
    fresh = want - known
    if trace.num_blocks + int(fresh.sum()) > np.iinfo(np.int32).max:
        raise ConfigError("too many blocks for one simulation (more than 2**31 ids)")
    keep = np.repeat(np.arange(len(trace)), known)
    within = np.arange(int(known.sum())) - np.repeat(np.cumsum(known) - known, known)
    blocks[offsets[:-1][keep] + within] = trace.blocks[trace.offsets[:-1][keep] + within]
    new = np.repeat(np.arange(len(trace)), fresh)
    within = np.arange(int(fresh.sum())) - np.repeat(np.cumsum(fresh) - fresh, fresh)
    blocks[offsets[:-1][new] + np.repeat(known, fresh) + within] = trace.num_blocks + np.arange(int(fresh.sum()))
    return Trace(offsets=offsets, blocks=blocks, input_length=L, output_length=trace.output_length,
                 timestamp=trace.timestamp, num_blocks=trace.num_blocks + int(fresh.sum()), block_size=block_size,
                 source=trace.source, format=trace.format)


#: per trace, its kernel layouts by (arrival order, block size, output KV, paged): the band's runs,
#: a load sweep's and a plan's simulations of one trace lay it out once
_LAYOUTS: "weakref.WeakKeyDictionary[Trace, dict]" = weakref.WeakKeyDictionary()
LAYOUTS_PER_TRACE = 4


def kernel_layout(trace: Trace, order: np.ndarray, block_size: int, output_kv: bool, paged: bool,
                  lookahead: int = 0) -> tuple[Trace, np.ndarray]:
    """(ext, P): the kernel's layout of `trace`'s requests in `order` (their arrival order), the
    same as decode_trace(hashed_prompts(trace.take(order)) if paged else trace.take(order)): each
    request's prompt ids (vLLM's pool, `paged`: its full blocks' ids and a fresh id for the
    partial last block), then its decode ids (`lookahead` more positions at its last token:
    speculative decoding's drafts and slots, decode_blocks); P the prompt block counts. Built in one pass of the
    core (serving/kernel/layout.c) and kept with the trace while it lives."""
    order = np.ascontiguousarray(order, dtype=np.int64)
    identity = bool(np.array_equal(order, np.arange(len(trace))))
    key = ("identity" if identity else hashlib.blake2b(order.tobytes(), digest_size=16).digest(), int(block_size),
           bool(output_kv), bool(paged), int(lookahead))
    cache = _LAYOUTS.setdefault(trace, {})
    if key not in cache:
        while len(cache) >= LAYOUTS_PER_TRACE:
            cache.pop(next(iter(cache)))
        cache[key] = _layout(trace, order, int(block_size), bool(output_kv), bool(paged), int(lookahead))
    return cache[key]


def _layout(trace: Trace, order: np.ndarray, block_size: int, output_kv: bool, paged: bool,
            lookahead: int = 0) -> tuple[Trace, np.ndarray]:
    L = np.ascontiguousarray(np.asarray(trace.input_length, dtype=np.int64)[order])
    O = np.ascontiguousarray(np.asarray(trace.output_length, dtype=np.int64)[order])
    known = np.diff(trace.offsets)[order]
    fresh = np.zeros_like(known)
    if paged:
        want = -(-L // block_size)
        known = np.minimum(known, L // block_size)
        fresh = want - known
        if trace.num_blocks + int(fresh.sum()) > np.iinfo(np.int32).max:
            raise ConfigError("too many blocks for one simulation (more than 2**31 ids)")
    P = (known + fresh).astype(np.int64)
    outputs = np.maximum(O, 1) + lookahead
    D = (np.maximum((L + outputs - 1 + block_size - 1) // block_size - (L + block_size - 1) // block_size, 0)
         if output_kv else np.zeros(len(trace), dtype=np.int64))
    prompt_ids = trace.num_blocks + int(fresh.sum())
    offsets = np.zeros(len(trace) + 1, dtype=np.int64)
    np.cumsum(P + D, out=offsets[1:])
    if offsets[-1] and prompt_ids + int(D.sum()) > np.iinfo(np.int32).max:
        raise ConfigError("too many blocks for one simulation (more than 2**31 ids with the decode blocks)")
    blocks = np.empty(int(offsets[-1]), dtype=np.int32)
    p, c = native.POINTER, native.COUNT
    native.function("kv_sim_layout", None, c, p, p, p, p, p, p, p, p, c, c)(
        len(trace), native.ptr(order), native.ptr(trace.offsets), native.ptr(trace.blocks),
        native.ptr(np.ascontiguousarray(known, dtype=np.int64)), native.ptr(np.ascontiguousarray(fresh, dtype=np.int64)),
        native.ptr(np.ascontiguousarray(D, dtype=np.int64)), native.ptr(offsets), native.ptr(blocks),
        trace.num_blocks, prompt_ids)
    for a in (offsets, blocks, L, O):
        a.flags.writeable = False
    timestamp = np.asarray(trace.timestamp, dtype=np.float64)[order]
    timestamp.flags.writeable = False
    ext = Trace(offsets=offsets, blocks=blocks, input_length=L, output_length=O, timestamp=timestamp,
                num_blocks=prompt_ids + int(D.sum()), block_size=block_size, source=trace.source, format=trace.format)
    return ext, P


def _outputs(O: np.ndarray, prefill_only: np.ndarray | None, order: np.ndarray) -> np.ndarray:
    """The kernel's O: the trace's outputs in kernel order, PREFILL_ONLY (sim.h) for SGLang's
    prefill-only requests."""
    if prefill_only is None or not np.any(prefill_only):
        return O
    return np.where(np.asarray(prefill_only, dtype=bool)[order], PREFILL_ONLY, O).astype(np.int64)


def decode_blocks(trace: Trace, block_size: int, output_kv: bool, lookahead: int = 0) -> np.ndarray:
    """Per request: the decode blocks its outputs need beyond its prompt's (at its last token:
    L + max(O, 1) - 1 tokens in KV, and `lookahead` more: speculative decoding's last step
    schedules its k draft tokens and reserves the drafter's slots beyond them); none without
    output KV."""
    if not output_kv:
        return np.zeros(len(trace), dtype=np.int64)
    L = np.asarray(trace.input_length, dtype=np.int64)
    outputs = np.maximum(np.asarray(trace.output_length, dtype=np.int64), 1) + lookahead
    return np.maximum((L + outputs - 1 + block_size - 1) // block_size - (L + block_size - 1) // block_size, 0)


def roomier(ext: Trace, calls: int, positions: int) -> Trace:
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


def id_spaces(ext: Trace, assigned: np.ndarray | None, instances: int, routed: int) -> np.ndarray:
    """Each instance's id space: exact when `assigned` (a fixed router) gives every request's
    instance (its requests' distinct ids), else an estimate, twice an even share plus the longest
    request, never more than the trace's ids. One instance needs no id map."""
    U = max(1, ext.num_blocks)
    if instances == 1:
        return np.array([U], dtype=np.int64)
    if assigned is not None and routed == instances:
        owner = np.repeat(assigned, np.diff(ext.offsets))
        pairs = np.sort(owner.astype(np.int64) * U + ext.blocks)  # (not np.unique: numpy 2.4's hashes, 15x slower)
        pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]]
        return np.maximum(np.bincount(pairs // U, minlength=instances), 1).astype(np.int64)
    longest = int(np.diff(ext.offsets).max(initial=1))
    return np.full(instances, min(U, 2 * -(-U // routed) + longest), dtype=np.int64)


def grown_state(make, capacity: int, base, params: dict, current, old_space: int, new_space: int, log_size: int | None):
    """`current` (an instance's policy state over `old_space` ids) as a state over `new_space` ids,
    every id keeping its entries, or None when the policy's state cannot be grown that way. A
    field over the ids (its length the id space's, in states made fresh at both sizes) keeps its
    first old_space entries and takes the fresh state's for the new ids; every other field must be
    the same in fresh states of both sizes (rings sized by the capacity are: growth waits until the
    id space passes 4 x the capacity, after which no ring's length follows it) and is copied."""
    if old_space <= 4 * capacity:
        return None
    states = []
    for space in (old_space, new_space):
        state = make(capacity, Sizing(base, space), **params)
        states.append(with_eviction_log(state, log_size) if log_size else state)
    fresh_old, fresh_new = states
    old_n, new_n = max(1, old_space), max(1, new_space)
    for name in current._fields:
        cur, a, b = getattr(current, name), getattr(fresh_old, name), getattr(fresh_new, name)
        same = lambda x, y: np.array_equal(x, y, equal_nan=x.dtype.kind == "f")  # noqa: E731
        if a.shape == b.shape and cur.shape == a.shape and same(a, b):
            b[...] = cur
        elif a.shape == (old_n,) and b.shape == (new_n,) and cur.shape == a.shape and same(b[:old_n], a):
            b[:old_n] = cur
        else:
            return None
    return fresh_new


class Growth:
    """kv_simulate's grow callback (sim.h SimGrow): an instance whose ids ran out gets a state over
    twice as many (at most every id of the trace), made and filled here (grown_state), where the
    run used to stop and run again with more room. An error in here is kept for run_once to raise."""

    def __init__(self, spec, capacity, params, states, records, io, spaces, bases, num_ids, log_size):
        self.spec, self.capacity, self.params = spec, capacity, params
        self.states, self.records, self.io, self.spaces, self.bases = states, records, io, spaces, bases
        self.num_ids, self.log_size = num_ids, log_size
        self.error, self.grown = None, 0

    def __call__(self, k: int, want: int) -> int:
        try:
            old = int(self.spaces[k])
            cap = min(int(want), self.num_ids)
            if cap <= old:
                return 0
            new = grown_state(self.spec.make_state, self.capacity, self.bases[k], self.params, self.states[k], old, cap,
                              self.log_size)
            if new is None:
                return 0
            self.states[k] = new
            self.records[k] = self.spec.compiled(new)
            address = native_address(self.records[k][1])
            self.io["states"][k] = address
            self.spaces[k] = cap
            self.grown += 1
            return address
        except BaseException as e:  # (an exception cannot cross the C frames: kept, raised after the run)
            self.error = e
            return 0


def grown_spaces(spaces: np.ndarray, out_of_ids: np.ndarray, status: np.ndarray, num_ids: int) -> np.ndarray:
    """The id spaces for the next run after a run stopped when the `out_of_ids` instances ran out
    of ids. An instance's ids grow about as requests arrive, so the one that ran out needs about
    its space x (requests / arrived so far); under a state-aware router every instance sees about
    as much, so all grow by that factor (x1.25 for margin, at least 2 for the ones that ran out):
    one more run, where doubling one instance at a time took up to instances x log2(ids / share)."""
    arrived = max(1, int(np.count_nonzero(status)))  # (the status of a request not arrived yet is 0)
    factor = max(1.0, 1.25 * status.size / arrived)
    grown = np.ceil(spaces * factor).astype(np.int64)
    grown[out_of_ids] = np.maximum(grown[out_of_ids], spaces[out_of_ids] * 2)
    return np.minimum(grown, max(1, num_ids))


@dataclass(frozen=True, eq=False)
class KernelRun:
    """One kernel run's settings (run_once's keywords; simulate builds one from its resolved
    configuration and replaces the time model, host terms and arrivals for its band's ends)."""

    policy: str
    capacity: int
    block_size: int
    time_model: TimeModel
    scheduler: object
    arrival_s: np.ndarray
    output_kv: bool = True
    params: dict | None = None
    instances: int = 1
    router: str | None = None
    router_options: dict | None = None
    router_lag_ms: float = 0.0
    seed: int = 0
    assigned: np.ndarray | None = None
    tiers: list | None = None
    tier_copies: str = "move"
    tier_overlap: bool = False
    block_bytes: int | None = None
    prefill_instances: int = 0
    transfer_s: np.ndarray | None = None
    local_ids: bool = True
    max_model_len: int | None = None
    kv_groups: list | None = None
    kv_retention: int | None = 0
    kv_engine: str = "vllm"
    host: HostTerms = NO_HOST
    closed: dict | None = None
    speculative: object = None
    draft_time_model: TimeModel | None = None
    prefill_only: np.ndarray | None = None
    lockstep: bool = False  # data parallelism: an MoE's DP ranks (the instances) step together (dataparallel.py)
    graph_tokens: int = 0  # with lockstep: the largest step a CUDA graph runs (the ranks pad to the largest count up to it)


def run_once(trace: Trace, run: KernelRun | None = None, **keywords) -> RawRun:
    """`instances` identical instances over `trace` with these arrivals, behind `router` (a
    state-aware router's name, or None: `assigned` gives each request's instance): the kernel's
    raw outputs in trace order. `run`: a KernelRun, or its fields as `keywords` (which replace
    `run`'s when both are given). local_ids=False keeps every instance on the trace's ids (the same
    results, more memory: tests compare the two). kv_groups (catalog/kv_groups.py's Groups, in
    vLLM's order): a hybrid model's layer groups under vLLM's hybrid KV cache manager
    (serving/kernel/hybrid.c; the vLLM style and policy vllm only), `capacity` block ids of its
    shared pool, prefix_cache_retention_interval kv_retention; with kv_engine "sglang", SGLang's
    UnifiedRadixCache (serving/kernel/sglang_hybrid.c; the SGLang style and policy radix only),
    `capacity` pages of its full-attention pool. host: what the host CPU adds per step and per token,
    and async scheduling (timing/host.py; its arrival delay is already in `arrival_s`, or in
    `closed`'s). closed: closed-loop arrivals (closed.py ClosedLoop.kernel_arrays, trace order:
    arrival holds the roots' times and `arrival_s` is not read); the RawRun's arrival_s are then the
    times requests arrived, and an `assigned` of -1 sends a request to the next instance in turn as
    it arrives (round-robin). speculative: a speculative.Speculative (the vLLM style: each decode step
    verifies k draft tokens; kernel/vllm.c, batch.c); draft_time_model: a draft model's own time
    model (its k passes a step; None: the head's fraction of the target's). prefill_only (trace
    order, the SGLang style): SGLang's prefill-only requests (max_new_tokens 0: one forward, nothing
    reserved for outputs; parallel sampling's first request, samples.py)."""
    r = KernelRun(**keywords) if run is None else replace(run, **keywords)
    k = _inputs(trace, r)
    cfg, fcfg = _settings(r, k)
    io = _io(r, k, cfg, fcfg)
    room = _room(r, k)
    states, pools = _runs(r, k, io, room)
    return _read_back(r, k, io, room, states, pools)


@dataclass
class _Inputs:
    """run_once's inputs in the kernel's terms: the policy, its layout of the trace, the groups."""

    spec: object
    params: dict
    n: int
    N: int
    routed: int
    arrival_s: np.ndarray
    order: np.ndarray
    radix: np.ndarray
    groups: np.ndarray
    spec_k: int
    spec_lookahead: int
    ext: Trace
    P: np.ndarray
    tm: np.ndarray
    route_bits: bool
    assigned_sorted: np.ndarray
    tiers: list
    names: list = field(default_factory=list)


def _inputs(trace: Trace, r: KernelRun) -> _Inputs:
    spec = get_policy(r.policy)
    if not spec.native:
        raise ConfigError(f"policy {spec.name!r} has no compiled operations for the simulator")
    params = spec.resolve(r.params or {})
    n, N = len(trace), r.instances
    arrival_s = r.arrival_s if r.closed is None else r.closed["arrival"]
    # (the kernel reads the open loop's arrivals in index order; the closed loop's releases are timed by it)
    order = np.argsort(arrival_s, kind="stable") if r.closed is None else np.arange(n)
    mode = kernel.mode(spec, r.scheduler.style)
    kv_groups, radix = r.kv_groups, np.zeros(0, dtype=np.int64)
    if kv_groups and r.kv_engine == "sglang":
        radix = radix_settings(kv_groups, r.capacity, r.block_size, spec.name, r.scheduler, r.tiers,
                               r.prefill_instances, r.output_kv)
        kv_groups = None
    groups = hybrid_groups(kv_groups, r.kv_retention, spec.name, r.scheduler.style, r.tiers, r.prefill_instances,
                           r.output_kv)
    spec_k = 0 if r.speculative is None else r.speculative.k
    spec_lookahead = 0 if r.speculative is None else r.speculative.lookahead
    ext, P = kernel_layout(trace, order, r.block_size, r.output_kv, mode == "MODE_PAGED", spec_k + spec_lookahead)
    # the routers' residency bits: a state-aware router, no tiers (their drain reads the eviction log)
    route_bits = (r.router is not None and not r.tiers and not len(groups) and not len(radix)
                  and spec.residency_bits and not REFERENCE_SCANS)
    assigned_sorted = (np.zeros(n, dtype=np.int64) if r.assigned is None
                       else np.ascontiguousarray(np.asarray(r.assigned, dtype=np.int64)[order]))
    return _Inputs(spec=spec, params=params, n=n, N=N, routed=r.prefill_instances if r.prefill_instances else N,
                   arrival_s=arrival_s, order=order, radix=radix, groups=groups, spec_k=spec_k,
                   spec_lookahead=spec_lookahead, ext=ext, P=P, tm=packed(r.time_model), route_bits=bool(route_bits),
                   assigned_sorted=assigned_sorted, tiers=list(r.tiers or []), names=kernel.counter_names())


def _settings(r: KernelRun, k: _Inputs) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's integer and float settings (cfg, fcfg)."""
    scheduler, speculative, tm = r.scheduler, r.speculative, k.tm
    host_slots = r.host.kernel_settings()
    router_index = -1 if r.router is None else routing.state_aware()[r.router][0]
    cfg = kernel.settings({
        "STYLE": ENGINE_STYLES.index(scheduler.style), "MAX_BATCHED": scheduler.max_num_batched_tokens,
        "MAX_SEQS": scheduler.max_num_seqs, "CHUNKED": _chunked(scheduler), "CAPACITY": r.capacity,
        "BLOCK_SIZE": r.block_size, "PRECHECK": int(not k.spec.request_level),
        "ONE_AT_A_TIME": int(tm[0] == KIND_INSTANT), "OUTPUT_KV": int(r.output_kv),
        "LPM": int(scheduler.schedule_policy == "lpm"), "CHUNK_SIZE": scheduler.chunked_prefill_size,
        "LPM_FCFS_ABOVE": scheduler.lpm_fcfs_above, "MAX_PREFILL": scheduler.max_prefill_tokens,
        "WINDOW": roofline_window(tm), "ROUTER": router_index, "TIER_OVERLAP": int(r.tier_overlap),
        "PREFILL_INSTANCES": r.prefill_instances, "INSTANCES": k.N, "REQUESTS": k.n,
        "CLIP_MAX_NEW": scheduler.clip_max_new_tokens, "SEED": r.seed, "LOCAL_IDS": int(r.local_ids),
        "MAX_MODEL_LEN": r.max_model_len or 0, "HYBRID_GROUPS": len(k.groups) // 4,
        "RETENTION": -1 if r.kv_retention is None else 0, "RADIX_HYBRID": int(len(k.radix) > 0),
        "TRACE_IDS": max(1, k.ext.num_blocks), "ROUTE_BITS": -1 if REFERENCE_SCANS else int(k.route_bits),
        "TRT_POLICY": ("guaranteed_no_evict", "max_utilization").index(scheduler.capacity_scheduler_policy),
        **host_slots["cfg"],
        "CLOSED": int(r.closed is not None),
        "SPEC_K": k.spec_k, "SPEC_LOOKAHEAD": k.spec_lookahead,
        "SPEC_DRAFT_SLOTS": 0 if speculative is None else speculative.draft_slots,
        "SPEC_EAGLE_DROP": int(speculative is not None and speculative.method in ("eagle", "mtp")),
        "DP_LOCKSTEP": int(r.lockstep), "DP_SYNC_INTERVAL": DP_SYNC_INTERVAL, "DP_GRAPH_TOKENS": r.graph_tokens,
    }, "cfg", np.int64)
    fcfg = kernel.settings({
        "RATIO_INIT": scheduler.init_new_token_ratio, "RATIO_MIN": scheduler.min_new_token_ratio,
        "RATIO_DECAY": scheduler.new_token_ratio_decay, "ROUTER_LAG_S": r.router_lag_ms / 1000.0,
        **host_slots["fcfg"],
        "SPEC_HEAD_FRACTION": 0.0 if speculative is None else speculative.head_fraction,
    }, "fcfg", np.float64)
    return cfg, fcfg


def _io(r: KernelRun, k: _Inputs, cfg: np.ndarray, fcfg: np.ndarray) -> dict:
    """The kernel's inputs and output arrays (sim.h SimIO), in arrival order."""
    n, N, T, ext, order = k.n, k.N, len(k.tiers), k.ext, k.order
    rparams = np.zeros(1) if r.router is None else routing.parameters(r.router, r.router_options)
    return {
        "offsets": ext.offsets, "blocks": ext.blocks, "P": k.P, "L": ext.input_length,
        "O": _outputs(ext.output_length, r.prefill_only, order),
        "arrival": np.ascontiguousarray(k.arrival_s[order], dtype=np.float64), "assigned": k.assigned_sorted,
        "transfer_s": (np.zeros(n) if r.transfer_s is None
                       else np.ascontiguousarray(np.asarray(r.transfer_s, dtype=np.float64)[order])),
        "tm": k.tm, "cfg": cfg, "fcfg": fcfg, "rparams": rparams,
        "scheduled_s": np.full(n, np.nan), "first_token_s": np.full(n, np.nan), "finish_s": np.full(n, np.nan),
        "hit_tokens": np.zeros(n, dtype=np.int64), "hit_blocks": np.zeros(n, dtype=np.int64),
        "preemptions": np.zeros(n, dtype=np.int64), "computed_total": np.zeros(n, dtype=np.int64),
        "status": np.zeros(n, dtype=np.int8), "instance": np.zeros(n, dtype=np.int64),
        "decode_instance": np.full(n, -1, dtype=np.int64), "tier_hits": np.zeros((n + 1) * (T + 1), dtype=np.int64),
        "counters": np.zeros(N * len(k.names), dtype=np.int64), "series": np.zeros(SERIES_POINTS * 6),
        "series_meta": np.zeros(2, dtype=np.int64), "itl": np.zeros(3 + ITL_BINS),
        "handles": np.zeros(ext.num_accesses + n + 1, dtype=np.int64), "end_s": np.zeros(1),
        "groups": k.groups, "hybrid_counters": np.zeros(N * len(HYBRID_COUNTERS), dtype=np.int64),
        "radix": k.radix, "radix_counters": np.zeros(N * len(RADIX_COUNTERS), dtype=np.int64),
        **_closed_arrays(r.closed, n), "arrived_s": np.zeros(n),
        "spec_accept": np.asarray(r.speculative.acceptance if r.speculative else [0.0], dtype=np.float64),
        "spec_accepted_at": np.zeros(max(k.spec_k, 1), dtype=np.int64),
        "tm_draft": (packed(r.draft_time_model) if r.draft_time_model is not None
                     else np.array([KIND_INSTANT], dtype=np.float64)),
    }


@dataclass
class _Room:
    """Each instance's id space and its policy state's room (pin_request calls, positions)."""

    spaces: np.ndarray
    calls: np.ndarray
    positions: np.ndarray
    use_map: bool
    log_size: int
    runs: int = 0


def _room(r: KernelRun, k: _Inputs) -> _Room:
    N, ext, assigned_sorted = k.N, k.ext, k.assigned_sorted
    live = bool((assigned_sorted < 0).any())  # (routed as they arrive: no exact id spaces before the run)
    spaces = (id_spaces(ext, assigned_sorted if r.router is None and not live else None, N, k.routed)
              if r.local_ids and N > 1 else np.full(N, max(1, ext.num_blocks), dtype=np.int64))
    use_map = r.local_ids and N > 1
    if use_map and r.router is not None:  # (past 4 x the capacity a state can grow in the run: Growth)
        spaces = np.maximum(spaces, min(max(1, ext.num_blocks), 4 * r.capacity + 1))
    # radix and belady: room for their requests, their decode blocks and one recomputation of
    # each (a state-aware router's share is unknown before the run: twice an even share)
    lengths = np.diff(ext.offsets)
    dec = lengths - k.P
    share = 1.0 if (r.router is None and not live) or N == 1 else min(1.0, 2.0 / N)
    calls = np.empty(N, dtype=np.int64)
    positions = np.empty(N, dtype=np.int64)
    for i in range(N):
        mine = assigned_sorted == i if r.router is None and not live else slice(None)
        calls[i] = int(2 * share * (len(lengths[mine]) + dec[mine].sum())) + 8
        positions[i] = int(2 * share * lengths[mine].sum()) + 8
    return _Room(spaces=spaces, calls=calls, positions=positions, use_map=use_map,
                 log_size=r.capacity + int(lengths.max(initial=0)) + 1)


def _runs(r: KernelRun, k: _Inputs, io: dict, room: _Room):
    """The kernel's runs: again with more room while a state ran out of it (the run is
    deterministic, so the result is the same). (states, tier pools) of the last."""
    from ..engine.tiers import Pools

    spec, N, ext, names = k.spec, k.N, k.ext, k.names
    logged = bool(k.tiers or k.route_bits)
    C = {name: i for i, name in enumerate(names)}
    while True:
        room.runs += 1
        states, records, bases = [], [], []
        for i in range(N):
            base = roomier(ext, int(room.calls[i]), int(room.positions[i])) if spec.sized_per_call else ext
            state = spec.make_state(r.capacity, Sizing(base, room.spaces[i]), **k.params)
            if logged:
                state = with_eviction_log(state, room.log_size)
            states.append(state)
            records.append(spec.compiled(state))
            bases.append(base)
        pools = Pools(k.tiers, N, ext.num_blocks, block_bytes=r.block_bytes, copies=r.tier_copies) if k.tiers else None
        if room.runs > 1:
            _fresh(io)
        counters = io["counters"].reshape(N, len(names))
        if spec.sized_per_call:
            counters[:, C["max_pin_calls"]], counters[:, C["max_positions"]] = room.calls, room.positions
        else:
            counters[:, C["max_pin_calls"]] = counters[:, C["max_positions"]] = -1
        io["states"] = np.array([native_address(rec) for _, rec in records], dtype=np.int64)
        io["state_ids"] = room.spaces if room.use_map else -room.spaces
        # an instance whose ids run out grows its state in the run (not the hybrid pools and trees)
        growth = (Growth(spec, r.capacity, k.params, states, records, io, room.spaces, bases, max(1, ext.num_blocks),
                         room.log_size if logged else None)
                  if room.use_map and not len(k.groups) and not len(k.radix) else None)
        kernel.run(io, records[0][0], None if pools is None else pools.record(), growth)
        if growth is not None and growth.error is not None:
            raise growth.error
        _check_run(r, k, counters, C)
        short = counters[:, C["state_out_of_room"]] != 0
        out_of_ids = counters[:, C["ids_out_of_room"]] != 0
        if not short.any() and not out_of_ids.any():
            return states, pools
        room.calls[short] *= 2
        room.positions[short] *= 2
        if out_of_ids.any():
            room.spaces = grown_spaces(room.spaces, out_of_ids, io["status"], ext.num_blocks)


def _fresh(io: dict) -> None:
    """The outputs of a run again from scratch (the first run's are fresh)."""
    for key in ("scheduled_s", "first_token_s", "finish_s"):
        io[key].fill(np.nan)
    for key in ("hit_tokens", "hit_blocks", "preemptions", "computed_total", "status", "instance", "tier_hits",
                "counters", "series", "series_meta", "itl", "handles", "end_s", "hybrid_counters",
                "radix_counters", "spec_accepted_at"):
        io[key].fill(0)
    io["decode_instance"].fill(-1)
    io["arrived_s"].fill(0)


def _check_run(r: KernelRun, k: _Inputs, counters: np.ndarray, C: dict) -> None:
    """A run's failures: a step or the clock out of range, a hybrid pool's error, a stall."""
    if counters[:, C["time_overflow"]].any():
        path = getattr(r.time_model, "path", None)  # a time-model file's values are named by the file
        where = f"{path}: " if isinstance(path, str) and not path.startswith("<") else ""
        raise ConfigError(f"{where}a step would take more than {kernel.MAX_STEP_S:g} s, or the simulated clock pass "
                          f"{kernel.MAX_TIME_S:g} s: the time model's overheads or latencies are too large "
                          "(--time-model, --step-overhead-ms) or the arrivals too far apart (--speedup, --rate)")
    failed = counters[:, C["hybrid_error"]]
    if failed.any():
        raise _hybrid_failure(int(failed[failed != 0][0]), len(k.radix) > 0, r.capacity, r.block_size)
    stuck = counters[:, C["stuck"]]
    if stuck.any():
        raise InvariantError(f"the simulator stalled with {int(stuck.sum())} running requests "
                             "that can no longer be scheduled")


def _read_back(r: KernelRun, k: _Inputs, io: dict, room: _Room, states: list, pools) -> RawRun:
    """The kernel's outputs as a RawRun, in trace order."""
    n, N, T, names = k.n, k.N, len(k.tiers), k.names
    policy_counters = {}
    if len(k.radix):  # (the radix state is not used: SGLang's trees' counters)
        for key, value in zip(RADIX_COUNTERS, io["radix_counters"].reshape(N, -1).sum(axis=0).tolist()):
            policy_counters[key] = int(value)
    elif len(k.groups):  # (the vllm state is not used: the hybrid pools' counters)
        for key, value in zip(HYBRID_COUNTERS, io["hybrid_counters"].reshape(N, -1).sum(axis=0).tolist()):
            policy_counters[key] = int(value)
    else:
        for st in states:
            for key, value in k.spec.read_state(st)[1].items():
                policy_counters[key] = policy_counters.get(key, 0) + value
    inv = np.empty(n, dtype=np.int64)
    inv[k.order] = np.arange(n)
    back = lambda a: a[inv]  # noqa: E731 - arrival order back to trace order
    counters = io["counters"].reshape(N, len(names))
    per_instance = [{key: value for key, value in zip(names, row.tolist()) if r.lockstep or key != "dummy_steps"}
                    for row in counters]
    names = [key for key in names if r.lockstep or key != "dummy_steps"]  # (only DP ranks in lockstep run dummy batches)
    merged = {key: (max if key in PEAKS else sum)(c[key] for c in per_instance) for key in names}
    meta = io["series_meta"]
    return RawRun(
        arrival_s=np.asarray(k.arrival_s, dtype=np.float64) if r.closed is None else back(io["arrived_s"]),
        scheduled_s=back(io["scheduled_s"]),
        first_token_s=back(io["first_token_s"]), finish_s=back(io["finish_s"]), hit_tokens=back(io["hit_tokens"]),
        hit_blocks=back(io["hit_blocks"]), preemptions=back(io["preemptions"]),
        computed_tokens=back(io["computed_total"]), status=back(io["status"]), counters=merged,
        series=io["series"].reshape(SERIES_POINTS, 6)[:meta[0]].copy(), end_s=float(io["end_s"][0]),
        policy_counters=policy_counters, itl=io["itl"], instance=back(io["instance"]), per_instance=per_instance,
        tier_hits=io["tier_hits"].reshape(n + 1, T + 1)[:n][inv], decode_instance=back(io["decode_instance"]),
        tier_totals=[] if pools is None else [pools.totals(t) for t in range(T)],
        id_spaces=room.spaces.tolist(), runs=room.runs, spec_accepted_at=io["spec_accepted_at"][:k.spec_k].copy(),
    )


def _closed_arrays(closed: dict | None, n: int) -> dict:
    """The kernel's closed-loop fields (release.c), in its order (the trace's: closed runs are not
    reordered), and the CLOSED setting; empty arrays for the open loop."""
    dtypes = {"waits": np.int64, "next_offsets": np.int64, "next_ids": np.int64, "next_delay_s": np.float64,
              "next_on_send": np.int8, "session": np.int64, "lane_queue": np.int64, "lane_delay_s": np.float64,
              "send_delay_s": np.float64}
    if closed is None:
        return {k: np.zeros(0, dtype=d) for k, d in dtypes.items()}
    out = {k: np.ascontiguousarray(closed[k], dtype=d) for k, d in dtypes.items()}
    m = out["next_ids"].shape[0]
    if out["waits"].shape != (n,) or out["next_offsets"].shape != (n + 1,) or out["session"].shape not in ((0,), (n,)) \
            or out["next_delay_s"].shape != (m,) or out["next_on_send"].shape != (m,) \
            or out["lane_delay_s"].shape != out["lane_queue"].shape or out["send_delay_s"].shape != (n,):
        raise ConfigError("closed-loop arrays must have one entry per request (or link)")
    return out


#: hybrid.h's pool counters, per instance
HYBRID_COUNTERS = ("admissions", "evictions", "duplicate_blocks", "oversize_requests", "resident_blocks")


def _hybrid_failure(code: int, sglang: bool, capacity: int, block_size: int) -> Exception:
    """The error a hybrid kernel's failure `code` means: SGLang's trees (sglang_hybrid.c) or vLLM's
    hybrid pools (hybrid.c)."""
    if sglang:
        if code == -1:
            return MemoryError("hybrid semantics: the simulator could not allocate SGLang's trees")
        return InvariantError("hybrid semantics: SGLang's tree " + (
            "found no Mamba state slot to free (SGLang asserts there too)" if code == -2 else
            "refused its settings" if code == -4 else
            "could not fit a prefill batch its budgets admitted (a bug)" if code == -5 else
            "disagrees with its pools after the run (a bug)" if code == -3 else f"failed (code {code})"))
    if code == -1:
        return MemoryError("hybrid semantics: the simulator could not allocate its pools")
    if code == -2:
        return ConfigError(f"hybrid semantics: the simulator's pool refuses a capacity of {capacity:,} block "
                           f"ids at {block_size}-token blocks (at most 2**31 - 2 ids and 2**24 tokens a block)")
    return InvariantError(f"hybrid semantics: the simulator's pool failed (code {code}: "
                          f"{'a hash id repeated within a hit' if code == -4 else 'its free queue ran dry'})")


#: sglang_hybrid.c's tree counters, per instance (policies/radix_hybrid.py COUNTERS, then its sizes)
RADIX_COUNTERS = ("admissions", "evictions", "swa_evictions", "mamba_evictions", "evicted_nodes", "node_splits",
                  "rejected", "oversize_requests", "resident_blocks", "swa_resident_pages", "mamba_states")


def radix_settings(kv_groups, full_pages: int, block_size: int, policy: str, scheduler, tiers, prefill_instances: int,
                   output_kv: bool) -> np.ndarray:
    """The kernel's `radix` array (policies/radix_hybrid.h RH_SETTINGS) for SGLang's UnifiedRadixCache
    over `kv_groups`, refusing what the simulator's SGLang trees do not model."""
    from ..hybrid.unified_radix import UnifiedRadix, compiled_settings

    from .semantics import unmodelled

    why = unmodelled(policy, scheduler.style, tiers, prefill_instances > 0, output_kv)
    if why:
        raise ConfigError("the simulator's SGLang hybrid trees do not model " + "; ".join(why)
                          + " (kv_semantics='full' serves every layer as full attention)")
    try:
        spec = UnifiedRadix(list(kv_groups), block_size, full_pages=full_pages, chunk_tokens=None)
    except ValueError as e:
        raise ConfigError(f"kv_groups: {e}") from None
    return compiled_settings(spec)  # (chunk -1: the scheduler cuts the chunks)


def hybrid_groups(kv_groups, retention, policy: str, style: str, tiers, prefill_instances: int,
                  output_kv: bool) -> np.ndarray:
    """The kernel's `groups` array (the spec groups' kinds, then their copies, windows and chunks;
    empty: full semantics), refusing what the simulator's hybrid manager does not model."""
    if not kv_groups:
        return np.zeros(0, dtype=np.int64)
    from ..hybrid.coordinator import KIND_CODES, check_groups

    from .semantics import unmodelled

    kv_groups = check_groups(kv_groups, retention)
    why = unmodelled(policy, style, tiers, prefill_instances > 0, output_kv)
    if why:
        raise ConfigError("the simulator's hybrid manager does not model " + "; ".join(why)
                          + " (kv_semantics='full' serves every layer as full attention)")
    return np.array([[KIND_CODES[g.kind], g.copies, g.window or 0, g.chunk or 0] for g in kv_groups],
                    dtype=np.int64).T.ravel()


def native_address(record: np.ndarray) -> int:
    return record.ctypes.data
