"""Replay commands: run, sweep, mrc, report, demo (each parser next to its handler)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from ..errors import ConfigError
from ..output.serving import tiers_text
from ..progress import tell
from ..output.summary import MRC_COLUMNS, SWEEP_COLUMNS, budget_heading, metrics_summary, over_time_table, run_summary, with_budget
from . import common
from .sessions import add_closed_options, closed_of
from .warmup import add_warmup_options, serving_warmup

DEFAULT_CAPACITY = 4096  # blocks, when run is given no --capacity


def _parser_run(sub) -> None:
    run = sub.add_parser("run", help="replay a trace under one policy and capacity")
    common.add_trace_options(run)
    run.add_argument("--policy", default=None, help="a policy name, case-insensitive (default s3fifo, or vllm for a "
                                                    "hybrid --model under hybrid semantics; see `kvreplay policies`)")
    run.add_argument("--capacity", type=common.capacity, default=None,
                     help="cache capacity in blocks, or a size like 80GiB with --model or --bytes-per-token "
                          "(default 4096 blocks; unbounded for policies where capacity is optional)")
    common.add_budget_options(run)
    common.add_param_options(run)
    common.add_price_options(run)
    run.add_argument("--tiers", default=None, metavar="SPEC",
                     help="memory tiers below the cache, which is then the GPU pool: dram=64GiB,ssd=2TiB:fifo "
                          "(NAME=SIZE[:lru|fifo], sizes in blocks or bytes with --model; hbm=SIZE sets the cache); "
                          "evicted blocks are demoted, hits counted per tier (docs/clusters.md, \"Tiers\")")
    run.add_argument("--tier-copies", choices=("move", "keep"), default="move",
                     help="a block loaded back into HBM leaves the tier below (move, default) or keeps its copy")
    run.add_argument("--over-time", type=common.over_time, metavar="DURATION|Nreq",
                     help="also show the hit rate per window of trace time (600s, 10m) or of N requests (1000req)")
    run.add_argument("--gpu", default=None,
                     help="with --model: the headroom's gaps also in GPU-seconds of prefill on this GPU (the serving "
                          "time model; see `kvreplay gpus`)")
    run.add_argument("--tp", type=common.positive_int, default=1, help="with --gpu: tensor-parallel GPUs (default 1)")
    run.add_argument("--output", "-o", help="write the JSON report to this file (atomically)")
    run.add_argument("--json", action="store_true", help="print the JSON report on stdout instead of a summary")
    run.add_argument("--summary-only", action="store_true", help="leave per_request out of the JSON report")


def _cmd_run(args) -> int:
    from ..engine.replay import replay

    semantics = _run_policy(args)
    params = common.given_params(args, args.policy)
    _refuse_run_flags(args, semantics)
    trace = common.load(args)
    capacity, defaulted = _run_capacity(args, trace)
    hybrid = semantics == "hybrid"
    sized, budget = common.resolve_budget(args, trace, [] if capacity is None else [capacity], hybrid=hybrid)
    capacity = sized[0] if sized else None
    bounds = _early_bounds(args, trace, capacity, hybrid, params)
    tell(args.progress, 0, 1, "replays")  # one compiled call: its stage shows the time it takes
    report = replay(trace, args.policy, capacity, args.block_size, engine=args.engine,
                    warmup_fraction=args.warmup_fraction, **_run_options(args, trace, hybrid), **params)
    tell(args.progress, 1, 1, "replays")
    if budget is not None and capacity is None:  # an unbounded policy: the bytes of the capacity it took
        budget = common.resolve_budget(args, trace, [report.cache_capacity_blocks], hybrid=hybrid)[1]
    from ..analysis import metrics

    summary = metrics.summarize(report, active_params=common.active_params(args), price_hit=args.price_hit, price_miss=args.price_miss)
    explained = explain(args, trace, report, bounds)
    del bounds  # (their arrays: not held beside the explanation's reuse distances)
    windows = None
    if args.over_time:
        unit, value = args.over_time
        windows = metrics.over_time(report, trace.timestamp, **{unit: value})
    _emit_run(args, trace, RunOutput(report, budget, summary, explained, windows, defaulted))
    return 0


def _run_policy(args) -> str:
    """The KV semantics of the run, with --policy defaulted (vllm under hybrid semantics, else
    s3fifo); under auto semantics a policy with no hybrid mode replays every layer as full."""
    from ..policies.registry import get_policy

    semantics = common.kv_semantics(args)
    if args.policy is None:
        args.policy = "vllm" if semantics == "hybrid" else "s3fifo"
    elif semantics == "hybrid" and get_policy(args.policy).replay_groups is None:
        if args.kv_semantics == "hybrid":
            raise ConfigError(f"--kv-semantics hybrid is vLLM's hybrid manager (--policy vllm) or SGLang's "
                              f"(--policy radix), not {args.policy}")
        semantics = args.kv_semantics = "full"  # auto: this policy has no hybrid mode
    return semantics


def _refuse_run_flags(args, semantics: str) -> None:
    """Every flag of run that does not apply with the others given, named (before the trace is read)."""
    from ..policies.registry import get_policy

    common.refuse_unless(args, "tier_copies", bool(args.tiers), "applies with --tiers (what a load from a tier leaves "
                                                                 "behind)")
    common.refuse_unless(args, "summary_only", bool(args.json or args.output),
                         "leaves per_request out of the JSON report: add --json or --output")
    common.refuse_unless(args, "gpu", args.model is not None, "prices the headroom's gaps in GPU-seconds of prefill: "
                                                               "give --model too")
    common.refuse_unless(args, "tp", args.gpu is not None, "goes with --gpu (the GPUs a prefill runs on)")
    if args.output and args.output != "-" and not args.output.lower().endswith(".json"):
        raise ConfigError(f"--output {args.output}: run writes its JSON report: name the file .json (or - for "
                          "standard output); sweep and mrc write tables (.csv, .json, .parquet)")
    common.check_output_dir(args.output, inputs=common.inputs_of(args))
    if args.gpu is not None and (args.tiers or semantics == "hybrid"
                                 or get_policy(args.policy).bound):
        raise ConfigError("--gpu prices the headroom, which a run with tiers, hybrid semantics or a bound (infinite, "
                          "belady) does not have: drop --gpu")


def _run_capacity(args, trace) -> tuple:
    """(capacity, defaulted): --capacity, else the default where the policy needs one (an explicit
    --tiers hbm=SIZE replaces the default)."""
    from ..policies.registry import get_policy

    capacity = args.capacity
    defaulted = capacity is None and get_policy(args.policy).capacity == "required"
    if defaulted:
        capacity = DEFAULT_CAPACITY
    if defaulted and args.tiers:  # an explicit --tiers hbm=SIZE replaces the default capacity
        from ..engine.tiers.parse import parse_tiers
        from ..trace.model import resolve_block_size

        hbm, _ = parse_tiers(args.tiers, block_size=resolve_block_size(args.block_size, trace),
                             block_bytes=_block_bytes(args, trace))
        if hbm is not None:
            capacity, defaulted = hbm, False
    return capacity, defaulted


def _run_options(args, trace, hybrid: bool) -> dict:
    """replay()'s keywords for --tiers and hybrid semantics (its layer groups)."""
    options = {}
    if args.tiers:
        options = dict(tiers=args.tiers, tier_copies=args.tier_copies, tier_block_bytes=_block_bytes(args, trace))
    if hybrid:
        from ..trace.model import resolve_block_size

        options["kv_groups"] = common.kv_layout(args, resolve_block_size(args.block_size, trace)).groups
    return options


