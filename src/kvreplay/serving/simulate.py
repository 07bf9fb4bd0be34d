"""``kvreplay.simulate``: engine instances serving a trace in simulated time.

simulate() resolves the configuration (config.resolve: block size, KV and weights dtypes, pool,
tiers), the time model, the arrivals and the router, runs the compiled loop (run.py) and returns a
SimReport (report.py); load_sweep() runs a grid of them. The rules (arrivals, schedulers, the pool,
time) are in docs/serving.md, docs/timing.md, docs/host.md and docs/engines.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np

from ..checks import items, number
from ..engine.misses import CODE
from ..engine.replay import as_trace
from ..errors import ConfigError
from ..policies.registry import get_policy
from ..progress import labelled, tell
from ..units import ms_arg
from ..trace.model import Trace, ragged_take
from . import closed, closed_stats, dataparallel, limits, routing
from .config import resolve
from .deployment import Deployment, SimConfig
from .report import FINISHED, SimReport
from .run import KernelRun, decode_blocks, run_once
from . import beam as beam_search
from .samples import check_applies, fan_out, private_tails, release_links, samples_per_request, summarize
from .semantics import choose
from .speculative import resolve as resolve_speculative
from .speculative import draft_cost_note, pool_with_drafter
from .speculative import summary as speculative_summary
from .timing import load_time_model
from .timing.host import band_end as host_band
from .timing.host import resolve as host_resolve
from .timing.host import graph_ceiling, with_cuda_graphs
from .timing.models import RooflineTimeModel
from .timing.profiles import DynamoNpzProfile, PolynomialProfile
from .warmup import judged_mask
from .warmup import resolve as resolve_warmup
from .timing.pipeline import pipelined
from .styles import ENGINE_STYLES, STYLE_DEFAULTS, STYLE_POLICY

#: TensorRT-LLM's capacity scheduler policies and context chunking policies (serving/inflight.py)
TRT_CAPACITY_POLICIES = ("guaranteed_no_evict", "max_utilization")
TRT_CHUNKING_POLICIES = ("first_come_first_served", "equal_progress")
#: a scheduler's token and sequence budgets: the kernel keeps them in int32 (more than any step
#: can hold: a run's block positions are at most limits.MAX_POSITIONS too)
MAX_BUDGET = 2 ** 31 - 1


@dataclass(frozen=True)
class Scheduler:
    """Scheduler settings (docs/engines.md, "Schedulers", gives each default's source)."""

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
    # TensorRT-LLM only (max_num_seqs is its max_batch_size, max_num_batched_tokens its max_num_tokens)
    capacity_scheduler_policy: str = "guaranteed_no_evict"
    context_chunking_policy: str = "first_come_first_served"

    @classmethod
    def for_style(cls, style: str = "vllm", **given) -> "Scheduler":
        """A style's scheduler: its own defaults (STYLE_DEFAULTS) where a setting is not given."""
        return cls(style=style, **{**STYLE_DEFAULTS.get(style, {}), **given})

    def __post_init__(self):
        if self.style not in ENGINE_STYLES:
            raise ConfigError(f"unknown engine style {self.style!r} (known: {', '.join(ENGINE_STYLES)})")
        for name in ("max_num_batched_tokens", "max_num_seqs", "chunked_prefill_size", "max_prefill_tokens",
                     "clip_max_new_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_BUDGET:
                raise ConfigError(f"{name} (--{name.replace('_', '-')}) must be a whole number from 1 to "
                                  f"{MAX_BUDGET:,}, got {v!r}")
        if self.schedule_policy not in ("fcfs", "lpm"):
            raise ConfigError(f"unknown SGLang schedule policy {self.schedule_policy!r} (known: fcfs, lpm)")
        if self.capacity_scheduler_policy not in TRT_CAPACITY_POLICIES:
            raise ConfigError(f"unknown TensorRT-LLM capacity scheduler policy {self.capacity_scheduler_policy!r} "
                              f"(known: {', '.join(TRT_CAPACITY_POLICIES)})")
        if self.context_chunking_policy not in TRT_CHUNKING_POLICIES:
            raise ConfigError(f"unknown TensorRT-LLM context chunking policy {self.context_chunking_policy!r} "
                              f"(known: {', '.join(TRT_CHUNKING_POLICIES)})")
        if self.style != "trtllm" and (self.capacity_scheduler_policy != "guaranteed_no_evict"
                                       or self.context_chunking_policy != "first_come_first_served"):
            raise ConfigError("capacity_scheduler_policy and context_chunking_policy are TensorRT-LLM's: "
                              "engine_style='trtllm'")

    def to_dict(self) -> dict:
        out = {"style": self.style, "max_num_batched_tokens": self.max_num_batched_tokens,
               "max_num_seqs": self.max_num_seqs, "chunked_prefill": self.chunked_prefill}
        if self.style == "sglang":
            out.update(schedule_policy=self.schedule_policy, chunked_prefill_size=self.chunked_prefill_size,
                       max_prefill_tokens=self.max_prefill_tokens, lpm_fcfs_above=self.lpm_fcfs_above,
                       init_new_token_ratio=self.init_new_token_ratio, min_new_token_ratio=self.min_new_token_ratio,
                       new_token_ratio_decay=self.new_token_ratio_decay)
        if self.style == "trtllm":  # (its names for them too)
            out.update(capacity_scheduler_policy=self.capacity_scheduler_policy, max_batch_size=self.max_num_seqs,
                       max_num_tokens=self.max_num_batched_tokens, enable_chunked_context=self.chunked_prefill,
                       context_chunking_policy=self.context_chunking_policy if self.chunked_prefill else None)
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
        return _within_clock(np.cumsum(gaps), f"rate {rate!r}")
    speedup = 1.0 if speedup is None else speedup
    if isinstance(speedup, bool) or not isinstance(speedup, (int, float)) or not speedup > 0 or speedup == float("inf"):
        raise ConfigError(f"speedup must be a positive number, got {speedup!r}")
    ts = np.asarray(trace.timestamp, dtype=np.float64)
    if not n:
        return ts
    return _within_clock((ts - ts.min()) / 1000.0 / speedup, f"speedup {speedup!r}")


def arrival_times(trace: Trace, *, speedup=None, rate=None, seed: int = 0, rate_profile=None):
    """(arrival seconds in trace order, the rate profile's name or None): `arrivals`, reshaped by
    `rate_profile` (profile.py) when one is given. What simulate() serves, and what plan's floors
    and windows are cut from before any run."""
    arrival_s = arrivals(trace, speedup=speedup, rate=rate, seed=seed)
    if rate_profile is None:
        return arrival_s, None
    from .profile import load_profile, reshape

    points, name = load_profile(rate_profile)
    return reshape(arrival_s, points), name


def _within_clock(arrival_s: np.ndarray, what: str) -> np.ndarray:
    """Arrivals the simulated clock can hold (kernel.MAX_TIME_S), else refused naming the load."""
    from .kernel import MAX_TIME_S

    last = float(arrival_s.max()) if arrival_s.size else 0.0
    if not last <= MAX_TIME_S / 10:
        raise ConfigError(f"{what} puts the last arrival at {last:g} s, beyond the {MAX_TIME_S / 10:g} s a run may "
                          "span: give a larger --speedup or --rate")
    return arrival_s


def tier_summary(tiers, raw, block_size, prompt_tokens, block_bytes, copies, overlap) -> dict:
    """Hit tokens per tier at first schedule (HBM first), over the finished requests."""
    from ..engine.tiers import split_by_tier, tier_rows
    from .report import FINISHED

    ok = raw.status == FINISHED
    per_request = split_by_tier(tiers, raw.tier_hits, raw.hit_blocks, raw.hit_tokens, block_size)
    return {"copies": copies, "overlap": overlap, "load_s": raw.counters.get("load_us", 0) / 1e6,
            "block_bytes": block_bytes,
            "tiers": tier_rows(tiers, per_request, ok, prompt_tokens, raw.tier_totals, block_bytes),
            "tokens_per_tier": per_request}


def simulate(trace, policy: str | None = None, capacity=None, block_size: int | None = None, **options):
    """Serve `trace` on one simulated engine instance (or `instances` identical ones behind
    `router`: one of routing.names()) and return a SimReport: a thin layer that gathers the
    keywords into a SimConfig (serving/deployment.py; any keyword no group takes is the policy's
    parameter) and serves it (:func:`serve`).

    policy: the prefix cache's policy (default: vllm for engine_style "vllm", radix for "sglang",
        trtllm for "trtllm": TensorRT-LLM's in-flight batching scheduler, serving/inflight.py, which
        serves its own block reuse only and needs the pool as `capacity`).
    capacity: the KV pool in blocks, or a size ("80GiB", with `model`); running requests and the
        prefix cache share it; default: what `gpu` x `tp` have left after `model`'s weights at
        `gpu_memory_utilization`. kv_dtype / kv_layers: how `model`'s KV is stored (config.resolve
        sizes the pool, the tiers and the time model's KV reads with them). weights_dtype: `model`'s
        weights, bf16 (default), fp16, fp8 (fp8 GEMMs) or int4 (weight-only, bf16 GEMMs): the
        weights the pool on `gpu` is sized after, and the roofline's weight bytes and compute peak;
        refused on a GPU that cannot run it (fp8 without FP8 tensor cores: A100).
    time_model: "instant", "roofline" (needs model and gpu), a Dynamo profile "FILE.npz", a
        polynomial "FILE.json", or a TimeModel.
    host: what the host CPU adds outside the GPU's steps (timing/host.py): "vllm" (vLLM 0.33.0's
        API server, engine core and async scheduling, fitted on measured serving runs), "vllm-sync"
        (the same without async scheduling: vLLM before 0.14, or --no-async-scheduling), "none",
        or HostTerms; default: "vllm" with the calibrated roofline, "none" with any other time
        model (a measured profile holds what it measured).
    speedup / rate: arrivals: the trace's timestamps divided by `speedup`, or a Poisson process of
        `rate` requests/s (seeded by `seed`). rate_profile: "diurnal", a FILE or (fraction,
        multiplier) points: the arrivals reshaped so their rate follows it over the span (profile.py).
    scheduler: a Scheduler (its style must match engine_style); default: engine_style's defaults.
    output_kv: generated tokens fill KV blocks (False: only prompts take room, as the sequential
        replay assumes).
    compare_sequential: also replay the trace sequentially (same policy, capacity) for comparison.
    instances / router / router_lag_ms / router_options: a cluster (routing/).
    pp: pipeline stages (vLLM's --pipeline-parallel-size), each on `tp` GPUs: the pool is the
        smallest stage's, a step crosses pp - 1 stage-to-stage hops (timing/pipeline.py).
    dp / enable_expert_parallel: vLLM's --data-parallel-size and --enable-expert-parallel
        (dataparallel.py): `dp` ranks of `tp` GPUs behind vLLM's rank choice (the vllm-dp router),
        an MoE's in lockstep with its experts split over the DP x TP GPUs; excludes instances,
        router, router_lag_ms, pp and disaggregation.
    tiers: tiers below HBM ("dram=64GiB@64GB/s,ssd=2TiB@7GB/s", "hbm=..." sets the pool; or a
        list of tiers.Tier); global_store: "SIZE@BANDWIDTH", a tier every instance shares;
        tier_copies "move" | "keep"; tier_overlap: loads overlap compute (engine/tiers.py).
    band_runs: with the calibrated roofline, also run the trace at both ends of its error band
        (False: the one run; kvreplay plan passes a band's end as the time model itself).
    max_model_len: the context limit: a request whose prompt + outputs exceed it is refused at
        arrival, before routing, and counted apart (vLLM's frontend refuses prompt + max_tokens >
        max_model_len). Default: `model`'s catalog value (vLLM's derivation from its config.json);
        none without a model.
    kv_semantics: a hybrid `model`'s layer groups (sliding window, chunked local, Mamba): "hybrid" serves
        them with vLLM 0.33.0's hybrid KV cache manager (policy vllm, the vLLM style; a block id
        holds one group's layers, so a size or the GPU memory holds more of them), "full" every
        layer as full attention, "auto" (default) hybrid where vLLM uses it by default and the
        simulator models it (serving/semantics.py), else full; the report's kv_semantics says which.
    kv_cache_memory / num_gpu_blocks_override: vLLM's kv_cache_memory_bytes (bytes or a size such
        as "20GiB": the KV memory per GPU instead of the profiled figure) and num_gpu_blocks_override
        (the block count, applied last); each needs `gpu` and `model` and excludes `capacity`. The
        pool on `gpu` is vLLM 0.33.0's budget (timing/memory.py): its activation and sampler
        peaks follow the scheduler's max_num_batched_tokens and max_num_seqs; enforce_eager
        (vLLM's --enforce-eager) leaves the CUDA graphs' memory out of it; language_model_only (vLLM's
        --language-model-only) serves a multimodal model as text only (no vision tower loaded, no
        encoder profiled). With engine_style "sglang" the pool on `gpu` is SGLang 0.5.23's instead
        (timing/sglang_memory.py): mem_fraction_static (SGLang's --mem-fraction-static; None: its
        default for the GPU and TP), refused with the vllm style.
    warmup: the first part of the arrivals, served but not judged (serving/warmup.py): "auto" (the
        trace's 90% reuse lookback), a fraction of the arrival span in [0, 1), a duration ("10m"),
        or None / 0 (default: every request is judged, from an empty cache). The summary's figures
        count the requests after it; its window says how it was chosen.
    arrivals: "open" (each request at its timestamp) or "closed" (a request is sent when what it
        waits for has ended, plus its think time: closed.py); None: the trace format's default
        (closed for Claude Code, whose files record think times; open otherwise). think_time:
        "trace" (default) or a distribution such as "exp:5s" (think.py). sessions: N concurrent
        sessions drawn from the trace's, each lane starting its next session when one ends
        (lanes.py; a closed loop). The report's `closed` then has per-session and per-turn
        figures and Little's law (closed_stats.py).
    prefill_instances / decode_instances / kv_link: prefill/decode disaggregation (vLLM style): the
        router sends requests to prefill instances; after its first token a request's KV crosses
        `kv_link` ("25GB/s": its prompt's KV bytes / bandwidth; none: at once) to the least loaded
        decode instance, which decodes the rest.
    slo_ttft_ms / slo_tpot_ms / router_lag_ms: milliseconds, or strings with their unit ("2s").
    progress: a kvreplay.progress callback, told ``(done, total, "runs")``: the run, the band's
        two ends (the calibrated roofline), and the sequential replay it is compared with.
    speculative / num_speculative_tokens / acceptance: speculative decoding (vLLM style):
        "ngram", "eagle", "mtp" or "draft:MODEL", k draft tokens a step, and the conditional
        acceptance rate per position ("a1,a2,..."; default: the published figures for the method
        and model, serving/speculative.py). Each decode step verifies 1 + k tokens and holds the
        drafter's lookahead slots; the report's speculative section gives the accepted tokens per step.
    n: parallel sampling: the completions of every request whose record gives no ``n`` (default 1);
        a request with n > 1 is served as vLLM 0.33.0 serves it, n child requests that share its
        prompt (serving/samples.py; the vLLM style and one instance only); the report's samples
        says the groups' shared and divergent KV and their TTFT.
    beam_width: beam search: the width of every request whose record gives no ``beam_width``
        (default 1: none); a request with width W > 1 is served as vLLM 0.33.0's API server runs
        it, rounds of one-token requests, one per live beam, the beams chosen by seeded synthetic
        logprobs (serving/beam.py; the vLLM style and one instance only); the report's beam says
        each group's rounds, requests, prompt tokens sent and hit, shared and divergent KV and its
        time to the final answer.
    """
    return serve(trace, SimConfig.from_keywords(policy, capacity, block_size, **options))


@dataclass
class Served:
    """One simulation, resolved (``_prepare``): the trace as served (samples fanned out, beam
    search's rounds, a closed loop's lanes), the policy, scheduler and Deployment, the time model and host terms,
    the arrivals and warm-up, and run_once's keywords. Its arrivals and warm-up are the clients'
    once a closed loop's run has timed them."""

    config: SimConfig
    trace: Trace
    fan: object
    parents: Trace | None
    spec: object
    scheduler: Scheduler
    deployment: Deployment
    spec_decode: object
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    router_lag_ms: float
    output_kv: bool
    tier_overlap: bool
    instances: int = 1
    router: str = "round-robin"  # the router the instances are behind (data parallelism: vLLM's own)
    capacity: int = 0
    drafter_pool: tuple | None = None
    tm: object = None
    draft_tm: object = None
    loop: object = None
    closed_run: bool = False
    arrival_s: np.ndarray | None = None
    profile_name: str | None = None
    warm: object = None
    max_model_len: int | None = None
    max_len_source: str | None = None
    disagg: bool = False
    transfer_s: np.ndarray | None = None
    semantics: object = None
    host_terms: object = None
    delay_s: np.ndarray | None = None
    releases: bool = False
    run: KernelRun | None = None
    widths: np.ndarray | None = None  # each request's beam width (beam.py; 0 or 1: none)
    beams: object = None  # beam.BeamRun: the rounds of one-token requests served

    @property
    def block_size(self) -> int:
        return self.deployment.block_size

    @property
    def tiers(self) -> list:
        return list(self.deployment.tiers)


def serve(trace, config: SimConfig) -> SimReport:
    """`trace` served under `config`: resolved once (_prepare), run (and at its band's ends, and
    replayed sequentially for comparison), and reported."""
    s = _prepare(as_trace(trace), config)
    progress = config.progress
    banded = config.time.band_runs and hasattr(s.tm, "at_band")  # the calibrated roofline: both ends of its band too
    compared = config.compare_sequential and not any(t.shared for t in s.tiers)
    runs = 1 + 2 * banded + compared
    tell(progress, 0, runs, "runs")
    raw = run_once(s.trace, s.run)
    tell(progress, 1, runs, "runs")
    if s.beams is not None:  # a later round's request: sent by the API server when the last round ended
        s.arrival_s = np.where(s.beams.round > 0, raw.arrival_s - _round_trip_s(s.host_terms), s.arrival_s)
    if s.closed_run:  # the clients' send times (the engine sees each one the host's delay later), the warm-up on them
        s.arrival_s = raw.arrival_s - s.delay_s
        s.warm = resolve_warmup(config.arrival.warmup, s.trace, s.arrival_s, s.block_size)
    band = _band_runs(s, progress, runs) if banded else None
    sequential = (None, None, None, None)
    if compared:
        sequential = _compared(s, raw)
        tell(progress, runs, runs, "runs")
    report = _report(s, raw, sequential)
    if s.spec_decode is not None:
        _speculative_section(s, report, raw)
    if band is not None:
        report.band = _band_section(s, report, band)
    if s.fan is not None:
        report.samples = summarize(s.fan, report, s.block_size, s.output_kv)
    if s.beams is not None:
        report.beam = beam_search.summarize(s.beams, report, s.block_size)
    if config.check:
        report.check_invariants()
        _check_tokens(report, raw)
    return report


def _prepare(trace: Trace, c: SimConfig) -> Served:
    """The simulation `c` of `trace`, resolved: every check, the Deployment (the model and GPU
    looked up once), the time model, the arrivals, the semantics, the routing and the host."""
    s = _checked(trace, c)
    _resolve_deployment(s)
    _expand_beams(s)
    _resolve_arrivals(s)
    a, cl = c.arrival, c.cluster
    d = s.deployment
    s.max_model_len, s.max_len_source = _max_model_len(c.max_model_len, d.model_spec)
    dp = d.data_parallel
    if dp is not None:  # vLLM's ranks behind one API server (dataparallel.py): the instances, its router
        dataparallel.check_cluster(dp, s.instances, cl.router, s.router_lag_ms, cl.prefill_instances is not None
                                   or cl.decode_instances is not None, d.pp)
        s.instances = dp.size
    s.disagg, s.instances, s.transfer_s = _disaggregation(s.trace, s.instances, cl.prefill_instances,
                                                          cl.decode_instances, cl.kv_link, c.engine_style,
                                                          d.block_bytes, d.block_size)
    s.semantics = choose(d, c.kv_semantics, policy=s.spec.name, engine_style=c.engine_style, disagg=s.disagg,
                         output_kv=s.output_kv, kv_layers=c.deployment.kv_layers, capacity=c.deployment.capacity)
    if s.semantics.hybrid and s.fan is not None and s.fan.style == "sglang":
        raise ConfigError("n > 1 with --engine-style sglang is not simulated on a hybrid model's layer groups (SGLang's "
                          "hybrid tree serving parallel sampling is not checked against SGLang): add --kv-semantics full")
    if s.semantics.hybrid:
        s.capacity = s.semantics.capacity
        if s.spec_decode is not None:
            raise ConfigError("speculative decoding is not simulated on a hybrid model's layer groups: add "
                              "--kv-semantics full")
    if s.spec_decode is not None and isinstance(s.tm, (DynamoNpzProfile, PolynomialProfile)) and not _constant(s.tm):
        raise ConfigError("speculative decoding's verification steps are priced by the roofline (a Dynamo profile or "
                          "polynomial has no multi-token decode): use --time-model roofline or instant")
    routed = cl.prefill_instances if s.disagg else s.instances
    s.router = dataparallel.DP_ROUTER if dp is not None and dp.size > 1 else cl.router
    if s.router == dataparallel.DP_ROUTER and dp is not None:
        s.router_lag_ms = dataparallel.COORDINATOR_INTERVAL_MS
    fixed = routed == 1 or s.router in routing.FIXED
    assigned = routing.route(s.trace, s.arrival_s, routed, cl.router if cl.router in routing.FIXED else "round-robin",
                             a.seed) if fixed else None
    if s.closed_run and fixed and routed > 1 and cl.router == "round-robin":
        assigned = np.full(len(s.trace), -1, dtype=np.int64)  # (round-robin in the order requests arrive: the kernel's)
    routing.parameters(cl.router, cl.router_options)  # checked before the run
    _resolve_host(s)
    engine_arrival_s = _engine_arrivals(s.host_terms, s.arrival_s, np.asarray(s.trace.input_length), s.fan or s.beams)
    if s.spec_decode is not None and s.spec_decode.method == "draft" and _is_roofline(c.time.time_model):
        s.draft_tm = load_time_model(c.time.time_model, model=s.spec_decode.draft_model, gpu=d.gpu_spec,
                                     tp=c.deployment.tp, kv_dtype=d.kv_dtype, dtype=d.weights_dtype)
    s.run = KernelRun(policy=s.spec.name, capacity=s.capacity, block_size=d.block_size, time_model=s.tm,
                      scheduler=s.scheduler, arrival_s=engine_arrival_s, output_kv=s.output_kv, params=c.params,
                      instances=s.instances, router=None if fixed else s.router, router_options=cl.router_options,
                      router_lag_ms=s.router_lag_ms, seed=a.seed, assigned=assigned, tiers=s.tiers,
                      tier_copies=cl.tier_copies, tier_overlap=s.tier_overlap, block_bytes=d.block_bytes,
                      prefill_instances=cl.prefill_instances if s.disagg else 0, transfer_s=s.transfer_s,
                      max_model_len=s.max_model_len, kv_groups=list(s.semantics.groups) or None,
                      kv_engine=s.semantics.engine, host=s.host_terms,
                      closed=s.loop.kernel_arrays(s.delay_s) if s.closed_run else None, speculative=s.spec_decode,
                      draft_time_model=s.draft_tm, lockstep=dp is not None and dp.lockstep,
                      graph_tokens=_graph_tokens(s) if dp is not None and dp.lockstep else 0)
    if s.releases:
        s.run = replace(s.run, closed=release_links(s.fan, engine_arrival_s), prefill_only=s.fan.prefill_only)
    if s.beams is not None:  # each round sent when the last one has ended (beam.py)
        s.run = replace(s.run, closed=s.beams.release_links(engine_arrival_s, _round_trip_s(s.host_terms)))
    return s


def _checked(trace: Trace, c: SimConfig) -> Served:
    """The checks of `c` that need no sizes (each naming its argument), samples fanned out."""
    a, cl, style = c.arrival, c.cluster, c.engine_style
    fan = parents = None
    per_request_n = samples_per_request(trace, a.n)
    if (per_request_n > 1).any():
        check_applies(style, cl.instances, cl.prefill_instances is not None or cl.decode_instances is not None,
                      closed.check_options(trace, a.arrivals, sessions=a.sessions, think_time=a.think_time,
                                           speedup=a.speedup, rate=a.rate)[0] == closed.CLOSED
                      or a.sessions is not None)
        parents, fan = trace, fan_out(trace, per_request_n, style)
        trace = fan.trace
    widths = beam_search.widths_per_request(trace, a.beam_width)
    if (widths > 1).any():
        beam_search.check_applies(style, cl.instances, cl.prefill_instances is not None or cl.decode_instances is not None,
                                  closed.check_options(trace, a.arrivals, sessions=a.sessions, think_time=a.think_time,
                                                       speedup=a.speedup, rate=a.rate)[0] == closed.CLOSED
                                  or a.sessions is not None, fan is not None, c.speculative.speculative is not None)
    sp = c.speculative
    spec_decode = resolve_speculative(sp.speculative, sp.num_speculative_tokens, model=c.deployment.model,
                                      acceptance=sp.acceptance)
    if spec_decode is not None and style != "vllm":
        raise ConfigError("speculative decoding is simulated with the vLLM scheduler style: add --engine-style vllm")
    if style not in ENGINE_STYLES:
        raise ConfigError(f"unknown engine style {style!r} (known: {', '.join(ENGINE_STYLES)})")
    slo = {}
    for name in ("slo_ttft_ms", "slo_tpot_ms"):
        value = getattr(c, name)
        slo[name] = value = None if value is None else ms_arg(value, name)
        if value is not None and not value > 0:
            raise ConfigError(f"{name} must be a positive number of milliseconds, got {value!r}")
    router_lag_ms = cl.router_lag_ms
    if isinstance(router_lag_ms, str):
        router_lag_ms = ms_arg(router_lag_ms, "router_lag_ms")
    if c.policy is not None and (not isinstance(c.policy, str) or not c.policy.strip()):
        raise ConfigError(f"policy (--policy) must be a policy's name (or None for the engine's), got {c.policy!r}")
    if isinstance(a.seed, bool) or not isinstance(a.seed, (int, np.integer)) or not 0 <= a.seed < 2 ** 63:
        raise ConfigError(f"seed (--seed) must be a whole number from 0 to 2^63 - 1, got {a.seed!r}")
    closed.check_options(trace, a.arrivals, sessions=a.sessions, think_time=a.think_time, speedup=a.speedup,
                         rate=a.rate)
    spec = _served_policy(c)
    scheduler = c.scheduler
    if scheduler is None:
        scheduler = Scheduler.for_style(style)
    elif scheduler.style != style:
        raise ConfigError(f"the scheduler's style {scheduler.style!r} differs from engine_style {style!r}")
    routing.check(cl.router)
    router_lag_ms = limits.check_router_lag(router_lag_ms)
    instances = limits.check_instances(cl.instances)
    tier_overlap = limits.check_flag(cl.tier_overlap, "tier_overlap")
    output_kv = limits.check_flag(c.output_kv, "output_kv")
    return Served(config=c, trace=trace, fan=fan, parents=parents, spec=spec, scheduler=scheduler, deployment=None,
                  spec_decode=spec_decode, router_lag_ms=router_lag_ms, output_kv=output_kv, tier_overlap=tier_overlap,
                  instances=instances, widths=widths, **slo)


def _served_policy(c: SimConfig):
    """The policy `c` serves with (the engine style's own by default), checked against the style."""
    style = c.engine_style
    spec = get_policy(c.policy or STYLE_POLICY[style])
    if spec.not_served:
        raise ConfigError(f"policy {spec.name!r} (--policy): {spec.not_served}")
    own = get_policy(STYLE_POLICY[style])
    for only in (spec, own):
        if only.style_only is not None and (spec.name, style) != (only.name, only.style_only):
            raise ConfigError(f"{only.style_only_why} (got policy {spec.name!r}, engine_style {style!r})")
    if style == "trtllm":
        d, cl = c.deployment, c.cluster
        _check_trtllm(capacity=d.capacity, tiers=d.tiers, global_store=d.global_store, kv_semantics=c.kv_semantics,
                      gpu_memory_utilization=d.gpu_memory_utilization, kv_cache_memory=d.kv_cache_memory,
                      num_gpu_blocks_override=d.num_gpu_blocks_override, enforce_eager=d.enforce_eager,
                      language_model_only=d.language_model_only, prefill_instances=cl.prefill_instances,
                      decode_instances=cl.decode_instances, kv_link=cl.kv_link)
    return spec


def _resolve_deployment(s: Served) -> None:
    """The Deployment (config.resolve: the model and GPU looked up once), the drafter's share of
    the pool, and the time model on it."""
    c, trace = s.config, s.trace
    asked = replace(c.deployment, engine_style=c.engine_style, max_num_seqs=s.scheduler.max_num_seqs,
                    max_num_batched_tokens=s.scheduler.max_num_batched_tokens if c.engine_style == "vllm"
                    else s.scheduler.chunked_prefill_size)
    if s.spec.capacity == "ignored":  # an unbounded pool: every prompt block and every decode block fits
        bs = resolve(trace, block_size=asked.block_size, capacity=1, model=asked.model,
                     kv_dtype=asked.kv_dtype).block_size
        # every position (a request may repeat an id; each position holds a block), every decode
        # block, and 2 more: SGLang's admission keeps a page free beyond a request's prompt and outputs
        asked = replace(asked, unbounded_ids=max(trace.num_blocks, trace.num_accesses)
                        + int(decode_blocks(trace, bs, s.output_kv).sum()) + 2)
    d = s.deployment = resolve(trace, asked)
    s.capacity = d.capacity
    if s.spec_decode is not None:  # the drafter's weights and KV share the GPUs (speculative.py)
        s.drafter_pool = pool_with_drafter(s.spec_decode, d.capacity_source, d.weights_dtype, d.kv_dtype)
        if s.drafter_pool is not None:
            s.capacity = s.drafter_pool[0]
    if s.fan is not None and s.fan.style == "sglang":  # (each row's partial last page its own, as SGLang's)
        s.fan = private_tails(s.fan, d.block_size)
        s.trace = s.fan.trace
    limits.check_requests(s.trace, d.block_size, s.output_kv)
    time_model, tp = c.time.time_model, c.deployment.tp
    tm = (load_time_model(time_model, model=d.model_spec, gpu=d.gpu_spec, tp=tp, kv_dtype=d.kv_dtype,
                          dtype=d.weights_dtype)
          if _is_roofline(time_model) else load_time_model(time_model, model=d.model_spec, gpu=d.gpu_spec, tp=tp))
    s.tm = dataparallel.time_model(pipelined(tm, d.pp), d.data_parallel)
    tm_dtype = getattr(s.tm, "dtype", None)
    if d.gpu is not None and isinstance(tm_dtype, str) and tm_dtype != d.weights_dtype:
        raise ConfigError(f"the time model runs {tm_dtype} weights but the pool is sized for weights_dtype="
                          f"{d.weights_dtype!r}: give the same weights dtype to both")


def _resolve_arrivals(s: Served) -> None:
    """The arrivals (open: the trace's or a rate's, reshaped; closed: the loop's lanes) and the warm-up."""
    a, bs, warmup = s.config.arrival, s.block_size, s.config.arrival.warmup
    s.loop = loop = closed.build(s.trace, a.arrivals, sessions=a.sessions, think_time=a.think_time, seed=a.seed,
                                 speedup=a.speedup, rate=a.rate, block_size=bs, time_model=s.tm,
                                 chunk=prefill_chunk(s.scheduler))
    s.closed_run = loop is not None and loop.open_arrival_s is None  # (else N sessions sent at their recorded times)
    load = dict(speedup=a.speedup, rate=a.rate, seed=a.seed, rate_profile=a.rate_profile)
    if loop is None and s.fan is None and s.beams is None:
        s.arrival_s, s.profile_name = arrival_times(s.trace, **load)
        s.warm = resolve_warmup(warmup, s.trace, s.arrival_s, bs)
    elif loop is None:  # n > 1: the parents arrive, their children with them; the warm-up is the parents' own
        # (a child's reuse of its sibling's prompt is no lookback; beam search: a group's first round
        # arrives with its request, the later rounds' times come from the run)
        arrival_s, s.profile_name = arrival_times(s.parents, **load)
        s.warm = resolve_warmup(warmup, s.parents, arrival_s, bs)
        s.arrival_s = arrival_s[(s.fan or s.beams).parent]
    else:
        if a.rate_profile is not None:
            raise ConfigError("rate_profile (--rate-profile) reshapes open-loop arrivals; a closed loop's arrivals "
                              "follow its sessions")
        s.trace = replace(loop.trace, session=loop.session)
        limits.check_requests(s.trace, bs, s.output_kv)
        if s.spec.capacity == "ignored":  # (the lanes' copies hold more blocks)
            s.capacity = max(s.capacity, s.trace.num_blocks + int(decode_blocks(s.trace, bs, s.output_kv).sum()) + 2)
        s.arrival_s, s.profile_name, s.warm = np.nan_to_num(loop.start_s), None, None  # (arrivals come from the run)
        if not s.closed_run:
            s.arrival_s = loop.open_arrival_s
            s.warm = resolve_warmup(warmup, s.trace, s.arrival_s, bs)


def _graph_tokens(s: Served) -> int:
    """The largest step vLLM runs in a CUDA graph (timing/host.py graph_ceiling): DP ranks whose
    steps all fit one pad to the largest of them (kernel/batch.c batch_start_lockstep)."""
    k = 1 + (s.spec_decode.k if s.spec_decode is not None else 0)
    return graph_ceiling(s.scheduler.max_num_seqs, s.deployment.gpu_spec or "", k, s.config.deployment.enforce_eager,
                         s.scheduler.max_num_batched_tokens)


def _resolve_host(s: Served) -> None:
    """What the host CPU adds (timing/host.py): each request reaches the engine core after the API
    server has tokenised it and sent it over, so its TTFT and end-to-end latency hold that."""
    s.host_terms = host_resolve(s.config.time.host, s.tm)
    if s.scheduler.style == "vllm":  # the host's kernel launches on the steps vLLM runs without a CUDA graph
        d = s.deployment
        s.tm = with_cuda_graphs(s.tm, s.host_terms, s.scheduler.max_num_seqs, d.gpu_spec or "",
                                1 + (s.spec_decode.k if s.spec_decode is not None else 0),
                                s.config.deployment.enforce_eager, s.scheduler.max_num_batched_tokens)
    s.delay_s = s.host_terms.arrival_delay(np.asarray(s.trace.input_length))  # (a closed loop's releases)
    # SGLang's groups: the samples are sent when the group's prefill-only request ends (samples.py);
    # the report keeps the parent's arrival for them (their client's), so their TTFT holds that wait
    s.releases = s.fan is not None and bool(s.fan.prefill_only.any())


def _band_runs(s: Served, progress, runs: int) -> dict:
    """The runs at both ends of the calibrated roofline's band (the host's terms at the same end
    of their own band)."""
    tm, host_terms, prompts = s.tm, s.host_terms, np.asarray(s.trace.input_length)
    band = {"bands": {p: list(tm.band(p)) for p in ("prefill", "decode", "mixed")},
            "host": {end: host_band(host_terms, end).describe() for end in ("low", "high")}}
    for k, end in enumerate(("low", "high")):
        host_end = host_band(host_terms, end)
        end_delay_s = host_end.arrival_delay(prompts)
        engine_arrival_s = _engine_arrivals(host_end, s.arrival_s, prompts, s.fan or s.beams)
        band[end] = run_once(s.trace, replace(
            s.run, time_model=tm.at_band(end), host=host_end, arrival_s=engine_arrival_s,
            closed=s.loop.kernel_arrays(end_delay_s) if s.closed_run else
            release_links(s.fan, engine_arrival_s) if s.releases else
            s.beams.release_links(engine_arrival_s, _round_trip_s(host_end)) if s.beams is not None else None,
            draft_time_model=s.draft_tm.at_band(end) if hasattr(s.draft_tm, "at_band") else s.draft_tm))
        band[end + "_delay_s"] = end_delay_s
        tell(progress, 2 + k, runs, "runs")
    return band


def _compared(s: Served, raw) -> tuple:
    """The sequential replay the run is compared with: (hit rate, evictions, parts, order).
    (A store shared by instances has no sequential counterpart per instance.)"""
    scheduler, semantics = s.scheduler, s.semantics
    chunk = scheduler.max_num_batched_tokens
    if semantics.engine == "sglang":  # SGLang's prefill chunks (none: a prompt in one piece)
        chunk = scheduler.chunked_prefill_size if scheduler.chunked_prefill else None
    hybrid = dict(kv_groups=list(semantics.groups), prefill_chunk=chunk) if semantics.hybrid else {}
    by = np.argsort(s.arrival_s, kind="stable")  # (one at a time, in the order they arrived)
    order = None if np.array_equal(by, np.arange(len(s.trace))) else by
    sequential, evictions, parts = _sequential(s, s.trace if order is None else s.trace.take(by), raw.instance[by],
                                               (raw.status == FINISHED)[by], hybrid,
                                               judged_mask(s.arrival_s, s.warm.seconds)[by])
    return sequential, evictions, parts, order


def _arrival_info(s: Served) -> dict:
    """The report's arrivals: the closed loop's, a Poisson rate's or the trace's (and the profile)."""
    a = s.config.arrival
    if s.loop is not None:
        info = closed_stats.arrival_info(s.loop)
    elif a.rate is not None:
        info = {"kind": "poisson", "rate_per_s": a.rate, "seed": a.seed}
    else:
        info = {"kind": "trace", "speedup": 1.0 if a.speedup is None else a.speedup}
    if s.profile_name is not None:
        info["rate_profile"] = s.profile_name
    return info


def _report(s: Served, raw, sequential: tuple) -> SimReport:
    """The run `raw` as a SimReport (its sequential comparison, tiers, SLOs, warm-up, closed loop)."""
    c, trace, bs, tier_list = s.config, s.trace, s.block_size, s.tiers
    seq_hit_rate, seq_evictions, parts, order = sequential
    instances, disagg, warmup = s.instances, s.disagg, c.arrival.warmup
    report = SimReport(
        policy=s.spec.name, params=s.spec.resolve(c.params), capacity_blocks=s.capacity, block_size=bs,
        scheduler=s.scheduler.to_dict(), time_model={**s.tm.describe(), "host": s.host_terms.describe(),
                                                     **_data_parallel_info(s.deployment.data_parallel)},
        arrivals=_arrival_info(s), output_kv=s.output_kv,
        trace_source=trace.source, arrival_s=np.asarray(s.arrival_s, dtype=np.float64), scheduled_s=raw.scheduled_s,
        first_token_s=raw.first_token_s, finish_s=raw.finish_s,
        prompt_tokens=np.asarray(trace.input_length, dtype=np.int64), hit_tokens=raw.hit_tokens,
        output_tokens=np.maximum(np.asarray(trace.output_length, dtype=np.int64), 1), preemptions=raw.preemptions,
        status=raw.status, counters=raw.counters, policy_counters=raw.policy_counters, series=raw.series,
        end_s=raw.end_s, itl_histogram=raw.itl, sequential_hit_rate=seq_hit_rate, sequential_evictions=seq_evictions,
        capacity_source=s.deployment.capacity_source, instances=instances,
        router=s.router if instances > 1 else None, instance=raw.instance if instances > 1 else None,
        instance_busy_s=[k["busy_us"] / 1e6 for k in raw.per_instance], router_lag_ms=s.router_lag_ms,
        prefill_instances=c.cluster.prefill_instances if disagg else None,
        decode_instance=raw.decode_instance if disagg else None,
        tiers=tier_summary(tier_list, raw, bs, np.asarray(trace.input_length), s.deployment.block_bytes,
                           c.cluster.tier_copies, s.tier_overlap) if tier_list else None,
        slo_ttft_s=None if s.slo_ttft_ms is None else s.slo_ttft_ms / 1000.0,
        slo_tpot_s=None if s.slo_tpot_ms is None else s.slo_tpot_ms / 1000.0,
        max_model_len=s.max_model_len, max_model_len_source=s.max_len_source, kv_semantics=s.semantics.note,
        warmup=None if s.warm.cold and warmup is None else s.warm.to_dict(),
        closed=None if s.loop is None else closed_stats.per_request(s.loop),
        judged_until_s=None if s.loop is None else closed_stats.steady_until(closed_stats.per_request(s.loop),
                                                                              s.arrival_s, raw.finish_s),
    )
    report.misses = _served_misses(trace, report, raw, parts, bs, instances, order)
    return report


def _data_parallel_info(dp) -> dict:
    return {} if dp is None else {"data_parallel": dp.describe()}


def _speculative_section(s: Served, report: SimReport, raw) -> None:
    """The report's speculative section: accepted tokens per step, the draft's cost, the pool."""
    spec_decode, tm = s.spec_decode, s.tm
    report.speculative = speculative_summary(spec_decode, raw)
    report.speculative["draft_cost"] = draft_cost_note(
        spec_decode, isinstance(tm, RooflineTimeModel) and (spec_decode.method != "draft" or s.draft_tm is not None))
    report.speculative["measured"]["draft_s"] = raw.counters.get("draft_us", 0) / 1e6
    report.speculative["pool"] = None if s.drafter_pool is None else s.drafter_pool[1]


def _band_section(s: Served, report: SimReport, band: dict) -> dict:
    """The report's band: each end's run as a report (its requests' times; kvreplay plan judges
    SLOs on it) and its latencies, and the calibration's warnings."""
    warmup = s.config.arrival.warmup
    band["runs"] = {}
    for end in ("low", "high"):
        other = band[end]
        end_delay_s = band.pop(end + "_delay_s")
        fields = {}
        if s.closed_run:  # its own arrivals, so its own warm-up and steady span (as plan's run at that end)
            sent = other.arrival_s - end_delay_s
            own = resolve_warmup(warmup, s.trace, sent, s.block_size)
            fields = dict(arrival_s=sent, warmup=None if own.cold and warmup is None else own.to_dict(),
                          judged_until_s=closed_stats.steady_until(report.closed, sent, other.finish_s))
        elif s.beams is not None:  # (its later rounds sent when its own earlier rounds ended)
            fields = dict(arrival_s=np.where(s.beams.round > 0,
                                             other.arrival_s - _round_trip_s(host_band(s.host_terms, end)),
                                             report.arrival_s))
        band["runs"][end] = replace(report, scheduled_s=other.scheduled_s, first_token_s=other.first_token_s,
                                    finish_s=other.finish_s, status=other.status, itl_histogram=other.itl,
                                    band=None, **fields)
        band[end] = band["runs"][end].latencies()
    band["warnings"] = _calibration_warnings(s.tm, s.trace, report)
    dp_note = dataparallel.warning(s.deployment.data_parallel, s.deployment.gpu or "")
    if dp_note:
        band["warnings"].append(dp_note)
    return band


def _expand_beams(s: Served) -> None:
    """Beam search's requests (beam.py): each group's rounds of one-token requests, one per live
    beam, in place of the group's request; its parents are the trace's requests."""
    if s.widths is None or not (s.widths > 1).any():
        return
    s.parents, s.beams = s.trace, beam_search.expand(s.trace, s.widths, s.block_size, s.config.arrival.seed)
    s.trace = s.beams.trace
    if s.spec.capacity == "ignored":  # (the rounds' own blocks: one per request beyond the trace's)
        s.capacity = max(s.capacity, s.trace.num_blocks + len(s.trace) + 2)
    limits.check_requests(s.trace, s.block_size, s.output_kv)


def _round_trip_s(host_terms) -> float:
    """What passes between a beam-search round's end and the engine seeing the next round's
    requests, less their own arrival delay: the API server's response and its next request."""
    return host_terms.request_s + host_terms.latency_s


def _engine_arrivals(host_terms, arrival_s, prompts, fan):
    """When each request reaches the engine core (timing/host.py engine_arrivals); a request with
    n > 1 passes the API server once, as its parent (vLLM fans it out into its children after
    tokenising it, v1/engine/async_llm.py add_request), so its children reach the engine together;
    with SGLang its prefill-only request does (the samples follow it, samples.py)."""
    if fan is None:
        return host_terms.engine_arrivals(arrival_s, prompts)
    first = fan.first_row
    return host_terms.engine_arrivals(np.asarray(arrival_s)[first], np.asarray(prompts)[first])[fan.parent]


def _check_trtllm(**given) -> None:
    """Refuse what the TensorRT-LLM style does not model (each setting named with its flag)."""
    why_pool = ("TensorRT-LLM sizes its pool from free_gpu_memory_fraction of the memory left after loading, "
                "which is not modelled: give the pool with capacity (--capacity BLOCKS, or a size with --model)")
    checks = (
        ("capacity", "--capacity", given["capacity"] is None, why_pool),
        ("gpu_memory_utilization", "--gpu-memory-utilization", given["gpu_memory_utilization"] is not None, why_pool),
        ("kv_cache_memory", "--kv-cache-memory", given["kv_cache_memory"] is not None, why_pool),
        ("num_gpu_blocks_override", "--num-gpu-blocks-override", given["num_gpu_blocks_override"] is not None, why_pool),
        ("enforce_eager", "--enforce-eager", bool(given["enforce_eager"]), why_pool),
        ("language_model_only", "--language-model-only", bool(given["language_model_only"]), why_pool),
        ("tiers", "--tiers", given["tiers"] is not None,
         "its host pool is the trtllm policy's host_blocks; the tiers below HBM are not modelled under its scheduler"),
        ("global_store", "--global-store", given["global_store"] is not None, "a shared store is not modelled"),
        ("prefill_instances", "--prefill-instances", given["prefill_instances"] is not None,
         "TensorRT-LLM's disaggregated serving is not modelled"),
        ("decode_instances", "--decode-instances", given["decode_instances"] is not None,
         "TensorRT-LLM's disaggregated serving is not modelled"),
        ("kv_link", "--kv-link", given["kv_link"] is not None, "TensorRT-LLM's disaggregated serving is not modelled"),
        ("kv_semantics", "--kv-semantics", given["kv_semantics"] == "hybrid",
         "TensorRT-LLM's variable attention windows are not modelled (kv_semantics='full' serves every layer as "
         "full attention)"),
    )
    for name, flag, bad, why in checks:
        if bad:
            raise ConfigError(f"{name} ({flag}) with engine_style='trtllm': {why}")


def prefill_chunk(scheduler: Scheduler) -> int | None:
    """Tokens one prefill step takes of a prompt alone (None: the whole prompt at once)."""
    if scheduler.style == "sglang":
        return scheduler.chunked_prefill_size if scheduler.chunked_prefill else None
    return scheduler.max_num_batched_tokens if scheduler.chunked_prefill else None


def _constant(tm) -> bool:
    """A polynomial step time with no variable (every step takes the same time, whatever its tokens)."""
    return isinstance(tm, PolynomialProfile) and all(not powers for _, powers in tm.terms)


def _max_model_len(value, model) -> tuple[int | None, str | None]:
    """The context limit and where it comes from (`value`, else `model`'s catalog entry)."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= 2 ** 40:
            raise ConfigError(f"max_model_len must be a whole number of tokens from 1 to 2^40, got {value!r}")
        return int(value), "given"
    if model is None:
        return None, None
    from ..analysis.models import get_model

    spec = get_model(model) if isinstance(model, str) else model
    limit = getattr(spec, "max_model_len", None)
    return (None, None) if limit is None else (int(limit), f"{spec.name}'s config.json (as vLLM derives it)")


def _calibration_warnings(tm, trace, report) -> list[str]:
    """Where this run leaves what the calibrated roofline was fitted and checked on."""
    out = calibration_warnings(tm, trace)
    rng = tm.calibration.fitted_range
    peak = int(report.counters.get("peak_running", 0))
    if rng.get("max_decode_batch") and peak > rng["max_decode_batch"]:
        out.append(f"up to {peak} requests ran in one step, beyond the calibrated {rng['max_decode_batch']}")
    return out


def _borrowed_warning(tm) -> str:
    """What a GPU that ships its nearest measured relative's coefficients runs at, and its band."""
    cal = tm.calibration
    memory = ("its own measured streaming bandwidth" if tm.bandwidth_source == "measured on this GPU"
              else tm.bandwidth_source)
    band = (f"its band is the spread of those coefficients on {cal.gpu}'s own measured kernels" if cal.checked
            else "its band is the cross-GPU check's")
    if cal.checked:
        head = f"{cal.gpu} ships {cal.measured_on}'s coefficients"
        own = [{"gemm": "GEMM", "moe": "fused MoE", "gdn": "Gated DeltaNet", "mla": "MLA", "elementwise": "elementwise"}[f]
               for f in cal.own_fitted]
        if own:
            head += f" but for its {', '.join(own)} terms, fitted on its own measured kernels"
    else:
        head = (f"{cal.gpu} has no kernel measurements: its coefficients are its nearest measured relative's "
                f"({cal.measured_on})")
    return (f"{head}, at {cal.gpu}'s own compute peaks and memory bandwidth "
            f"({tm.bandwidth / 1e12:.2f} TB/s: {memory}); {band}")


def _extrapolated(tm) -> str:
    """What of an unchecked model's step the calibration extrapolates, and from what."""
    spec = tm.model
    if getattr(tm, "moe", None):
        return (f"its routed experts run vLLM's fused MoE kernel as fitted on measured MoE kernels ({tm.moe_kernel} "
                "weights; the band covers that kernel's spread), its other terms are extrapolated from "
                "dense-model kernels")
    if spec.moe:  # the catalog has its experts, but no MoE kernel was measured for these weights on this GPU
        return (f"no {tm.dtype} MoE kernel was measured on the {tm.calibration.measured_on}, so its routed experts are "
                "timed with its other GEMMs, at the dense GEMMs' efficiency (on the measured GPUs the MoE kernels "
                "run 1.4-2.6x slower than that: docs/timing.md), and its terms are extrapolated from dense-model kernels")
    return "its terms are extrapolated from dense-model kernels"


def _pcie_warning(tm) -> str:
    """A PCIe GPU's all-reduce with no fit of its own: over a pair, what LLMServingSim's held-out
    RTX PRO 6000 run showed; over more, what the L40S's measured kernels showed."""
    if tm.tp == 2:
        return (f"{tm.gpu.name} has no GPU link and no measured all-reduce of its own: the all-reduce of TP 2 runs "
                f"at PCIe's {tm.gpu.link_gbps:g} GB/s each way, which a measured pair of PCIe cards did not reach "
                "(LLMServingSim's vLLM run of Qwen3-32B at TP 2 on two RTX PRO 6000s decoded 18% and prefilled about "
                "2x slower than simulated): read this run's times as short, beyond its band (docs/fidelity.md, "
                "\"LLMServingSim's per-request vLLM runs\")")
    return (f"{tm.gpu.name} has no GPU link: the all-reduce of TP {tm.tp} runs at PCIe's {tm.gpu.link_gbps:g} GB/s "
            "each way, which measured PCIe platforms sustain between 2 GPUs only (aiconfigurator's L40S kernels: "
            "a bus bandwidth of 18-20 GB/s over 2 GPUs, 4-5 over 4, 2 over 8; its prefill steps at TP 4 and 8 ran "
            "5.6x and 22.6x longer than predicted): read this run's times as far below what it would measure, "
            "beyond its band (docs/gpus.md, \"GPU catalog\")")


def calibration_warnings(tm, trace) -> list[str]:
    """Where serving `trace` with the calibrated roofline `tm` leaves what it was fitted and
    checked on, before any run (the batch a run reaches: _calibration_warnings)."""
    cal = tm.calibration
    rng = cal.fitted_range
    out = []
    if cal.borrowed:
        out.append(_borrowed_warning(tm))
    spec = tm.model
    checked = list(rng.get("models", []))
    if getattr(tm, "moe", None) and tm.moe_kernel in (cal.bands_moe_steps or {}):  # MoE steps checked at these weights
        checked += rng.get("moe_models", [])
    if getattr(tm, "moe", None) and tm.moe_kernel in (cal.bands_mla_steps or {}):  # and an MLA MoE's (DeepSeek-V3)
        checked += rng.get("mla_models", [])
    if checked and spec.name not in checked:
        kind = ("an MoE model" if spec.active_params != spec.total_params else "a model") + \
            (" with MLA attention" if spec.kv_lora_rank else "") + \
            (" with sliding-window layers" if spec.sliding_window_layers else "") + \
            (" with Mamba / linear-attention layers" if spec.mamba_layers else "")
        out.append(f"{spec.name} is {kind} outside the calibration's checked models ({', '.join(checked)}): "
                   + _extrapolated(tm))
    if getattr(tm, "moe", None):
        out.append("end to end, the silicon serving runs of an MoE (MiniMax-M2.5 on H200 and B200, vLLM 0.16-0.19) "
                   "measured TTFT well above the simulated while TPOT held (docs/host.md): read its "
                   "TTFT as a lower bound")
    if getattr(tm, "gdn", None):
        out.append(f"{spec.name}'s {tm.mamba_layers} Gated DeltaNet layers run vLLM's GDN kernels as fitted on measured "
                   "ones (Qwen3.5's, at these heads too); the band is widened to their spread (docs/timing.md)")
    elif getattr(tm, "mamba_layers", 0):
        out.append(f"{spec.name}'s {tm.mamba_layers} Mamba / linear-attention layers are priced by the roofline's "
                   "state term (state read and write per request, state update per token), which no measurement "
                   "checks: the band covers the attention and GEMM terms only")
    if rng.get("tp") and tm.tp not in rng["tp"]:
        out.append(f"tp={tm.tp} is outside the calibrated TP degrees {rng['tp']}")
    if tm.gpu.link_topology == "pcie" and tm.tp > 1 and getattr(tm, "pcie_allreduce", None) is None:
        out.append(_pcie_warning(tm))  # (a GPU with its own PCIe all-reduce fit runs it: catalog/gpus.py)
    context = np.asarray(trace.input_length) + np.asarray(trace.output_length)
    longest = int(context.max()) if len(trace) else 0
    # an MLA run with its fitted term: the MLA modules were measured to longer prompts than the steps
    mla = bool(getattr(tm, "mla", False) and rng.get("mla_max_context"))
    limit = rng["mla_max_context"] if mla else rng.get("max_context")
    if limit and longest > limit:
        n = int((context > limit).sum())
        out.append((f"{n:,} requests reach contexts" if n > 1 else "1 request reaches a context")
                   + f" beyond the calibrated {limit:,} tokens"
                   + (" (the MLA modules' longest prompt)" if mla else "")
                   + f" (up to {longest:,}): attention there is extrapolated")
    if spec.checkpoint_weights and tm.dtype != spec.checkpoint_weights_dtype:
        out.append(f"weights at {tm.dtype}, but {spec.checkpoint_note()}")
    elif spec.checkpoint_weights == "fp8-block" and tm.dtype == "fp8":
        which = "its other fp8 GEMMs" if getattr(tm, "moe", None) else "the fp8 GEMMs"
        out.append(f"{which} were fitted on per-tensor W8A8 kernels; {spec.name}'s block-scaled fp8 weights "
                   "(a scale per 128 x 128 block) run other kernels")
    if tm.dtype == "int4":
        out.append("no int4 GEMMs were measured: int4 weights are read at half a byte each and their GEMMs run at "
                   "the bf16 kernels' fitted coefficients (dequantised to bf16)")
    elif tm.dtype == "fp16":
        out.append("no fp16 GEMMs were measured: fp16 weights use the bf16 kernels' fitted coefficients")
    return out


def _is_roofline(time_model) -> bool:
    """A roofline named by its spec ("roofline", or a variant "roofline-..."): it takes the dtypes."""
    return isinstance(time_model, str) and time_model.strip().lower().startswith("roofline")


def _disaggregation(trace, instances, prefill_instances, decode_instances, kv_link, engine_style, block_bytes,
                    block_size):
    """(disaggregated?, instances, each request's KV transfer seconds or None)."""
    if prefill_instances is None and decode_instances is None:
        if kv_link is not None:
            raise ConfigError("--kv-link applies to prefill/decode disaggregation: add --prefill-instances and "
                              "--decode-instances")
        return False, instances, None
    for name, value in (("prefill_instances", prefill_instances), ("decode_instances", decode_instances)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{name} ({flag}) must be a whole number >= 1 (disaggregation needs both "
                              f"--prefill-instances and --decode-instances), got {value!r}")
        limits.check_instances(value, f"{name} (--{name.replace('_', '-')})")
    limits.check_instances(prefill_instances + decode_instances,
                           "prefill_instances + decode_instances (--prefill-instances, --decode-instances)")
    if instances not in (1, prefill_instances + decode_instances):
        raise ConfigError(f"instances {instances} differs from prefill + decode instances "
                          f"({prefill_instances} + {decode_instances})")
    if engine_style != "vllm":
        raise ConfigError("prefill/decode disaggregation is simulated with the vLLM-style scheduler")
    transfer_s = np.zeros(len(trace))
    if kv_link is not None:
        from ..engine.tiers import parse_bandwidth

        if block_bytes is None:
            raise ConfigError("the KV link's transfer time needs the model's KV bytes: give --model")
        try:
            link = parse_bandwidth(kv_link)
        except ConfigError as e:
            raise ConfigError(f"kv_link (--kv-link): {e}") from None
        transfer_s = np.asarray(trace.input_length, dtype=np.float64) * (block_bytes / block_size) / link
    return True, prefill_instances + decode_instances, transfer_s


def _sequential(s: Served, trace, instance_of, finished, hybrid: dict, judged):
    """Each instance's finished requests through its own cache (and tiers), one at a time (N
    replays for N instances): the hit rate over the same requests as the concurrent one (rejected
    and refused requests left out of both; the warm-up's requests replayed, not counted), and the evictions (None with decode instances, which
    evict too and have no sequential counterpart). `hybrid`: replay()'s kv_groups and prefill_chunk
    (hybrid semantics, whose sequential replay is the same engine's hybrid cache)."""
    from ..engine.replay import replay

    spec, params, capacity, block_size, instances = s.spec, s.config.params, s.capacity, s.block_size, s.instances
    tier_list, tier_copies, disagg = s.tiers, s.config.cluster.tier_copies, s.disagg
    tier_args = dict(tiers=tier_list, tier_copies=tier_copies) if tier_list else {}
    hits = 0
    evictions = []
    parts = []  # (the instance's requests, their replay): the served miss account's sequential causes
    for k in range(instances):
        mine = finished if instances == 1 else finished & (instance_of == k)
        sub = trace if mine.all() else trace.take(np.flatnonzero(mine))
        if len(sub) == 0:
            evictions.append(0)
            continue
        seq = replay(sub, spec.name, None if spec.capacity == "ignored" else capacity, block_size, **tier_args,
                     **hybrid, stranded_samples=0, **params)
        hits += int(seq.hit_tokens[judged[mine]].sum())
        evictions.append(seq.counters.get("evictions"))
        parts.append((np.flatnonzero(mine), seq))
    prompt = int(np.asarray(trace.input_length)[finished & judged].sum())
    return (hits / prompt if prompt else 0.0), (None if None in evictions or disagg else sum(evictions)), parts


def _served_misses(trace, report, raw, parts, block_size, instances, order=None) -> dict | None:
    """The served miss account (serving/misses.py) over the finished judged requests (`counted`): {"account" (a
    MissAccount), "tokens", "not_measured", "concurrency"}; None when the sequential replays have
    no account (tiers, hybrid semantics) or were not run. `order`: the requests in the order they
    arrived when it is not the trace's (a closed loop: the sequential replays ran in it), else None."""
    if not parts or any(seq.misses is None for _, seq in parts):
        return None
    from .misses import served_account

    by = np.arange(len(trace)) if order is None else order
    ordered = trace if order is None else trace.take(by)
    account, split = served_account(ordered, block_size, parts, raw.hit_blocks[by], report.counted[by],
                                    raw.scheduled_s[by], raw.first_token_s[by],
                                    raw.instance[by] if instances > 1 else None)
    if order is not None:  # back to trace order: its requests' rows and their accesses
        back = np.empty_like(by)
        back[by] = np.arange(by.size)
        _, index = ragged_take(ordered.offsets, back)
        tokens = np.empty_like(account.tokens)
        tokens[by] = account.tokens
        gone, cause = account.gone[index], account.cause[index]
        gone = np.where(gone >= 0, by[np.maximum(gone, 0)], -1)[cause == CODE["evicted"]].astype(np.int32)
        account = replace(account, tokens=tokens, cause=cause, evicted_gone=gone)
    not_measured = dict(parts[0][1].misses.not_measured)
    not_measured.pop("concurrency", None)
    account.not_measured = not_measured
    return {"account": account, "concurrency": split}


def route(trace: Trace, arrival_s: np.ndarray, instances: int, router: str, seed: int = 0) -> np.ndarray:
    """The instance of each request under a fixed router (routing.route)."""
    return routing.route(trace, arrival_s, instances, router, seed)


def _check_tokens(report, raw) -> None:
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


@dataclass(frozen=True)
class SweepGrid:
    """A load sweep's grid: the loads (trace timestamps / speedups, Poisson rates, or numbers of
    concurrent sessions: one of them) x policies x capacities x instances x routers x tiers (None:
    simulate()'s option of that name, one value)."""

    speedups: object = None
    rates: object = None
    sessions: object = None
    policies: object = None
    capacities: object = None
    instances: object = None
    routers: object = None
    tiers: object = None


def load_sweep(trace, grid: SweepGrid | None = None, *, jobs: int = 1, executor: str = "local",
               ray_address: str | None = None, progress=None, **options) -> list[dict]:
    """simulate() over the grid policies x capacities x instances x routers x tiers x loads (trace
    timestamps / speedup, Poisson rates, or numbers of concurrent sessions: a closed loop): one tidy
    row per run (sweep_row). `grid`: a SweepGrid, or its fields among the keywords. The runs go to
    `executor` ("local": a pool of `jobs` processes, "threads", or "ray"; analysis/executors.py):
    the rows, in grid order, are the same wherever they ran. `options` go to simulate(). progress:
    a kvreplay.progress callback, told ``(done, total, "simulations")``."""
    from ..analysis.executors import run

    axes = {f.name: options.pop(f.name) for f in fields(SweepGrid) if f.name in options}
    grid = SweepGrid(**axes) if grid is None else replace(grid, **axes)
    if sum(x is not None for x in (grid.speedups, grid.rates, grid.sessions)) != 1:
        raise ConfigError("give the loads as speedups, rates or concurrent sessions (one of them)")
    trace = as_trace(trace)
    loads = _sweep_loads(grid)
    axes = dict(policies=grid.policies or [options.pop("policy", None)],
                capacities=grid.capacities or [options.pop("capacity", None)],
                instances=grid.instances or [options.pop("instances", 1)],
                routers=grid.routers or [options.pop("router", "round-robin")],
                tiers=grid.tiers or [options.pop("tiers", None)])
    limits.check_cluster_sizes(axes["instances"])
    from .semantics import one_semantics

    asked = options.get("kv_semantics", "auto")
    options, note = one_semantics(options.get("model"), options, axes["tiers"], axes["policies"])  # one for the grid
    forced = note if asked == "auto" and options.get("kv_semantics") == "full" else None
    tasks, layout = _sweep_tasks(loads, axes, options)
    limits.check_sweep_size(len(tasks))
    rows = [out[0] for out in run(tasks, [trace], executor=executor, jobs=jobs, ray_address=ray_address,
                                  progress=labelled(progress, "simulations"))]
    for g in range(0, len(rows), len(loads)):
        for row in rows[g:g + len(loads)]:
            if row["instances"] == 1 and row["error"] is None and rows[g]["error"] is None and grid.sessions is None:
                row["sequential_hit_rate"] = rows[g].get("sequential_hit_rate")
    rows = [rows[i] if router is None else dict(rows[i], router=router) for i, router in layout]
    if forced is not None:  # every run full because of the grid: say why
        for row in rows:
            if row.get("kv_semantics_text"):
                row["kv_semantics_text"] = forced["text"]
    return rows


def _sweep_loads(grid: SweepGrid) -> list[tuple[str, float]]:
    """The sweep's loads as (kind, value), each checked naming its argument."""
    if grid.sessions is not None:
        from .lanes import check_sessions

        return [("sessions", float(check_sessions(n)))
                for n in items(grid.sessions, "sessions (--sessions-list)", single=())]
    kind, name, values = (("speedup", "speedups (--speedups)", grid.speedups) if grid.speedups is not None
                          else ("rate", "rates (--rates)", grid.rates))
    if isinstance(values, str):
        raise ConfigError(f"{name} must be a list of numbers, got {values!r}")
    return [(kind, number(x, name)) for x in items(values, name, single=())]


def _sweep_tasks(loads: list, axes: dict, options: dict) -> tuple[list, list]:
    """The sweep's tasks (one simulate() each) and the layout of its rows: (task, router or None).
    One instance has no routing: its run is the same under every router, so it runs once (under
    the first) and its row is written under each router asked for (every row of the grid is there)."""
    from itertools import product

    from ..analysis.executors import Task

    routers = axes["routers"]
    tasks, layout, single = [], [], {}
    for policy, capacity, n, router, tier in product(axes["policies"], axes["capacities"], axes["instances"], routers,
                                                     axes["tiers"]):
        for k, (kind, value) in enumerate(loads):
            key = (policy, capacity, tier, k)
            if n == 1 and router != routers[0]:
                layout.append((single[key], router))
                continue
            if n == 1:
                single[key] = len(tasks)
            layout.append((len(tasks), router if n == 1 and len(routers) > 1 else None))
            opts = dict(options, policy=policy, capacity=capacity, instances=n, router=router, tiers=tier,
                        speedup=value if kind == "speedup" else None, rate=value if kind == "rate" else None,
                        # one instance's sequential replay does not depend on the load: once per
                        # group; a cluster's does (it replays each instance's share, and the router's
                        # split depends on the arrivals), so every cluster row runs its own; so do
                        # concurrent sessions (each count draws its own sessions)
                        compare_sequential=(k == 0 or n > 1 or kind == "sessions")
                        and options.get("compare_sequential", True))
            if kind == "sessions":
                opts["sessions"] = int(value)
            tasks.append(Task(kind="call", trace=0, options=tuple(sorted(opts.items())), function=sweep_row))
    return tasks, layout


def sweep_row(trace, options: dict) -> dict:
    """One run of a sweep as a row: load, configuration, TTFT, hit rates, throughput, stability.
    A run that breaks an internal invariant gives a row with its configuration and `error`, so the
    sweep's other rows are kept (the CLI writes them and exits 3); a refused configuration
    (ConfigError) still stops the sweep, with nothing written."""
    from ..errors import InvariantError

    kind = "sessions" if options.get("sessions") is not None else "speedup" if options.get("rate") is None else "rate"
    try:
        r = simulate(trace, **options)
        s = r.summary()
    except InvariantError as e:
        internal = True
        return {"load_kind": kind, "load": _load_value(kind, options),
                "policy": options.get("policy") or "-", "capacity_blocks": options.get("capacity"),
                "instances": options.get("instances", 1), "router": options.get("router") or "-",
                "tiers": options.get("tiers") or "none", "stable": None,
                "error": ("internal error, please report: " if internal else "") + str(e), "internal_error": internal}
    return run_row(r, s, kind, options)


def run_row(r, s: dict, kind: str, options: dict) -> dict:
    """sweep_row's row of the run `r` (its summary `s`) at the load `kind` of `options`."""
    ttft = s["latency_s"]["ttft"]
    tiers = r.tiers["tiers"] if r.tiers is not None else None
    return {
        "load_kind": kind, "load": _load_value(kind, options),
        "policy": r.policy, "capacity_blocks": r.capacity_blocks, "instances": r.instances,
        "kv_semantics": (r.kv_semantics or {}).get("semantics"),
        "kv_semantics_text": (r.kv_semantics or {}).get("text"),
        "router": r.router or "-", "tiers": options.get("tiers") or "none",
        "ttft_p50_s": ttft["p50"], "ttft_p90_s": ttft["p90"], "ttft_p99_s": ttft["p99"],
        "tpot_p50_s": s["latency_s"]["tpot"]["p50"], "hit_rate": s["hit_rate"],
        "hbm_hit_rate": tiers[0]["hit_rate"] if tiers else s["hit_rate"],
        "sequential_hit_rate": r.sequential_hit_rate, "requests_per_s": s["throughput"]["requests_per_s"],
        "goodput_per_s": s["goodput"]["requests_per_s"],
        "slo_attainment": (s["goodput"]["good_requests"] / s["finished"] if s["finished"] and (
            r.slo_ttft_s is not None or r.slo_tpot_s is not None) else None),
        "slo_ttft_s": r.slo_ttft_s, "slo_tpot_s": r.slo_tpot_s,
        "preemptions": s["preemptions"],
        "peak_running": s["peak_running_requests"], "load_balance": r.load_balance() if r.instances > 1 else 1.0,
        **_verdict_columns(s["keeps_up"]), "finished": s["finished"], "rejected": s["rejected"],
        "refused_context": s["refused_context"], "requests": s["requests"], "warmup_s": r.warmup_s,
        "judged_requests": s["requests"], "window_text": s["window"]["text"], "whole_run": s["whole_run"],
        **_band_columns(s.get("latency_band_s")), **_closed_columns(s.get("closed")), "error": None,
        "hit_tokens": s["hit_tokens"], "prompt_tokens": s["prompt_tokens"], **_miss_columns(s.get("misses")),
    }


def _miss_columns(misses) -> dict:
    """A sweep row's miss_<cause>_tokens (the served account over the finished requests; None for
    a cause not measured, or every cause without an account)."""
    from ..engine.misses import CAUSES

    if misses is None:
        return {f"miss_{c}_tokens": None for c in CAUSES}
    return {f"miss_{c}_tokens": None if c in misses["not_measured"] else misses["tokens"][c] for c in CAUSES}



def _closed_columns(c: dict | None) -> dict:
    """A sweep row's closed-loop columns (None for the open loop)."""
    if c is None:
        return {"session_time_p50_s": None, "session_time_p90_s": None, "turns_per_minute": None,
                "think_share": None, "littles_law_holds": None}
    law = c.get("littles_law") or {}
    return {"session_time_p50_s": c["session_time_s"]["p50"], "session_time_p90_s": c["session_time_s"]["p90"],
            "turns_per_minute": c["turns_per_minute"], "think_share": c["think_share"],
            "littles_law_holds": law.get("holds")}


def _load_value(kind: str, options: dict) -> float:
    if kind == "sessions":
        return float(options["sessions"])
    return float(options["rate"] if kind == "rate" else (options.get("speedup") or 1.0))


def _verdict_columns(v: dict) -> dict:
    """A sweep row's keeps-up columns (serving/verdict.py)."""
    return {"stable": v["keeps_up"], "stable_at_centre": v.get("centre_keeps_up", v["keeps_up"]),
            "backlog_s": v["backlog_s"], "verdict_window_s": v["window_s"],
            "worst_queue_p90_s": v["worst_queue_p90_s"], "worst_window_start_s": v["worst_window_start_s"]}


def _band_columns(band) -> dict:
    """A sweep row's band columns (low / high of TTFT p50, p90, p99 and TPOT p50; None without one)."""
    out = {}
    for key, stat in (("ttft", "p50"), ("ttft", "p90"), ("ttft", "p99"), ("tpot", "p50")):
        lo, hi = band[key][stat] if band is not None else (None, None)
        out[f"{key}_{stat}_low_s"], out[f"{key}_{stat}_high_s"] = lo, hi
    return out


@dataclass(frozen=True)
class ServingSection:
    """What `kvreplay report --gpu` serves: `instances` instances of `model` on `gpu` x `tp` (x `pp`
    stages) behind `router` (with `tiers` below each pool), whose pool is what the GPUs hold after
    the weights (at `weights_dtype`), with the engine-faithful `policy`, at `speedups` (or
    `sessions`: numbers of concurrent sessions, a closed loop: lanes.py), each run judged after its
    `warmup` (warmup.py). arrivals / think_time / seed: as simulate(); `slo_ttft_ms` states the
    capacity (output.serving.capacity_lines)."""

    gpu: object
    model: object
    tp: int = 1
    time_model: object = "roofline"
    speedups: object = (0.25, 0.5, 1.0)
    policy: str = "vllm"
    block_size: int | None = None
    gpu_memory_utilization: float | None = None  # None: vLLM 0.33.0's default
    weights_dtype: str = "bf16"
    instances: int = 1
    router: str = "round-robin"
    tiers: str | None = None
    warmup: object = "auto"
    pp: int = 1
    sessions: object = None
    slo_ttft_ms: object = None
    arrivals: str | None = None
    think_time: object = None
    seed: int = 0


def serving_section(trace, section: ServingSection | None = None, *, progress=None, **keywords) -> dict:
    """The report's serving section (JSON-ready) of `section` (a ServingSection, or its fields as
    `keywords`): a load sweep (or closed-loop runs at each number of sessions, whose rows add their
    per-turn TTFT ``ttft_by_turn``, Little's law ``littles_law`` and draw ``draws``). A hybrid
    model is served with every layer as full attention, as the report's curves replay it (its note
    says so)."""
    c = ServingSection(**keywords) if section is None else replace(section, **keywords)
    options = dict(policy=c.policy, capacity=None, gpu=c.gpu, model=c.model, tp=c.tp, pp=c.pp,
                   time_model=c.time_model, block_size=c.block_size, instances=c.instances, router=c.router,
                   tiers=c.tiers, gpu_memory_utilization=c.gpu_memory_utilization, weights_dtype=c.weights_dtype,
                   kv_semantics="full", warmup=c.warmup, arrivals=c.arrivals, think_time=c.think_time, seed=c.seed,
                   slo_ttft_ms=c.slo_ttft_ms)  # (the report's curves and pool are full semantics)
    if c.sessions is not None:
        rows = _sessions_rows(trace, list(c.sessions), options, progress)
    else:
        grid = SweepGrid(speedups=list(c.speedups), policies=[c.policy], capacities=[None], instances=[c.instances],
                         routers=[c.router], tiers=[c.tiers])
        rows = load_sweep(trace, grid, progress=progress,
                          **{k: v for k, v in options.items() if k not in ("policy", "capacity", "instances", "router",
                                                                           "tiers")})
    d = resolve(trace, block_size=c.block_size, model=c.model, gpu=c.gpu, tp=c.tp,
                gpu_memory_utilization=c.gpu_memory_utilization, weights_dtype=c.weights_dtype, pp=c.pp)
    on = dict(model=d.model_spec, gpu=d.gpu_spec, tp=c.tp)
    tm = pipelined(load_time_model(c.time_model, **on, dtype=d.weights_dtype)
                   if _is_roofline(c.time_model) else load_time_model(c.time_model, **on), d.pp)
    return {"rows": rows, "capacity_source": d.capacity_source, "time_model": tm.describe(),
            "weights_dtype": d.weights_dtype, "instances": c.instances, "router": c.router, "tiers": c.tiers,
            "scheduler": Scheduler().to_dict(), "policy": c.policy, "block_size": d.block_size, "warmup": c.warmup,
            "slo_ttft_s": None if c.slo_ttft_ms is None else ms_arg(c.slo_ttft_ms, "slo_ttft_ms") / 1000.0,
            "arrivals": closed.check_options(as_trace(trace), c.arrivals, think_time=c.think_time)[0],
            "think_time": c.think_time}


def _sessions_rows(trace, sessions: list, options: dict, progress) -> list[dict]:
    """serving_section's rows at concurrent sessions: one closed-loop run per count, each row with
    its per-turn TTFT, Little's law and draw (what a sweep row leaves out)."""
    from .lanes import check_sessions

    rows = []
    for k, n in enumerate(sessions):
        if progress is not None:
            progress(k, len(sessions), "simulations")
        opts = dict(options, sessions=check_sessions(n))
        r = simulate(trace, **opts)
        s = r.summary()
        closed = s["closed"]
        law = closed.get("littles_law") or {}
        rows.append(dict(run_row(r, s, "sessions", opts), ttft_by_turn=closed["ttft_by_turn"],
                         littles_law=law.get("text"), draws=r.arrivals.get("draws"),
                         sessions_judged=closed["sessions"]))
    if progress is not None:
        progress(len(sessions), len(sessions), "simulations")
    return rows


def deployment_focus(trace, collect_options: dict, serving: dict) -> dict:
    """The report's options when it has a serving section: its operating point is the
    deployment's GPU pool (unless a capacity was asked for), and its curves include the policy
    the serving section runs."""
    out = dict(collect_options)
    sizes = resolve(trace, block_size=out.get("block_size"), model=serving["model"], gpu=serving["gpu"],
                    tp=serving.get("tp", 1), pp=serving.get("pp", 1),
                    gpu_memory_utilization=serving.get("gpu_memory_utilization"),
                    weights_dtype=serving.get("weights_dtype", "bf16"))
    if out.get("focus_capacity") is None:
        src = sizes.capacity_source
        out["focus_capacity"] = sizes.capacity
        out["focus_rule"] = "gpu-pool"
        stages = f"{src['pp']} stages x " if src.get("pp", 1) > 1 else ""
        out["focus_reason"] = (f"the KV pool of the serving section's deployment: {stages}{src['tp']} x {src['gpu']} after "
                               f"{src['model']}'s weights ({sizes.capacity:,} blocks per instance)")
    policies = out.get("policies") or ["s3fifo", "lru", "fifo"]
    policies = policies.split(",") if isinstance(policies, str) else list(policies)
    engine_policy = serving.get("policy", "vllm")
    if engine_policy not in [p.split(":")[0].strip() for p in policies]:
        policies.append(engine_policy)
    out["policies"] = policies
    return out
