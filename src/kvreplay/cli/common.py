"""What the command families share: argument types, option builders, loading, writing, progress."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import ConfigError
from ..trace.formats import FORMATS


LARGEST = 2**62  # counts above this overflow the kernels' 64-bit arithmetic; no cache is that large


def whole_number(text: str, low: int, high: int, high_text: str) -> int:
    """An argparse value: a whole number in low..high."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
    if value > high:
        raise argparse.ArgumentTypeError(f"must be {high_text}, got {value:,}")
    return value


def positive_int(text: str) -> int:
    """Counts and sizes: 1..2**62."""
    return whole_number(text, 1, LARGEST, f"at most 2**62 = {LARGEST:,}")


def non_negative_int(text: str) -> int:
    """Seeds: 0..2**32-1."""
    return whole_number(text, 0, 2**32 - 1, "below 2**32")


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def capacity(text: str):
    """A block count (int), or a size with a unit ("80GiB", kept as text: it becomes blocks once
    the block size and the KV bytes per token are known; see analysis/models.py)."""
    from ..analysis.models import parse_size

    text = text.strip()
    if text.isdigit() or not any(c.isalpha() for c in text):
        return positive_int(text)
    try:
        parse_size(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def capacities_or_sizes(text: str):
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return [capacity(part) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"capacities: {e} (use comma-separated block counts or sizes like 16GiB, or 'auto')") from None


def price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a price per million tokens, got {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def add_price_options(p: argparse.ArgumentParser) -> None:
    from ..analysis.metrics import DEFAULT_PRICE_HIT, DEFAULT_PRICE_MISS

    p.add_argument("--price-hit", type=price, default=DEFAULT_PRICE_HIT, metavar="P",
                   help=f"price per million cached input tokens (default {DEFAULT_PRICE_HIT}, DeepSeek API list price; docs/metrics.md)")
    p.add_argument("--price-miss", type=price, default=DEFAULT_PRICE_MISS, metavar="P",
                   help=f"price per million uncached input tokens (default {DEFAULT_PRICE_MISS})")


def over_time(text: str):
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


def active_params(args):
    """Active parameters of --model (for prefill FLOPs saved), or None."""
    if getattr(args, "model", None) is None:
        return None
    from ..analysis.models import get_model

    return get_model(args.model).active_params


def add_capacities_options(p: argparse.ArgumentParser, what: str) -> None:
    """--capacities (block counts, sizes or auto) and the options that turn sizes into blocks."""
    p.add_argument("--capacities", type=capacities_or_sizes, default="auto",
                   help=f"{what} or sizes (16GiB, with --model or --bytes-per-token), or auto (default)")
    add_budget_options(p)


def add_executor_options(p: argparse.ArgumentParser, what: str, jobs_default: str = "default 1") -> None:
    """--jobs, --executor and --ray-address: where the command's `what` (replays, runs, searches) go
    (analysis/executors.py; docs/scaling.md)."""
    p.add_argument("--jobs", type=positive_int, default=1,
                   help=f"{what} at once ({jobs_default}; local: processes, threads: threads)")
    p.add_argument("--executor", choices=("local", "threads", "ray"), default="local",
                   help=f"where {what} go: local processes (default), threads, or ray (needs kvreplay[ray]; "
                        "docs/scaling.md); the results are the same wherever they ran")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --executor ray: auto (this machine's cluster) or ray://HOST:10001 (default: start a "
                        "local instance)")


def add_max_model_len(p: argparse.ArgumentParser, refused: str) -> None:
    """--max-model-len for simulate and plan: what happens to a request past it is `refused`."""
    p.add_argument("--max-model-len", type=positive_int, default=None, metavar="TOKENS",
                   help=f"the context limit (default: --model's, from its config.json): {refused}")


def add_curve_outputs(p: argparse.ArgumentParser, output_help: str) -> None:
    p.add_argument("--output", "-o", help=output_help)
    p.add_argument("--json", action="store_true", help="print JSON on stdout instead of a table")
    p.add_argument("--plot", metavar="FILE", help="draw hit rate vs capacity to FILE.png|.svg|.pdf (atomically)")
    add_zoom_option(p)


def zoom(text: str):
    """--zoom: "auto", "off", or "LO,HI" (percent hit rate) for the curve's zoom panel."""
    text = text.strip().lower()
    if text in ("auto", "off"):
        return "auto" if text == "auto" else False
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto, off or LO,HI (percent), got {text!r}") from None
    if not 0 <= lo < hi <= 100:
        raise argparse.ArgumentTypeError(f"LO,HI must satisfy 0 <= LO < HI <= 100, got {text!r}")
    return (lo, hi)


def add_zoom_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zoom", type=zoom, default="auto", metavar="auto|off|LO,HI",
                   help="the hit-rate curve's zoom panel on the low band: auto (when the policies crowd it; "
                        "default), off, or a band in percent, e.g. 2,8")


def add_budget_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="turn sizes (80GiB) into blocks with this model's KV bytes per token: a name from "
                   "`kvreplay models`, or a path to a Hugging Face config.json or a model directory holding one")
    p.add_argument("--kv-dtype", default=None, help="with --model: KV element type, bf16 (default), fp16, fp8, int8, fp32, fp4")
    p.add_argument("--kv-layers", choices=("all", "full"), default=None,
                   help="with --model: count every layer (default) or only full-attention layers (sliding-window models)")
    p.add_argument("--bytes-per-token", type=positive_int, default=None, metavar="N", help="KV bytes per token, instead of --model")
    p.add_argument("--kv-semantics", choices=("auto", "hybrid", "full"), default="auto",
                   help="with a hybrid --model (sliding-window, chunked-local or Mamba layers): hybrid replays vLLM's "
                        "hybrid manager (policy vllm; a hit must be served by every layer group), full replays every "
                        "layer as full attention; auto (default): hybrid where vLLM 0.33.0 uses it by default")


