"""`stats()`: what a trace looks like to a prefix cache, in one pass (C: stats.c).

Every figure is over the whole trace, in trace order, and token-weighted where it is a rate.

- **Infinite-cache hits.** Every block ever accessed stays resident. Request i hits
  ``min(k_i * block_size, L_i)`` tokens, k_i = its longest run of blocks from block 0 that
  some earlier request accessed (anywhere). Equal to ``replay(trace, "infinite")`` (tested).
- **Reuse distance** of an access to block b: the number of *distinct* blocks accessed
  between this access and the previous access to b (0 when b is used twice in a row). The
  first access to a block has none (``first_use``). Accesses are counted in flat trace order
  (request by request, block by block). Buckets are log2: ``0``, ``1``, ``2-3``, ``4-7``, ...
  An LRU cache of C blocks keeps b between the two uses exactly when the distance is < C.
- **Prefix sharing.** Request i shares its first s_i blocks with an earlier request when some
  earlier request's first s_i blocks are the same ids in the same order (a prefix trie). With
  chained ids (a block id determines every block before it) s_i equals k_i above; on a
  trace whose ids are not chained s_i <= k_i.
- **Sessions** (when the trace has a ``session`` column): sessions, requests (turns) per session.

Percentiles are ``numpy.percentile(method="inverted_cdf")``: always a value that occurs.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..engine.driver import trace_arrays
from ..engine.replay import as_trace
from ..trace.model import exact_sum, resolve_block_size
from ..errors import ConfigError
from ..progress import labelled, tell
from .fenwick import fenwick_add, fenwick_sum

PERCENTILES = (50, 90, 99)
SHARING_DEPTHS = (1, 2, 4, 8, 16, 32, 64, 128)
NUM_BUCKETS = 64  # log2 buckets: enough for any int64 count


def bucket_of(d: np.ndarray) -> np.ndarray:
    """Log2 bucket of non-negative counts (their bit length): 0 -> 0, 1 -> 1, 2..3 -> 2, 4..7 -> 3, ..."""
    x = np.array(d, dtype=np.int64)
    out = np.zeros(x.shape, dtype=np.int64)
    while x.any():
        out += x > 0
        x >>= 1
    return out


def bucket_label(k: int) -> str:
    if k <= 1:
        return str(k)
    return f"{1 << (k - 1)}-{(1 << k) - 1}"


def _pass_reference(trace, block_size, hit_tokens, hit_blocks, shared_blocks, reuse_hist, key_stride, told=None) -> int:
    """One pass over `trace` (plain Python; compiled: stats.c): infinite-cache hits per request,
    trie-shared prefix per request, reuse-distance histogram (index 0 = first use, b+1 = log2
    bucket b). Returns the number of first uses. told(done, total): the requests done, now and then."""
    offsets, blocks, lengths = trace.offsets.tolist(), trace.blocks.tolist(), trace.input_length.tolist()
    step = max(1, len(lengths) // 100)
    tree = [0] * (offsets[-1] + 1)  # Fenwick over access times 1..n: 1 marks a block's latest use
    last = [0] * int(trace.num_blocks)  # 1-based time of the latest use, 0 = never
    reuse = [0] * reuse_hist.shape[0]
    marked = 0
    t = 0
    children = {}  # node * key_stride + block -> child node
    next_node = 1  # node 0 is the root
    for i in range(len(lengths)):
        if told is not None and i % step == 0:
            told(i, len(lengths))
        start, end = offsets[i], offsets[i + 1]
        k = 0
        while start + k < end and last[blocks[start + k]] > 0:
            k += 1
        hit_blocks[i] = k
        hit_tokens[i] = min(k * block_size, lengths[i])
        node = 0
        matching = True
        s = 0
        for j in range(start, end):
            key = node * key_stride + blocks[j]
            if matching and key in children:
                node = children[key]
                s += 1
            else:
                matching = False
                children[key] = next_node
                node = next_node
                next_node += 1
        shared_blocks[i] = s
        for j in range(start, end):
            b = blocks[j]
            t += 1
            p = last[b]
            if p == 0:
                reuse[0] += 1
                marked += 1
            else:
                d = marked - fenwick_sum(tree, p)  # distinct blocks whose latest use is after p
                reuse[d.bit_length() + 1] += 1
                fenwick_add(tree, p, -1)
            fenwick_add(tree, t, 1)
            last[b] = t
    reuse_hist += reuse
    if told is not None:
        told(len(lengths), len(lengths))
    return reuse[0]


def _pass_compiled(trace, block_size, hit_tokens, hit_blocks, shared_blocks, reuse_hist, key_stride, told=None) -> int:
    """The same pass in C (stats.c)."""
    offsets, blocks, input_length = trace_arrays(trace.offsets, trace.blocks, trace.input_length)
    tree = np.zeros(int(offsets[-1]) + 1, dtype=np.int32)
    last = np.zeros(int(trace.num_blocks), dtype=np.int64)
    p, i = native.POINTER, native.COUNT
    alive, callback = native.callback(told)  # (alive: the C function, held while C may call it)
    first = native.function("kv_stats_pass", i, p, i, p, p, i, p, p, p, p, i, p, p, p)(
        native.ptr(offsets), input_length.shape[0], native.ptr(blocks), native.ptr(input_length), int(block_size),
        native.ptr(hit_tokens), native.ptr(hit_blocks), native.ptr(shared_blocks), native.ptr(reuse_hist),
        int(key_stride), native.ptr(tree), native.ptr(last), callback)
    if first < 0:
        raise MemoryError("kvreplay stats: no memory for the prefix trie")
    return first


def _percentiles(x: np.ndarray) -> dict:
    if x.size == 0:
        return {"mean": 0.0, "min": 0, **{f"p{q}": 0 for q in PERCENTILES}, "max": 0}
    values = np.percentile(x, PERCENTILES, method="inverted_cdf")
    return {"mean": float(x.mean()), "min": int(x.min()), **{f"p{q}": int(v) for q, v in zip(PERCENTILES, values)},
            "max": int(x.max())}


def _histogram(values: np.ndarray) -> list[dict]:
    """Log2 buckets of non-negative counts, as [{"range", "lo", "hi", "count"}] up to the last non-empty one."""
    if values.size == 0:
        return []
    counts = np.bincount(bucket_of(values))
    return [{"range": bucket_label(k), "lo": 0 if k == 0 else 1 << (k - 1), "hi": 0 if k == 0 else (1 << k) - 1,
             "count": int(c)} for k, c in enumerate(counts)]


def infinite_hits(trace, block_size: int | None = None, progress=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(hit_tokens, hit_blocks, shared_blocks, reuse) per request, from one pass.

    hit_tokens/hit_blocks: the infinite cache's hits; shared_blocks: s_i of the prefix trie;
    reuse: {"first_use": N, "histogram": int64[b] accesses per log2 bucket of reuse distance}.
    progress: a kvreplay.progress callback, told ``(done, total, "requests scanned")``.
    """
    trace = as_trace(trace)
    block_size = _block_size(trace, block_size)
    n = len(trace)
    hit_tokens = np.zeros(n, np.int64)
    hit_blocks = np.zeros(n, np.int64)
    shared = np.zeros(n, np.int64)
    reuse = np.zeros(NUM_BUCKETS + 1, np.int64)
    stride = max(1, int(trace.num_blocks))
    if trace.num_accesses and (trace.num_accesses + 1) * stride >= 2**62:
        raise ConfigError(f"trace too large for the prefix trie ({trace.num_accesses} accesses x {stride} blocks)")
    one_pass = _pass_compiled if native.use_core() else _pass_reference
    tell(progress, 0, n, "requests scanned")
    first = one_pass(trace, block_size, hit_tokens, hit_blocks, shared, reuse, stride,
                     labelled(progress, "requests scanned"))
    last = int(np.flatnonzero(reuse[1:])[-1]) + 1 if reuse[1:].any() else 0
    return hit_tokens, hit_blocks, shared, {"first_use": int(first), "histogram": reuse[1:last + 1]}


