"""Parallel sampling (`n` completions per prompt) as vLLM 0.33.0 serves it: the frontend fans a
request with n > 1 out into n child requests, and the scheduler sees n ordinary requests.

vLLM 0.33.0 (wheel vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl):
- vllm/v1/engine/llm_engine.py:293-311 and async_llm.py:534-560: n > 1 builds a ParentRequest and
  adds n children, ids ``f"{index}_{parent_id}"`` (parallel_sampling.py:94), each a copy of the
  request with sampling n = 1 (parallel_sampling.py:74-75), one after the other to the engine core.
  Each child is then admitted, preempted and freed as its own request.
- The children's prompt is the parent's, so with prefix caching they hit its blocks: the scheduler
  caches a request's full blocks when it allocates them (kv_cache_manager.py:614-620,
  ``cache_blocks`` in allocate_slots, before the step runs), so a child admitted in the same step as
  the first one already hits them. The hit stops at ``num_tokens - 1`` (kv_cache_manager.py:296-305):
  floor((L - 1) / block_size) prompt blocks are shared; the rest of the prompt (a partial block, or
  the last full block when L is a multiple of the block size) and every output block are each
  child's own.

kvreplay's vLLM-style kernel does the same (kernel/requests.c paged_admit: a block gets its hash when
the tokens scheduled so far fill it), so fanning the trace out is the whole model: each request with
n > 1 becomes n consecutive requests with its prompt, arrival and output length.

SGLang 0.5.23 is not modelled: tokenizer_manager.py:2128-2160 sends a prefill-only copy of the
request (max_new_tokens = 0) and waits for its response before it sends the n samples
(tokenizer_manager.py:2163-2180), an arrival that depends on a served request, which kvreplay's
open-loop arrivals cannot express. simulate refuses n > 1 with the SGLang style.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import ConfigError
from ..trace.model import Trace
from ..trace.mooncake import MAX_SAMPLES  # vLLM caps nothing; a bound keeps a typo from multiplying a trace


def check_n(n, what: str = "n (--n)") -> int | None:
    """`n` as a whole number in 1..MAX_SAMPLES, or None (not given)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_SAMPLES:
        raise ConfigError(f"{what} must be a whole number of completions per request in 1..{MAX_SAMPLES}, got {n!r}")
    return int(n)


def samples_per_request(trace: Trace, n: int | None) -> np.ndarray:
    """Per request: its completions: the trace's ``n`` where a record gives it, else `n` (default 1)."""
    n = check_n(n)
    fill = 1 if n is None else n
    out = np.full(len(trace), fill, dtype=np.int64)
    if trace.samples is not None:
        given = trace.samples > 0
        out[given] = trace.samples[given]
    return out


@dataclass(frozen=True)
class FanOut:
    """A trace fanned out: child c of the expanded trace belongs to parent ``parent[c]`` and is its
    ``index[c]``-th sample (0-based); ``n[p]`` is parent p's sample count."""

    trace: Trace
    parent: np.ndarray
    index: np.ndarray
    n: np.ndarray


def fan_out(trace: Trace, n: np.ndarray) -> FanOut:
    """Each request p repeated n[p] times in place (vLLM's children, in the order it adds them)."""
    parent = np.repeat(np.arange(len(trace), dtype=np.int64), n)
    starts = np.zeros(len(trace) + 1, dtype=np.int64)
    np.cumsum(n, out=starts[1:])
    index = np.arange(parent.size, dtype=np.int64) - starts[:-1][parent]
    # (the children keep no n of their own, and no dependencies: n > 1 is served open-loop only)
    child = replace(trace.take(parent), samples=None, dependencies=None)
    return FanOut(trace=child, parent=parent, index=index, n=np.asarray(n, dtype=np.int64))


def check_applies(engine_style: str, instances: int, disaggregated: bool, closed_loop: bool) -> None:
    """Refuse a fan-out where kvreplay cannot serve it as the engine does."""
    if closed_loop:
        raise ConfigError("n > 1 (--n or the trace's n) is served with open-loop arrivals only: in a closed loop "
                          "the next turn waits for the group's completions, which is not modelled (--arrivals open)")
    if engine_style != "vllm":
        raise ConfigError("n > 1 (--n or the trace's n) is modelled for --engine-style vllm only: SGLang 0.5.23 "
                          "sends a prefill-only copy of the request and waits for it before sending the n samples "
                          "(tokenizer_manager.py:2128-2180), an arrival that depends on the run")
    if instances > 1 or disaggregated:
        raise ConfigError("n > 1 (--n or the trace's n) needs one instance: a router would route each child on its "
                          "own, where a deployment routes the parent request once")


