"""kvreplay diagnose: why a token log's prompts share less than they could (the spans that break
prefix sharing, each with its replayed what-if), or, from a hashed trace, the symptom."""

from __future__ import annotations

import os
import sys

from ..errors import ConfigError
from . import common

DEFAULT_BLOCK_SIZE = 16  # vLLM's default block size: a token log has none of its own
DEFAULT_CAPACITY = 4096


def _parser_diagnose(sub) -> None:
    dg = sub.add_parser("diagnose", help="find the spans of a token log that break prefix sharing (a timestamp, an "
                                         "id near the start) and replay the log with each moved; or, from a hashed "
                                         "trace, the symptom")
    dg.add_argument("input", help="a token log (JSONL token_ids or prompt_token_ids, or text with --tokenizer; as kvreplay hash reads), or "
                                  "a hashed trace (its symptom only)")
    dg.add_argument("--tokenizer", metavar="TOKENIZER_JSON",
                    help="local tokenizer.json: tokenizes text records and decodes the examples (kvreplay[tokenizers])")
    dg.add_argument("--salt", default="", help="namespace of records that name none (as kvreplay hash)")
    dg.add_argument("--block-size", type=common.positive_int, default=None,
                    help=f"tokens per block of the replays (default {DEFAULT_BLOCK_SIZE}, vLLM's)")
    dg.add_argument("--policy", default=None, help="the policy of the replays (default s3fifo)")
    dg.add_argument("--capacity", type=common.positive_int, default=None,
                    help=f"the cache of the replays, in blocks (default {DEFAULT_CAPACITY})")
    dg.add_argument("--horizon", type=common.positive_int, default=None,
                    help="search the first N tokens of each prompt (default 4096)")
    dg.add_argument("--max-width", type=common.positive_int, default=None, help="the longest span (tokens, default 256)")
    dg.add_argument("--min-requests", type=common.positive_int, default=None,
                    help="report a span that breaks at least N requests (default: 1%% of them, at least 3)")
    dg.add_argument("--rewrite", metavar="FILE.jsonl",
                    help="write the token log with every span found moved to the end of its prompts (atomically)")
    dg.add_argument("--json", action="store_true", help="print the diagnosis as JSON")


def _is_token_log(path: str) -> bool:
    """Does the file's first record carry tokens (token_ids, prompt_token_ids, text or prompt)?"""
    import msgspec

    from ..trace.jsonl import open_trace

    if os.path.isdir(path):
        return False
    stream = open_trace(path)
    try:
        for line in stream:
            if line.strip():
                try:
                    first = msgspec.json.decode(line)
                except msgspec.DecodeError:
                    return False
                return isinstance(first, dict) and any(k in first for k in ("token_ids", "prompt_token_ids", "text", "prompt"))
    finally:
        stream.close()
    return False


def _cmd_diagnose(args) -> int:
    if args.rewrite:
        common.check_output_dir(args.rewrite, inputs=common.inputs_of(args), flags=("--rewrite",))
    if not os.path.exists(args.input):
        raise ConfigError(f"{args.input}: no such file")
    if not _is_token_log(args.input):
        return _symptom(args)
    from ..analysis.advice import advice
    from ..analysis.diagnose import diagnose, rewrite
    from ..output.diagnose import diagnose_text
    from ..output.misses import advice_lines, misses_lines
    from ..trace.token_log import read_token_log

    from ..analysis.diagnose import DEFAULT_HORIZON, DEFAULT_MAX_WIDTH, Search

    log = read_token_log(args.input, tokenizer=args.tokenizer, salt=args.salt, progress=args.progress)
    max_width = args.max_width or DEFAULT_MAX_WIDTH
    decode = None
    if args.tokenizer:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(args.tokenizer)
        decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    params: dict = {}
    d = diagnose(log, block_size=args.block_size or DEFAULT_BLOCK_SIZE, policy=args.policy or "s3fifo",
                 capacity=args.capacity or DEFAULT_CAPACITY, decode=decode,
                 search=Search(horizon=args.horizon or DEFAULT_HORIZON, max_width=max_width),
                 min_requests=args.min_requests, progress=args.progress, **params)
    report, trace = d.pop("report"), d.pop("trace")
    sentences = []
    if d["spans"]:
        s = d["spans"][0]
        sentences.append(f"Moving the span at token {s['start']:,} (e.g. {_quoted(s['examples'][0])}) to the end of "
                         f"the prompt lifts the hit rate from {100 * d['replay']['hit_rate']:.1f}% to "
                         f"{100 * s['what_if']['hit_rate']:.1f}% (the rewritten log, replayed).")
    sentences += advice(trace, report)[:3 - len(sentences)]
    if args.rewrite:
        from ..files import write_atomic

        fixed, _ = rewrite(log, [s["span"] for s in d["spans"]], max_width=max_width)
        write_atomic(args.rewrite, fixed.to_jsonl())
    for s in d["spans"]:
        s.pop("span")
    d["advice"] = sentences
    if args.json:
        sys.stdout.buffer.write(common.encode_json(d))
        return 0
    lines = diagnose_text(d, args.tokenizer)
    account = report.misses
    lines += misses_lines(account.totals(), account.not_measured, report.total_prompt_tokens, account.evicted)
    lines += advice_lines(sentences)
    if args.rewrite:
        lines.append(f"rewrote   {args.rewrite}: every span moved (kvreplay hash {args.rewrite} -o TRACE.jsonl "
                     f"--block-size {d['block_size']} then kvreplay run replays it)")
    print("\n".join(lines))
    return 0


def _quoted(example) -> str:
    import json

    return json.dumps(example if isinstance(example, str) else " ".join(map(str, example)), ensure_ascii=False)


def _symptom(args) -> int:
    from ..analysis.diagnose import symptom
    from ..output.diagnose import symptom_text
    from ..trace import load_trace

    for flag, value in (("--tokenizer", args.tokenizer), ("--rewrite", args.rewrite), ("--salt", args.salt),
                        ("--block-size", args.block_size), ("--policy", args.policy), ("--capacity", args.capacity),
                        ("--horizon", args.horizon), ("--max-width", args.max_width),
                        ("--min-requests", args.min_requests)):
        if value:
            raise ConfigError(f"{flag}: {args.input} is a hashed trace (no token ids), whose symptom needs no "
                              f"{flag}; it applies to a token log")
    trace = load_trace(args.input)
    s = symptom(trace)
    if args.json:
        sys.stdout.buffer.write(common.encode_json({"source": trace.source, **s}))
        return 0
    print("\n".join(symptom_text(s, trace.source)))
    return 0


PARSERS = [_parser_diagnose]
COMMANDS = {"diagnose": _cmd_diagnose}