@dataclass(frozen=True)
class RunOutput:
    """What run shows or writes: the report, its byte budget, metrics, miss explanation, windows over
    time (or None), and whether the capacity was the default."""

    report: object
    budget: dict | None
    metrics: dict
    explained: dict
    windows: list | None
    defaulted: bool


def _emit_run(args, trace, out: RunOutput) -> None:
    """run's JSON document (--json, --output) or its text on standard output."""
    report, budget, windows = out.report, out.budget, out.windows
    data = None
    if args.output or args.json:
        document = report.to_dict(per_request=not args.summary_only)
        if budget is not None:
            document["budget"] = budget
        document["metrics"] = out.metrics
        document.update(out.explained)
        if windows is not None:
            document["over_time"] = windows
        data = common.encode_json(document)
    if args.output and args.output != "-":
        from ..files import write_atomic

        write_atomic(args.output, data)
    if args.json or args.output == "-":
        sys.stdout.buffer.write(data)
    else:
        print(run_summary(trace, report, budget))
        if report.tiers is not None:
            print(tiers_text(report.tiers))
        if out.defaulted:
            print(f"note      no --capacity given: {DEFAULT_CAPACITY:,} blocks, the default (a byte budget: "
                  "--capacity 80GiB --model NAME)")
        print(metrics_summary(out.metrics))
        if windows is not None:
            print(over_time_table(windows))
        print(explained_text(report, out.explained))