def group_memory(L: np.ndarray, out: np.ndarray, n: np.ndarray, block_size: int, output_kv: bool) -> dict:
    """Per group (arrays): the KV blocks at each child's last token, by vLLM's rule (module doc).

    shared: the prompt's blocks every child hits, floor((L - 1) / block_size), counted once;
    own: one child's blocks beyond them (the rest of its prompt and its outputs' KV, L + O - 1
    tokens at its last token); divergent = n x own; group = shared + divergent; independent:
    n requests that share nothing, n x (shared + own); saved = independent - group."""
    bs = block_size
    kv = L + (np.maximum(out, 1) - 1 if output_kv else 0)
    total = (kv + bs - 1) // bs
    shared = np.minimum(np.maximum(L - 1, 0) // bs, total)
    own = total - shared
    group = shared + n * own
    independent = n * total
    return {"shared_blocks": shared, "own_blocks_per_child": own, "divergent_blocks": n * own,
            "group_blocks": group, "independent_blocks": independent, "saved_blocks": independent - group}


def _group_ttft(fan: FanOut, report) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per parent: the TTFT of its first and of its last child (NaN unless every child finished),
    and whether every child finished."""
    parents = fan.n.size
    ttft = np.where(report.finished, report.ttft_s, np.nan)
    first = np.full(parents, np.nan)
    last = np.full(parents, np.nan)
    done = np.zeros(parents, dtype=np.int64)
    np.add.at(done, fan.parent, report.finished.astype(np.int64))
    complete = done == fan.n
    np.fmin.at(first, fan.parent, ttft)
    np.fmax.at(last, fan.parent, ttft)
    return np.where(complete, first, np.nan), np.where(complete, last, np.nan), complete


def summarize(fan: FanOut, report, block_size: int, output_kv: bool) -> dict:
    """The groups' figures: memory by vLLM's rule (group_memory) over the groups with n > 1, and from
    the run: each group's TTFT for its first and its last child (from the parent's arrival; with the
    calibrated roofline, their medians at both ends of its band too), and the prompt tokens its later
    children hit."""
    parents = fan.n.size
    L = np.asarray(report.prompt_tokens)[np.searchsorted(fan.parent, np.arange(parents))]
    out = np.asarray(report.output_tokens)[np.searchsorted(fan.parent, np.arange(parents))]
    mem = group_memory(L, out, fan.n, block_size, output_kv)
    multi = fan.n > 1
    first, last, complete = _group_ttft(fan, report)
    later = fan.index > 0
    later_hits = np.zeros(parents, dtype=np.int64)
    np.add.at(later_hits, fan.parent[later], np.asarray(report.hit_tokens)[later])
    shared_tokens = mem["shared_blocks"] * block_size
    hit_expected = shared_tokens * (fan.n - 1)
    totals = {k: int(v[multi].sum()) for k, v in mem.items() if k != "own_blocks_per_child"}
    # the TTFT medians count the groups the summary judges (their parent arrives after the warm-up)
    judged = multi & complete & np.asarray(report.judged)[fan.index == 0]

    def median(a):
        return float(np.median(a[judged])) if judged.any() else None

    band = None
    if report.band is not None and judged.any():
        ends = {end: _group_ttft(fan, report.band["runs"][end]) for end in ("low", "high")}
        band = {"first_child_s": [median(ends[e][0]) for e in ("low", "high")],
                "last_child_s": [median(ends[e][1]) for e in ("low", "high")]}
    return {
        "groups": int(multi.sum()), "children": int(fan.n[multi].sum()), "max_n": int(fan.n.max(initial=1)),
        "block_size": block_size, "rule": "vLLM 0.33.0: children hit floor((L - 1) / block_size) prompt blocks; "
                                          "blocks at each child's last token",
        **totals,
        "saved_fraction": totals["saved_blocks"] / totals["independent_blocks"] if totals["independent_blocks"] else 0.0,
        "later_children_hit_tokens": int(later_hits[multi].sum()),
        "later_children_shared_tokens": int(hit_expected[multi].sum()),
        "judged_complete_groups": int(judged.sum()),
        "median_ttft_first_child_s": median(first),
        "median_ttft_last_child_s": median(last),
        "median_ttft_band": band,  # the same medians at the calibrated roofline's band ends (None without one)
        "per_group": {"parent": np.flatnonzero(multi), "n": fan.n[multi], "prompt_tokens": L[multi],
                      **{k: v[multi] for k, v in mem.items()},
                      "later_children_hit_tokens": later_hits[multi],
                      "ttft_first_child_s": np.where(complete, first, np.nan)[multi],
                      "ttft_last_child_s": np.where(complete, last, np.nan)[multi]},
    }


def to_json(s: dict | None, per_group: bool) -> dict | None:
    """The summary as JSON (per_group as lists, NaN as None, only with per_group=True)."""
    if s is None:
        return None
    doc = {k: v for k, v in s.items() if k != "per_group"}
    if per_group:
        doc["per_group"] = {k: [None if isinstance(x, float) and x != x else x for x in np.asarray(v).tolist()]
                            for k, v in s["per_group"].items()}
    return doc
