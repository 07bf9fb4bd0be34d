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


def _capacity(text: str):
    """A block count (int), or a size with a unit ("80GiB", kept as text: it becomes blocks once
    the block size and the KV bytes per token are known; see analysis/models.py)."""
    from .analysis.models import parse_size

    text = text.strip()
    if text.isdigit() or not any(c.isalpha() for c in text):
        return _positive_int(text)
    try:
        parse_size(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _capacities_or_sizes(text: str):
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return [_capacity(part) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"capacities: {e} (use comma-separated block counts or sizes like 16GiB, or 'auto')") from None


def _price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a price per million tokens, got {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _add_price_options(p: argparse.ArgumentParser) -> None:
    from .analysis.metrics import DEFAULT_PRICE_HIT, DEFAULT_PRICE_MISS

    p.add_argument("--price-hit", type=_price, default=DEFAULT_PRICE_HIT, metavar="P",
                   help=f"price per million cached input tokens (default {DEFAULT_PRICE_HIT}, DeepSeek API list price; docs/metrics.md)")
    p.add_argument("--price-miss", type=_price, default=DEFAULT_PRICE_MISS, metavar="P",
                   help=f"price per million uncached input tokens (default {DEFAULT_PRICE_MISS})")


def _over_time(text: str):
    """--over-time: "N" requests per window, or "Ns" seconds of trace time."""
    unit = "seconds" if text.strip().lower().endswith("s") else "requests"
    number = text.strip().rstrip("sS")
    try:
        value = float(number) if unit == "seconds" else int(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N (requests) or Ns (seconds), got {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return unit, value


def _active_params(args):
    """Active parameters of --model (for prefill FLOPs saved), or None."""
    if getattr(args, "model", None) is None:
        return None
    from .analysis.models import get_model

    return get_model(args.model).active_params


def _add_capacities_options(p: argparse.ArgumentParser, what: str) -> None:
    """--capacities (block counts, sizes or auto) and the options that turn sizes into blocks."""
    p.add_argument("--capacities", type=_capacities_or_sizes, default="auto",
                   help=f"{what} or sizes (16GiB, with --model or --bytes-per-token), or auto (default)")
    _add_budget_options(p)


def _add_curve_outputs(p: argparse.ArgumentParser, output_help: str) -> None:
    p.add_argument("--output", "-o", help=output_help)
    p.add_argument("--json", action="store_true", help="print JSON on stdout instead of a table")
    p.add_argument("--plot", metavar="FILE", help="draw hit rate vs capacity to FILE.png|.svg|.pdf (atomically)")


def _add_budget_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="turn sizes (80GiB) into blocks with this model's KV bytes per token (see `kvreplay models`)")
    p.add_argument("--kv-dtype", default=None, help="with --model: KV element type, bf16 (default), fp16, fp8, int8, fp32, fp4")
    p.add_argument("--kv-layers", choices=("all", "full"), default=None,
                   help="with --model: count every layer (default) or only full-attention layers (sliding-window models)")
    p.add_argument("--bytes-per-token", type=_positive_int, default=None, metavar="N", help="KV bytes per token, instead of --model")


def _resolve_budget(args, trace, capacities):
    """Block counts for `capacities` (block counts, sizes, or "auto") at the effective block size,
    and the JSON "budget" object (None without --model or --bytes-per-token)."""
    from .analysis.models import is_size, resolve_capacities
    from .trace.model import resolve_block_size

    priced = args.model is not None or args.bytes_per_token is not None
    if capacities == "auto":
        if not priced:
            return "auto", None
        from .analysis.sweep import auto_capacities

        capacities = auto_capacities(trace.num_blocks)
    if not priced and any(is_size(c) for c in capacities):
        size = next(c for c in capacities if is_size(c))
        raise ConfigError(f"capacity {size} is a size: give --model NAME (and --kv-dtype) or --bytes-per-token N "
                          "to turn it into blocks")
    if args.model is None and (args.kv_dtype is not None or args.kv_layers is not None):
        raise ConfigError("--kv-dtype and --kv-layers need --model")
    if args.model is not None and args.bytes_per_token is not None:
        raise ConfigError("give --model or --bytes-per-token, not both")
    block_size = resolve_block_size(args.block_size, trace)
    return resolve_capacities(capacities, block_size, model=args.model, kv_dtype=args.kv_dtype,
                              layers=args.kv_layers, bytes_per_token=args.bytes_per_token)


def _with_budget(rows: list[dict], columns, budget):
    """Table rows and columns with each capacity's KV bytes next to its block count."""
    if budget is None:
        return rows, columns
    from .analysis.models import format_bytes

    per_block = budget["bytes_per_block"]
    rows = [dict(r, kv_bytes=format_bytes(r["cache_capacity_blocks"] * per_block)) for r in rows]
    at = [key for key, _ in columns].index("cache_capacity_blocks") + 1
    return rows, list(columns[:at]) + [("kv_bytes", "KV bytes")] + list(columns[at:])


def _budget_heading(budget) -> str:
    from .analysis.models import budget_text

    return "" if budget is None else "\n" + budget_text(budget)


class _TracePaths(argparse.Action):
    """One path stays a string (args.trace); several become a list (also in args.traces)."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.traces = list(values)
        setattr(namespace, self.dest, values[0] if len(values) == 1 else list(values))


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _add_trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", nargs="+", action=_TracePaths,
                   help="trace file(s) (optionally .gz), a directory of them, or - for stdin; several merge into one trace")
    p.add_argument("--format", choices=("auto", "mooncake", "bailian", "claude-code"), default="auto",
                   help="trace format (default auto: sniffed from each file's first record)")
    p.add_argument("--session-arrivals", choices=("fixed", "poisson", "zero"), default="fixed",
                   help="start times of merged Claude Code sessions: fixed spacing (default), poisson (seeded), zero (all at 0)")
    p.add_argument("--session-spacing", type=_seconds, default=60.0, metavar="SECONDS",
                   help="gap between session starts (fixed) or mean gap (poisson); default 60")
    p.add_argument("--seed", type=int, default=0, help="seed of --session-arrivals poisson (default 0)")
    p.add_argument("--subagent-sessions", action="store_true", help="Claude Code: each subagent stream is its own session")
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
    run.add_argument("--capacity", type=_capacity, default=None,
                     help="cache capacity in blocks, or a size like 80GiB with --model or --bytes-per-token "
                          "(default 4096 blocks; unbounded for policies where capacity is optional)")
    _add_budget_options(run)
    _add_param_options(run)
    _add_price_options(run)
    run.add_argument("--over-time", type=_over_time, metavar="N|Ns",
                     help="also show the hit rate per window of N requests, or of N seconds of trace time (e.g. 600s)")
    run.add_argument("--output", "-o", help="write the JSON report to this file (atomically)")
    run.add_argument("--json", action="store_true", help="print the JSON report on stdout instead of a summary")
    run.add_argument("--summary-only", action="store_true", help="leave per_request out of the JSON report")

    sw = sub.add_parser("sweep", help="replay many capacities x policies over one trace")
    _add_trace_options(sw)
    _add_capacities_options(sw, "comma-separated block counts")
    sw.add_argument("--policies", default="s3fifo,lru,fifo", help="comma-separated; parameters as name:key=value:key=value")
    sw.add_argument("--bounds", action="store_true", help="add the infinite-cache ceiling and belady (offline MIN) at every capacity")
    sw.add_argument("--each", action="store_true",
                    help="with several trace files: sweep each one on its own (a trace column) instead of merging them")
    sw.add_argument("--jobs", type=_positive_int, default=1, help="replays run at once (default 1; local: processes, threads: threads)")
    sw.add_argument("--executor", choices=("local", "threads", "ray"), default="local",
                    help="where replays run: local processes (default), threads, or ray (needs kvreplay[ray]; see docs/scaling.md)")
    sw.add_argument("--ray-address", default=None, metavar="ADDR",
                    help="with --executor ray: auto (this machine's cluster) or ray://HOST:10001 (default: start a local instance)")
    _add_curve_outputs(sw, "write results to FILE.json or FILE.csv (atomically)")

    mr = sub.add_parser("mrc", help="exact LRU hit curve over many capacities in one pass")
    _add_trace_options(mr)
    _add_capacities_options(mr, "comma-separated block counts")
    _add_curve_outputs(mr, "write the curve to FILE.json or FILE.csv (atomically)")

    rp = sub.add_parser("report", help="write one self-contained HTML report (curves, hit rate over time, tables)")
    _add_trace_options(rp)
    rp.add_argument("--policies", default="s3fifo,lru,fifo", help="comma-separated; parameters as name:key=value:key=value")
    _add_capacities_options(rp, "the curve's capacities: block counts")
    rp.add_argument("--capacity", type=_capacity, default=None,
                    help="the capacity of the per-request views, blocks or a size (default: the middle of the curve)")
    rp.add_argument("--bounds", action="store_true", help="add belady (offline MIN) to the curve")
    _add_price_options(rp)
    rp.add_argument("--title", help="page title (default: the trace's name)")
    rp.add_argument("--output", "-o", required=True, help="the HTML file to write (atomically)")

    hs = sub.add_parser("hash", help="turn a token log (JSONL token_ids, or text with --tokenizer) into a Mooncake trace")
    hs.add_argument("input", help="token log (JSONL, optionally gzip), or - for stdin")
    hs.add_argument("--output", "-o", required=True, help="the Mooncake JSONL trace to write (atomically)")
    hs.add_argument("--block-size", type=_positive_int, default=512, help="tokens per block (default 512; 16 for Bailian-like)")
    hs.add_argument("--tokenizer", metavar="TOKENIZER_JSON", help="local tokenizer.json for records with text/prompt (needs kvreplay[tokenizers])")
    hs.add_argument("--salt", default="", help="namespace of records that name none (default: empty)")
    hs.add_argument("--keep-hashes", action="store_true", help="also write each block's sha256 hex digest (block_hashes)")

    from .trace.writers import WRITE_FORMATS

    cv = sub.add_parser("convert", help="rewrite a trace in another format (Mooncake or Bailian JSONL)")
    sl = sub.add_parser("slice", help="keep a range of requests, a time window or the first sessions of a trace")
    for p in (cv, sl):
        p.add_argument("input", help="trace file (any readable format, optionally gzip), or - for stdin")
        p.add_argument("--output", "-o", required=True, help="the trace to write (atomically; .gz compresses; - for stdout)")
        p.add_argument("--from", dest="from_format", default="auto", help="input format (default auto)")
        p.add_argument("--on-invalid", choices=("error", "skip"), default="error", help="bad records: stop (default) or skip them")
        p.add_argument("--keep-ids", action="store_true", help="write the file's block ids instead of dense ids 0..U-1")
    cv.add_argument("--to", choices=WRITE_FORMATS, default="mooncake", help="output format (default mooncake)")
    sl.add_argument("--to", choices=WRITE_FORMATS, default=None, help="output format (default: the input's, else mooncake)")
    sl.add_argument("--requests", metavar="A:B", help="positions A (inclusive) to B (exclusive), Python-style; "
                    "negative counts from the end (write --requests=-100: for the last 100)")
    sl.add_argument("--time", metavar="T0:T1", help="t0 <= timestamp < t1: seconds after the first request, or absolute ms "
                    "with the suffix ms (e.g. 0:60, 1500ms:90000ms); either side may be empty")
    sl.add_argument("--sessions", type=_positive_int, metavar="N", help="the first N sessions (traces with sessions only)")

    mg = sub.add_parser("merge", help="merge traces into one, ordered by time (each input keeps its own block ids)")
    mg.add_argument("inputs", nargs="+", metavar="trace", help="trace files or directories (each directory is one input)")
    mg.add_argument("--output", "-o", required=True, help="the trace to write (atomically; .gz compresses; - for stdout)")
    mg.add_argument("--to", choices=WRITE_FORMATS, default="mooncake", help="output format (default mooncake)")
    mg.add_argument("--format", choices=("auto", "mooncake", "bailian", "claude-code"), default="auto",
                    help="input format (default auto: sniffed per file)")
    mg.add_argument("--on-invalid", choices=("error", "skip"), default="error", help="bad records: stop (default) or skip them")
    mg.add_argument("--shared-ids", action="store_true",
                    help="inputs share blocks by their files' ids (default: ids are private to each input)")
    mg.add_argument("--offsets", metavar="S1,S2,...",
                    help="start offset in seconds of each input, added to its timestamps (default: Claude Code "
                         "sessions follow --session-arrivals, other inputs keep their times)")
    mg.add_argument("--session-arrivals", choices=("fixed", "poisson", "zero"), default="fixed",
                    help="start times of Claude Code sessions: fixed spacing (default), poisson (seeded), zero")
    mg.add_argument("--session-spacing", type=_seconds, default=60.0, metavar="SECONDS",
                    help="gap between session starts (fixed) or mean gap (poisson); default 60")
    mg.add_argument("--seed", type=int, default=0, help="seed of --session-arrivals poisson (default 0)")

    st = sub.add_parser("stats", help="describe a trace: lengths, unique blocks, infinite-cache hit rate, reuse, sharing")
    _add_trace_options(st)
    st.add_argument("--json", action="store_true", help="print the statistics as JSON")
    sy = sub.add_parser("synth", help="generate a synthetic workload (chat, RAG, agent sessions), or one like a trace")
    sy.add_argument("--output", "-o", required=True, help="the Mooncake JSONL file to write (atomically; .gz compresses; - for stdout)")
    sy.add_argument("--like", metavar="TRACE", help="fit the generator to this trace and keep its statistics")
    sy.add_argument("--like-model", choices=("sessions", "prefixes"), default=None,
                    help="--like: fit sessions with one level of shared prompts (default), or resample requests and "
                         "copy their shared prefixes (nested prefixes, exact length distribution; docs/synth.md)")
    sy.add_argument("--scale-requests", type=float, default=None, metavar="K", help="--like: K times as many requests (default 1)")
    sy.add_argument("--speedup", type=float, default=None, metavar="K", help="--like: arrivals and think times K times faster (default 1)")
    sy.add_argument("--requests", type=_positive_int, default=None, help="requests to generate (default 10000; --like: the trace's count x K)")
    for flag, kind, default, text in _SYNTH_KNOBS:
        sy.add_argument(flag, type=kind, default=None, help=f"{text} (default {default})")
    sy.add_argument("--block-size", type=_positive_int, default=None, help="tokens per block (default 512; --like: the trace's)")
    sy.add_argument("--seed", type=int, default=0, help="random seed: the same seed gives the same file (default 0)")
    sub.add_parser("demo", help="replay a built-in synthetic workload under every policy (no files needed)")
    sub.add_parser("policies", help="list the policies and their parameters")
    md = sub.add_parser("models", help="list the KV-size catalog: KV bytes per token of open models")
    md.add_argument("--json", action="store_true", help="print the catalog as JSON")
    return parser


def _load(args):
    from .trace import load_trace

    return load_trace(args.trace, format=args.format, on_invalid=args.on_invalid, sort_by_time=args.sort_by_time,
                      session_arrivals=args.session_arrivals, session_spacing=args.session_spacing, seed=args.seed,
                      subagent_sessions=args.subagent_sessions)


def _encode_json(obj) -> bytes:
    import msgspec

    return msgspec.json.format(msgspec.json.encode(obj), indent=1) + b"\n"


def _cmd_run(args) -> int:
    from .engine.replay import replay

    from .policies.registry import get_policy

    params = _given_params(args, args.policy)
    _check_output_dir(args.output)
    capacity = args.capacity
    if capacity is None and get_policy(args.policy).capacity == "required":
        capacity = 4096
    trace = _load(args)
    sized, budget = _resolve_budget(args, trace, [] if capacity is None else [capacity])
    capacity = sized[0] if sized else None
    report = replay(trace, args.policy, capacity, args.block_size, engine=args.engine, warmup_fraction=args.warmup_fraction, **params)
    if budget is not None and capacity is None:  # an unbounded policy: the bytes of the capacity it took
        budget = _resolve_budget(args, trace, [report.cache_capacity_blocks])[1]
    from .analysis import metrics

    summary = metrics.summarize(report, active_params=_active_params(args), price_hit=args.price_hit, price_miss=args.price_miss)
    windows = None
    if args.over_time:
        unit, value = args.over_time
        windows = metrics.over_time(report, trace.timestamp, **{unit: value})
    data = None
    if args.output or args.json:
        document = report.to_dict(per_request=not args.summary_only)
        if budget is not None:
            document["budget"] = budget
        document["metrics"] = summary
        if windows is not None:
            document["over_time"] = windows
        data = _encode_json(document)
    if args.output:
        from .files import write_atomic

        write_atomic(args.output, data)
    if args.json:
        sys.stdout.buffer.write(data)
    else:
        print(_run_summary(trace, report, budget))
        print(_metrics_summary(summary))
        if windows is not None:
            print(_over_time_table(windows))
    return 0


def _metrics_summary(m: dict) -> str:
    pct = m["request_hit_rate_percentiles"]
    money = m["money"]
    speed = m["ideal_prefill_speedup"]
    lines = [
        "speedup   ideal prefill speedup " + ("infinite" if speed is None else f"{speed:.2f}x") + " = 1/(1 - hit rate)",
        f"requests  per-request hit rate p50 {100 * pct['p50']:.1f}%, p90 {100 * pct['p90']:.1f}%, p99 {100 * pct['p99']:.1f}% "
        "(each request counted once)",
        f"cost      input {money['cost_without_cache']:,.2f} without cache, {money['cost_with_cache']:,.2f} with it, "
        f"saved {money['saved']:,.2f} (at {money['price_hit_per_million']} hit / {money['price_miss_per_million']} miss "
        "per million tokens)",
    ]
    if "prefill_flops_saved" in m:
        lines.append(f"compute   prefill FLOPs saved ~ {m['prefill_flops_saved']:.3g} "
                     f"(2 x {m['active_params']:,} active parameters x hit tokens)")
    return "\n".join(lines)


def _over_time_table(windows: list[dict]) -> str:
    from .output.table import format_table

    if windows and "first_request" in windows[0]:
        rows = [dict(w, span=f"requests {w['first_request']}-{w['last_request']}") for w in windows]
    else:
        rows = [dict(w, span=f"{w['start_s']:,.0f}-{w['end_s']:,.0f} s") for w in windows]
    return "hit rate over time (token-weighted per window):\n" + format_table(
        rows, [("span", "window"), ("requests", "requests"), ("hit_tokens", "hit tokens"), ("prompt_tokens", "prompt tokens"),
               ("hit_rate", "hit rate")])


def _run_summary(trace, report, budget=None) -> str:
    params = ", ".join(f"{k}={v}" for k, v in report.params.items())
    sizes = ", ".join(f"{k}={v}" for k, v in report.sizes.items())
    detail = "; ".join(x for x in (params, sizes) if x)
    lines = [
        f"trace     {trace.source}: {len(trace):,} requests, {trace.total_prompt_tokens:,} prompt tokens, "
        f"{trace.num_accesses:,} block accesses, {trace.num_blocks:,} unique blocks",
        f"policy    {report.policy}" + (f" ({detail})" if detail else ""),
        f"cache     {report.cache_capacity_blocks:,} blocks x {report.block_size} tokens" + _budget_summary(budget),
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


def _budget_summary(budget) -> str:
    """The run summary's byte budget, after the block count (empty without one)."""
    if budget is None:
        return ""
    from .analysis.models import budget_text, format_bytes

    point = budget["capacities"][0]
    asked = f"; budget {point['requested']} = {point['budget_bytes']:,} B" if "requested" in point else ""
    return f" = {format_bytes(point['cache_bytes'])} ({point['cache_bytes']:,} B) of KV{asked}\n          {budget_text(budget)}"


SWEEP_COLUMNS = [
    ("policy", "policy"), ("params", "params"), ("cache_capacity_blocks", "capacity"),
    ("total_hit_tokens", "hit tokens"), ("total_prompt_tokens", "prompt tokens"),
    ("hit_rate", "hit rate"), ("final_cache_blocks", "final blocks"),
]


def _cmd_sweep(args) -> int:
    from .analysis.sweep import points_to_rows, sweep

    _check_table_output(args)
    policies = [p for p in args.policies.split(",") if p.strip()]
    if args.bounds:
        policies += [p for p in ("infinite", "belady") if p not in policies]
    if args.each and len(args.traces) > 1:
        return _sweep_each(args, policies)
    trace = _load(args)
    capacities, budget = _resolve_budget(args, trace, args.capacities)
    with _Progress("replaying") as progress:
        result = sweep(trace, capacities, policies, args.block_size,
                       warmup_fraction=args.warmup_fraction, jobs=args.jobs, engine=args.engine,
                       executor=args.executor, ray_address=args.ray_address, progress=progress)
    if budget is not None:
        result["budget"] = budget
    _emit(args, result, *_with_budget(points_to_rows(result["results"]), SWEEP_COLUMNS, budget),
          f"trace {result['trace']}, block size {result['block_size']}, window: {result['window']}; hit rate is token-weighted"
          + _budget_heading(budget),
          trace=trace)
    return 0


def _sweep_each(args, policies) -> int:
    """`sweep --each A B ...`: the grid traces x policies x capacities, one trace per file."""
    import copy

    from .analysis.sweep import points_to_rows, sweep

    traces = {}
    for path in args.traces:
        one = copy.copy(args)
        one.trace = path
        traces[os.path.basename(path.rstrip(os.sep)) or path] = _load(one)
    if args.model is not None or args.bytes_per_token is not None:
        raise ConfigError("--each sweeps capacities in blocks (each trace may have its own block size); drop --model/--bytes-per-token")
    capacities, _ = _resolve_budget(args, next(iter(traces.values())), args.capacities)
    if args.plot and "infinite" not in policies:
        policies.append("infinite")  # each trace's ceiling on the plot
    with _Progress("replaying") as progress:
        result = sweep(traces, capacities, policies, args.block_size, warmup_fraction=args.warmup_fraction, jobs=args.jobs,
                       engine=args.engine, executor=args.executor, ray_address=args.ray_address, progress=progress)
    windows = "; ".join(f"{t['trace']}: block size {t['block_size']}, {t['window']}" for t in result["traces"])
    _emit(args, result, points_to_rows(result["results"]), [("trace", "trace")] + SWEEP_COLUMNS,
          f"{len(traces)} traces ({windows}); hit rate is token-weighted", trace=None)
    return 0


MRC_COLUMNS = [
    ("cache_capacity_blocks", "capacity"), ("total_hit_tokens", "hit tokens"), ("total_prompt_tokens", "prompt tokens"),
    ("hit_rate", "hit rate"), ("final_cache_blocks", "final blocks"), ("admissions", "admissions"),
]


def _check_output_dir(*paths) -> None:
    """Fail before a long run, not after it, when an output's directory does not exist."""
    from .errors import OutputError

    for path in paths:
        if path and path != "-" and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise OutputError(path, "cannot write: No such file or directory")


def _check_table_output(args) -> None:
    if args.output and not args.output.lower().endswith((".json", ".csv")):
        raise ConfigError(f"--output {args.output}: the name must end in .json or .csv")
    if getattr(args, "plot", None):
        from .output.plot import check_plot_path

        check_plot_path(args.plot)
    _check_output_dir(args.output, getattr(args, "plot", None))


def _cmd_mrc(args) -> int:
    from .analysis.mrc import mrc

    _check_table_output(args)
    trace = _load(args)
    capacities, budget = _resolve_budget(args, trace, args.capacities)
    curve = mrc(trace, capacities, args.block_size, warmup_fraction=args.warmup_fraction)
    if budget is not None:
        curve["budget"] = budget
    _emit(args, curve, *_with_budget(curve["points"], MRC_COLUMNS, budget),
          f"trace {curve['trace']}, policy lru (one-pass stack distances), block size {curve['block_size']}, "
          f"window: {curve['window']}; hit rate is token-weighted" + _budget_heading(budget), trace=trace)
    return 0


def _plot_curve(args, document: dict, trace) -> None:
    """--plot: hit rate vs capacity for a sweep's results or an mrc curve, with the infinite-cache ceiling."""
    from .output import plot

    rows = document.get("results") or [dict(p, policy="lru", params={}) for p in document["points"]]
    if trace is not None and not any(r["policy"] == "infinite" for r in rows):
        from .engine.replay import replay

        ceiling = replay(trace, "infinite", None, document["block_size"], warmup_fraction=document["warmup_fraction"])
        rows = rows + [{"policy": "infinite", "params": {}, "cache_capacity_blocks": 0, "hit_rate": ceiling.hit_rate}]
    budget = document.get("budget") or {}
    bytes_per_block = budget.get("bytes_per_block")
    note = " ".join(str(budget[k]) for k in ("model", "kv_dtype") if budget.get(k))
    if "traces" in document:  # sweep --each: one line per trace and policy
        title = f"{len(document['traces'])} traces, {document['traces'][0]['window'].split(' (')[0]}"
    else:
        title = f"{os.path.basename(document['trace'])}, block size {document['block_size']}, {document['window']}"
    plot.save_figure(plot.curves_figure(rows, title=title, bytes_per_block=bytes_per_block, capacity_note=note), args.plot)


def _emit(args, document: dict, rows: list[dict], columns, heading: str, trace=None) -> None:
    """Write `document` (JSON) or `rows` (CSV) to --output, and print JSON or a table."""
    if getattr(args, "plot", None):
        _plot_curve(args, document, trace)
    if args.output:
        from .files import write_atomic
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


def _cmd_hash(args) -> int:
    from .trace.hashing import hash_token_log

    s = hash_token_log(args.input, args.output, block_size=args.block_size, tokenizer=args.tokenizer,
                       salt=args.salt, keep_hashes=args.keep_hashes)
    print(f"{s['source']}: {s['requests']:,} requests, {s['tokens']:,} tokens, {s['blocks']:,} blocks of {s['block_size']} "
          f"({s['unique_blocks']:,} unique) -> {s['output']}", file=sys.stderr)
    _block_size_note(int(s["block_size"]))
    return 0


def _read_for_writing(args):
    """Load `args.input` for convert/slice, after refusing an output that would replace it."""
    from .trace import load_trace
    from .trace.writers import refuse_overwrite

    refuse_overwrite(args.output, [args.input])
    return load_trace(args.input, format=args.from_format, on_invalid=args.on_invalid, keep_ids=args.keep_ids)


def _block_size_note(trace, to: str = "mooncake") -> None:
    """Mooncake files do not record a block size (replays assume 512): say how to replay this one.
    `trace`: a Trace, or a block size."""
    from .trace.model import DEFAULT_BLOCK_SIZE

    size = trace if isinstance(trace, int) else trace.block_size
    if to == "mooncake" and size not in (None, DEFAULT_BLOCK_SIZE):
        print(f"kvreplay: note: the blocks are {size} tokens and Mooncake files do not say so: "
              f"replay the output with --block-size {size}", file=sys.stderr)


def _cmd_convert(args) -> int:
    from .trace.writers import write_trace

    trace = _read_for_writing(args)
    write_trace(trace, args.output, args.to, original_ids=args.keep_ids)
    print(f"{trace.source}: {len(trace):,} requests ({trace.format}) -> {args.output} ({args.to})", file=sys.stderr)
    _block_size_note(trace, args.to)
    return 0


def _cmd_slice(args) -> int:
    from .trace.slicing import parse_request_range, parse_time_range, slice_trace
    from .trace.writers import WRITE_FORMATS, write_trace

    if args.requests is None and args.time is None and args.sessions is None:
        raise ConfigError("slice: give --requests A:B, --time T0:T1 and/or --sessions N")
    requests = None if args.requests is None else parse_request_range(args.requests)
    trace = _read_for_writing(args)
    time_ms = None if args.time is None else parse_time_range(args.time, trace.timestamp)
    part = slice_trace(trace, requests, time_ms, sessions=args.sessions)
    to = args.to or (trace.format if trace.format in WRITE_FORMATS else "mooncake")
    write_trace(part, args.output, to, original_ids=args.keep_ids)
    total = trace.total_prompt_tokens
    pct = 100 * part.total_prompt_tokens / total if total else 0.0
    share = (f"{pct:.1f}%" if pct >= 1 or pct == 0 else f"{pct:.2g}%") + " of prompt tokens" if total else "no prompt tokens"
    print(f"kept {len(part):,} of {len(trace):,} requests, {share} -> {args.output} ({to})", file=sys.stderr)
    _block_size_note(part, to)
    return 0


def _cmd_merge(args) -> int:
    from .trace import load_trace
    from .trace.ops import merge, start_offsets_ms
    from .trace.writers import refuse_overwrite, write_trace

    refuse_overwrite(args.output, args.inputs)
    offsets = None
    if args.offsets is not None:
        try:
            offsets = [1000.0 * _seconds(part) for part in args.offsets.split(",")]
        except argparse.ArgumentTypeError as e:
            raise ConfigError(f"--offsets: {e}") from None
        if len(offsets) != len(args.inputs):
            raise ConfigError(f"--offsets: got {len(offsets)} offsets for {len(args.inputs)} inputs")
    options = dict(session_arrivals=args.session_arrivals, session_spacing=args.session_spacing, seed=args.seed)
    traces = [load_trace(p, format=args.format, on_invalid=args.on_invalid, keep_ids=args.shared_ids, **options)
              for p in args.inputs]
    if offsets is None:
        offsets = start_offsets_ms(traces, args.session_arrivals, args.session_spacing, args.seed)
    merged = merge(traces, namespace=not args.shared_ids, offsets_ms=offsets)
    write_trace(merged, args.output, args.to, original_ids=args.shared_ids)
    _block_size_note(merged, args.to)
    print(f"merged {len(traces)} inputs: {len(merged):,} requests, {merged.num_sessions:,} sessions, "
          f"{merged.num_blocks:,} unique blocks -> {args.output} ({args.to})", file=sys.stderr)
    if merged.block_size is not None and not (args.to == "bailian" and merged.block_size == 16):
        print(f"note: the inputs declare {merged.block_size}-token blocks, which {args.to} files do not record: "
              f"replay the output with --block-size {merged.block_size}", file=sys.stderr)
    return 0


_SYNTH_KNOBS = [  # flag, type, default, help; the defaults live in kvreplay.trace.synth.synth
    ("--arrival-rate", float, 1.0, "sessions per second (Poisson)"),
    ("--prefix-scale", float, 1.0, "multiplier on system prompt and RAG document lengths"),
    ("--prefixes", int, 8, "distinct system prompts (Zipf popularity)"),
    ("--docs", int, 200, "distinct RAG documents (Zipf popularity)"),
    ("--turns", float, 4.0, "mean requests per chat or RAG session"),
    ("--agent-steps", float, 10.0, "mean requests per agent loop"),
    ("--mix", str, "chat=0.6,rag=0.2,agent=0.2", "session kinds and weights"),
    ("--think-time", float, 30.0, "mean seconds between turns (agents: a tenth)"),
    ("--zipf", float, 1.1, "Zipf exponent of prompt and document popularity"),
]


def _cmd_stats(args) -> int:
    from .analysis.stats import format_stats, stats

    result = stats(_load(args), args.block_size)
    if args.json:
        sys.stdout.buffer.write(_encode_json(result))
    else:
        print(format_stats(result))
    return 0


def _cmd_synth(args) -> int:
    from .analysis.stats import stats
    from .trace.synth import compare_table, sessions_of, synth, synth_like, synth_like_prefixes
    from .trace.writers import refuse_overwrite, write_trace

    knobs = {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag, *_ in _SYNTH_KNOBS}
    given = [f"--{k.replace('_', '-')}" for k, v in knobs.items() if v is not None]
    out = sys.stderr if args.output == "-" else sys.stdout
    if args.like:
        if given:
            raise ConfigError(f"{', '.join(given)}: the generator's knobs are fitted with --like; leave them out")
        from .trace import load_trace

        refuse_overwrite(args.output, [args.like])
        original = load_trace(args.like)
        scale = args.scale_requests if args.scale_requests is not None else 1.0
        if args.requests is not None:
            if args.scale_requests is not None:
                raise ConfigError("--requests and --scale-requests: give one of them")
            scale = args.requests / len(original)
        like = synth_like_prefixes if args.like_model == "prefixes" else synth_like
        trace = like(original, scale_requests=scale, speedup=args.speedup if args.speedup is not None else 1.0,
                     block_size=args.block_size, seed=args.seed)
        write_trace(trace, args.output, format="mooncake")
        sessions = len(set(sessions_of(original, trace.block_size)[2].tolist()))
        print(f"{args.output}: {len(trace):,} requests like {original.source}, block size {trace.block_size}; "
              "rates are token-weighted over the whole trace", file=out)
        print(compare_table(stats(original, trace.block_size), stats(trace), sessions), file=out)
        return 0
    for flag in ("--scale-requests", "--speedup", "--like-model"):
        if getattr(args, flag[2:].replace("-", "_")) is not None:
            raise ConfigError(f"{flag} applies only with --like TRACE")
    from .trace.model import resolve_block_size

    trace = synth(args.requests or 10_000, block_size=resolve_block_size(args.block_size), seed=args.seed,
                  **{k: v for k, v in knobs.items() if v is not None})
    write_trace(trace, args.output, format="mooncake")
    _block_size_note(trace)
    print(f"{args.output}: {trace.source}: {len(trace):,} requests, {trace.total_prompt_tokens:,} prompt tokens, "
          f"{trace.num_blocks:,} unique blocks of {trace.block_size} tokens, {trace.num_sessions:,} sessions "
          f"(kvreplay stats {args.output} describes it)", file=out)
    return 0


def _cmd_demo(args) -> int:
    import time

    from .analysis.sweep import points_to_rows, sweep
    from .output.table import format_table
    from .policies.registry import POLICIES
    from .trace.synth import synth

    started = time.perf_counter()
    # Chat, RAG and agent sessions (kvreplay synth's defaults, fewer documents): ~21k block accesses.
    trace = synth(1000, docs=20, seed=0)
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


class _Progress:
    """A rich progress bar on stderr for long runs, only when stderr is a terminal (silent in pipes,
    logs and CI). Use as a context manager; the instance is the ``progress(done, total)`` callback."""

    def __init__(self, description: str):
        self.description = description
        self.bar = None
        self.task = None

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.__enter__()
        return self

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            return
        if self.task is None:
            self.task = self.bar.add_task(self.description, total=total)
        self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False


def _cmd_report(args) -> int:
    from . import report_html
    from .files import write_atomic

    _check_output_dir(args.output)
    trace = _load(args)
    policies = [p for p in args.policies.split(",") if p.strip()]
    capacities, budget = _resolve_budget(args, trace, args.capacities)
    focus = None if args.capacity is None else _resolve_budget(args, trace, [args.capacity])[0][0]
    note = " ".join(str(budget[k]) for k in ("model", "kv_dtype") if budget.get(k)) if budget else ""
    with _Progress("replaying") as progress:
        page = report_html(trace, policies=policies, capacities=capacities, focus_capacity=focus,
                           block_size=args.block_size, warmup_fraction=args.warmup_fraction, bounds=args.bounds,
                           engine=args.engine, title=args.title, progress=progress, price_hit=args.price_hit,
                           price_miss=args.price_miss, active_params=_active_params(args),
                           bytes_per_block=budget["bytes_per_block"] if budget else None, budget_note=note)
    write_atomic(args.output, page.encode())
    print(f"wrote {args.output} ({len(page) / 1024:,.0f} KiB, self-contained HTML)", file=sys.stderr)
    return 0


def _cmd_policies(args) -> int:
    from .policies.registry import POLICIES

    for spec in POLICIES.values():
        print(f"{spec.name:9s} {spec.summary}" + ("" if spec.capacity == "required" else f" [capacity {spec.capacity}]"))
        for p in spec.params:
            print(f"{'':9s}   --{p.name.replace('_', '-')} {p.default}: {p.help}")
    return 0


def _cmd_models(args) -> int:
    from .analysis.models import catalog, describe, format_params

    entries = [describe(m) for m in catalog()]
    if args.json:
        sys.stdout.buffer.write(_encode_json({"models": entries}))
        return 0
    from .output.table import format_table

    rows = [{
        "name": e["name"], "attention": e["attention"], "num_layers": e["num_layers"], "num_kv_heads": e["num_kv_heads"],
        "head_dim": e["head_dim"],
        "sliding": f"{e['sliding_window_layers']} x {e['sliding_window']}" if e["sliding_window"] else "-",
        "bf16": e["kv_bytes_per_token"]["all"]["bf16"], "fp8": e["kv_bytes_per_token"]["all"]["fp8"],
        "full": e["kv_bytes_per_token"]["full"]["bf16"] if e["sliding_window"] else "-",
        "params": f"{format_params(e['active_params'])} / {format_params(e['total_params'])}", "source": e["source"],
    } for e in entries]
    print(format_table(rows, [
        ("name", "model"), ("attention", "kind"), ("num_layers", "layers"), ("num_kv_heads", "kv heads"),
        ("head_dim", "head dim"), ("sliding", "sliding layers x window"), ("bf16", "KV B/token bf16"),
        ("fp8", "KV B/token fp8"), ("full", "bf16 full-attn only"), ("params", "active / total params"), ("source", "source"),
    ]))
    print("\nKV bytes per token: MHA/GQA = 2 (K, V) x layers x kv heads x head dim x dtype bytes; "
          "MLA = layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes\n(one latent per token and layer, shown as 1 kv head "
          "of that width). Sliding-window models: budgets count every layer (an engine without a hybrid\nallocator keeps them all); "
          "--kv-layers full counts only full-attention layers (what vLLM's hybrid allocator keeps for long prefixes).\n"
          "Use: kvreplay run TRACE --capacity 80GiB --model NAME [--kv-dtype fp8]. Details: docs/budgets.md")
    return 0


COMMANDS = {"run": _cmd_run, "sweep": _cmd_sweep, "mrc": _cmd_mrc, "hash": _cmd_hash, "convert": _cmd_convert, "slice": _cmd_slice, "demo": _cmd_demo, "policies": _cmd_policies}
COMMANDS["models"] = _cmd_models
COMMANDS["stats"] = _cmd_stats
COMMANDS["synth"] = _cmd_synth


class _CompileNotice:
    """Shown while a kernel compiles (kvreplay.jit calls it only when that takes a noticeable
    time): a rich spinner when stderr is a terminal, one line otherwise. Worker processes of a
    sweep inherit it: there it prints the line only when stderr is not a terminal (the main
    process's progress bar owns the terminal)."""

    def __init__(self):
        self.pid = os.getpid()

    def __call__(self, what: str):
        from contextlib import contextmanager

        text = f"compiling {what} (first run only; cached afterwards)…"
        tty = sys.stderr.isatty()

        @contextmanager
        def shown():
            if not tty:
                print(f"kvreplay: {text}", file=sys.stderr, flush=True)
                yield
            elif os.getpid() != self.pid:
                yield
            else:
                from rich.console import Console
                from rich.errors import LiveError

                try:
                    with Console(stderr=True).status(text):
                        yield
                except LiveError:  # a progress bar is already live: say it in a line above it
                    print(f"kvreplay: {text}", file=sys.stderr, flush=True)
                    yield

        return shown()


def main(argv=None) -> int:
    """Entry point of the `kvreplay` command. Exit codes: 0 ok, 2 bad input or options, 3 internal error."""
    from .jit import set_compile_listener

    warnings.formatwarning = lambda message, category, *a, **k: f"kvreplay: warning: {message}\n"
    set_compile_listener(_CompileNotice())
    args = build_parser().parse_args(argv)
    try:
        return (COMMANDS.get(args.command) or globals()[f"_cmd_{args.command.replace('-', '_')}"])(args)
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
