"""Prompt structure (``kvreplay diagnose``): the spans of a token log that break prefix sharing,
and what moving each would give, replayed (docs/metrics.md, "Prompt structure").

A *break* is a request that shares a prefix with an earlier request, then differs for a short
stretch, then shares long content with it again: a timestamp, a request id or a user name
rendered early in a template. For each request i, in log order:

1. j = the latest earlier request sharing i's longest prefix (to a 16-token granularity, then to
   the token), l = that prefix's length;
2. the resumption: the first position a in (l, l + max_width] where ``anchor`` tokens of i (32)
   equal ``anchor`` tokens of j at some b in [l, l + max_width]; none: i simply differs from
   every earlier request there (new content), not a break;
3. the shared run after it: the tokens i and j have in common from a and b on; a break needs at
   least ``anchor`` of them.

Breaks that resume at the same content (the same ``anchor`` tokens) form a group; the group's
span starts where its requests first differ (the smallest l) and ends at each request's
resumption. Groups whose spans overlap (one template position, rendered over several system
prompts) make one reported span, which starts where the earliest of them does. Only the first ``horizon`` tokens of a
prompt are searched ("near the start").

**What-if.** The log is rewritten with the span moved to the end of every prompt that has it
(the same prefix before it, the same content after it), after the shared content, and the
rewritten log is hashed and replayed with the same policy and capacity: the hit rate is a
replay's, not an estimate.

**Symptom without the cause** (a hashed trace, no tokens): sessions whose first block changes
every turn (with a session column), and requests whose first block no earlier request had.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.replay import replay
from ..errors import ConfigError
from ..progress import labelled, tell
from ..trace.token_log import TokenLog, hashed

GRANULE = 16  # tokens per step of the coarse prefix match
DEFAULT_HORIZON = 4096
DEFAULT_MAX_WIDTH = 256
DEFAULT_ANCHOR = 32
EXAMPLES = 3


@dataclass
class Break:
    request: int
    earlier: int
    start: int  # tokens shared with `earlier` before the span
    resume: int  # where the shared content starts again in this request
    resume_earlier: int
    shared_after: int  # tokens in common from there on
    key: int  # the content it resumes at


def _common(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens two arrays share."""
    n = min(a.shape[0], b.shape[0])
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def _grams(tokens: np.ndarray, lo: int, hi: int, anchor: int) -> dict:
    """anchor-token runs starting in [lo, hi] -> their first position."""
    out: dict = {}
    seq = tokens.tolist()
    for p in range(lo, min(hi, len(seq) - anchor) + 1):
        out.setdefault(tuple(seq[p:p + anchor]), p)
    return out


