"""plan: the cheapest deployment that meets an SLO at each load (serving/plan.py; docs/plan.md)."""

from __future__ import annotations

import sys

from ..errors import ConfigError
from . import common
from .sessions import add_closed_options, closed_of
from .warmup import add_warmup_options, warmup_of


def _parser_plan(sub) -> None:
    pl = sub.add_parser("plan", help="the cheapest deployment (GPU, TP, instances, tiers, router, policy) that meets "
                                     "TTFT/TPOT/E2E SLOs at each load, with its cost")
    common.add_trace_options(pl, refused=("--engine", "--warmup-fraction"))
    pl.add_argument("--model", required=True, help="the model served: a name from `kvreplay models`, or a path to a "
                    "Hugging Face config.json or a model directory holding one")
    pl.add_argument("--slo-ttft-p90", type=common.positive_duration, default=None, metavar="T", help="TTFT p90 limit, e.g. 2s")
    pl.add_argument("--slo-tpot-p90", type=common.positive_duration, default=None, metavar="T", help="TPOT p90 limit, e.g. 50ms")
    pl.add_argument("--slo-e2e-p99", type=common.positive_duration, default=None, metavar="T", help="end-to-end p99 limit, e.g. 60s")
    pl.add_argument("--window", type=common.positive_duration, default=None, metavar="T",
                    help="every SLO must hold in every window of arrivals this long (default 5m, or a quarter of "
                         "the arrival span under 20 minutes)")
    add_warmup_options(pl, "each run")
    pl.add_argument("--min-window-requests", type=common.positive_int, default=None, metavar="N",
                    help="a window binds only over N judged requests (ten times N for a p99): fewer are merged with "
                         "their neighbours (default 50: a p90 then has 5 requests above it)")
    pl.add_argument("--gpus", default="H100", help="comma-separated GPUs to consider (default H100; `kvreplay gpus`)")
    pl.add_argument("--tp", default=None, metavar="N,M,...",
                    help="tensor-parallel degrees to consider (default: each GPU's of 1, 2, 4 and 8 on which vLLM "
                         "would start the model)")
    pl.add_argument("--pp", "--pipeline-parallel-size", dest="pp", default=None, metavar="N,M,...",
                    help="pipeline-parallel degrees to consider, each with every --tp (default: 1, and TP 8 x PP 2 "
                         "and 4 for a model no TP of 1, 2, 4 or 8 starts)")
    pl.add_argument("--tiers", default="none", metavar="SPEC;SPEC",
                    help="';'-separated tier sets below each instance's pool, none for HBM only "
                         "(default none; e.g. \"none;dram=256GiB@64GB/s\")")
    pl.add_argument("--routers", default="round-robin", help="comma-separated routers (default round-robin)")
    pl.add_argument("--policies", default="vllm", help="comma-separated cache policies (default vllm)")
    pl.add_argument("--loads", default=None, metavar="X,Y,...",
                    help="loads to plan for, as multiples of the trace's arrival rate (default 1)")
    pl.add_argument("--rate-profile", default=None, metavar="diurnal|FILE",
                    help="reshape the arrivals over the span (as simulate --rate-profile)")
    pl.add_argument("--rates", default=None, metavar="R,S,...",
                    help="instead of --loads: Poisson arrivals at these requests per second")
    add_closed_options(pl, "list")
    pl.add_argument("--price", action="append", default=[], metavar="NAME=USD",
                    help="override a price: GPU=USD/h (per GPU-hour) or dram=USD/GiB-month; repeat for several")
    pl.add_argument("--pricing", choices=("on-demand", "reserved"), default="on-demand",
                    help="which catalog price of the GPUs (default on-demand)")
    pl.add_argument("--judge", choices=("pessimistic", "centre"), default="pessimistic",
                    help="judge the SLOs at the time model's pessimistic band end (default) or its centre")
    pl.add_argument("--max-instances", type=common.positive_int, default=64,
                    help="the most instances the search tries per configuration (default 64)")
    pl.add_argument("--time-model", default="roofline", help="roofline (default, calibrated), roofline-raw, FILE")
    pl.add_argument("--weights-dtype", choices=("bf16", "fp16", "fp8", "int4"), default="bf16")
    pl.add_argument("--kv-semantics", choices=("auto", "hybrid", "full"), default="auto",
                    help="a hybrid --model's layer groups: hybrid serves them with vLLM's hybrid KV cache manager, "
                         "full every layer as full attention; auto (default): hybrid where vLLM uses it and every "
                         "configuration can run it (policy vllm, no tiers), else full for all")
    common.add_max_model_len(pl, "requests past it are refused, and a configuration that refuses any misses "
                                 "the SLOs")
    pl.add_argument("--cache", default=None, metavar="DIR",
                    help="keep every simulation in DIR (named by the trace's digest and its configuration), so a "
                         "later or refined plan reuses them; SLOs are judged again each time")
    common.add_executor_options(pl, "configurations' searches",
                                "default 1: one after another, pruning what cannot beat the best")
    pl.add_argument("--output", "-o", default=None,
                    help="write the plan: .json (the whole plan), .csv or .parquet (one row per configuration tried "
                         "at each load, with its verdict and why); atomically")
    pl.add_argument("--plot", default=None, metavar="FILE",
                    help="plot cost against TTFT p90 for every run, with the Pareto frontier, the SLO and the chosen "
                         "deployment (.png, .svg or .pdf)")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    pl.add_argument("--emit", choices=("vllm", "sglang", "k8s"), default=None,
                    help="print the chosen deployment of each load instead of the table: vllm or sglang launch "
                         "commands (one per instance, and the router's), or a Kubernetes manifest (k8s)")
    pl.add_argument("--engine-style", choices=("vllm", "sglang"), default="vllm",
                    help="the scheduler the plan simulates: vllm (default) or sglang (as simulate --engine-style)")


