"""Trace commands: hash, convert, slice, merge, stats, synth (each parser next to its handler)."""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from ..trace.formats import FORMATS
from . import common


def _parser_hash(sub) -> None:
    hs = sub.add_parser("hash", help="turn a token log (JSONL token_ids or vLLM's prompt_token_ids, or text with "
                                     "--tokenizer) into a Mooncake trace of block hash ids")
    hs.add_argument("input", help="token log (JSONL, optionally gzip), or - for stdin")
    hs.add_argument("--output", "-o", required=True, help="the Mooncake JSONL trace to write (atomically)")
    hs.add_argument("--block-size", type=common.positive_int, default=512, help="tokens per block (default 512; 16 for Bailian-like)")
    hs.add_argument("--tokenizer", metavar="TOKENIZER_JSON", help="local tokenizer.json for records with text/prompt (needs kvreplay[tokenizers])")
    hs.add_argument("--salt", default="", help="namespace of records that name none (default: empty)")
    hs.add_argument("--keep-hashes", action="store_true", help="also write each block's sha256 hex digest (block_hashes)")


def _cmd_hash(args) -> int:
    from ..trace.hashing import hash_token_log

    common.check_output_dir(args.output, inputs=common.inputs_of(args))
    s = hash_token_log(args.input, args.output, block_size=args.block_size, tokenizer=args.tokenizer,
                       salt=args.salt, keep_hashes=args.keep_hashes, progress=args.progress)
    common.note(args, f"{s['source']}: {s['requests']:,} requests, {s['tokens']:,} tokens, {s['blocks']:,} blocks of "
                      f"{s['block_size']} ({s['unique_blocks']:,} unique) -> {s['output']}")
    if args.tokenizer and not s["tokenized"]:  # (a warning: it prints with --quiet too)
        print(f"kvreplay: warning: --tokenizer was not used: every record of {s['source']} gives its token ids "
              "(token_ids or prompt_token_ids), none text or prompt", file=sys.stderr)
    elif args.tokenizer:
        common.note(args, f"{s['tokenized']:,} of {s['requests']:,} requests tokenized with {args.tokenizer}")
    return 0


def _add_input_block_size(p) -> None:
    p.add_argument("--block-size", type=common.positive_int, default=None,
                   help="tokens per block of the input, when its format does not record it (Mooncake: 512 is assumed)")


def _declared(trace, block_size):
    """`trace` with the block size the user declared (--block-size), which must agree with the file's own."""
    from dataclasses import replace

    if block_size is None:
        return trace
    if trace.block_size is not None and trace.block_size != block_size:
        raise ConfigError(f"--block-size {block_size}: {trace.source} declares {trace.block_size}-token blocks")
    return replace(trace, block_size=block_size)


def _read_for_writing(args):
    """Load `args.input` for convert/slice, after refusing an output that would replace it."""
    from ..trace import load_trace
    common.check_output_dir(args.output, inputs=common.inputs_of(args))
    trace = load_trace(args.input, format=args.from_format, on_invalid=args.on_invalid, keep_ids=args.keep_ids,
                       progress=args.progress)
    return _declared(trace, args.block_size)


def _parser_convert_slice(sub) -> None:
    from ..trace.writers import WRITE_FORMATS

    cv = sub.add_parser("convert", help="rewrite a trace in another format (Mooncake or Bailian JSONL)")
    sl = sub.add_parser("slice", help="keep a range of requests, a time window or the first sessions of a trace")
    for p in (cv, sl):
        p.add_argument("input", help="trace file (any readable format, optionally gzip), or - for stdin")
        p.add_argument("--output", "-o", required=True, help="the trace to write (atomically; .gz compresses; - for stdout)")
        p.add_argument("--from", dest="from_format", default="auto", help="input format (default auto)")
        p.add_argument("--on-invalid", choices=("error", "skip"), default="error", help="bad records: stop (default) or skip them")
        p.add_argument("--keep-ids", action="store_true", help="write the file's block ids instead of dense ids 0..U-1")
        _add_input_block_size(p)
    cv.add_argument("--to", choices=WRITE_FORMATS, default="mooncake", help="output format (default mooncake)")
    sl.add_argument("--to", choices=WRITE_FORMATS, default=None, help="output format (default: the input's, else mooncake)")
    sl.add_argument("--requests", metavar="A:B", help="positions A (inclusive) to B (exclusive), Python-style; "
                    "negative counts from the end (write --requests=-100: for the last 100)")
    sl.add_argument("--time", metavar="T0:T1", help="t0 <= timestamp < t1: durations after the first request (0s:1h, "
                    "10m:20m), or timestamps on the file's clock with @ (@1500ms:@90000ms); either side may be empty")
    sl.add_argument("--sessions", type=common.positive_int, metavar="N", help="the first N sessions (traces with sessions only)")