def _early_bounds(args, trace, capacity, hybrid: bool, params: dict):
    """The headroom's bounds (analysis/headroom.bound_hits) with what they were computed for:
    (capacity, block size, engine) -> hit tokens of the ceiling and belady, or None where the run
    has no headroom or its capacity is the replay's to choose. Computed before the run's replay,
    so that belady's arrays and the miss account's are never resident together; the replay's
    arguments are checked first (an error never waits for the bounds)."""
    from ..analysis.headroom import bound_hits
    from ..engine.replay import check_capacity, resolve_engine, warmup_count
    from ..policies.registry import get_policy
    from ..trace.model import resolve_block_size

    spec = get_policy(args.policy)
    if args.tiers or hybrid or spec.bound or capacity is None or spec.capacity == "ignored":
        return None
    block_size = resolve_block_size(args.block_size, trace)
    check_capacity(capacity)
    spec.check_block_size(block_size)
    spec.resolve(params)
    warmup_count(len(trace), args.warmup_fraction)
    engine = resolve_engine(args.engine) if spec.native else "reference"
    return (capacity, block_size, engine), bound_hits(trace, block_size, capacity, engine)


def explain(args, trace, report, bounds=None) -> dict:
    """Why the cache missed, for run: the headroom (with --model/--gpu, in GPU-seconds of
    prefill too) and the advice that follows ({} where the replay has no miss account).
    bounds: _early_bounds(), used when they are this report's (capacity, block size, engine)."""
    from ..analysis.advice import advice, stranded_mean
    from ..analysis.headroom import headroom

    if report.misses is None:
        return {}
    out = {"headroom": None}
    if report.policy not in ("infinite", "belady") and report.kv_semantics is None:
        cost = None
        if args.gpu is not None:
            from ..serving.prefill_cost import PrefillCost

            cost = PrefillCost(args.model, args.gpu, args.tp, kv_dtype=args.kv_dtype or "bf16")
        key = (report.cache_capacity_blocks, report.block_size, report.engine)
        out["headroom"] = headroom(trace, report, cost=cost, engine=report.engine,
                                   bounds=bounds[1] if bounds is not None and bounds[0] == key else None)
        if cost is not None:
            out["headroom"]["cost_note"] = cost.note
    out["advice"] = advice(trace, report, headroom=out["headroom"], engine=report.engine,
                           stranded_mean=stranded_mean(report))
    return out


def explained_text(report, explained: dict) -> str:
    from ..output.misses import advice_lines, headroom_lines, misses_lines, stranded_line

    if report.misses is None:
        return "misses    no miss account with tiers below the cache"
    account = report.misses
    lines = misses_lines(account.totals(), account.not_measured, report.total_prompt_tokens, account.evicted)
    lines.append(stranded_line(report))
    if explained.get("headroom"):
        lines += headroom_lines(explained["headroom"])
    lines += advice_lines(explained.get("advice", []))
    return "\n".join(lines)


def _block_bytes(args, trace):
    """The KV bytes of one block, for tier sizes in bytes: --bytes-per-token, or --model's."""
    from ..trace.model import resolve_block_size

    per_token = getattr(args, "bytes_per_token", None)
    if per_token is None and getattr(args, "model", None):
        from ..analysis.models import kv_bytes_per_token

        per_token = kv_bytes_per_token(args.model, getattr(args, "kv_dtype", None) or "bf16")
    return None if per_token is None else int(per_token) * resolve_block_size(args.block_size, trace)