def _block_size(trace, block_size) -> int:
    size = resolve_block_size(block_size, trace)
    if size < 1:
        raise ConfigError(f"block_size must be >= 1, got {size}")
    return size


def stats(trace, block_size: int | None = None, *, progress=None) -> dict:
    """Describe `trace` (a Trace or a path) as a prefix cache sees it; a JSON-ready dict.

    block_size: tokens per block; default: the trace's declared size, else 512.
    Keys: source, block_size, num_requests, total_prompt_tokens, total_output_tokens,
    num_block_accesses, num_unique_blocks, infinite_cache_hit_tokens, infinite_cache_hit_rate,
    duration_s, request_rate_per_s, input_length and output_length ({mean, min, p50, p90, p99, max}),
    reuse_distance, prefix_sharing, sessions (None without a session column).
    See the module docstring for the exact definitions. progress: a kvreplay.progress callback,
    told ``(done, total, "requests scanned")`` as the pass goes.
    """
    trace = as_trace(trace)
    size = _block_size(trace, block_size)
    hit_tokens, hit_blocks, shared, reuse = infinite_hits(trace, size, progress)
    n = len(trace)
    prompt = trace.total_prompt_tokens
    hits = exact_sum(hit_tokens)
    with np.errstate(over="ignore"):
        duration_ms = float(trace.timestamp.max() - trace.timestamp.min()) if n else 0.0
    if not np.isfinite(duration_ms):
        raise ConfigError(f"{trace.source}: the timestamps span more than a float can hold "
                          f"({trace.timestamp.min():g} to {trace.timestamp.max():g} ms)")
    shared_tokens = exact_sum(np.minimum(shared * size, trace.input_length))
    out = {
        "source": trace.source,
        "block_size": size,
        "num_requests": n,
        "total_prompt_tokens": prompt,
        "total_output_tokens": exact_sum(trace.output_length),
        "num_block_accesses": trace.num_accesses,
        "num_unique_blocks": int(np.unique(trace.blocks).size) if trace.num_accesses else 0,
        "infinite_cache_hit_tokens": hits,
        "infinite_cache_hit_rate": hits / prompt if prompt else 0.0,
        "duration_s": duration_ms / 1000.0,
        "request_rate_per_s": (n - 1) / (duration_ms / 1000.0) if duration_ms > 0 else None,
        "input_length": _percentiles(trace.input_length),
        "output_length": _percentiles(trace.output_length),
        "reuse_distance": {
            "unit": "distinct blocks accessed between two consecutive uses of a block (log2 buckets)",
            "first_use": reuse["first_use"],
            "histogram": [{"range": bucket_label(k), "lo": 0 if k == 0 else 1 << (k - 1),
                           "hi": 0 if k == 0 else (1 << k) - 1, "count": int(c)}
                          for k, c in enumerate(reuse["histogram"])],
        },
        "prefix_sharing": {
            "requests_sharing_at_least": [{"blocks": k, "requests": int(np.count_nonzero(shared >= k)),
                                           "fraction": float(np.count_nonzero(shared >= k) / n) if n else 0.0}
                                          for k in SHARING_DEPTHS],
            "shared_blocks_histogram": _histogram(shared),
            "shared_prefix_tokens": shared_tokens,
            "shared_prefix_token_fraction": shared_tokens / prompt if prompt else 0.0,
        },
        "sessions": None,
    }
    session = getattr(trace, "session", None)
    if session is not None and n:
        _, per_session = np.unique(session, return_counts=True)
        out["sessions"] = {
            "num_sessions": int(per_session.size),
            "mean_turns": float(per_session.mean()),
            "requests_per_session": _percentiles(per_session),
            "turns_histogram": _histogram(per_session),
        }
    return out