def _cmd_convert(args) -> int:
    from ..trace.writers import write_trace

    trace = _read_for_writing(args)
    write_trace(trace, args.output, args.to, original_ids=args.keep_ids, progress=args.progress)
    common.note(args, f"{trace.source}: {len(trace):,} requests ({trace.format}) -> {args.output} ({args.to})")
    return 0


def _cmd_slice(args) -> int:
    from ..trace.slicing import parse_request_range, parse_time_range, slice_trace
    from ..trace.writers import WRITE_FORMATS, write_trace

    if args.requests is None and args.time is None and args.sessions is None:
        raise ConfigError("slice: give --requests A:B, --time T0:T1 and/or --sessions N")
    requests = None if args.requests is None else parse_request_range(args.requests)
    trace = _read_for_writing(args)
    if args.sessions is not None and trace.session is None:
        raise ConfigError(f"--sessions {args.sessions}: {trace.source} ({trace.format}) has no sessions")
    time_ms = None if args.time is None else parse_time_range(args.time, trace.timestamp)
    part = slice_trace(trace, requests, time_ms, sessions=args.sessions)
    to = args.to or (trace.format if trace.format in WRITE_FORMATS else "mooncake")
    write_trace(part, args.output, to, original_ids=args.keep_ids, progress=args.progress)
    total = trace.total_prompt_tokens
    pct = 100 * part.total_prompt_tokens / total if total else 0.0
    share = (f"{pct:.1f}%" if pct >= 1 or pct == 0 else f"{pct:.2g}%") + " of prompt tokens" if total else "no prompt tokens"
    common.note(args, f"kept {len(part):,} of {len(trace):,} requests, {share} -> {args.output} ({to})")
    return 0


def _parser_merge(sub) -> None:
    from ..trace.writers import WRITE_FORMATS

    mg = sub.add_parser("merge", help="merge traces into one, ordered by time (each input keeps its own block ids)")
    mg.add_argument("inputs", nargs="+", metavar="trace", help="trace files or directories (each directory is one input)")
    mg.add_argument("--output", "-o", required=True, help="the trace to write (atomically; .gz compresses; - for stdout)")
    mg.add_argument("--to", choices=WRITE_FORMATS, default="mooncake", help="output format (default mooncake)")
    mg.add_argument("--format", choices=("auto", *FORMATS), default="auto",
                    help="input format (default auto: sniffed per file)")
    mg.add_argument("--on-invalid", choices=("error", "skip"), default="error", help="bad records: stop (default) or skip them")
    mg.add_argument("--shared-ids", action="store_true",
                    help="inputs share blocks by their files' ids (default: ids are private to each input)")
    mg.add_argument("--offsets", metavar="T1,T2,...",
                    help="start offset of each input, a duration added to its timestamps, e.g. 0s,90s (default: "
                         "Claude Code sessions follow --session-arrivals, other inputs keep their times)")
    mg.add_argument("--session-arrivals", choices=("fixed", "poisson", "zero"), default="fixed",
                    help="start times of Claude Code sessions: fixed spacing (default), poisson (seeded), zero")
    mg.add_argument("--session-spacing", type=common.duration, default=60.0, metavar="DURATION",
                    help="gap between session starts (fixed) or mean gap (poisson), e.g. 60s; default 60s")
    mg.add_argument("--seed", type=common.non_negative_int, default=0, help="seed of --session-arrivals poisson (default 0)")
    _add_input_block_size(mg)


def _cmd_merge(args) -> int:
    from ..trace import load_trace
    from ..trace.ops import merge, start_offsets_ms
    from ..trace.writers import write_trace

    common.check_output_dir(args.output, inputs=common.inputs_of(args))
    offsets = None
    if args.offsets is not None:
        try:
            offsets = [1000.0 * common.duration(part) for part in args.offsets.split(",")]
        except argparse.ArgumentTypeError as e:
            raise ConfigError(f"--offsets: {e}") from None
        if len(offsets) != len(args.inputs):
            raise ConfigError(f"--offsets: got {len(offsets)} offsets for {len(args.inputs)} inputs")
    options = dict(session_arrivals=args.session_arrivals, session_spacing=args.session_spacing, seed=args.seed)
    traces = [_declared(load_trace(p, format=args.format, on_invalid=args.on_invalid, keep_ids=args.shared_ids,
                                   progress=args.progress, **options), args.block_size)
              for p in args.inputs]
    if offsets is None:
        offsets = start_offsets_ms(traces, args.session_arrivals, args.session_spacing, args.seed)
    merged = merge(traces, namespace=not args.shared_ids, offsets_ms=offsets)
    write_trace(merged, args.output, args.to, original_ids=args.shared_ids, progress=args.progress)
    common.note(args, f"merged {len(traces)} inputs: {len(merged):,} requests, {merged.num_sessions:,} sessions, "
                      f"{merged.num_blocks:,} unique blocks -> {args.output} ({args.to})")
    return 0