def _parser_sweep(sub) -> None:
    sw = sub.add_parser("sweep", help="replay many capacities x policies over one trace")
    common.add_trace_options(sw)
    common.add_capacities_options(sw, "comma-separated block counts")
    sw.add_argument("--policies", default="s3fifo,lru,fifo", help="comma-separated; parameters as name:key=value:key=value")
    sw.add_argument("--bounds", action="store_true", help="add the infinite-cache ceiling and belady (offline MIN) at every capacity")
    sw.add_argument("--hbm", type=common.positive_int, default=None, metavar="BLOCKS",
                    help="sweep a DRAM tier (--dram-sizes) below a cache of BLOCKS, the GPU pool; rows split the hits "
                         "into HBM and DRAM (docs/clusters.md, \"Tiers\")")
    sw.add_argument("--dram-sizes", type=_sizes, default=None, metavar="D,E,...",
                    help="with --hbm: the DRAM tier's sizes in blocks (0: none)")
    sw.add_argument("--each", action="store_true",
                    help="with several trace files: sweep each one on its own (a trace column) instead of merging them")
    sw.add_argument("--gpu", default=None,
                    help="with --model: also rank the policies by their hit rate served on this GPU's pool in the "
                         "simulator (at the trace's load, --instances behind --router), beside the offline ranking")
    sw.add_argument("--tp", type=common.positive_int, default=1, help="with --gpu: tensor-parallel GPUs (default 1)")
    sw.add_argument("--instances", type=common.positive_int, default=1,
                    help="with --gpu: identical instances behind --router (default 1)")
    sw.add_argument("--router", default="round-robin", help="with --gpu and --instances: the router (as simulate)")
    add_warmup_options(sw, "the served runs (with --gpu)")
    common.add_executor_options(sw, "replays")
    common.add_curve_outputs(sw, "write the results table to FILE.csv, FILE.json or FILE.parquet (atomically; "
                                 ".parquet needs kvreplay[parquet]; columns: docs/formats.md)")


def _cmd_sweep(args) -> int:
    from ..analysis.sweep import points_to_rows, sweep

    common.check_table_outputs(args)
    policies = [p for p in args.policies.split(",") if p.strip()]
    if args.bounds:
        policies += [p for p in ("infinite", "belady") if p not in policies]
    common.refuse_unless(args, "each", len(args.traces) > 1, "sweeps several trace files one by one: give two or more")
    served = _served_options(args)
    if served is not None and (args.each or args.hbm is not None):
        raise ConfigError("--gpu ranks the policies served on one deployment: not with --each or --hbm")
    if args.each:
        return _sweep_each(args, policies)
    if args.hbm is not None and args.capacities != "auto":
        raise ConfigError("--capacities with --hbm: the cache is then the GPU pool of --hbm blocks and the sizes "
                          "swept are the DRAM tier's (--dram-sizes); drop --capacities")
    if (args.hbm is None) != (args.dram_sizes is None):
        raise ConfigError("--hbm and --dram-sizes go together (a DRAM tier's sizes below a fixed GPU pool)")
    trace = common.load(args)
    if args.hbm is not None:
        return _sweep_dram(args, trace, policies)
    hybrid = _sweep_semantics(args, policies) == "hybrid"
    capacities, budget = common.resolve_budget(args, trace, args.capacities, hybrid=hybrid)
    groups = None
    if hybrid:
        from ..trace.model import resolve_block_size

        groups = common.kv_layout(args, resolve_block_size(args.block_size, trace)).groups
    result = sweep(trace, capacities, policies, args.block_size,
                   warmup_fraction=args.warmup_fraction, jobs=args.jobs, engine=args.engine,
                   executor=args.executor, ray_address=args.ray_address, progress=args.progress, kv_groups=groups)
    if budget is not None:
        result["budget"] = budget
    ranking = None
    if served is not None:
        from ..serving.ranking import served_ranking

        ranking = served_ranking(trace, [p for p in policies if p not in ("infinite", "belady")],
                                 block_size=args.block_size, progress=args.progress, **served)
        result["served_ranking"] = ranking
    _emit(args, result, *with_budget(points_to_rows(result["results"]), SWEEP_COLUMNS, budget),
          f"trace {result['trace']}, block size {result['block_size']}, window: {result['window']}; hit rate is token-weighted"
          + budget_heading(budget),
          trace=trace)
    if ranking is not None and not args.json:
        from ..output.ranking import ranking_text

        print(ranking_text(ranking))
    return 0