def find_breaks(log: TokenLog, *, horizon: int = DEFAULT_HORIZON, max_width: int = DEFAULT_MAX_WIDTH,
                anchor: int = DEFAULT_ANCHOR, progress=None) -> list[Break]:
    """Every request's break (module doc, steps 1-3), in log order."""
    latest: dict = {}  # chained prefix key -> the latest request with that prefix
    first_token: dict = {}
    out = []
    n = len(log)
    for i, tokens in enumerate(log.tokens):
        seq = tokens[:horizon].tolist()
        keys, key = [], (log.namespace[i],)
        for g in range(len(seq) // GRANULE):
            key = hash((key, tuple(seq[g * GRANULE:(g + 1) * GRANULE])))
            keys.append(key)
        depth = 0
        while depth < len(keys) and keys[depth] in latest:
            depth += 1
        j = latest[keys[depth - 1]] if depth else first_token.get((log.namespace[i], seq[0]) if seq else None)
        for k in keys:
            latest[k] = i
        if seq:
            first_token[(log.namespace[i], seq[0])] = i
        if progress is not None and i % 256 == 0:
            progress(i, n)
        if j is None:
            continue
        other = log.tokens[j]
        start = _common(tokens[:horizon], other[:horizon])
        if start >= min(len(tokens), horizon) - anchor:
            continue  # shared as far as the search goes
        theirs = _grams(other, start, start + max_width, anchor)
        seq_i = tokens.tolist()
        for a in range(start + 1, min(start + max_width, len(seq_i) - anchor) + 1):
            gram = tuple(seq_i[a:a + anchor])
            b = theirs.get(gram)
            if b is not None:
                shared = _common(tokens[a:], other[b:])
                if shared >= anchor:
                    out.append(Break(i, j, start, a, b, shared, hash(gram)))
                break
    if progress is not None:
        progress(n, n)
    return out


@dataclass
class Span:
    """A span that breaks prefix sharing: where it starts (tokens), the content before it (one
    prefix per template variant) and after it (its first `anchor` tokens), the requests it breaks."""

    start: int
    prefixes: list  # token arrays: what comes before the span, per variant
    anchors: list  # tuples: the content the span is followed by, per variant
    broken: list  # requests whose break it is
    widths: tuple  # (shortest, longest) span among the broken requests
    shared_after: int  # median tokens shared after the span
    examples: list  # token arrays of the span, distinct, at most EXAMPLES


def group_spans(log: TokenLog, breaks: list[Break], *, min_requests: int, anchor: int = DEFAULT_ANCHOR) -> list[Span]:
    """Breaks grouped by the content they resume at, groups merged by position (module doc);
    the spans breaking at least `min_requests` requests, most broken first."""
    groups: dict = {}
    for b in breaks:
        groups.setdefault(b.key, []).append(b)
    variants = []
    for members in groups.values():
        start = min(b.start for b in members)
        first = log.tokens[members[0].request]
        prefix = first[:start]
        members = [b for b in members if np.array_equal(log.tokens[b.request][:start], prefix)]
        if not members:
            continue
        widths = [b.resume - start for b in members]
        gram = tuple(first[members[0].resume:members[0].resume + anchor].tolist())
        variants.append({"start": start, "prefix": prefix, "anchor": gram, "members": members,
                         "widths": (min(widths), max(widths))})
    merged: list[dict] = []
    for v in sorted(variants, key=lambda v: (v["start"], v["widths"])):
        last = merged[-1] if merged else None
        if last and v["start"] <= last["end"]:  # the spans overlap: one template position, several variants
            last["variants"].append(v)
            last["end"] = max(last["end"], v["start"] + v["widths"][1])
        else:
            merged.append({"start": v["start"], "end": v["start"] + v["widths"][1], "variants": [v]})
    spans = []
    for m in merged:
        start = m["start"]  # the merged span starts where the earliest variant's does
        members = [b for v in m["variants"] for b in v["members"]]
        if len(members) < min_requests:
            continue
        widths = [b.resume - start for b in members]
        seen, examples = set(), []
        for b in members:
            span = log.tokens[b.request][start:b.resume]
            if tuple(span.tolist()) not in seen and len(examples) < EXAMPLES:
                seen.add(tuple(span.tolist()))
                examples.append(span)
        spans.append(Span(start=start, prefixes=[log.tokens[v["members"][0].request][:start] for v in m["variants"]],
                          anchors=[v["anchor"] for v in m["variants"]], broken=sorted(b.request for b in members),
                          widths=(min(widths), max(widths)),
                          shared_after=int(np.median([b.shared_after for b in members])), examples=examples))
    return sorted(spans, key=lambda s: -len(s.broken))


def span_of(tokens: np.ndarray, span: Span, max_width: int, anchor: int) -> int | None:
    """Where `span` ends in a prompt that has it (its prefix, then its content within
    max_width), or None."""
    for prefix, gram in zip(span.prefixes, span.anchors):
        if len(tokens) >= len(prefix) and np.array_equal(tokens[:len(prefix)], prefix):
            seq = tokens[span.start:span.start + max_width + anchor].tolist()
            for a in range(1, min(max_width, len(seq) - anchor) + 1):
                if tuple(seq[a:a + anchor]) == gram:
                    return span.start + a
    return None


def rewrite(log: TokenLog, spans: list[Span], *, max_width: int = DEFAULT_MAX_WIDTH,
            anchor: int = DEFAULT_ANCHOR) -> tuple[TokenLog, int]:
    """The log with each span moved to the end of every prompt that has it: (the rewritten log,
    the prompts rewritten)."""
    tokens, changed = list(log.tokens), 0
    for span in spans:
        for i, t in enumerate(tokens):
            end = span_of(t, span, max_width, anchor)
            if end is not None:
                tokens[i] = np.concatenate([t[:span.start], t[end:], t[span.start:end]])
                changed += 1
    return log.with_tokens(tokens), changed


def hit_rate(log: TokenLog, block_size: int, policy: str, capacity, **params) -> dict:
    """The log hashed (as kvreplay hash does) and replayed: its hit rate and miss account totals."""
    trace, content = hashed(log, block_size)
    r = replay(trace, policy, capacity, block_size, block_content=content if log.has_namespaces else None,
               stranded_samples=0, **params)
    return {"hit_rate": r.hit_rate, "hit_tokens": r.total_hit_tokens, "prompt_tokens": r.total_prompt_tokens,
            "misses": r.misses.totals() if r.misses is not None else None, "report": r, "trace": trace}


@dataclass(frozen=True)
class Search:
    """How the breaks are searched (find_breaks, group_spans, rewrite): each a whole number >= 1."""

    horizon: int = DEFAULT_HORIZON
    max_width: int = DEFAULT_MAX_WIDTH
    anchor: int = DEFAULT_ANCHOR

    def __post_init__(self):
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")


def diagnose(log: TokenLog, *, block_size: int = 16, policy: str = "s3fifo", capacity=4096, decode=None,
             search: Search = Search(), min_requests: int | None = None, progress=None, **params) -> dict:
    """The spans of `log` that break prefix sharing, each with its what-if (module doc), and the
    log's own replay. decode: token ids -> text for the examples (a tokenizer's decode), or None.
    progress: a kvreplay.progress callback, told ``(done, total, "requests searched")`` as the
    breaks are searched, then ``"replays"`` (the log's own, then each what-if)."""
    horizon, max_width, anchor = search.horizon, search.max_width, search.anchor
    if min_requests is None:
        min_requests = max(3, len(log) // 100)
    breaks = find_breaks(log, horizon=horizon, max_width=max_width, anchor=anchor,
                         progress=labelled(progress, "requests searched"))
    spans = group_spans(log, breaks, min_requests=min_requests, anchor=anchor)
    replays = 1 + len(spans) + (len(spans) > 1)  # the log's own, each span's what-if, all spans moved
    tell(progress, 0, replays, "replays")
    base = hit_rate(log, block_size, policy, capacity, **params)
    tell(progress, 1, replays, "replays")
    out = []
    for k, span in enumerate(spans):
        fixed, changed = rewrite(log, [span], max_width=max_width, anchor=anchor)
        after = hit_rate(fixed, block_size, policy, capacity, **params)
        out.append({"start": span.start, "widths": list(span.widths), "variants": len(span.prefixes),
                    "broken_requests": len(span.broken), "rewritten_requests": changed,
                    "shared_after_median": span.shared_after,
                    "examples": [decode(e.tolist()) if decode else e.tolist() for e in span.examples],
                    "what_if": _figures(after), "span": span})
        tell(progress, k + 2, replays, "replays")
    everything = None
    if len(spans) > 1:
        fixed, _ = rewrite(log, spans, max_width=max_width, anchor=anchor)
        everything = _figures(hit_rate(fixed, block_size, policy, capacity, **params))
        tell(progress, replays, replays, "replays")
    return {"source": log.source, "requests": len(log), "prompt_tokens": int(sum(len(t) for t in log.tokens)),
            "block_size": block_size, "policy": policy, "capacity": capacity, "params": params,
            "replay": _figures(base), "report": base["report"], "trace": base["trace"],
            "breaks": len(breaks), "min_requests": min_requests, "spans": out, "all_spans_moved": everything,
            "search": {"horizon": horizon, "max_width": max_width, "anchor": anchor}}


def _figures(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("report", "trace")}


def symptom(trace, block_size: int | None = None, horizon: int = DEFAULT_HORIZON) -> dict:
    """From a hashed trace: requests whose first block no earlier request had; where requests most
    often stop sharing a prefix with every earlier request near the start (the infinite cache's
    hit, in blocks: the most common stop within the first `horizon` tokens among requests with
    blocks left after it); and, with a session column, multi-turn sessions whose first block
    changes every turn."""
    from ..trace.model import resolve_block_size

    block_size = resolve_block_size(block_size, trace)
    counts = np.diff(trace.offsets)
    starts = trace.offsets[:-1][counts > 0]
    first = trace.blocks[starts]
    new_first = trace.first_seen[first] == starts
    out = {"requests": len(trace), "requests_with_blocks": int(starts.size), "block_size": block_size,
           "new_first_block": int(new_first.sum()), "stop": None, "sessions": None}
    shared = replay(trace, "infinite", None, block_size, miss_account=False).hit_blocks
    early = (shared < counts) & (shared * block_size < horizon) & (shared > 0)
    if early.any():
        stop = int(np.bincount(shared[early]).argmax())
        at = early & (shared == stop)
        out["stop"] = {"block": stop, "tokens": [stop * block_size, (stop + 1) * block_size], "requests": int(at.sum()),
                       "blocks_after_median": int(np.median(counts[at] - stop))}
    if trace.session is not None:
        session = np.asarray(trace.session)[counts > 0]
        order = np.lexsort((np.arange(session.size), session))
        s, b = session[order], first[order]
        same_session = s[1:] == s[:-1]
        changed = b[1:] != b[:-1]
        turns = np.bincount(s, minlength=int(s.max()) + 1 if s.size else 0)
        kept = np.zeros(turns.size, dtype=bool)
        np.logical_or.at(kept, s[1:][same_session & ~changed], True)  # a turn that kept its first block
        multi = turns >= 2
        out["sessions"] = {"multi_turn": int(multi.sum()), "first_block_changes_every_turn": int((multi & ~kept).sum())}
    return out