def _parser_stats(sub) -> None:
    st = sub.add_parser("stats", help="describe a trace: lengths, unique blocks, infinite-cache hit rate, reuse, sharing")
    common.add_trace_options(st, refused=("--engine", "--warmup-fraction"))
    st.add_argument("--json", action="store_true", help="print the statistics as JSON")


def _cmd_stats(args) -> int:
    from ..analysis.stats import format_stats, stats

    common.refuse_unless(args, "engine", False, "does not apply: stats is one compiled pass of its own")
    common.refuse_unless(args, "warmup_fraction", False, "does not apply: stats describes the whole trace")
    trace = common.load(args, sessions_used="sessions and turns per session")
    result = stats(trace, args.block_size, progress=args.progress)
    if args.json:
        sys.stdout.buffer.write(common.encode_json(result))
    else:
        print(format_stats(result))
    return 0


_SYNTH_KNOBS = [  # flag, type, default, help; the defaults live in kvreplay.trace.synth.synth
    ("--arrival-rate", float, 1.0, "sessions per second (Poisson)"),
    ("--prefix-scale", float, 1.0, "multiplier on system prompt and RAG document lengths"),
    ("--prefixes", int, 8, "distinct system prompts (Zipf popularity)"),
    ("--docs", int, 200, "distinct RAG documents (Zipf popularity)"),
    ("--turns", float, 4.0, "mean requests per chat or RAG session"),
    ("--agent-steps", float, 10.0, "mean requests per agent loop"),
    ("--mix", str, "chat=0.6,rag=0.2,agent=0.2", "session kinds and weights"),
    ("--think-time", common.positive_duration, "30s", "mean time between turns, e.g. 30s (agents: a tenth)"),
    ("--agent-tool-tokens", float, 800.0, "median tokens of an agent step's tool output"),
    ("--agent-reply-tokens", float, 150.0, "median tokens of an agent step's reply"),
    ("--burst", float, 1.0, "mean sessions starting together (geometric bursts; 1: one at a time)"),
    ("--max-context", int, None, "a session ends before a request's prompt + reply would pass this many tokens"),
    ("--zipf", float, 1.1, "Zipf exponent of prompt and document popularity"),
    ("--system-priority", int, None, "a priority class for system prompts: their tokens' KV retention priority, "
                                     "0-100 (TensorRT-LLM's; docs/formats.md)"),
    ("--system-priority-ms", common.milliseconds, None, "with --system-priority: how long the priority lasts, in "
                                                         "ms or a duration with its unit"),
]


def _parser_synth(sub) -> None:
    sy = sub.add_parser("synth", help="generate a synthetic workload (chat, RAG, agent sessions), or one like a trace")
    sy.add_argument("--output", "-o", required=True, help="the Mooncake JSONL file to write (atomically; .gz compresses; - for stdout)")
    sy.add_argument("--like", metavar="TRACE", help="fit the generator to this trace and keep its statistics")
    sy.add_argument("--like-model", choices=("sessions", "prefixes"), default=None,
                    help="--like: fit sessions with one level of shared prompts (default), or resample requests and "
                         "copy their shared prefixes (nested prefixes, exact length distribution; docs/synth.md)")
    sy.add_argument("--scale-requests", type=float, default=None, metavar="K", help="--like: K times as many requests (default 1)")
    sy.add_argument("--speedup", type=float, default=None, metavar="K", help="--like: arrivals and think times K times faster (default 1)")
    sy.add_argument("--requests", type=common.positive_int, default=None, help="requests to generate (default 10000; --like: the trace's count x K)")
    for flag, kind, default, text in _SYNTH_KNOBS:
        sy.add_argument(flag, type=kind, default=None, help=f"{text} (default {default})")
    sy.add_argument("--block-size", type=common.positive_int, default=None, help="tokens per block (default 512; --like: the trace's)")
    sy.add_argument("--seed", type=common.non_negative_int, default=0, help="random seed: the same seed gives the same file (default 0)")
    sy.add_argument("--token-log", action="store_true",
                    help="write a token log of multi-turn chats instead (token_ids: kvreplay hash and diagnose read "
                         "it), its template rendering each request's time into the system prompt (--timestamp-at)")
    sy.add_argument("--timestamp-at", type=_timestamp_at, default=None, metavar="N|end|none",
                    help="--token-log: the time (YYYY-MM-DD HH:MM) after the system prompt's N-th token (default 20), "
                         "at the prompt's end (the restructured template), or none")