def resolve_budget(args, trace, capacities, *, hybrid: bool = False):
    """Block counts for `capacities` (block counts, sizes, or "auto") at the effective block size,
    and the JSON "budget" object (None without --model or --bytes-per-token). `hybrid`: the
    command replays hybrid semantics (run), so sizes count vLLM's layout of --model's groups."""
    from ..analysis.models import is_size, resolve_capacities
    from ..trace.model import resolve_block_size

    priced = args.model is not None or args.bytes_per_token is not None
    if capacities == "auto":
        if not priced:
            return "auto", None
        from ..analysis.capacities import auto_capacities

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
    layout = kv_layout(args, block_size) if hybrid else None
    if not hybrid and getattr(args, "kv_semantics", "auto") == "hybrid":
        raise ConfigError("--kv-semantics hybrid: only run and sweep replay vLLM's hybrid manager so far (mrc and "
                          "report replay full semantics)")
    return resolve_capacities(capacities, block_size, model=args.model, kv_dtype=args.kv_dtype,
                              layers=args.kv_layers, bytes_per_token=args.bytes_per_token, layout=layout)


def kv_semantics(args) -> str:
    """"hybrid" or "full": --kv-semantics, with auto resolved from --model (analysis/kv_groups.py)."""
    asked = getattr(args, "kv_semantics", "auto")
    if asked == "hybrid" and args.model is None:
        raise ConfigError("--kv-semantics hybrid needs --model (the model's layer groups)")
    if args.model is None:
        return "full"  # (no model, nothing to look up: the layer groups are not imported)
    from ..analysis.kv_groups import resolve_semantics

    if getattr(args, "kv_layers", None) is not None:  # bytes per token: full semantics' way to count
        if asked == "hybrid":
            raise ConfigError("--kv-layers counts bytes per token for full semantics; with --kv-semantics hybrid a "
                              "block id costs what vLLM's layout gives: drop one of them")
        return "full"
    semantics = resolve_semantics(args.model, asked)
    if semantics == "hybrid" and not _is_hybrid(args.model):
        raise ConfigError(f"--kv-semantics hybrid: {args.model} has one kind of layer (no sliding-window, "
                          "chunked-local or Mamba groups); its semantics are full")
    return semantics


