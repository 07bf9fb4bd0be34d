"""kvreplay diagnose as terminal text (render only: analysis/diagnose.py computes)."""

from __future__ import annotations

import json


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _example(e) -> str:
    return json.dumps(e if isinstance(e, str) else " ".join(map(str, e)), ensure_ascii=False)


def span_lines(k: int, s: dict, d: dict) -> list[str]:
    n = d["requests"]
    lo, hi = s["widths"]
    wide = f"{lo} tokens wide" if lo == hi else f"{lo}-{hi} tokens wide"
    where = f"in {s['variants']} prompt variants" if s["variants"] > 1 else "in one prompt variant"
    w = s["what_if"]
    gain = 100 * (w["hit_rate"] - d["replay"]["hit_rate"])
    return [f"span {k}    at token {s['start']:,}, {wide}, {where}: breaks {s['broken_requests']:,} of {n:,} requests "
            f"({100 * s['broken_requests'] / n:.1f}%), each sharing a prefix with an earlier request, then this span, "
            f"then {s['shared_after_median']:,} more tokens in common (median)",
            "          examples  " + " | ".join(_example(e) for e in s["examples"]),
            f"          what-if   moved to the end of the {s['rewritten_requests']:,} prompts that have it: "
            f"{_pct(w['hit_rate'])} ({gain:+.2f} points; the rewritten log hashed and replayed, {d['policy']} at "
            f"{d['capacity']:,} blocks)"]


def diagnose_text(d: dict, tokenizer: str | None) -> list[str]:
    r = d["replay"]
    lines = [f"log       {d['source']}: {d['requests']:,} requests, {d['prompt_tokens']:,} prompt tokens; block size "
             f"{d['block_size']} (--block-size), policy {d['policy']} at {d['capacity']:,} blocks; examples "
             + (f"decoded with {tokenizer}" if tokenizer else "as token ids (--tokenizer decodes them)"),
             f"replay    {_pct(r['hit_rate'])} of the prompt tokens hit ({r['hit_tokens']:,} of {r['prompt_tokens']:,}, "
             "token-weighted, the whole log)",
             f"search    the first {d['search']['horizon']:,} tokens of each prompt, spans up to "
             f"{d['search']['max_width']:,} tokens followed by {d['search']['anchor']} or more tokens in common; "
             f"{d['breaks']:,} requests break that way; a span is reported when it breaks {d['min_requests']:,} or more"]
    if not d["spans"]:
        lines.append("spans     none: no short varying span near the start of the prompts breaks their sharing")
    for k, s in enumerate(d["spans"], 1):
        lines += span_lines(k, s, d)
    if d.get("all_spans_moved"):
        lines.append(f"all       every span moved: {_pct(d['all_spans_moved']['hit_rate'])}")
    return lines


def symptom_text(s: dict, source: str) -> list[str]:
    n = s["requests_with_blocks"]
    lines = [f"trace     {source}: a hashed trace (no tokens): the symptom, not the cause",
             f"first     {s['new_first_block']:,} of {n:,} requests ({100 * s['new_first_block'] / n:.1f}%) open "
             "with a block no earlier request had" if n else "first     no request has a block"]
    stop = s["stop"]
    if stop is not None:
        lines.append(f"stop      {stop['requests']:,} requests ({100 * stop['requests'] / n:.1f}%) share their first "
                     f"{stop['block']:,} block{'s' if stop['block'] > 1 else ''} with an earlier request and then none of block "
                     f"{stop['block']:,} "
                     f"(tokens {stop['tokens'][0]:,}-{stop['tokens'][1] - 1:,}), with {stop['blocks_after_median']:,} "
                     "blocks after it (median): the most common place near the start where sharing ends")
    if s["sessions"] is not None:
        m = s["sessions"]
        lines.append(f"sessions  {m['first_block_changes_every_turn']:,} of {m['multi_turn']:,} multi-turn sessions "
                     "change their first block every turn: something at the start of their prompts varies per request "
                     "(a timestamp, a request id)")
    else:
        lines.append("sessions  the trace has no session column: which requests are turns of one conversation is unknown")
    lines.append("cause     kvreplay diagnose on the token log (token ids, or text with --tokenizer) finds the span and "
                 "replays the prompts with it moved")
    return lines