def _timestamp_at(text: str):
    """--timestamp-at: a token position (int), "end" or "none"."""
    word = text.strip().lower()
    if word in ("end", "none"):
        return word
    if not word.isdigit():
        raise argparse.ArgumentTypeError(f"a token position (0, 1, ...), end or none, got {text!r}")
    return int(word)


def _token_log(args, given: list[str]) -> int:
    """`synth --token-log`: trace/token_synth.py's chats as a token log."""
    from ..files import write_atomic
    from ..trace.token_synth import token_log

    unused = given + [f for f in ("--like", "--block-size") if getattr(args, f[2:].replace("-", "_")) is not None]
    if unused:
        raise ConfigError(f"{', '.join(unused)}: not used by --token-log (its knobs: --requests, --timestamp-at, --seed)")
    at = 20 if args.timestamp_at is None else None if args.timestamp_at == "none" else args.timestamp_at
    if args.output == "-":
        raise ConfigError("--token-log writes a file: give --output FILE.jsonl")
    common.check_output_dir(args.output, inputs=common.inputs_of(args))
    log = token_log(args.requests or 2000, timestamp_at=at, seed=args.seed)
    write_atomic(args.output, log.to_jsonl())
    print(f"{args.output}: {len(log):,} requests, {sum(len(t) for t in log.tokens):,} prompt tokens ({log.source}); "
          "kvreplay diagnose reads it", file=sys.stdout)
    return 0


def _cmd_synth(args) -> int:
    from ..analysis.stats import stats
    from ..trace.synth import compare_table, sessions_of, synth, synth_like, synth_like_prefixes
    from ..trace.writers import write_trace

    common.check_output_dir(args.output, inputs=common.inputs_of(args))
    knobs = {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag, *_ in _SYNTH_KNOBS}
    given = [f"--{k.replace('_', '-')}" for k, v in knobs.items() if v is not None]
    if args.token_log:
        return _token_log(args, given + [f for f in ("--scale-requests", "--speedup", "--like-model")
                                         if getattr(args, f[2:].replace("-", "_")) is not None])
    if args.timestamp_at is not None:
        raise ConfigError("--timestamp-at applies only with --token-log")
    # The summary is the command's output; with the trace itself on stdout it is a note on stderr.
    say = (lambda text: common.note(args, text)) if args.output == "-" else print
    if args.like:
        if given:
            raise ConfigError(f"{', '.join(given)}: the generator's knobs are fitted with --like; leave them out")
        from ..trace import load_trace

        original = load_trace(args.like, progress=args.progress)
        scale = args.scale_requests if args.scale_requests is not None else 1.0
        if args.requests is not None:
            if args.scale_requests is not None:
                raise ConfigError("--requests and --scale-requests: give one of them")
            scale = args.requests / len(original)
        like = synth_like_prefixes if args.like_model == "prefixes" else synth_like
        trace = like(original, scale_requests=scale, speedup=args.speedup if args.speedup is not None else 1.0,
                     block_size=args.block_size, seed=args.seed, progress=args.progress)
        write_trace(trace, args.output, format="mooncake", progress=args.progress)
        sessions = len(set(sessions_of(original, trace.block_size)[2].tolist()))
        table = compare_table(stats(original, trace.block_size, progress=args.progress),
                              stats(trace, progress=args.progress), sessions)
        say(f"{args.output}: {len(trace):,} requests like {original.source}, block size {trace.block_size}; "
            "rates are token-weighted over the whole trace")
        say(table)
        return 0
    for flag in ("--scale-requests", "--speedup", "--like-model"):
        if getattr(args, flag[2:].replace("-", "_")) is not None:
            raise ConfigError(f"{flag} applies only with --like TRACE")
    from ..trace.model import resolve_block_size

    trace = synth(args.requests or 10_000, block_size=resolve_block_size(args.block_size), seed=args.seed,
                  progress=args.progress, **{k: v for k, v in knobs.items() if v is not None})
    write_trace(trace, args.output, format="mooncake", progress=args.progress)
    say(f"{args.output}: {trace.source}: {len(trace):,} requests, {trace.total_prompt_tokens:,} prompt tokens, "
        f"{trace.num_blocks:,} unique blocks of {trace.block_size} tokens, {trace.num_sessions:,} sessions "
        f"(kvreplay stats {args.output} describes it)")
    return 0


PARSERS = [_parser_hash, _parser_convert_slice, _parser_merge, _parser_stats, _parser_synth]
COMMANDS = {"hash": _cmd_hash, "convert": _cmd_convert, "slice": _cmd_slice, "merge": _cmd_merge, "stats": _cmd_stats, "synth": _cmd_synth}
