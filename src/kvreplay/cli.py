"""Command line: parse arguments, call the public API, render. No replay logic lives here."""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from .errors import ConfigError, InvariantError, KvreplayError

EXIT_BAD_INPUT = 2
EXIT_BUG = 3


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def _capacities(text: str):
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return [_positive_int(part) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"capacities: {e} (use a comma-separated list or 'auto')") from None


def _add_trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="trace file (Mooncake JSONL, optionally .gz), or - for stdin")
    p.add_argument("--block-size", type=_positive_int, default=None, help="tokens per block (default: the trace's own, else 512)")
    p.add_argument("--on-invalid", choices=("error", "skip"), default="error", help="bad records: stop (default) or skip and count them")
    p.add_argument("--sort-by-time", action="store_true", help="replay in timestamp order (stable) instead of file order")
    p.add_argument("--engine", choices=("compiled", "reference"), default="compiled", help="compiled (numba, default) or reference (plain Python)")
    p.add_argument("--warmup-fraction", type=_fraction, default=0.0, metavar="F", help="the first floor(F*N) requests only warm the cache (default 0)")


def _param_table() -> dict:
    """Every policy parameter name -> (Param, names of the policies that take it)."""
    from .policies.registry import POLICIES

    table: dict = {}
    for spec in POLICIES.values():
        for p in spec.params:
            table.setdefault(p.name, (p, []))[1].append(spec.name)
    return table


def _add_param_options(p: argparse.ArgumentParser) -> None:
    for name, (param, owners) in _param_table().items():
        p.add_argument(f"--{name.replace('_', '-')}", dest=f"param_{name}", type=param.kind, default=None,
                       help=f"{', '.join(owners)}: {param.help} (default {param.default})")


def _given_params(args, policy: str) -> dict:
    from .policies.registry import get_policy

    spec = get_policy(policy)
    own = {p.name for p in spec.params}
    given = {k[len("param_"):]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}
    for name in given:
        if name not in own:
            owners = ", ".join(_param_table()[name][1])
            raise ConfigError(f"--{name.replace('_', '-')} applies to {owners}, not {spec.name}")
    return given


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvreplay", description="Replay LLM request traces through a KV prefix cache.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"kvreplay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="replay a trace under one policy and capacity")
    _add_trace_options(run)
    run.add_argument("--policy", default="s3fifo", help="a policy name, case-insensitive (default s3fifo; see `kvreplay policies`)")
    run.add_argument("--capacity", type=_positive_int, default=None,
                     help="cache capacity in blocks (default 4096; unbounded for policies where capacity is optional)")
    _add_param_options(run)
    run.add_argument("--output", "-o", help="write the JSON report to this file (atomically)")
    run.add_argument("--json", action="store_true", help="print the JSON report on stdout instead of a summary")
    run.add_argument("--summary-only", action="store_true", help="leave per_request out of the JSON report")

    sw = sub.add_parser("sweep", help="replay many capacities x policies over one trace")
    _add_trace_options(sw)
    sw.add_argument("--capacities", type=_capacities, default="auto", help="comma-separated block counts, or auto (default)")
    sw.add_argument("--policies", default="s3fifo,lru,fifo", help="comma-separated; parameters as name:key=value:key=value")
    sw.add_argument("--bounds", action="store_true", help="add the infinite-cache ceiling and belady (offline MIN) at every capacity")
    sw.add_argument("--jobs", type=_positive_int, default=1, help="replays run at once (threads)")
    sw.add_argument("--output", "-o", help="write results to FILE.json or FILE.csv (atomically)")
    sw.add_argument("--json", action="store_true", help="print JSON on stdout instead of a table")

    mr = sub.add_parser("mrc", help="exact LRU hit curve over many capacities in one pass")
    _add_trace_options(mr)
    mr.add_argument("--capacities", type=_capacities, default="auto", help="comma-separated block counts, or auto (default)")
    mr.add_argument("--output", "-o", help="write the curve to FILE.json or FILE.csv (atomically)")
    mr.add_argument("--json", action="store_true", help="print JSON on stdout instead of a table")

    sub.add_parser("demo", help="replay a built-in synthetic workload under every policy (no files needed)")
    sub.add_parser("policies", help="list the policies and their parameters")
    return parser


