"""The serving command: ``kvreplay simulate`` (one instance; a load sweep with --speedups/--rates)."""

from __future__ import annotations

import argparse
import sys

from ..engine.misses import CAUSES
from ..errors import ConfigError
from ..policies.registry import get_policy
from ..serving import routing
from . import common
from ..serving.beam import check_beam_width
from ..serving.samples import check_n
from .sessions import add_closed_options, check_single, closed_of
from .warmup import add_warmup_options, warmup_of


def number_list(text: str) -> list[float]:
    """Comma-separated positive numbers (loads)."""
    try:
        return [positive_number(part.strip()) for part in text.split(",")]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"every load must be a positive finite number: {e}") from None


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def _size(text: str) -> str:
    """A size with units (bytes when bare), checked here so a bad one names the flag."""
    from ..units import parse_size

    try:
        parse_size(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def unit_fraction(text: str) -> float:
    value = positive_number(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


#: --weights-dtype's values (catalog/gpus.py WEIGHTS_COMPUTE_DTYPE; bytes: models.WEIGHT_DTYPE_BYTES).
WEIGHTS_DTYPES = ("bf16", "fp16", "fp8", "int4")


def _parser_simulate(sub) -> None:
    sim = sub.add_parser("simulate", help="serve a trace on a simulated engine: concurrency, scheduler, TTFT",
                         description="Serve the trace on one simulated engine instance: requests arrive at their "
                                     "timestamps, a vLLM- or SGLang-style scheduler batches them, running requests "
                                     "hold their KV blocks and the prefix cache gets the rest. Reports TTFT, TPOT, "
                                     "throughput and the hit rate under concurrency (docs/serving.md).")
    common.add_trace_options(sim, refused=("--warmup-fraction",))
    _deployment_arguments(sim)
    _scheduler_arguments(sim)
    _time_arguments(sim)
    _load_arguments(sim)
    _cluster_arguments(sim)
    _output_arguments(sim)


def _deployment_arguments(sim) -> None:
    """The deployment: the policy, the pool, the model on its GPUs (TP x PP), dtypes and vLLM's / SGLang's pool settings."""
    sim.add_argument("--policy", default=None,
                     help="prefix cache policy (default: vllm for --engine-style vllm, radix for sglang; any "
                          "policy of `kvreplay policies`)")
    sim.add_argument("--capacity", type=common.capacity, default=None,
                     help="the KV pool in blocks (or a size like 40GiB with --model); default with --gpu: what is "
                          "left of GPU memory after the weights")
    common.add_budget_options(sim)
    sim.add_argument("--weights-dtype", type=str.lower, choices=WEIGHTS_DTYPES, default=None,
                     help="with --gpu and --model: the weights' type, bf16 (default), fp16, fp8 (fp8 weights and "
                          "GEMMs; GPUs with FP8 tensor cores) or int4 (weight-only, bf16 GEMMs): the memory the "
                          "weights take before the KV pool, and the roofline's weight reads and compute peak")
    sim.add_argument("--gpu", help="GPU for the roofline time model and the default pool (see `kvreplay gpus`)")
    sim.add_argument("--tp", type=common.positive_int, default=1, help="tensor-parallel GPUs per instance (default 1)")
    sim.add_argument("--pp", "--pipeline-parallel-size", dest="pp", type=common.positive_int, default=1,
                     help="with --gpu and --model: pipeline stages per instance, each on --tp GPUs holding its layers' "
                          "weights and KV, as vLLM's --pipeline-parallel-size (default 1); the pool is the smallest "
                          "stage's and a step crosses pp - 1 stage-to-stage sends")
    sim.add_argument("--dp", "--data-parallel-size", dest="dp", type=common.positive_int, default=1,
                     help="data-parallel ranks, each an engine with its own scheduler and pool on --tp GPUs behind "
                          "one API server that picks each request's rank, as vLLM's --data-parallel-size (default 1); "
                          "an MoE's ranks step in lockstep, its experts split over every rank's GPUs, their tokens "
                          "exchanged at each MoE layer (an all-gather and a reduce-scatter, timed from NCCL) "
                          "(docs/clusters.md, \"Data parallelism\")")
    sim.add_argument("--enable-expert-parallel", action="store_true",
                     help="with --model (an MoE) and --dp or --tp: whole experts on each GPU instead of each expert "
                          "split over them, as vLLM's flag (the same weights per GPU; the experts' time changes)")
    sim.add_argument("--gpu-memory-utilization", type=unit_fraction, default=None,
                     help="fraction of the GPU's memory (as the device reports it) vLLM may use for weights, "
                          "the profile run's peak, CUDA graphs and KV, as vLLM's flag (default 0.92, as vLLM 0.33.0)")
    sim.add_argument("--kv-cache-memory", type=_size, default=None, metavar="SIZE",
                     help="with --gpu and --model: the KV memory per GPU (e.g. 20GiB, 21474836480), instead of what "
                          "the profile leaves; ignores --gpu-memory-utilization, as vLLM's --kv-cache-memory-bytes")
    sim.add_argument("--num-gpu-blocks-override", type=common.positive_int, default=None, metavar="N",
                     help="with --gpu and --model: the pool's block count whatever the memory holds, as vLLM's flag "
                          "(applied after --kv-cache-memory, as vLLM does)")
    sim.add_argument("--enforce-eager", action="store_true",
                     help="with --gpu and --model: vLLM without CUDA graphs (as vLLM's flag): the pool's budget "
                          "takes no CUDA graph memory")
    sim.add_argument("--language-model-only", action="store_true",
                     help="with --gpu and --model: a multimodal model served as text only, as vLLM's flag (no vision "
                          "tower loaded, no image encoder profiled, so a larger pool)")
    sim.add_argument("--mem-fraction-static", type=float, default=None, metavar="F",
                     help="with --engine-style sglang, --gpu and --model: SGLang's share of the memory for weights "
                          "and KV (default: SGLang 0.5.23's for the GPU and TP)")


def _scheduler_arguments(sim) -> None:
    """The engine style and its scheduler's settings."""
    sim.add_argument("--engine-style", choices=("vllm", "sglang", "trtllm"), default="vllm",
                     help="scheduler: vllm (v1: decode first, chunked prefill, preempt the newest; default), "
                          "sglang (prefill batches first, reserves decode room, retracts) or trtllm (TensorRT-LLM's "
                          "in-flight batching: a capacity scheduler, then a micro-batch; serves --policy trtllm, "
                          "needs --capacity)")
    sim.add_argument("--capacity-scheduler-policy", choices=("guaranteed_no_evict", "max_utilization"), default=None,
                     help="trtllm: guaranteed_no_evict (default: a request starts once the blocks to finish every "
                          "scheduled one are free) or max_utilization (the next step's blocks; pauses the newest)")
    sim.add_argument("--context-chunking", choices=("first_come_first_served", "equal_progress"), default=None,
                     help="trtllm: enable chunked context with this chunking policy (default: off, as TensorRT-LLM)")
    sim.add_argument("--schedule", choices=("fcfs", "lpm"), default="fcfs",
                     help="sglang: waiting-queue order, fcfs (default) or lpm (longest cached prefix first)")
    sim.add_argument("--max-num-batched-tokens", type=common.positive_int, default=8192,
                     help="tokens per step (vllm; trtllm's max_num_tokens; default 8192)")
    sim.add_argument("--max-num-seqs", type=common.positive_int, default=None,
                     help="running requests at most (default 256; trtllm's max_batch_size, default 2048)")
    sim.add_argument("--no-chunked-prefill", action="store_true", help="a prompt waits for a step that fits it whole")
    sim.add_argument("--chunked-prefill-size", type=common.positive_int, default=None,
                     help="sglang: prefill tokens per step (default 8192, SGLang's value for 60-160 GB GPUs)")
    sim.add_argument("--max-prefill-tokens", type=common.positive_int, default=None,
                     help="sglang without chunked prefill: prompt tokens per prefill batch (default 16384)")


def _time_arguments(sim) -> None:
    """The time model and the host CPU's terms."""
    sim.add_argument("--time-model", default=None,
                     help="instant, roofline (default with --gpu and --model: calibrated on measured kernels, "
                          "with error bands), roofline-raw (uncalibrated), a Dynamo profile FILE.npz or a "
                          "polynomial FILE.json")
    sim.add_argument("--mfu", type=unit_fraction, default=None,
                     help="roofline-raw (giving it picks the uncalibrated roofline): compute efficiency (default 0.5)")
    sim.add_argument("--mbu", type=unit_fraction, default=None, help="roofline-raw: bandwidth efficiency (default 0.6)")
    sim.add_argument("--step-overhead-ms", type=common.milliseconds, default=None, metavar="MS",
                     help="roofline-raw: fixed cost per step in ms, or a duration with its unit (default 0)")
    sim.add_argument("--host-cpu", choices=("vllm", "vllm-sync", "none"), default=None,
                     help="what the host CPU adds outside the GPU's steps: vllm (vLLM 0.33.0's API server, engine "
                          "core and async scheduling, fitted on measured serving runs; the default with the "
                          "calibrated roofline), vllm-sync (the same without async scheduling: vLLM before 0.14 or "
                          "--no-async-scheduling), none (the default with any other time model)")


def _load_arguments(sim) -> None:
    """The arrivals (open or closed loop) and a sweep's grid and executor."""
    load = sim.add_mutually_exclusive_group()
    load.add_argument("--speedup", type=positive_number, default=None,
                      help="divide the trace's inter-arrival times by X (2: twice the load)")
    load.add_argument("--rate", type=positive_number, default=None,
                      help="Poisson arrivals at R requests/s instead of the timestamps (seeded by --seed)")
    load.add_argument("--speedups", type=number_list, default=None, metavar="X,Y,...",
                      help="load sweep: one simulation per speedup (table and --plot of TTFT and hit rate vs load)")
    load.add_argument("--rates", type=number_list, default=None, metavar="R,S,...",
                      help="load sweep over Poisson rates (requests/s)")
    add_closed_options(sim, "one")
    sim.add_argument("--policies", default=None, metavar="P,Q,...",
                     help="load sweep: the policies to compare (default: --policy)")
    sim.add_argument("--capacities", type=common.capacities_or_sizes, default=None, metavar="C,D,...",
                     help="load sweep: the pools to compare, in blocks or sizes with --model (default: --capacity)")
    sim.add_argument("--instances-list", type=_positive_ints, default=None, metavar="N,M,...", help="sweep: the cluster sizes to compare (default: --instances)")
    sim.add_argument("--routers", default=None, metavar="R,S,...",
                     help="sweep: the routers to compare (default: --router)")
    sim.add_argument("--tier-list", default=None, metavar="SPEC;SPEC;...",
                     help="sweep: the --tiers to compare, separated by ';' (none: HBM only), e.g. "
                          "\"none;dram=64GiB@64GB/s;dram=256GiB@64GB/s\"")
    common.add_executor_options(sim, "a sweep's runs")


def _cluster_arguments(sim) -> None:
    """SLOs, the instances and their router, disaggregation, the context limit, the warm-up, tiers."""
    sim.add_argument("--slo-ttft", type=common.positive_duration, default=None, metavar="DURATION",
                     help="goodput counts requests whose TTFT is at most this, e.g. 2s or 500ms")
    sim.add_argument("--slo-tpot", type=common.positive_duration, default=None, metavar="DURATION",
                     help="goodput counts requests whose TPOT is at most this, e.g. 50ms")
    sim.add_argument("--instances", type=common.positive_int, default=1,
                     help="identical engine instances, each with the pool and time model above (default 1)")
    sim.add_argument("--router", choices=routing.names(), default="round-robin",
                     help="with --instances: round-robin by arrival (default), random (seeded by --seed), "
                          "session (sticky: by session id, else by the request's first block), least-loaded "
                          "(fewest requests in flight), or a cache-aware preset: kv-aware (= dynamo, NVIDIA "
                          "Dynamo's KV router cost), sglang (SGLang router's cache-aware policy), llm-d "
                          "(weighted prefix/KV/queue scorers), mooncake (Conductor: least estimated TTFT); "
                          "docs/clusters.md, \"Routers\"")
    sim.add_argument("--prefill-instances", type=common.positive_int, default=None, metavar="P",
                     help="prefill/decode disaggregation: P prefill instances behind --router (with "
                          "--decode-instances); each request's KV then moves to the least loaded decode instance")
    sim.add_argument("--decode-instances", type=common.positive_int, default=None, metavar="D",
                     help="prefill/decode disaggregation: D decode instances (with --prefill-instances)")
    sim.add_argument("--rate-profile", default=None, metavar="diurnal|FILE",
                     help="reshape the arrivals so their rate follows a profile over the span: diurnal (peak 14:00, "
                          "3:1) or a CSV of fraction,multiplier (docs/serving.md, \"Rate profiles\")")
    common.add_max_model_len(sim, "requests whose prompt + outputs exceed it are refused at arrival and counted "
                                  "apart, as vLLM refuses them")
    add_warmup_options(sim, "the run")
    sim.add_argument("--kv-link", default=None, metavar="BANDWIDTH",
                     help="disaggregation: the link a prompt's KV crosses to its decode instance, e.g. 25GB/s "
                          "(needs --model; default: at once)")
    sim.add_argument("--router-lag-ms", type=common.milliseconds, default=0.0, metavar="MS",
                     help="a state-aware router reads the instances' load as of a snapshot taken every MS ms (or a "
                          "duration with its unit, e.g. 1s; default 0: current)")
    sim.add_argument("--router-option", action="append", default=[], metavar="NAME=VALUE",
                     help="a router preset's parameter (e.g. prefill_load_scale=2 for kv-aware); repeatable")
    sim.add_argument("--tiers", default=None, metavar="SPEC",
                     help="memory tiers below each instance's GPU pool: dram=64GiB@64GB/s,ssd=2TiB@7GB/s:fifo "
                          "(NAME=SIZE[@BANDWIDTH][:lru|fifo]; sizes in blocks or bytes with --model; hbm=SIZE sets "
                          "the pool); a lower-tier hit costs its load time (docs/clusters.md, \"Tiers\")")
    sim.add_argument("--global-store", default=None, metavar="SIZE@BANDWIDTH",
                     help="a store every instance shares, below its tiers (Mooncake Store, LMCache): 3TiB@25GB/s")
    sim.add_argument("--tier-copies", choices=("move", "keep"), default="move",
                     help="a block loaded back into HBM leaves the tier below (move, default) or keeps its copy "
                          "(keep: as vLLM's CPU offload, HiCache, LMCache and Mooncake Store do)")
    sim.add_argument("--tier-overlap", action="store_true",
                     help="loading from the tiers overlaps the step's compute layer by layer (max of the two; "
                          "default: the load comes first)")


def _output_arguments(sim) -> None:
    """Speculative decoding, parallel sampling, output KV, policy parameters, and the outputs."""
    sim.add_argument("--speculative", default=None, metavar="ngram|eagle|mtp|draft:MODEL",
                     help="speculative decoding (vLLM style): each decode step verifies K draft tokens from an n-gram "
                          "lookup, an EAGLE head, the model's MTP module or a draft model; accepted tokens per step "
                          "from published figures for the method and model, or --acceptance (docs/engines.md)")
    sim.add_argument("--num-speculative-tokens", type=common.positive_int, default=None, metavar="K",
                     help="with --speculative: draft tokens per step")
    sim.add_argument("--acceptance", default=None, metavar="A1,A2,...",
                     help="with --speculative: the conditional acceptance rate of each draft position (position p "
                          "accepted given 1..p-1 were), one for all positions or K of them")
    sim.add_argument("--n", type=int, default=None, metavar="N",
                     help="parallel sampling: N completions for every request whose record gives no n (default 1), "
                          "served as vLLM serves them, N child requests sharing the prompt's KV (vLLM style, one "
                          "instance)")
    sim.add_argument("--beam-width", type=int, default=None, metavar="W",
                     help="beam search of width W (2..10) for every request whose record gives no beam_width, served "
                          "as vLLM's API server runs it: rounds of one-token requests, one per live beam, the beams "
                          "chosen by seeded synthetic logprobs (vLLM style, one instance; default 1: none)")
    sim.add_argument("--no-output-kv", action="store_true",
                     help="generated tokens take no KV blocks (the sequential replay's assumption)")
    common.add_param_options(sim)
    sim.add_argument("--output", "-o", help="write the results: .json (report), .csv or .parquet (per request; a "
                                             "load sweep writes its rows), atomically")
    sim.add_argument("--plot", help="write a figure (.png, .svg, .pdf): TTFT CDF and the engine over time; for a "
                                    "load sweep, TTFT and hit rate against load")
    sim.add_argument("--json", action="store_true", help="print the JSON report on stdout instead of the summary")
    sim.add_argument("--summary-only", action="store_true", help="leave per_request out of the JSON report")

def _options(args, trace) -> dict:
    """simulate()'s keyword arguments from the command line."""
    from ..serving.simulate import Scheduler
    from ..serving.styles import STYLE_POLICY

    warmup = warmup_of(args)
    if args.engine == "reference":
        raise ConfigError("the serving simulator runs compiled only: --engine reference does not apply")
    _refuse_what_cannot_apply(args)
    capacity = args.capacity
    if capacity is not None and args.bytes_per_token is not None:
        capacity = common.resolve_budget(args, trace, [capacity])[0][0]  # (simulate sizes KV from --model)
    if args.model is None and (args.kv_dtype is not None or args.kv_layers is not None):
        raise ConfigError("--kv-dtype and --kv-layers need --model")
    if args.weights_dtype is not None and (args.gpu is None or args.model is None):
        raise ConfigError("--weights-dtype sizes the model's weights on the GPUs (before the KV pool) and the "
                          "roofline's GEMMs: it needs --gpu and --model")
    weights_dtype = args.weights_dtype or "bf16"
    time_model = args.time_model
    if time_model is None:
        if args.gpu is None or args.model is None:
            raise ConfigError("simulate needs a time model: --gpu NAME --model NAME (roofline), --time-model "
                              "FILE.npz (a Dynamo profile) or FILE.json, or --time-model instant (no service time)")
        time_model = "roofline"
    roofline = {k: v for k, v in (("mfu", args.mfu), ("mbu", args.mbu)) if v is not None}
    if args.step_overhead_ms is not None:
        roofline["overhead_s"] = args.step_overhead_ms / 1000.0
    if roofline and str(time_model).lower() not in ("roofline", "roofline-raw"):
        raise ConfigError("--mfu, --mbu and --step-overhead-ms set the uncalibrated roofline (--time-model roofline-raw)")
    if roofline:  # they make the roofline the uncalibrated one
        from ..serving.timing import load_time_model

        time_model = load_time_model("roofline-raw", model=args.model, gpu=args.gpu, tp=args.tp,
                                     kv_dtype=args.kv_dtype or "bf16", dtype=weights_dtype, **roofline)
    scheduler = _scheduler(args)
    policy = args.policy
    # a policy parameter is refused naming a policy that would run without it: each of --policies, else
    # --policy's (or the engine style's)
    params = {}
    for name in ([p.split(":")[0].strip() for p in args.policies.split(",") if p.strip()] if args.policies
                 else [policy or STYLE_POLICY[args.engine_style]]):
        params = common.given_params(args, name)
    if params and args.policies:
        raise ConfigError(f"--{next(iter(params)).replace('_', '-')}: in a sweep over --policies, give a policy's "
                          "parameters in the list (name:key=value, e.g. s3fifo:small_ratio=0.2)")
    return dict(policy=policy, capacity=capacity, block_size=args.block_size, engine_style=args.engine_style,
                time_model=time_model, model=args.model, gpu=args.gpu, tp=args.tp, pp=getattr(args, "pp", 1),
                dp=getattr(args, "dp", 1), enable_expert_parallel=getattr(args, "enable_expert_parallel", False),
                gpu_memory_utilization=args.gpu_memory_utilization, seed=args.seed, scheduler=scheduler,
                slo_ttft_ms=_ms(args.slo_ttft), slo_tpot_ms=_ms(args.slo_tpot), output_kv=not args.no_output_kv,
                instances=args.instances, router=args.router, router_lag_ms=args.router_lag_ms,
                tiers=args.tiers, global_store=args.global_store, tier_copies=args.tier_copies,
                tier_overlap=args.tier_overlap, kv_dtype=args.kv_dtype, kv_layers=args.kv_layers,
                weights_dtype=weights_dtype,
                prefill_instances=args.prefill_instances,
                decode_instances=args.decode_instances, kv_link=args.kv_link, max_model_len=args.max_model_len,
                rate_profile=args.rate_profile, kv_semantics=args.kv_semantics, warmup=warmup,
                kv_cache_memory=args.kv_cache_memory, num_gpu_blocks_override=args.num_gpu_blocks_override,
                enforce_eager=args.enforce_eager, language_model_only=args.language_model_only,
                mem_fraction_static=args.mem_fraction_static, host=args.host_cpu,
                router_options=_router_options(args.router_option), **closed_of(args),
                speculative=args.speculative, num_speculative_tokens=args.num_speculative_tokens,
                acceptance=args.acceptance, n=args.n, beam_width=args.beam_width, **params)


def _cmd_simulate(args) -> int:
    """simulate: parse (the trace, simulate()'s keywords), then one run or a load sweep, printed."""
    common.check_table_outputs(args)
    check_n(args.n)  # (an argument error before the trace is read)
    check_beam_width(args.beam_width)
    routers = {args.router, *(r.strip() for r in (args.routers or "").split(","))}
    random = [what for what, used in (("--rate/--rates (Poisson arrivals)", args.rate or args.rates),
                                      ("--router random", "random" in routers)) if used]
    trace = common.load(args, sessions_used="the session router" if "session" in routers else None,
                        seed_used=" and ".join(random) or None)
    options = _options(args, trace)
    check_single(args)
    grid = args.instances_list or args.routers or args.tier_list
    sweeping = args.speedups is not None or args.rates is not None or args.sessions_list is not None or bool(grid)
    common.refuse_unless(args, "summary_only", not sweeping, "applies to one run's JSON report, not a sweep's rows")
    if not sweeping and (args.policies or args.capacities):
        raise ConfigError("--policies and --capacities compare runs in a load sweep: add --speedups or --rates "
                          "(one run: --policy, --capacity)")
    if not sweeping and (args.jobs > 1 or args.executor != "local" or args.ray_address):
        raise ConfigError("--jobs, --executor and --ray-address run a sweep's runs: add --speedups, --rates, "
                          "--instances-list, --routers or --tier-list")
    if sweeping:
        return _simulate_sweep(args, trace, options)
    report, checked = _simulate_one(args, trace, options)
    return _print_one(args, trace, report, checked)


def _simulate_sweep(args, trace, options: dict) -> int:
    """A load sweep's grid from the command line, run (load_sweep) and written."""
    from ..serving.simulate import load_sweep

    if args.sessions is not None and args.sessions_list is None:
        args.sessions_list = [args.sessions]
    if args.speedups is None and args.rates is None and args.sessions_list is None:
        args.speedups = [args.speedup or 1.0] if args.rate is None else None
        args.rates = [args.rate] if args.rate is not None else None
    policies = [p.strip() for p in args.policies.split(",") if p.strip()] if args.policies else None
    capacities = None
    if args.capacities is not None:
        if args.capacities == "auto":
            raise ConfigError("--capacities auto does not apply to a load sweep: give block counts or sizes")
        capacities = (common.resolve_budget(args, trace, args.capacities)[0] if args.bytes_per_token is not None
                      else list(args.capacities))
    if policies:
        options.pop("policy")
    if capacities:
        options.pop("capacity")
    instances = args.instances_list or [options.pop("instances")]
    options.pop("instances", None)
    routers = [r.strip() for r in args.routers.split(",") if r.strip()] if args.routers else [options["router"]]
    unknown = [r for r in routers if r not in routing.names()]
    if unknown:
        raise ConfigError(f"--routers: unknown router {unknown[0]!r} (known: {', '.join(routing.names())})")
    options.pop("router")
    tier_list = [options.pop("tiers")]
    if args.tier_list:
        tier_list = [None if t.strip().lower() in ("", "none", "hbm") else t.strip() for t in args.tier_list.split(";")]
    rows = load_sweep(trace, speedups=args.speedups, rates=args.rates, sessions=args.sessions_list,
                      policies=policies, capacities=capacities, instances=instances, routers=routers,
                      tiers=tier_list, jobs=args.jobs, executor=args.executor, ray_address=args.ray_address,
                      progress=args.progress, **options)
    return _emit_sweep(args, trace, rows)


def _simulate_one(args, trace, options: dict):
    """One run (and, with speculative decoding, the same run without it; for a run that does not
    keep up, the fixes checked): (report, checked)."""
    from ..serving.simulate import simulate

    report = simulate(trace, speedup=args.speedup, rate=args.rate, sessions=args.sessions, progress=args.progress,
                      **options)
    if report.speculative is not None:  # the same run without speculation, for the TPOT change
        from ..serving.speculative import compare

        off = dict(options, speculative=None, num_speculative_tokens=None, acceptance=None)
        compare(report, simulate(trace, speedup=args.speedup, rate=args.rate, sessions=args.sessions, **off))
    checked = None
    if not args.json and not report.summary()["keeps_up"]["keeps_up"]:
        from ..serving.fixcheck import check_fix

        checked = check_fix(trace, dict(options, speedup=args.speedup, rate=args.rate, sessions=args.sessions), report,
                            progress=args.progress)
    return report, checked


def _print_one(args, trace, report, checked) -> int:
    """One run's outputs: its files (atomically, all or none), then the JSON or the summary."""
    from ..output.atomic import write_all

    files = {}  # every output's bytes first, then the files: a failure leaves none behind
    if args.output:
        name = args.output.lower()
        if name.endswith(".json"):
            files[args.output] = common.encode_json(report.to_dict(per_request=not args.summary_only))
        else:
            columns = report.request_columns()
            kinds = {**REQUEST_KINDS, **(CLOSED_KINDS if report.closed is not None else {}),
                     **{k: "int" for k in columns if k.startswith("miss_")}}
            files[args.output] = _table_bytes(args.output, columns, kinds)
    if args.plot:
        from ..output import plot
        from ..output.serving import trace_name

        files[args.plot] = plot.plot_bytes(plot.serving_figure(report, title=trace_name(trace)), args.plot)
    write_all(files)
    if args.json:
        sys.stdout.buffer.write(common.encode_json(report.to_dict(per_request=not args.summary_only)))
    else:
        from ..output.serving import simulate_summary

        from ..output.speculative import speculative_lines

        print("\n".join([simulate_summary(trace, report, checked=checked), *speculative_lines(report)]))
        if report.samples is not None:
            from ..output.samples import samples_lines

            print("\n".join(samples_lines(report.samples)))
        if report.beam is not None:
            from ..output.beam import lines as beam_lines

            print("\n".join(beam_lines(report.beam)))
        served_headroom = _served_headroom(args, trace, report)
        if served_headroom is not None:
            from ..output.misses import headroom_lines

            print("\n".join(headroom_lines(served_headroom)))
    return 0


def _served_headroom(args, trace, report):
    """The headroom down to the served hit rate (analysis/headroom.py), for one instance without
    tiers: the ceiling, belady and the policy's sequential replay at the pool's size, then served;
    in GPU-seconds of prefill with the roofline's --model and --gpu. None where it does not apply."""
    from ..analysis.headroom import headroom
    from ..engine.replay import replay

    if report.misses is None or report.instances > 1 or get_policy(report.policy).bound or \
            report.closed is not None or report.samples is not None or report.beam is not None:
        # (a closed loop serves its requests out of trace order, or copies them; n > 1 serves the fanned-out trace)
        return None
    sequential = replay(trace, report.policy, report.capacity_blocks, report.block_size, miss_account=False,
                        **report.params)
    cost = None
    if args.model and args.gpu and report.time_model.get("time_model") == "roofline":
        from ..serving.prefill_cost import PrefillCost

        cost = PrefillCost(args.model, args.gpu, args.tp, chunk=report.scheduler["max_num_batched_tokens"],
                           kv_dtype=report.time_model.get("kv_dtype", "bf16"),
                           dtype=report.time_model.get("dtype", "bf16"))
    out = headroom(trace, sequential, served_hit_tokens=report.hit_tokens, requests=report.counted, cost=cost)
    if cost is not None:
        out["cost_note"] = cost.note
    return out


REQUEST_KINDS = {"arrival_s": "float", "scheduled_s": "float", "first_token_s": "float", "finish_s": "float",
                 "prompt_tokens": "int", "hit_tokens": "int", "output_tokens": "int", "preemptions": "int",
                 "status": "str", "instance": "int", "judged": "bool"}
#: a closed loop's extra columns (closed_stats: its session, its rank there, its think time)
CLOSED_KINDS = {"session": "int", "turn": "int", "think_s": "float"}
SWEEP_KINDS = {"load_kind": "str", "load": "float", "policy": "str", "capacity_blocks": "int", "kv_semantics": "str",
               "instances": "int",
               "router": "str", "tiers": "str", "ttft_p50_s": "float", "ttft_p90_s": "float", "ttft_p99_s": "float",
               "tpot_p50_s": "float", "hit_rate": "float", "hbm_hit_rate": "float", "sequential_hit_rate": "float",
               "load_balance": "float", "requests_per_s": "float", "goodput_per_s": "float", "slo_attainment": "float",
               "slo_ttft_s": "float", "slo_tpot_s": "float",
               "preemptions": "int", "peak_running": "int", "stable": "bool", "stable_at_centre": "bool",
               "backlog_s": "float", "warmup_s": "float", "judged_requests": "int",
               "verdict_window_s": "float", "worst_queue_p90_s": "float", "worst_window_start_s": "float",
               "finished": "int", "rejected": "int", "error": "str",
               # a closed loop's (empty for the open loop)
               "session_time_p50_s": "float", "session_time_p90_s": "float", "turns_per_minute": "float",
               "think_share": "float", "littles_law_holds": "bool",
               "hit_tokens": "int", "prompt_tokens": "int", **{f"miss_{c}_tokens": "int" for c in CAUSES},
               # the calibrated roofline's band (empty for other time models)
               **{f"{k}_{e}_s": "float" for k in ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50") for e in ("low", "high")}}


def _table_bytes(path: str, columns: dict, kinds: dict) -> bytes:
    """A table as CSV or Parquet bytes (by `path`'s extension)."""
    import numpy as np

    data = {k: (v.tolist() if isinstance(v, np.ndarray) else list(v)) for k, v in columns.items()}
    data = {k: [None if isinstance(x, float) and x != x else x for x in v] for k, v in data.items()}
    if path.lower().endswith(".parquet"):
        from ..tables import parquet_bytes

        return parquet_bytes(data, kinds, what=f"--output {path}")
    from ..output.table import to_csv

    n = len(next(iter(data.values()))) if data else 0
    rows = [{k: data[k][i] for k in kinds} for i in range(n)]
    return to_csv(rows, list(kinds)).encode()


def _emit_sweep(args, trace, rows: list[dict]) -> int:
    from ..output.atomic import write_all

    files = {}  # every output's bytes first, then the files: a failure leaves none behind
    if args.output:
        if args.output.lower().endswith(".json"):
            files[args.output] = common.encode_json({"trace": trace.source, "rows": rows})
        else:
            files[args.output] = _table_bytes(args.output, {k: [r.get(k) for r in rows] for k in SWEEP_KINDS},
                                              SWEEP_KINDS)
    if args.plot:
        from ..output import plot
        from ..output.serving import trace_name

        title = trace_name(trace) + (f"; {args.model} on {args.tp} x {args.gpu} per instance" if getattr(args, "gpu", None) else "")
        files[args.plot] = plot.plot_bytes(plot.load_figure([r for r in rows if r["error"] is None], title=title),
                                           args.plot)
    write_all(files)
    if args.json:
        sys.stdout.buffer.write(common.encode_json({"trace": trace.source, "rows": rows}))
    else:
        from ..output.serving import load_table

        print(load_table(trace, rows))
    failed = [r for r in rows if r["error"] is not None]
    for r in failed:
        print(f"kvreplay: the run at load {r['load']:g} ({r['policy']}, {r['instances']} instance(s), router "
              f"{r['router']}, tiers {r['tiers']}) failed: {r['error']}", file=sys.stderr)
    if failed:
        print(f"kvreplay: {len(failed)} of {len(rows)} runs failed; the other rows are written", file=sys.stderr)
        return 3 if any(r.get("internal_error") for r in failed) else 2
    return 0


PARSERS = (_parser_simulate,)
COMMANDS = {"simulate": _cmd_simulate}


def _router_options(items) -> dict:
    """NAME=VALUE pairs of --router-option, the values as numbers."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ConfigError(f"--router-option wants NAME=NUMBER, got {item!r}")
    return out


def _refuse_what_cannot_apply(args) -> None:
    """A flag whose setting cannot change this run is refused (never accepted and ignored)."""
    refuse = common.refuse_unless
    time_model = str(args.time_model or "roofline").lower()
    roofline = time_model in ("roofline", "roofline-raw")
    refuse(args, "gpu", roofline or args.model is not None,
           f"times the steps (the roofline) or holds --model's weights and KV: with --time-model {args.time_model} "
           "and no --model it has no part")
    refuse(args, "tp", args.gpu is not None, "splits the model over --gpu's GPUs: add --gpu")
    refuse(args, "gpu_memory_utilization", args.gpu is not None and args.model is not None,
           "sizes the pool from --gpu and --model's weights: add --gpu and --model")
    refuse(args, "gpu_memory_utilization", args.kv_cache_memory is None,
           "does not apply with --kv-cache-memory, which gives the KV memory itself (as vLLM's flags)")
    refuse(args, "bytes_per_token", any(isinstance(c, str) for c in [args.capacity, *(args.capacities or [])]),
           "turns a size (--capacity 40GiB) into blocks: the pool here is given in blocks")
    sglang = args.engine_style == "sglang"
    refuse(args, "max_num_batched_tokens", not sglang,
           "is vLLM's step budget: SGLang's are --chunked-prefill-size and --max-prefill-tokens")
    refuse(args, "chunked_prefill_size", sglang and not args.no_chunked_prefill,
           "is SGLang's chunk (with --engine-style sglang, without --no-chunked-prefill)")
    refuse(args, "max_prefill_tokens", sglang, "is SGLang's prefill batch budget: add --engine-style sglang")
    unknown = [r for r in (args.routers or "").split(",") if r.strip() and r.strip() not in routing.names()]
    if unknown:
        raise ConfigError(f"--routers: unknown router {unknown[0].strip()!r} (known: {', '.join(routing.names())})")
    cluster = args.instances > 1 or bool(args.instances_list and max(args.instances_list) > 1) \
        or args.prefill_instances is not None
    refuse(args, "router", cluster, "routes requests between instances: add --instances N (N > 1)")
    refuse(args, "routers", cluster, "compares routers between instances: add --instances N or --instances-list")
    refuse(args, "router_lag_ms", cluster, "delays the router's view of the instances: add --instances N (N > 1)")
    tiered = bool(args.tiers or args.global_store or args.tier_list)
    refuse(args, "tier_copies", tiered, "applies with --tiers or --global-store (what a load from a tier leaves "
                                        "behind)")
    refuse(args, "tier_overlap", tiered, "overlaps loads from the tiers with compute: add --tiers or --global-store")
    refuse(args, "summary_only", bool(args.json or args.output),
           "leaves per_request out of the JSON report: add --json or --output")
    for one, many in (("policy", "policies"), ("capacity", "capacities"), ("instances", "instances_list"),
                      ("router", "routers"), ("tiers", "tier_list")):
        refuse(args, one, not common.given(args, many),
               f"and --{many.replace('_', '-')} both give the sweep's {one}: give one of them")
    refuse(args, "param_last_token_recompute", False,
           "is the sequential replay's (kvreplay run): the simulated vLLM scheduler computes a fully cached "
           "prompt's last token itself, as vLLM's does")


def _ms(seconds):
    """A duration flag's seconds as the milliseconds simulate() takes (None stays None)."""
    return None if seconds is None else seconds * 1e3


def _positive_ints(text: str) -> list[int]:
    """N,M,...: whole numbers >= 1."""
    return [common.positive_int(part) for part in text.split(",") if part.strip()]


def _scheduler(args):
    """The scheduler the flags give, each style's flags refused under another style."""
    from ..serving.simulate import Scheduler

    style = args.engine_style
    if args.schedule != "fcfs" and style != "sglang":
        raise ConfigError("--schedule lpm is SGLang's: add --engine-style sglang")
    for flag, value in (("--chunked-prefill-size", args.chunked_prefill_size),
                        ("--max-prefill-tokens", args.max_prefill_tokens)):
        if value is not None and style != "sglang":
            raise ConfigError(f"{flag} is SGLang's: add --engine-style sglang")
    for flag, value in (("--capacity-scheduler-policy", args.capacity_scheduler_policy),
                        ("--context-chunking", args.context_chunking)):
        if value is not None and style != "trtllm":
            raise ConfigError(f"{flag} is TensorRT-LLM's: add --engine-style trtllm")
    given = {"max_num_batched_tokens": args.max_num_batched_tokens, "schedule_policy": args.schedule}
    if args.max_num_seqs is not None:
        given["max_num_seqs"] = args.max_num_seqs
    if style == "trtllm":
        if args.no_chunked_prefill and args.context_chunking is not None:
            raise ConfigError("--no-chunked-prefill and --context-chunking contradict each other: give one")
        given["chunked_prefill"] = args.context_chunking is not None
        given["capacity_scheduler_policy"] = args.capacity_scheduler_policy or "guaranteed_no_evict"
        given["context_chunking_policy"] = args.context_chunking or "first_come_first_served"
    else:
        given["chunked_prefill"] = not args.no_chunked_prefill
        for name in ("chunked_prefill_size", "max_prefill_tokens"):
            if getattr(args, name) is not None:
                given[name] = getattr(args, name)
    return Scheduler.for_style(style, **given)