def _served_options(args) -> dict | None:
    """sweep --gpu: the deployment the policies are served on (None without --gpu)."""
    for dest in ("tp", "instances", "router", "warmup", "cold_start"):
        common.refuse_unless(args, dest, args.gpu is not None, "shapes the served ranking: add --gpu and --model")
    common.refuse_unless(args, "router", args.instances > 1, "routes between instances: add --instances 2 or more")
    if args.gpu is None:
        return None
    common.refuse_unless(args, "gpu", args.model is not None, "needs --model (the weights to place and to run)")
    return {"model": args.model, "gpu": args.gpu, "tp": args.tp, "instances": args.instances, "router": args.router,
            "warmup": serving_warmup(args)}


def _sweep_semantics(args, policies: list[str]) -> str:
    """A hybrid --model sweeps hybrid semantics when every policy is vllm (auto) or when asked
    (then every policy must be vllm); else full semantics, as the heading says."""
    from ..policies.registry import get_policy

    semantics = common.kv_semantics(args)
    names = {get_policy(p.split(":")[0].strip()).name for p in policies}
    if semantics == "hybrid" and names not in ({"vllm"}, {"radix"}):
        if args.kv_semantics == "hybrid":
            raise ConfigError("--kv-semantics hybrid is one engine's hybrid cache: sweep --policies vllm (vLLM's) or "
                              "--policies radix (SGLang's), one of them")
        return "full"
    if semantics == "hybrid":
        args.policy = names.pop()  # (common.kv_layout sizes the pool as that engine lays it out)
    return semantics


def _sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        if part.strip():
            if not part.strip().isdigit() or int(part) > 2 ** 40:
                raise argparse.ArgumentTypeError(f"a DRAM tier size is a whole number of blocks from 0 to 2^40, "
                                                 f"got {part!r}")
            out.append(int(part))
    return out


DRAM_COLUMNS = [("policy", "policy"), ("params", "params"), ("cache_capacity_blocks", "HBM blocks"),
                ("dram_blocks", "DRAM blocks"), ("hit_rate", "hit rate %"), ("hbm_hit_rate", "from HBM %"),
                ("dram_hit_rate", "from DRAM %")]


def _sweep_dram(args, trace, policies) -> int:
    """`sweep --hbm C --capacities D1,D2`: a DRAM tier's sizes below a fixed GPU pool."""
    from ..analysis.sweep import points_to_rows, sweep

    if not args.dram_sizes:
        raise ConfigError("--hbm: give the DRAM tier's sizes with --dram-sizes (block counts; 0 for none)")
    sizes = args.dram_sizes
    result = sweep(trace, sizes, policies, args.block_size, warmup_fraction=args.warmup_fraction, jobs=args.jobs,
                   engine=args.engine, executor=args.executor, ray_address=args.ray_address, progress=args.progress,
                   hbm=args.hbm)
    _emit(args, result, points_to_rows(result["results"]), DRAM_COLUMNS,
          f"trace {result['trace']}, block size {result['block_size']}, window: {result['window']}; a DRAM tier (LRU, "
          f"copies moved) below {args.hbm:,} blocks of HBM; hit rates are token-weighted shares of the prompt tokens",
          trace=trace)
    return 0


def _sweep_each(args, policies) -> int:
    """`sweep --each A B ...`: the grid traces x policies x capacities, one trace per file."""
    import copy

    from ..analysis.sweep import points_to_rows, sweep

    traces = {}
    for path in args.traces:
        one = copy.copy(args)
        one.trace = path
        traces[os.path.basename(path.rstrip(os.sep)) or path] = common.load(one)
    if args.model is not None or args.bytes_per_token is not None:
        raise ConfigError("--each sweeps capacities in blocks (each trace may have its own block size); drop --model/--bytes-per-token")
    capacities, _ = common.resolve_budget(args, next(iter(traces.values())), args.capacities)
    if args.plot and "infinite" not in policies:
        policies.append("infinite")  # each trace's ceiling on the plot
    result = sweep(traces, capacities, policies, args.block_size, warmup_fraction=args.warmup_fraction, jobs=args.jobs,
                   engine=args.engine, executor=args.executor, ray_address=args.ray_address, progress=args.progress)
    windows = "; ".join(f"{t['trace']}: block size {t['block_size']}, {t['window']}" for t in result["traces"])
    _emit(args, result, points_to_rows(result["results"]), [("trace", "trace")] + SWEEP_COLUMNS,
          f"{len(traces)} traces ({windows}); hit rate is token-weighted", trace=None)
    return 0