def _is_hybrid(model) -> bool:
    from ..analysis.models import get_model

    return get_model(model).is_hybrid


def kv_layout(args, block_size: int):
    """The engine's layout of --model's groups under hybrid semantics: SGLang's pools for policy
    radix, vLLM's block pool otherwise (None for full semantics)."""
    if getattr(args, "model", None) is None or kv_semantics(args) != "hybrid":
        return None
    from ..analysis.kv_groups import layout, sglang_layout

    policy = str(getattr(args, "policy", "") or "").split(":")[0].strip().lower()
    return (sglang_layout if policy == "radix" else layout)(args.model, block_size, args.kv_dtype or "bf16")


class TracePaths(argparse.Action):
    """One path stays a string (args.trace); several become a list (also in args.traces)."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.traces = list(values)
        setattr(namespace, self.dest, values[0] if len(values) == 1 else list(values))


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def add_trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", nargs="+", action=TracePaths,
                   help="trace file(s) (optionally .gz), a directory of them, or - for stdin; several merge into one trace")
    p.add_argument("--format", choices=("auto", *FORMATS), default="auto",
                   help="trace format (default auto: sniffed from each file's first record)")
    p.add_argument("--session-arrivals", choices=("fixed", "poisson", "zero"), default="fixed",
                   help="start times of merged Claude Code sessions: fixed spacing (default), poisson (seeded), zero (all at 0)")
    p.add_argument("--session-spacing", type=seconds, default=60.0, metavar="SECONDS",
                   help="gap between session starts (fixed) or mean gap (poisson); default 60")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of --session-arrivals poisson (default 0)")
    p.add_argument("--subagent-sessions", action="store_true", help="Claude Code: each subagent stream is its own session")
    p.add_argument("--block-size", type=positive_int, default=None, help="tokens per block (default: the trace's own, else 512)")
    p.add_argument("--on-invalid", choices=("error", "skip"), default="error", help="bad records: stop (default) or skip and count them")
    p.add_argument("--sort-by-time", action="store_true", help="replay in timestamp order (stable) instead of file order")
    p.add_argument("--engine", choices=("compiled", "reference"), default=None,
                   help="compiled (C; the default where the compiled core is installed) or reference (plain Python)")
    p.add_argument("--warmup-fraction", type=fraction, default=0.0, metavar="F", help="the first floor(F*N) requests only warm the cache (default 0)")


def param_table() -> dict:
    """Every policy parameter name -> [(policy name, its Param), ...] for the policies that take it
    (from the registry's index: no policy module is imported)."""
    from ..policies.registry import INFO

    table: dict = {}
    for spec in INFO.values():
        for p in spec.params:
            table.setdefault(p.name, []).append((spec.name, p))
    return table


def add_param_options(p: argparse.ArgumentParser) -> None:
    for name, owners in param_table().items():
        # a name several policies take (ttl: ttl and deepseek) says each one's meaning and default
        text = "; ".join(f"{policy}: {param.help} (default {param.default})" for policy, param in owners)
        p.add_argument(f"--{name.replace('_', '-')}", dest=f"param_{name}", type=owners[0][1].kind, default=None,
                       help=text)


def given_params(args, policy: str) -> dict:
    from ..policies.registry import INFO, get_policy

    spec = get_policy(policy)  # (ConfigError for an unknown name)
    own = {p.name for p in INFO[spec.name].params}
    given = {k[len("param_"):]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}
    for name in given:
        if name not in own:
            owners = ", ".join(policy for policy, _ in param_table()[name])
            raise ConfigError(f"--{name.replace('_', '-')} applies to {owners}, not {spec.name}")
    return given


def load(args, path=None):
    """The trace of `args` (or `path`), after checking that its hash ids fit the block size in use:
    an inferred block size that most requests misfit stops the command (exit 2) with the size they
    fit; a --block-size the user gave is used, with a warning that counts the misfits."""
    from ..trace import load_trace
    from ..trace.model import check_block_size, resolve_block_size

    trace = load_trace(args.trace if path is None else path, format=args.format, on_invalid=args.on_invalid,
                       sort_by_time=args.sort_by_time, session_arrivals=args.session_arrivals,
                       session_spacing=args.session_spacing, seed=args.seed, subagent_sessions=args.subagent_sessions)
    check_block_size(trace, resolve_block_size(args.block_size, trace), given=args.block_size is not None)
    return trace


def encode_json(obj) -> bytes:
    import msgspec

    return msgspec.json.format(msgspec.json.encode(obj), indent=1) + b"\n"


def check_output_dir(*paths, inputs=()) -> None:
    """Fail before a long run, not after it, when an output's directory does not exist or an
    output would replace one of the `inputs` (an input trace is never overwritten)."""
    from ..errors import OutputError
    from ..trace.writers import refuse_overwrite

    for path in paths:
        if path and path != "-" and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise OutputError(path, "cannot write: No such file or directory")
        if path:
            refuse_overwrite(path, inputs)


def plot_curve(args, document: dict, trace) -> None:
    """--plot: hit rate vs capacity for a sweep's results or an mrc curve, with the infinite-cache ceiling."""
    from ..output import plot

    rows = document.get("results") or [dict(p, policy="lru", params={}) for p in document["points"]]
    if trace is not None and not any(r["policy"] == "infinite" for r in rows):
        from ..engine.replay import replay

        ceiling = replay(trace, "infinite", None, document["block_size"], warmup_fraction=document["warmup_fraction"])
        rows = rows + [{"policy": "infinite", "params": {}, "cache_capacity_blocks": 0, "hit_rate": ceiling.hit_rate}]
    budget = document.get("budget") or {}
    bytes_per_block = budget.get("bytes_per_block")
    note = " ".join(str(budget[k]) for k in ("model", "kv_dtype") if budget.get(k))
    if "traces" in document:  # sweep --each: one line per trace and policy
        title = f"{len(document['traces'])} traces, {document['traces'][0]['window'].split(' (')[0]}"
    else:
        title = f"{os.path.basename(document['trace'])}, block size {document['block_size']}, {document['window']}"
    plot.save_figure(plot.curves_figure(rows, title=title, bytes_per_block=bytes_per_block, capacity_note=note,
                                        zoom=args.zoom), args.plot)


class Progress:
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


def check_table_outputs(args) -> None:
    """sweep, mrc and simulate: --output is .csv, .json or .parquet (pyarrow installed), --plot a known
    image type; every output's directory exists and no output is an input trace. Checked before
    anything runs."""
    if args.output:
        name = args.output.lower()
        if not name.endswith((".json", ".csv", ".parquet")):
            raise ConfigError(f"--output {args.output}: the name must end in .csv, .json or .parquet")
        if name.endswith(".parquet"):
            from ..tables import require

            require("pyarrow", f"--output {args.output}")
    if args.plot:
        from ..output.plot import check_plot_path

        check_plot_path(args.plot)
    check_output_dir(args.output, args.plot, inputs=inputs_of(args))


def inputs_of(args) -> list[str]:
    """Every file a command reads, so no output replaces one: the traces and a --time-model
    profile (FILE.npz / FILE.json)."""
    out = list(getattr(args, "traces", None) or [])
    tm = getattr(args, "time_model", None)
    if isinstance(tm, str) and os.path.isfile(tm):
        out.append(tm)
    return out