def _cmd_plan(args) -> int:
    from ..serving.plan import plan
    from ..catalog.prices import Prices, parse_overrides
    from ..serving.slo import MIN_WINDOW_REQUESTS, SLO
    from .serving import number_list

    common.check_table_outputs(args)
    warmup = warmup_of(args)
    if args.emit and args.json:
        raise ConfigError("give --emit or --json, not both (each replaces the table on stdout)")
    if args.emit in ("vllm", "sglang") and args.emit != args.engine_style:
        raise ConfigError(f"--emit {args.emit} deploys the {args.emit} engine: plan it with --engine-style {args.emit}")
    slo = SLO(args.slo_ttft_p90, args.slo_tpot_p90, args.slo_e2e_p99)
    prices = Prices(parse_overrides(args.price), args.pricing)
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    if args.sessions is not None and (args.loads is not None or args.rates is not None):
        raise ConfigError("--sessions is the load (concurrent sessions, a closed loop): drop --loads / --rates")
    loads = _numbers(number_list, args.loads, "--loads")
    rates = _numbers(number_list, args.rates, "--rates")
    tps = None if args.tp is None else [_numbers(common.positive_int, x, "--tp") for x in split(args.tp)]
    pps = None if args.pp is None else [_numbers(common.positive_int, x, "--pp") for x in split(args.pp)]
    tiers = [None if t.strip().lower() in ("", "none", "hbm") else t.strip() for t in args.tiers.split(";")]
    _refuse_unused_prices(prices.overrides, split(args.gpus), tiers)
    common.refuse_unless(args, "judge", str(args.time_model).strip().lower() == "roofline",
                         f"chooses an end of the calibrated roofline's band: --time-model {args.time_model} has no band")
    common.refuse_unless(args, "engine", False, "does not apply: plan's simulations run compiled only")
    random = [what for what, used in (("--rates (Poisson arrivals)", rates), ("--routers random",
                                                                              "random" in split(args.routers)),
                                      ("--sessions", args.sessions is not None),
                                      ("--think-time", getattr(args, "think_time", None) is not None)) if used]
    trace = common.load(args, seed_used=" and ".join(random) or None)
    result = plan(trace, model=args.model, slo=slo, gpus=split(args.gpus), tps=tps, pps=pps, tiers=tiers,
                  routers=split(args.routers), policies=split(args.policies), loads=loads, rates=rates,
                  window_s=args.window, warmup=warmup,
                  min_window_requests=args.min_window_requests or MIN_WINDOW_REQUESTS,
                  prices=prices, judge_at=args.judge, max_instances=args.max_instances,
                  time_model=args.time_model, weights_dtype=args.weights_dtype, block_size=args.block_size,
                  rate_profile=args.rate_profile, max_model_len=args.max_model_len, cache_dir=args.cache,
                  kv_semantics=args.kv_semantics, engine_style=args.engine_style,
                  sessions=args.sessions, **closed_of(args), **({"seed": args.seed} if random else {}),
                  jobs=args.jobs, executor=args.executor, ray_address=args.ray_address, progress=args.progress)
    emitted = None
    if args.emit:
        from ..serving.emit import emit

        emitted = emit(result, args.emit)  # (before any file is written: a plan with nothing to deploy writes none)
    _write_outputs(args, result)
    if emitted is not None:
        sys.stdout.write(emitted)
    elif args.json:
        sys.stdout.buffer.write(common.encode_json(result))
    else:
        from ..output.plan import plan_text

        print(plan_text(trace, result))
    return 0


def _refuse_unused_prices(overrides: dict, gpus: list[str], tiers: list) -> None:
    """--price for a GPU the plan does not search, or a memory no tier set holds, is refused (GPUs
    compared by their catalog names: --price is matched ignoring case, aliases too, and so is --gpus)."""
    from ..serving.plan import tier_gib
    from ..serving.plan_args import gpu_names
    from ..catalog.prices import MEMORIES

    held = {kind for spec in tiers for kind in tier_gib(spec)}
    searched = set(gpu_names(gpus))
    for name in overrides:
        if name in MEMORIES and name not in held:
            raise ConfigError(f"--price {name}=...: no tier set holds {name} (--tiers {';'.join(t or 'none' for t in tiers)})")
        if name not in MEMORIES and name not in searched:
            raise ConfigError(f"--price {name}=...: {name} is not among the GPUs searched (--gpus {','.join(gpus)})")


def _numbers(parse, text, flag: str):
    """`parse(text)` (None when the flag was not given), its refusal naming `flag`."""
    import argparse

    if text is None:
        return None
    try:
        return parse(text)
    except (argparse.ArgumentTypeError, ValueError) as e:
        raise ConfigError(f"{flag}: {e}") from None


def _write_outputs(args, result) -> None:
    """--output and --plot: every file's bytes first, then the files, all or none (output/atomic.py)."""
    from ..output.atomic import write_all

    files = {}
    if args.output:
        name = args.output.lower()
        if name.endswith(".json"):
            files[args.output] = common.encode_json(result)
        elif name.endswith(".parquet"):
            files[args.output] = result.to_parquet_bytes(what=f"--output {args.output}")
        else:
            from ..output.table import to_csv
            from ..serving.plan_result import ROW_KINDS

            files[args.output] = to_csv(result.rows(), list(ROW_KINDS)).encode()
    if args.plot:
        from ..output.plan_plot import pareto_figure
        from ..output.plot import plot_bytes

        files[args.plot] = plot_bytes(pareto_figure(result), args.plot)
    write_all(files)


PARSERS = (_parser_plan,)
COMMANDS = {"plan": _cmd_plan}
