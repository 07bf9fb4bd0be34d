"""One simulation run: a trace, its arrivals and every setting turned into the compiled loop's
inputs (serving/kernel), run, and read back as a RawRun in trace order.

Each instance's policy state is sized by the block ids routed to it (the kernel gives every
instance its own compact ids): exactly, for routers fixed before the run; for state-aware
routers, an estimate that a run which outgrows it doubles, running again (the run is
deterministic, so the result is the same). radix and belady also grow with every pin_request, and
are sized the same way (docs/scaling.md, "Memory").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError, InvariantError
from ..policies.base import with_eviction_log
from ..policies.registry import get_policy
from ..trace.model import Trace
from . import kernel, routing
from .timing import KIND_INSTANT, TimeModel, packed, roofline_window

#: Policies whose start is all or nothing inside the policy (vllm, radix): the kernel asks them;
#: for every other policy it checks first that the start fits beside the held blocks.
REQUEST_LEVEL = ("vllm", "radix")
#: Policies whose compiled state grows with every pin_request (radix: nodes and an arena;
#: belady: heap entries), sized by the trace it is built from.
SIZED_PER_CALL = ("radix", "belady")
SERIES_POINTS = 4096
ITL_BINS = 23100  # up to 1e-6 s x 1.001^23099, about 1e4 s; longer gaps count in the last bin
#: Counters that are peaks (the cluster's is the largest instance's), not sums.
PEAKS = {"peak_held_blocks", "peak_running", "peak_waiting", "max_pin_calls", "max_positions"}


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
        pairs = np.unique(owner.astype(np.int64) * U + ext.blocks)
        return np.maximum(np.bincount(pairs // U, minlength=instances), 1).astype(np.int64)
    longest = int(np.diff(ext.offsets).max(initial=1))
    return np.full(instances, min(U, 2 * -(-U // routed) + longest), dtype=np.int64)


def run_once(trace: Trace, *, policy: str, capacity: int, block_size: int, time_model: TimeModel, scheduler,
             arrival_s: np.ndarray, output_kv: bool = True, params: dict | None = None, instances: int = 1,
             router: str | None = None, router_options: dict | None = None, router_lag_ms: float = 0.0,
             seed: int = 0, assigned: np.ndarray | None = None, tiers: list | None = None, tier_copies: str = "move",
             tier_overlap: bool = False, block_bytes: int | None = None, prefill_instances: int = 0,
             transfer_s: np.ndarray | None = None, local_ids: bool = True, max_model_len: int | None = None,
             kv_groups: list | None = None, kv_retention: int | None = 0, kv_engine: str = "vllm",
             speculative=None, draft_time_model: TimeModel | None = None) -> RawRun:
    """`instances` identical instances over `trace` with these arrivals, behind `router` (a
    state-aware router's name, or None: `assigned` gives each request's instance): the kernel's
    raw outputs in trace order. local_ids=False keeps every instance on the trace's ids (the same
    results, more memory: tests compare the two). kv_groups (analysis/kv_groups.py's Groups, in
    vLLM's order): a hybrid model's layer groups under vLLM's hybrid KV cache manager
    (serving/kernel/hybrid.c; the vLLM style and policy vllm only), `capacity` block ids of its
    shared pool, prefix_cache_retention_interval kv_retention; with kv_engine "sglang", SGLang's
    UnifiedRadixCache (serving/kernel/sglang_hybrid.c; the SGLang style and policy radix only),
    `capacity` pages of its full-attention pool. speculative: a speculative.Speculative (the
    vLLM style: each decode step verifies k draft tokens; kernel/vllm.c, batch.c); draft_time_model:
    a draft model's own time model (its k passes a step; None: the head's fraction of the target's)."""
    from ..engine.tiers import Pools

    spec = get_policy(policy)
    if not spec.native:
        raise ConfigError(f"policy {spec.name!r} has no compiled operations for the simulator")
    params = spec.resolve(params or {})
    n, N = len(trace), instances
    routed = prefill_instances if prefill_instances else N
    order = np.argsort(arrival_s, kind="stable")
    sorted_trace = trace.take(order) if n and np.any(order != np.arange(n)) else trace
    mode = kernel.mode(spec, scheduler.style)
    radix = np.zeros(0, dtype=np.int64)
    if kv_groups and kv_engine == "sglang":
        radix = radix_settings(kv_groups, capacity, block_size, spec.name, scheduler, tiers, prefill_instances,
                               output_kv)
        kv_groups = None
    groups = hybrid_groups(kv_groups, kv_retention, spec.name, scheduler.style, tiers, prefill_instances, output_kv)
    spec_k = 0 if speculative is None else speculative.k
    spec_lookahead = 0 if speculative is None else speculative.lookahead
    ext, P = decode_trace(hashed_prompts(sorted_trace, block_size) if mode == "MODE_PAGED" else sorted_trace,
                          block_size, output_kv, spec_k + spec_lookahead)
    tm = packed(time_model)
    router_index, rparams = -1, np.zeros(1)
    if router is not None:
        router_index = routing.state_aware()[router][0]
        rparams = routing.parameters(router, router_options)
    assigned_sorted = (np.zeros(n, dtype=np.int64) if assigned is None
                       else np.ascontiguousarray(np.asarray(assigned, dtype=np.int64)[order]))
    cfg = kernel.settings({
        "STYLE": 0 if scheduler.style == "vllm" else 1, "MAX_BATCHED": scheduler.max_num_batched_tokens,
        "MAX_SEQS": scheduler.max_num_seqs, "CHUNKED": int(scheduler.chunked_prefill), "CAPACITY": capacity,
        "BLOCK_SIZE": block_size, "PRECHECK": int(spec.name not in REQUEST_LEVEL),
        "ONE_AT_A_TIME": int(tm[0] == KIND_INSTANT), "OUTPUT_KV": int(output_kv),
        "LPM": int(scheduler.schedule_policy == "lpm"), "CHUNK_SIZE": scheduler.chunked_prefill_size,
        "LPM_FCFS_ABOVE": scheduler.lpm_fcfs_above, "MAX_PREFILL": scheduler.max_prefill_tokens,
        "WINDOW": roofline_window(tm), "ROUTER": router_index, "TIER_OVERLAP": int(tier_overlap),
        "PREFILL_INSTANCES": prefill_instances, "INSTANCES": N, "REQUESTS": n,
        "CLIP_MAX_NEW": scheduler.clip_max_new_tokens, "SEED": seed, "LOCAL_IDS": int(local_ids),
        "MAX_MODEL_LEN": max_model_len or 0, "HYBRID_GROUPS": len(groups) // 4,
        "RETENTION": -1 if kv_retention is None else 0, "RADIX_HYBRID": int(len(radix) > 0),
        "SPEC_K": spec_k, "SPEC_LOOKAHEAD": spec_lookahead,
        "SPEC_DRAFT_SLOTS": 0 if speculative is None else speculative.draft_slots,
        "SPEC_EAGLE_DROP": int(speculative is not None and speculative.method in ("eagle", "mtp")),
    }, "cfg", np.int64)
    fcfg = kernel.settings({
        "RATIO_INIT": scheduler.init_new_token_ratio, "RATIO_MIN": scheduler.min_new_token_ratio,
        "RATIO_DECAY": scheduler.new_token_ratio_decay, "ROUTER_LAG_S": router_lag_ms / 1000.0,
        "SPEC_HEAD_FRACTION": 0.0 if speculative is None else speculative.head_fraction,
    }, "fcfg", np.float64)
    tiers = list(tiers or [])
    T = len(tiers)
    names = kernel.counter_names()
    C = {name: k for k, name in enumerate(names)}
    io = {
        "offsets": ext.offsets, "blocks": ext.blocks, "P": P, "L": np.asarray(sorted_trace.input_length, dtype=np.int64),
        "O": np.asarray(sorted_trace.output_length, dtype=np.int64),
        "arrival": np.ascontiguousarray(arrival_s[order], dtype=np.float64), "assigned": assigned_sorted,
        "transfer_s": (np.zeros(n) if transfer_s is None else np.ascontiguousarray(np.asarray(transfer_s, dtype=np.float64)[order])),
        "tm": tm, "cfg": cfg, "fcfg": fcfg, "rparams": rparams,
        "scheduled_s": np.full(n, np.nan), "first_token_s": np.full(n, np.nan), "finish_s": np.full(n, np.nan),
        "hit_tokens": np.zeros(n, dtype=np.int64), "hit_blocks": np.zeros(n, dtype=np.int64),
        "preemptions": np.zeros(n, dtype=np.int64), "computed_total": np.zeros(n, dtype=np.int64),
        "status": np.zeros(n, dtype=np.int8), "instance": np.zeros(n, dtype=np.int64),
        "decode_instance": np.full(n, -1, dtype=np.int64), "tier_hits": np.zeros((n + 1) * (T + 1), dtype=np.int64),
        "counters": np.zeros(N * len(names), dtype=np.int64), "series": np.zeros(SERIES_POINTS * 6),
        "series_meta": np.zeros(2, dtype=np.int64), "itl": np.zeros(3 + ITL_BINS),
        "handles": np.zeros(ext.num_accesses + n + 1, dtype=np.int64), "end_s": np.zeros(1),
        "groups": groups, "hybrid_counters": np.zeros(N * len(HYBRID_COUNTERS), dtype=np.int64),
        "radix": radix, "radix_counters": np.zeros(N * len(RADIX_COUNTERS), dtype=np.int64),
        "spec_accept": np.asarray(speculative.acceptance if speculative else [0.0], dtype=np.float64),
        "spec_accepted_at": np.zeros(max(spec_k, 1), dtype=np.int64),
        "tm_draft": packed(draft_time_model) if draft_time_model is not None else np.array([KIND_INSTANT], dtype=np.float64),
    }
    spaces = (id_spaces(ext, assigned_sorted if router is None else None, N, routed) if local_ids and N > 1
              else np.full(N, max(1, ext.num_blocks), dtype=np.int64))
    use_map = local_ids and N > 1
    # radix and belady: room for their requests, their decode blocks and one recomputation of
    # each (a state-aware router's share is unknown before the run: twice an even share)
    lengths = np.diff(ext.offsets)
    dec = lengths - P
    share = 1.0 if router is None or N == 1 else min(1.0, 2.0 / N)
    calls = np.empty(N, dtype=np.int64)
    positions = np.empty(N, dtype=np.int64)
    for k in range(N):
        mine = assigned_sorted == k if router is None else slice(None)
        calls[k] = int(2 * share * (len(lengths[mine]) + dec[mine].sum())) + 8
        positions[k] = int(2 * share * lengths[mine].sum()) + 8
    log_size = capacity + int(lengths.max(initial=0)) + 1
    runs = 0
    while True:
        runs += 1
        make = spec.make_state
        states, records = [], []
        for k in range(N):
            base = roomier(ext, int(calls[k]), int(positions[k])) if spec.name in SIZED_PER_CALL else ext
            state = make(capacity, Sizing(base, spaces[k]), **params)
            if tiers:
                state = with_eviction_log(state, log_size)
            states.append(state)
            records.append(spec.compiled(state))
        pools = Pools(tiers, N, ext.num_blocks, block_bytes=block_bytes, copies=tier_copies) if tiers else None
        for key in ("scheduled_s", "first_token_s", "finish_s"):
            io[key].fill(np.nan)
        for key in ("hit_tokens", "hit_blocks", "preemptions", "computed_total", "status", "instance", "tier_hits",
                    "counters", "series", "series_meta", "itl", "handles", "end_s", "hybrid_counters",
                    "radix_counters", "spec_accepted_at"):
            io[key].fill(0)
        io["decode_instance"].fill(-1)
        counters = io["counters"].reshape(N, len(names))
        if spec.name in SIZED_PER_CALL:
            counters[:, C["max_pin_calls"]], counters[:, C["max_positions"]] = calls, positions
        else:
            counters[:, C["max_pin_calls"]] = counters[:, C["max_positions"]] = -1
        io["states"] = np.array([native_address(r) for _, r in records], dtype=np.int64)
        io["state_ids"] = spaces if use_map else -spaces
        kernel.run(io, records[0][0], None if pools is None else pools.record())
        if counters[:, C["time_overflow"]].any():
            raise ConfigError(f"a step would take more than {kernel.MAX_STEP_S:g} s, or the simulated clock pass "
                              f"{kernel.MAX_TIME_S:g} s: the time model's overheads or latencies are too large "
                              "(--time-model, --step-overhead-ms) or the arrivals too far apart (--speedup, --rate)")
        failed = counters[:, C["hybrid_error"]]
        if failed.any():
            raise _hybrid_failure(int(failed[failed != 0][0]), len(radix) > 0, capacity, block_size)
        stuck = counters[:, C["stuck"]]
        if stuck.any():
            raise InvariantError(f"the simulator stalled with {int(stuck.sum())} running requests "
                                 "that can no longer be scheduled")
        short = counters[:, C["state_out_of_room"]] != 0
        out_of_ids = counters[:, C["ids_out_of_room"]] != 0
        if not short.any() and not out_of_ids.any():
            break
        calls[short] *= 2
        positions[short] *= 2
        spaces[out_of_ids] = np.minimum(spaces[out_of_ids] * 2, max(1, ext.num_blocks))
    policy_counters = {}
    if len(radix):  # (the radix state is not used: SGLang's trees' counters)
        for key, value in zip(RADIX_COUNTERS, io["radix_counters"].reshape(N, -1).sum(axis=0).tolist()):
            policy_counters[key] = int(value)
    elif len(groups):  # (the vllm state is not used: the hybrid pools' counters)
        for key, value in zip(HYBRID_COUNTERS, io["hybrid_counters"].reshape(N, -1).sum(axis=0).tolist()):
            policy_counters[key] = int(value)
    else:
        for st in states:
            for key, value in spec.read_state(st)[1].items():
                policy_counters[key] = policy_counters.get(key, 0) + value
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    back = lambda a: a[inv]  # noqa: E731 - arrival order back to trace order
    per_instance = [dict(zip(names, row.tolist())) for row in counters]
    merged = {key: (max if key in PEAKS else sum)(c[key] for c in per_instance) for key in names}
    meta = io["series_meta"]
    return RawRun(
        arrival_s=np.asarray(arrival_s, dtype=np.float64), scheduled_s=back(io["scheduled_s"]),
        first_token_s=back(io["first_token_s"]), finish_s=back(io["finish_s"]), hit_tokens=back(io["hit_tokens"]),
        hit_blocks=back(io["hit_blocks"]), preemptions=back(io["preemptions"]),
        computed_tokens=back(io["computed_total"]), status=back(io["status"]), counters=merged,
        series=io["series"].reshape(SERIES_POINTS, 6)[:meta[0]].copy(), end_s=float(io["end_s"][0]),
        policy_counters=policy_counters, itl=io["itl"], instance=back(io["instance"]), per_instance=per_instance,
        tier_hits=io["tier_hits"].reshape(n + 1, T + 1)[:n][inv], decode_instance=back(io["decode_instance"]),
        tier_totals=[] if pools is None else [pools.totals(t) for t in range(T)],
        id_spaces=spaces.tolist(), runs=runs, spec_accepted_at=io["spec_accepted_at"][:spec_k].copy(),
    )


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
    from ..policies.radix_hybrid import UnifiedRadix, compiled_settings

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
    from ..policies.hybrid import KIND_CODES, check_groups

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