def _emit(args, result, rows: list[dict], columns, heading: str, trace=None) -> None:
    """sweep and mrc: --plot; --output as the tidy table (CSV, Parquet) or the JSON document;
    --json on stdout, else the human table (`rows` under `columns`)."""
    files = {}  # every output's bytes first, then the files, all or none
    if args.plot:
        files[args.plot] = common.plot_curve(args, result, trace)
    document = result.to_dict() if args.output or args.json else None
    if args.output:
        from ..output.table import to_csv

        name = args.output.lower()
        if name.endswith(".csv"):
            data = to_csv(result.rows(), list(result.columns())).encode()
        elif name.endswith(".parquet"):
            data = result.to_parquet_bytes(what=f"--output {args.output}")
        else:
            data = common.encode_json(document)
        files[args.output] = data
    from ..output.atomic import write_all

    write_all(files)
    if args.json:
        sys.stdout.buffer.write(common.encode_json(document))
    else:
        from ..output.table import format_table

        print(heading)
        print(format_table(rows, columns))


def _parser_mrc(sub) -> None:
    mr = sub.add_parser("mrc", help="exact LRU hit curve over many capacities in one pass")
    common.add_trace_options(mr, refused=("--engine",))
    common.add_capacities_options(mr, "comma-separated block counts")
    common.add_curve_outputs(mr, "write the curve's table to FILE.csv, FILE.json or FILE.parquet (atomically; "
                                 ".parquet needs kvreplay[parquet]; columns: docs/formats.md)")


def _cmd_mrc(args) -> int:
    from ..analysis.mrc import mrc

    common.refuse_unless(args, "engine", False, "does not apply: mrc computes the LRU curve in one pass of its own "
                                                "(sweep --policies lru replays it on either engine)")
    common.refuse_unless(args, "kv_semantics", False, "does not apply: mrc replays every layer as full attention "
                                                      "(sweep --policies vllm replays vLLM's hybrid manager)")
    common.check_table_outputs(args)
    trace = common.load(args)
    capacities, budget = common.resolve_budget(args, trace, args.capacities)
    curve = mrc(trace, capacities, args.block_size, warmup_fraction=args.warmup_fraction, progress=args.progress)
    if budget is not None:
        curve["budget"] = budget
    _emit(args, curve, *with_budget(curve["points"], MRC_COLUMNS, budget),
          f"trace {curve['trace']}, policy lru (one-pass stack distances), block size {curve['block_size']}, "
          f"window: {curve['window']}; hit rate is token-weighted" + budget_heading(budget), trace=trace)
    return 0