def format_stats(s: dict) -> str:
    """The human-readable text block of `kvreplay stats`."""
    def pct(d, mean="{:,.0f}"):
        return "  ".join(["mean " + mean.format(d["mean"]), f"min {d['min']:,}"] + [f"p{q} {d[f'p{q}']:,}" for q in PERCENTILES]
                         + [f"max {d['max']:,}"])

    rate = s["request_rate_per_s"]
    lines = [
        f"trace                {s['source']}",
        f"block size           {s['block_size']} tokens (rates are token-weighted over the whole trace)",
        f"requests             {s['num_requests']:,} over {s['duration_s']:,.1f} s"
        + (f" ({rate:,.3f} requests/s)" if rate else ""),
        f"prompt tokens        {s['total_prompt_tokens']:,}",
        f"output tokens        {s['total_output_tokens']:,}",
        f"block accesses       {s['num_block_accesses']:,}",
        f"unique blocks        {s['num_unique_blocks']:,}",
        f"infinite cache       {s['infinite_cache_hit_tokens']:,} of {s['total_prompt_tokens']:,} prompt tokens hit = "
        f"{100 * s['infinite_cache_hit_rate']:.2f}%",
        f"input length         {pct(s['input_length'])}",
        f"output length        {pct(s['output_length'])}",
    ]
    sharing = s["prefix_sharing"]
    lines.append(f"shared prefixes      {sharing['shared_prefix_tokens']:,} prompt tokens "
                 f"({100 * sharing['shared_prefix_token_fraction']:.2f}%) lie in a prefix an earlier request had")
    lines.append("requests sharing >= " + "  ".join(
        f"{r['blocks']}: {r['requests']:,} ({100 * r['fraction']:.1f}%)" for r in sharing["requests_sharing_at_least"]))
    lines.append("shared prefix blocks " + "  ".join(f"{h['range']}: {h['count']:,}" for h in sharing["shared_blocks_histogram"]))
    reuse = s["reuse_distance"]
    lines.append(f"reuse distance       first use: {reuse['first_use']:,}  "
                 + "  ".join(f"{h['range']}: {h['count']:,}" for h in reuse["histogram"]))
    lines.append("                     (distinct blocks accessed between two uses of a block)")
    sess = s["sessions"]
    if sess:
        lines.append(f"sessions             {sess['num_sessions']:,}; requests per session "
                     f"{pct(sess['requests_per_session'], mean='{:,.2f}')}")
    return "\n".join(lines)