def _load(args):
    from .trace import load_trace

    return load_trace(args.trace, on_invalid=args.on_invalid, sort_by_time=args.sort_by_time)


def _encode_json(obj) -> bytes:
    import msgspec

    return msgspec.json.format(msgspec.json.encode(obj), indent=1) + b"\n"


def _cmd_run(args) -> int:
    from .engine.replay import replay

    from .policies.registry import get_policy

    params = _given_params(args, args.policy)
    capacity = args.capacity
    if capacity is None and get_policy(args.policy).capacity == "required":
        capacity = 4096
    trace = _load(args)
    report = replay(trace, args.policy, capacity, args.block_size, engine=args.engine, warmup_fraction=args.warmup_fraction, **params)
    data = None
    if args.output or args.json:
        data = _encode_json(report.to_dict(per_request=not args.summary_only))
    if args.output:
        from .output.report import write_atomic

        write_atomic(args.output, data)
    if args.json:
        sys.stdout.buffer.write(data)
    else:
        print(_run_summary(trace, report))
    return 0


def _run_summary(trace, report) -> str:
    params = ", ".join(f"{k}={v}" for k, v in report.params.items())
    sizes = ", ".join(f"{k}={v}" for k, v in report.sizes.items())
    detail = "; ".join(x for x in (params, sizes) if x)
    lines = [
        f"trace     {trace.source}: {len(trace):,} requests, {trace.total_prompt_tokens:,} prompt tokens, "
        f"{trace.num_accesses:,} block accesses, {trace.num_blocks:,} unique blocks",
        f"policy    {report.policy}" + (f" ({detail})" if detail else ""),
        f"cache     {report.cache_capacity_blocks:,} blocks x {report.block_size} tokens",
        f"window    {report.window}",
        f"hits      {report.total_hit_tokens:,} of {report.total_prompt_tokens:,} prompt tokens = "
        f"{100 * report.hit_rate:.2f}% (token-weighted)",
        f"final     {report.final_cache_blocks:,} blocks resident",
        "counters  " + ", ".join(f"{k}={v:,}" for k, v in report.counters.items()),
    ]
    if report.invalid_records:
        inv = report.invalid_records
        lines.append(f"skipped   {inv['count']:,} invalid records (first lines: {', '.join(map(str, inv['first_lines']))})")
    return "\n".join(lines)


SWEEP_COLUMNS = [
    ("policy", "policy"), ("params", "params"), ("cache_capacity_blocks", "capacity"),
    ("total_hit_tokens", "hit tokens"), ("total_prompt_tokens", "prompt tokens"),
    ("hit_rate", "hit rate"), ("final_cache_blocks", "final blocks"),
]


def _cmd_sweep(args) -> int:
    from .analysis.sweep import points_to_rows, sweep

    _check_table_output(args)
    trace = _load(args)
    policies = [p for p in args.policies.split(",") if p.strip()]
    if args.bounds:
        policies += [p for p in ("infinite", "belady") if p not in policies]
    result = sweep(trace, args.capacities, policies, args.block_size,
                   warmup_fraction=args.warmup_fraction, jobs=args.jobs, engine=args.engine)
    _emit(args, result, points_to_rows(result["results"]), SWEEP_COLUMNS,
          f"trace {result['trace']}, block size {result['block_size']}, window: {result['window']}; hit rate is token-weighted")
    return 0


MRC_COLUMNS = [
    ("cache_capacity_blocks", "capacity"), ("total_hit_tokens", "hit tokens"), ("total_prompt_tokens", "prompt tokens"),
    ("hit_rate", "hit rate"), ("final_cache_blocks", "final blocks"), ("admissions", "admissions"),
]


