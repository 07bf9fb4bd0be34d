"""What the command families share: argument types, option builders, loading, writing, progress."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import ConfigError
from ..trace.formats import FORMATS
from ..units import Seconds, parse_duration


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


def duration(text: str) -> float:
    """A duration flag's value in seconds: 2s, 50ms, 5m, 1h (units.parse_duration); a bare number
    other than 0 is refused, naming the flag: "2000 what? write 2000s or 2000ms"."""
    try:
        return parse_duration(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_duration(text: str) -> float:
    """A duration > 0 (an SLO, a window, a think time)."""
    value = duration(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0, got {text!r}")
    return value


def milliseconds(text: str) -> float:
    """A flag named in milliseconds (--router-lag-ms): a bare number is milliseconds, as its name
    says; a duration with a unit (2s, 500us) is converted. Returns milliseconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = duration(text) * 1e3
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite duration >= 0, got {text!r}")
    return value


REQUEST_UNITS = ("req", "reqs", "request", "requests")


def over_time(text: str):
    """--over-time: a window of N requests ("1000req") or of trace time ("600s", "10m")."""
    raw = text.strip()
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    if raw[len(number):].strip() in REQUEST_UNITS:
        try:
            value = int(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number of requests, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1 request, got {text!r}")
        return "requests", value
    try:
        value = parse_duration(raw)
    except ConfigError as e:
        message = str(e)
        if "what?" in message:  # a bare number: it could be requests too
            message = f"{raw} what? write {raw}s (seconds of trace time) or {raw}req (requests per window)"
        raise argparse.ArgumentTypeError(message) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0, got {text!r}")
    return "seconds", value


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

    refuse_unless(args, "kv_semantics", args.model is not None, "needs --model (the model's layer groups)")
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
    """"hybrid" or "full": --kv-semantics, with auto resolved from --model (catalog/kv_groups.py)."""
    asked = getattr(args, "kv_semantics", "auto")
    refuse_unless(args, "kv_semantics", args.model is not None, "needs --model (the model's layer groups)")
    if asked == "hybrid" and args.model is None:
        raise ConfigError("--kv-semantics hybrid needs --model (the model's layer groups)")
    if args.model is None:
        return "full"  # (no model, nothing to look up: the layer groups are not imported)
    from ..catalog.kv_groups import resolve_semantics

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
    from ..catalog.kv_groups import layout, sglang_layout
    from ..policies.registry import INFO, get_policy

    policy = str(getattr(args, "policy", "") or "").split(":")[0].strip().lower()
    kind = get_policy(policy).layout if policy in INFO else "vllm"
    return {"vllm": layout, "sglang": sglang_layout}[kind](args.model, block_size, args.kv_dtype or "bf16")


class TracePaths(argparse.Action):
    """One path stays a string (args.trace); several become a list (also in args.traces)."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.traces = list(values)
        setattr(namespace, self.dest, values[0] if len(values) == 1 else list(values))


def add_trace_options(p: argparse.ArgumentParser, refused: tuple = ()) -> None:
    """The trace's options. `refused`: flags the command takes only to refuse with its reason
    (``--warmup-fraction`` in plan says to use ``--warmup``), left out of its --help."""
    p.add_argument("trace", nargs="+", action=TracePaths,
                   help="trace file(s) (optionally .gz), a directory of them, or - for stdin; several merge into one trace")
    p.add_argument("--format", choices=("auto", *FORMATS), default="auto",
                   help="trace format (default auto: sniffed from each file's first record)")
    p.add_argument("--session-arrivals", choices=("fixed", "poisson", "zero"), default="fixed",
                   help="start times of merged Claude Code sessions: fixed spacing (default), poisson (seeded), zero (all at 0)")
    p.add_argument("--session-spacing", type=duration, default=60.0, metavar="DURATION",
                   help="gap between session starts (fixed) or mean gap (poisson), e.g. 60s or 2m; default 60s")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of --session-arrivals poisson and of the run's draws: Poisson --rate(s), --sessions, --think-time (default 0)")
    p.add_argument("--subagent-sessions", action="store_true", help="Claude Code: each subagent stream is its own session")
    p.add_argument("--block-size", type=positive_int, default=None, help="tokens per block (default: the trace's own, else 512)")
    p.add_argument("--on-invalid", choices=("error", "skip"), default="error", help="bad records: stop (default) or skip and count them")
    p.add_argument("--sort-by-time", action="store_true", help="replay in timestamp order (stable) instead of file order")
    hidden = lambda flag, text: argparse.SUPPRESS if flag in refused else text  # noqa: E731
    p.add_argument("--engine", choices=("compiled", "reference"), default=None, help=hidden(
        "--engine", "compiled (C; the default where the compiled core is installed) or reference (plain Python)"))
    p.add_argument("--warmup-fraction", type=fraction, default=0.0, metavar="F",
                   help=hidden("--warmup-fraction", "the first floor(F*N) requests only warm the cache (default 0)"))
    p.add_argument("--no-token-id-check", action="store_true",
                   help="replay hash ids that look like token ids (about one per prompt token, repeated within "
                        "prompts) as they are, instead of stopping (docs/formats.md, \"Token ids are not hash ids\")")


def param_table() -> dict:
    """Every policy parameter name -> [(policy name, its Param), ...] for the policies that take it
    (from the registry's index: no policy module is imported)."""
    from ..policies.registry import INFO

    table: dict = {}  # (Seconds: a duration parameter, units.py)
    for spec in INFO.values():
        for p in spec.params:
            table.setdefault(p.name, []).append((spec.name, p))
    return table


def add_param_options(p: argparse.ArgumentParser) -> None:
    from ..policies.registry import default_text

    for name, owners in param_table().items():
        # a name several policies take (ttl: ttl and deepseek) says each one's meaning and default
        text = "; ".join(f"{policy}: {param.help} (default {default_text(param)})" for policy, param in owners)
        kind = owners[0][1].kind
        p.add_argument(f"--{name.replace('_', '-')}", dest=f"param_{name}", type=duration if kind is Seconds else kind,
                       default=None, help=text)


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


def given(args, dest: str) -> bool:
    """Was the option stored in `dest` given on the command line (cli.parser records them)?"""
    return dest in getattr(args, "given", ())


def refuse_unless(args, dest: str, applies: bool, why: str) -> None:
    """A given flag that cannot apply is refused, never accepted and ignored: ConfigError
    "--FLAG why" when `dest` was given and `applies` is false."""
    if given(args, dest) and not applies:
        raise ConfigError(f"--{dest.removeprefix('param_').replace('_', '-')} {why}")


def _claude_files(args) -> int:
    """How many Claude Code sessions the command's trace files hold (a file one, a JSONL corpus one
    per line)."""
    from ..trace.claude_code import sessions_in
    from ..trace.formats import sniff_format
    from ..trace.ops import trace_paths

    paths = trace_paths(args.trace)
    if args.format not in ("auto", "claude-code"):
        return 0
    return sum(sessions_in(p) if p != "-" else 1 for p in paths
               if args.format == "claude-code" or (p != "-" and sniff_format(p) == "claude-code"))


def check_session_options(args, sessions_used: str | None = None, seed_used: str | None = None) -> None:
    """Refuse the trace options that cannot apply: start times of merged Claude Code sessions
    need two or more Claude Code files, --seed something random, --subagent-sessions a command
    that uses sessions (`sessions_used`: where, or None). `seed_used`: what else the command seeds."""
    flags = ("session_arrivals", "session_spacing", "subagent_sessions", "seed")
    if not any(given(args, d) for d in flags):
        return
    n = _claude_files(args)
    merged = f"they set the start times of merged Claude Code sessions: give two or more Claude Code session " \
             f"files (given: {n})"
    refuse_unless(args, "session_arrivals", n >= 2, merged)
    refuse_unless(args, "session_spacing", n >= 2, merged)
    refuse_unless(args, "session_spacing", args.session_arrivals != "zero",
                  "does not apply with --session-arrivals zero (every session starts at 0)")
    refuse_unless(args, "subagent_sessions", n >= 1, "applies to Claude Code session files (none given)")
    refuse_unless(args, "subagent_sessions", sessions_used is not None,
                  f"numbers each subagent stream as its own session, and kvreplay {args.command} does not use sessions")
    poisson = n >= 2 and args.session_arrivals == "poisson"
    refuse_unless(args, "seed", poisson or seed_used is not None,
                  "seeds --session-arrivals poisson (with two or more Claude Code session files)"
                  + (f" and {seed_used}" if seed_used else "") + ": nothing random here uses it")


def load(args, path=None, *, sessions_used: str | None = None, seed_used: str | None = None):
    """The trace of `args` (or `path`), after checking that its hash ids are block hashes, not token
    ids (unless --no-token-id-check), and that they fit the block size in use: a block size that
    most requests misfit stops the command (exit 2) with the size they fit. The session options
    are refused where they cannot apply (check_session_options)."""
    from .. import native
    from ..trace import load_trace
    from ..trace.model import check_block_size, check_not_token_ids, resolve_block_size

    check_session_options(args, sessions_used, seed_used)
    native.fix_mmap_threshold()  # the trace's arrays and what a run frees go back to the system
    trace = load_trace(args.trace if path is None else path, format=args.format, on_invalid=args.on_invalid,
                       sort_by_time=args.sort_by_time, session_arrivals=args.session_arrivals,
                       session_spacing=args.session_spacing, seed=args.seed, subagent_sessions=args.subagent_sessions,
                       progress=getattr(args, "progress", None))
    if not args.no_token_id_check:
        check_not_token_ids(trace)
    check_block_size(trace, resolve_block_size(args.block_size, trace), given=args.block_size is not None)
    return trace


def encode_json(obj) -> bytes:
    import msgspec

    return msgspec.json.format(msgspec.json.encode(obj), indent=1) + b"\n"


#: the positional arguments that name a command's input (inputs_of's flag for them)
POSITIONAL = ("trace", "traces", "input", "inputs")


def check_output_dir(*paths, inputs=(), flags=("-o", "--plot")) -> None:
    """Fail before a long run, not after it, when an output's directory does not exist or an
    output would replace one of the `inputs` (a list of paths, or inputs_of's {path: flag}): no
    input is ever overwritten, and two outputs are never one file. `flags`: the outputs' flags,
    in the order of `paths`, for the messages."""
    from ..errors import OutputError
    from ..trace.writers import same_file

    sources = inputs if isinstance(inputs, dict) else dict.fromkeys(inputs, "input")
    given = [(flags[k] if k < len(flags) else "-o", p) for k, p in enumerate(paths) if p]
    for k, (flag, path) in enumerate(given):
        if path != "-" and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise OutputError(path, "cannot write: No such file or directory")
        for source, source_flag in sources.items():
            if same_file(path, source):
                of = "" if source_flag in POSITIONAL else f" of {source_flag}"
                raise ConfigError(f"{flag} {path}: that is the input file{of}; write to another name")
        for other_flag, other in given[:k]:
            if path != "-" and (same_file(path, other) or os.path.abspath(path) == os.path.abspath(other)):
                raise ConfigError(f"{flag} {path}: {other_flag} writes it too; give each output its own name")


def plot_curve(args, document: dict, trace) -> bytes:
    """--plot's bytes: hit rate vs capacity for a sweep's results or an mrc curve, with the
    infinite-cache ceiling."""
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
    return plot.plot_bytes(plot.curves_figure(rows, title=title, bytes_per_block=bytes_per_block, capacity_note=note,
                                              zoom=args.zoom), args.plot)


def note(args, text: str) -> None:
    """An informational line on stderr (what a command wrote), left out with --quiet."""
    if not getattr(args, "quiet", False):
        print(text, file=sys.stderr)


def check_table_outputs(args) -> None:
    """sweep, mrc and simulate: --output is .csv, .json or .parquet (pyarrow installed), --plot a known
    image type; every output's directory exists and no output is an input trace. Checked before
    anything runs."""
    refuse_unless(args, "zoom", bool(getattr(args, "plot", None)), "shapes the --plot figure's zoom panel: add --plot")
    refuse_unless(args, "ray_address", getattr(args, "executor", None) == "ray", "applies with --executor ray")
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


#: the arguments that name what a command writes (every other one naming a file is an input)
OUTPUT_ARGS = frozenset({"output", "plot", "rewrite", "cache", "command"})


def inputs_of(args) -> dict[str, str]:
    """Every file a command reads, with the flag that named it, so that no output replaces one:
    each argument naming an existing file (traces, --time-model and --rate-profile files, --plan,
    --like, --tokenizer, a --model config.json, calibrate-profile's steps...), the files of a
    directory given (a trace directory, a model directory), and the files a --plan names."""
    out = {}
    for name, value in vars(args).items():
        if name in OUTPUT_ARGS:
            continue
        flag = name if name in POSITIONAL else "--" + name.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, str) or v == "-" or not os.path.exists(v):
                continue
            if os.path.isdir(v):
                with os.scandir(v) as entries:
                    for k, e in enumerate(entries):
                        if k >= 100_000:
                            break
                        if e.is_file():
                            out.setdefault(e.path, flag)
            else:
                out.setdefault(v, flag)
    plan = getattr(args, "plan", None)
    if isinstance(plan, str) and os.path.isfile(plan):
        out.update({p: f"--plan {plan}" for p in _files_a_plan_names(plan)})
    return out


def _files_a_plan_names(path: str) -> list[str]:
    """The --time-model and --rate-profile files a plan's runs were made with (report serves them
    again), relative to the working directory as the plan recorded them."""
    import msgspec

    try:
        with open(path, "rb") as f:
            options = (msgspec.json.decode(f.read()) or {}).get("run_options") or {}
    except (OSError, msgspec.DecodeError, AttributeError, RecursionError):
        return []  # (load_plan says what is wrong with it)
    if not isinstance(options, dict):
        return []
    return [v for v in (options.get("time_model"), options.get("rate_profile")) if isinstance(v, str)
            and os.path.isfile(v)]