def _parser_report(sub) -> None:
    rp = sub.add_parser("report", help="write one self-contained HTML report (curves, hit rate over time, tables)")
    common.add_trace_options(rp)
    rp.add_argument("--policies", default="s3fifo,lru,fifo", help="comma-separated; parameters as name:key=value:key=value")
    common.add_capacities_options(rp, "the curve's capacities: block counts")
    common.add_zoom_option(rp)
    rp.add_argument("--capacity", type=common.capacity, default=None,
                    help="the capacity of the per-request views, blocks or a size (default: the middle of the curve)")
    rp.add_argument("--bounds", action="store_true", help="add belady (offline MIN) to the curve")
    common.add_price_options(rp)
    rp.add_argument("--title", help="page title (default: the trace's name)")
    rp.add_argument("--output", "-o", required=True, help="the HTML file to write (atomically)")
    rp.add_argument("--gpu", help="add a serving section: one instance on this GPU (with --model) at several loads "
                                  "(kvreplay simulate; see `kvreplay gpus`)")
    rp.add_argument("--tp", type=common.positive_int, default=1, help="with --gpu: tensor-parallel GPUs (default 1)")
    rp.add_argument("--pp", "--pipeline-parallel-size", dest="pp", type=common.positive_int, default=1,
                    help="with --gpu: pipeline stages, each on --tp GPUs (default 1; as simulate --pp)")
    rp.add_argument("--time-model", default="roofline",
                    help="with --gpu: roofline (default, calibrated, with its band), roofline-raw, FILE.npz or FILE.json")
    rp.add_argument("--weights-dtype", choices=("bf16", "fp16", "fp8", "int4"), default="bf16",
                    help="with --gpu: the weights' dtype (sizes them before the KV pool; fp8 needs fp8 tensor cores)")
    rp.add_argument("--speedups", default="0.25,0.5,1", metavar="X,Y,...",
                    help="with --gpu: the loads, as factors on the trace's arrival rate (default 0.25,0.5,1)")
    rp.add_argument("--instances", type=common.positive_int, default=1,
                    help="with --gpu: identical instances behind --router, as kvreplay simulate (default 1)")
    rp.add_argument("--router", default="round-robin", help="with --gpu and --instances: the router (as simulate)")
    rp.add_argument("--tiers", default=None, metavar="SPEC",
                    help="with --gpu: tiers below each instance's pool, as simulate (dram=64GiB@64GB/s)")
    rp.add_argument("--plan", default=None, metavar="FILE.json",
                    help="add a plan section from `kvreplay plan ... -o FILE.json` on this trace (checked by its "
                         "digest): every configuration tried, the cheapest per load served again (its instances, "
                         "GPUs, router, policy, tiers, load and warm-up) and judged, and the cost-vs-TTFT plot")
    add_warmup_options(rp, "the serving section's runs (with --gpu)")
    add_closed_options(rp, "report")
    rp.add_argument("--slo-ttft", type=common.positive_duration, default=None, metavar="DURATION",
                    help="with --gpu and --sessions: state the deployment's capacity as the most concurrent sessions "
                         "whose TTFT p90 stays within this, e.g. 2s")