def _check_table_output(args) -> None:
    if args.output and not args.output.lower().endswith((".json", ".csv")):
        raise ConfigError(f"--output {args.output}: the name must end in .json or .csv")


def _cmd_mrc(args) -> int:
    from .analysis.mrc import mrc

    _check_table_output(args)
    trace = _load(args)
    curve = mrc(trace, args.capacities, args.block_size, warmup_fraction=args.warmup_fraction)
    _emit(args, curve, curve["points"], MRC_COLUMNS,
          f"trace {curve['trace']}, policy lru (one-pass stack distances), block size {curve['block_size']}, "
          f"window: {curve['window']}; hit rate is token-weighted")
    return 0


def _emit(args, document: dict, rows: list[dict], columns, heading: str) -> None:
    """Write `document` (JSON) or `rows` (CSV) to --output, and print JSON or a table."""
    if args.output:
        from .output.report import write_atomic
        from .output.table import to_csv

        if args.output.lower().endswith(".csv"):
            data = to_csv(rows, [k for k, _ in columns]).encode()
        else:
            data = _encode_json(document)
        write_atomic(args.output, data)
    if args.json:
        sys.stdout.buffer.write(_encode_json(document))
    else:
        from .output.table import format_table

        print(heading)
        print(format_table(rows, columns))


def _cmd_demo(args) -> int:
    import time

    from .analysis.sweep import points_to_rows, sweep
    from .output.table import format_table
    from .policies.registry import POLICIES
    from .trace.synth import chat_workload

    started = time.perf_counter()
    trace = chat_workload()
    caps = sorted({max(16, int(trace.num_blocks * f)) for f in (0.05, 0.1, 0.25, 0.5)})
    print(f"kvreplay demo: {trace.source}")
    print(f"  {len(trace):,} requests, {trace.total_prompt_tokens:,} prompt tokens, {trace.num_accesses:,} block accesses, "
          f"{trace.num_blocks:,} unique blocks of {trace.block_size} tokens")
    # The reference engine needs no compilation and is quick on a trace this small; the
    # compiled engine gives the same numbers (the test suite checks it request by request).
    result = sweep(trace, caps, list(POLICIES), engine="reference")
    print(f"  every policy at {len(caps)} capacities; window: {result['window']}; hit rate = hit tokens / prompt tokens\n")
    print(format_table(points_to_rows(result["results"]), SWEEP_COLUMNS))
    print(f"\n{len(result['results'])} replays in {time.perf_counter() - started:.1f} s (reference engine).")
    print("Try it on a real trace:  kvreplay run TRACE.jsonl --policy s3fifo --capacity 4096")
    return 0


def _cmd_policies(args) -> int:
    from .policies.registry import POLICIES

    for spec in POLICIES.values():
        print(f"{spec.name:9s} {spec.summary}" + ("" if spec.capacity == "required" else f" [capacity {spec.capacity}]"))
        for p in spec.params:
            print(f"{'':9s}   --{p.name.replace('_', '-')} {p.default}: {p.help}")
    return 0


COMMANDS = {"run": _cmd_run, "sweep": _cmd_sweep, "mrc": _cmd_mrc, "demo": _cmd_demo, "policies": _cmd_policies}


def main(argv=None) -> int:
    """Entry point of the `kvreplay` command. Exit codes: 0 ok, 2 bad input or options, 3 internal error."""
    warnings.formatwarning = lambda message, category, *a, **k: f"kvreplay: warning: {message}\n"
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KvreplayError as e:
        print(f"kvreplay: {e}" if not hasattr(e, "path") else str(e), file=sys.stderr)
        return EXIT_BAD_INPUT
    except InvariantError as e:
        print(f"kvreplay: internal error, please report: {e}", file=sys.stderr)
        return EXIT_BUG
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