def _cmd_report(args) -> int:
    from .. import report_html
    from ..files import write_atomic

    common.check_output_dir(args.output, inputs=common.inputs_of(args))
    common.refuse_unless(args, "kv_semantics", False, "does not apply: the report replays every layer as full "
                                                      "attention (its serving section too)")
    serving = None
    if args.gpu:
        from .. import native
        from .serving import number_list

        native.require("the report's serving section (--gpu: the serving simulator, which is C only)")

        if args.model is None:
            raise ConfigError("--gpu needs --model (the weights to place and to run)")
        try:
            speedups = number_list(args.speedups)
        except argparse.ArgumentTypeError as e:
            raise ConfigError(f"--speedups: {e}") from None
        if args.plan:
            raise ConfigError("--plan serves the plan's chosen deployment in the serving section: drop --gpu (or "
                              "drop --plan to serve --gpu's)")
        common.refuse_unless(args, "router", args.instances > 1, "routes between instances: add --instances 2 or more")
        if args.sessions is not None:
            common.refuse_unless(args, "speedups", False, "are open-loop loads: --sessions N,M,... is the serving "
                                                          "section's load (a closed loop); give one of them")
            common.refuse_unless(args, "arrivals", args.arrivals != "open", "--sessions N,M,... is a closed loop "
                                                                          "(drop --arrivals open)")
        common.refuse_unless(args, "slo_ttft", args.sessions is not None,
                             "states the capacity in concurrent sessions: add --sessions N,M,...")
        serving = {"gpu": args.gpu, "model": args.model, "tp": args.tp, "pp": args.pp, "time_model": args.time_model,
                   "speedups": speedups, "weights_dtype": args.weights_dtype, "instances": args.instances,
                   "router": args.router, "tiers": args.tiers, "warmup": serving_warmup(args),
                   "sessions": args.sessions, "slo_ttft_ms": None if args.slo_ttft is None else 1000.0 * args.slo_ttft,
                   **closed_of(args), "seed": args.seed}
    else:
        kept = " (a --plan's deployment is served as the plan chose it)" if args.plan else ""
        for dest in ("tp", "pp", "time_model", "weights_dtype", "speedups", "instances", "router", "tiers", "sessions",
                     "arrivals", "think_time", "slo_ttft"):
            common.refuse_unless(args, dest, False, f"shapes the serving section: add --gpu and --model{kept}")
        for dest in ("warmup", "cold_start"):
            common.refuse_unless(args, dest, False, "applies to the serving section: add --gpu and --model (a --plan's "
                                                    "runs keep the plan's warm-up)")
    random = [what for what, used in (("--sessions", args.sessions is not None),
                                      ("--think-time", args.think_time is not None)) if used and serving]
    trace = common.load(args, seed_used=" and ".join(random) or None)
    plan = None
    if args.plan:
        from ..serving.plan_result import load_plan

        plan = load_plan(args.plan, trace)
        if args.model is not None and plan.get("model") not in (None, args.model):
            raise ConfigError(f"--model {args.model}: the plan {args.plan} is for {plan['model']}")
    policies = [p for p in args.policies.split(",") if p.strip()]
    capacities, budget = common.resolve_budget(args, trace, args.capacities)
    focus = None if args.capacity is None else common.resolve_budget(args, trace, [args.capacity])[0][0]
    note = " ".join(str(budget[k]) for k in ("model", "kv_dtype") if budget.get(k)) if budget else ""
    page = report_html(trace, policies=policies, capacities=capacities, focus_capacity=focus,
                       block_size=args.block_size, warmup_fraction=args.warmup_fraction, bounds=args.bounds,
                       engine=args.engine, title=args.title, progress=args.progress, price_hit=args.price_hit,
                       price_miss=args.price_miss, active_params=common.active_params(args),
                       bytes_per_block=budget["bytes_per_block"] if budget else None, budget_note=note,
                       zoom=args.zoom, serving=serving, plan=plan, model=budget.get("model") if budget else None)
    write_atomic(args.output, page.encode())
    common.note(args, f"wrote {args.output} ({len(page) / 1024:,.0f} KiB, self-contained HTML)")
    return 0


def _parser_demo(sub) -> None:
    sub.add_parser("demo", help="replay a built-in synthetic workload under every policy (no files needed)")


def _cmd_demo(args) -> int:
    import time

    from ..analysis.sweep import points_to_rows, sweep
    from ..output.table import format_table
    from ..policies.registry import POLICIES
    from ..trace.synth import synth

    started = time.perf_counter()
    # Chat, RAG and agent sessions (kvreplay synth's defaults, fewer documents): ~21k block accesses.
    trace = synth(1000, docs=20, seed=0)
    caps = sorted({max(16, int(trace.num_blocks * f)) for f in (0.05, 0.1, 0.25, 0.5)})
    print(f"kvreplay demo: {trace.source}")
    print(f"  {len(trace):,} requests, {trace.total_prompt_tokens:,} prompt tokens, {trace.num_accesses:,} block accesses, "
          f"{trace.num_blocks:,} unique blocks of {trace.block_size} tokens")
    # The compiled engine (C, built at install) needs no compiling; the reference engine gives the
    # same numbers (the test suite checks it request by request).
    result = sweep(trace, caps, list(POLICIES))
    print(f"  every policy at {len(caps)} capacities; window: {result['window']}; hit rate = hit tokens / prompt tokens\n")
    print(format_table(points_to_rows(result["results"]), SWEEP_COLUMNS))
    print(f"\n{len(result['results'])} replays in {time.perf_counter() - started:.2f} s.")
    print("Try it on a real trace:  kvreplay run TRACE.jsonl --policy s3fifo --capacity 4096")
    print("Serve it on a GPU:       kvreplay simulate TRACE.jsonl --model Llama-3.1-8B --gpu H100  (TTFT, hit rate "
          "under load)")
    return 0


PARSERS = [_parser_run, _parser_sweep, _parser_mrc, _parser_report, _parser_demo]
COMMANDS = {"run": _cmd_run, "sweep": _cmd_sweep, "mrc": _cmd_mrc, "report": _cmd_report, "demo": _cmd_demo}
