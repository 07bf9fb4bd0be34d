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

SGLang 0.5.23 (wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl) serves n > 1 in its
tokenizer manager, TokenizerManager._handle_batch_request (srt/managers/tokenizer_manager.py:2074):
GenerateReqInput.normalize makes a request with n > 1 a batch (io_struct.py:550), and for it
(tokenizer_manager.py:2115-2182):
- "Cache the common prefix for parallel sampling": a copy of the request with a fresh rid and
  ``max_new_tokens = 0`` is sent, and the manager awaits its response
  (``await self._wait_one_response(...).__anext__()``) before going on. The scheduler serves it as
  a prefill-only request (Req.is_prefill_only, schedule_batch.py:1501): its admission reserves no
  output tokens (schedule_policy.py PrefillAdder: max_new_tokens 0), its forward samples nothing
  (tp_worker.py:742-749, dummy token ids), and it finishes in its prefill's result processing
  (batch_result_processor.py process_batch_result_prefill: update_finish_state, length 0), which
  caches its prompt in the radix tree (release_kv_cache, whole pages).
- Then the n samples, each a copy with its own rid and the request's n = 1 sampling, are sent one
  after the other; each is an ordinary request whose prefix match stops at input_len - 1
  (Req._compute_max_prefix_len, schedule_batch.py:1766): it hits floor((L - 1) / page) pages of the
  prefill-only request's prompt if they are still cached.

kvreplay serves that as its closed loop does (kernel/release.c): a group with n > 1 is its
prefill-only request (index -1 here; sent at the parent's arrival, kernel O = PREFILL_ONLY) and n
samples that wait for its end (the engine's output path, as any release: no think time, no second
pass through the API server: the manager reuses the tokenized request). The sharing rule is then
vLLM's, floor((L - 1) / block_size) prompt blocks, and group_memory applies to both; the
prefill-only requests are engine requests, counted in the run's summary, and the groups' TTFT is
from the parent's arrival, so it holds the prefill-only request's time.
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
    """A trace fanned out: row c of the expanded trace belongs to parent ``parent[c]`` and is its
    ``index[c]``-th sample (0-based), or (SGLang) its prefill-only request (index -1, the group's
    first row); ``n[p]`` is parent p's sample count; ``style`` the engine style it was fanned for."""

    trace: Trace
    parent: np.ndarray
    index: np.ndarray
    n: np.ndarray
    style: str = "vllm"

    @property
    def prefill_only(self) -> np.ndarray:
        """Per row: SGLang's prefill-only request of its group."""
        return self.index < 0

    @property
    def first_row(self) -> np.ndarray:
        """Per parent: its group's first row (it arrives when the parent does)."""
        return np.searchsorted(self.parent, np.arange(self.n.size))

    @property
    def samples(self) -> np.ndarray:
        """Per row: one of its group's n samples (not a prefill-only request)."""
        return self.index >= 0


def fan_out(trace: Trace, n: np.ndarray, style: str = "vllm") -> FanOut:
    """Each request p repeated n[p] times in place (vLLM's children, in the order it adds them);
    with the SGLang style a request with n > 1 is first its prefill-only request (one forward:
    output length 1 here, PREFILL_ONLY for the kernel), then its n samples."""
    n = np.asarray(n, dtype=np.int64)
    lead = ((n > 1) if style == "sglang" else np.zeros(n.size, dtype=bool)).astype(np.int64)
    rows = n + lead
    parent = np.repeat(np.arange(len(trace), dtype=np.int64), rows)
    starts = np.zeros(len(trace) + 1, dtype=np.int64)
    np.cumsum(rows, out=starts[1:])
    index = np.arange(parent.size, dtype=np.int64) - starts[:-1][parent] - lead[parent]
    # (the children keep no n of their own, and no dependencies: n > 1 is served open-loop only)
    child = replace(trace.take(parent), samples=None, dependencies=None)
    if lead.any():
        out = np.array(child.output_length, dtype=np.int64)
        out[index < 0] = 1
        child = replace(child, output_length=out)
    return FanOut(trace=child, parent=parent, index=index, n=n, style=style)


def private_tails(fan: FanOut, block_size: int) -> FanOut:
    """SGLang's groups with each row's partial last prompt page under a fresh id: the radix tree
    holds whole pages only (a request's partial page is its own, freed at its end), where the
    trace gives the group's rows one id for it, which kvreplay's pool would hold once."""
    t = fan.trace
    L = np.asarray(t.input_length, dtype=np.int64)
    P = np.diff(t.offsets)
    rows = np.flatnonzero((fan.n[fan.parent] > 1) & (L % block_size != 0) & (P == -(-L // block_size)))
    if rows.size == 0:
        return fan
    blocks = np.array(t.blocks)
    blocks[t.offsets[rows + 1] - 1] = t.num_blocks + np.arange(rows.size, dtype=blocks.dtype)
    return replace(fan, trace=replace(t, blocks=blocks, num_blocks=t.num_blocks + rows.size))


def release_links(fan: FanOut, engine_arrival_s: np.ndarray) -> dict:
    """The compiled loop's closed-loop arrays (closed.py ClosedLoop.kernel_arrays' shape) for
    SGLang's groups: the prefill-only requests and the groups of one sample arrive at their
    engine arrival; each sample waits for its group's prefill-only request to end, with no delay
    beyond the engine's output path."""
    rows = fan.parent.size
    waits = (fan.samples & (fan.n[fan.parent] > 1)).astype(np.int64)
    lead = np.flatnonzero(fan.prefill_only)
    counts = np.zeros(rows, dtype=np.int64)
    counts[lead] = fan.n[fan.parent[lead]]
    next_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=next_offsets[1:])
    next_ids = np.flatnonzero(waits == 1).astype(np.int64)  # (each group's samples follow its lead row)
    return {"arrival": np.where(waits == 0, np.asarray(engine_arrival_s, dtype=np.float64), 0.0), "waits": waits,
            "next_offsets": next_offsets, "next_ids": next_ids, "next_delay_s": np.zeros(next_ids.size),
            "next_on_send": np.zeros(next_ids.size, dtype=np.int8), "session": np.zeros(0, dtype=np.int64),
            "lane_queue": np.zeros(0, dtype=np.int64), "lane_delay_s": np.zeros(0, dtype=np.float64),
            "send_delay_s": np.zeros(rows, dtype=np.float64)}  # (no link fires on a send, no lanes)


def check_applies(engine_style: str, instances: int, disaggregated: bool, closed_loop: bool) -> None:
    """Refuse a fan-out where kvreplay cannot serve it as the engine does."""
    if closed_loop:
        raise ConfigError("n > 1 (--n or the trace's n) is served with open-loop arrivals only: in a closed loop "
                          "the next turn waits for the group's completions, which is not modelled (--arrivals open)")
    if engine_style not in ("vllm", "sglang"):
        raise ConfigError("n > 1 (--n or the trace's n) is modelled for --engine-style vllm and sglang: "
                          f"{engine_style}'s parallel sampling is not")
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
    """Per parent: the TTFT of its first and of its last sample, from the parent's arrival (its
    group's first row: with SGLang, its prefill-only request), NaN unless every sample finished;
    and whether every sample finished."""
    parents = fan.n.size
    arrival = np.asarray(report.arrival_s, dtype=np.float64)[fan.first_row][fan.parent]
    ttft = np.where(report.finished & fan.samples, np.asarray(report.first_token_s) - arrival, np.nan)
    first = np.full(parents, np.nan)
    last = np.full(parents, np.nan)
    done = np.zeros(parents, dtype=np.int64)
    np.add.at(done, fan.parent, (report.finished & fan.samples).astype(np.int64))
    complete = done == fan.n
    np.fmin.at(first, fan.parent, ttft)
    np.fmax.at(last, fan.parent, ttft)
    return np.where(complete, first, np.nan), np.where(complete, last, np.nan), complete


def summarize(fan: FanOut, report, block_size: int, output_kv: bool) -> dict:
    """The groups' figures: memory by the engines' common rule (group_memory) over the groups with
    n > 1, and from the run: each group's TTFT for its first and its last sample (from the parent's
    arrival; with the calibrated roofline, their medians at both ends of its band too), and the
    prompt tokens its later samples hit (SGLang: every sample's, the prefill-only request's
    prompt being the one they share)."""
    parents = fan.n.size
    first_sample = np.flatnonzero(fan.index == 0)  # (one per parent, in parent order)
    L = np.asarray(report.prompt_tokens)[first_sample]
    out = np.asarray(report.output_tokens)[first_sample]
    mem = group_memory(L, out, fan.n, block_size, output_kv)
    multi = fan.n > 1
    first, last, complete = _group_ttft(fan, report)
    sglang = fan.style == "sglang"
    later = fan.samples if sglang else fan.index > 0
    sharers = fan.n if sglang else fan.n - 1
    later_hits = np.zeros(parents, dtype=np.int64)
    np.add.at(later_hits, fan.parent[later], np.asarray(report.hit_tokens)[later])
    shared_tokens = mem["shared_blocks"] * block_size
    hit_expected = shared_tokens * sharers
    totals = {k: int(v[multi].sum()) for k, v in mem.items() if k != "own_blocks_per_child"}
    # the TTFT medians count the groups the summary judges (their parent arrives after the warm-up)
    judged = multi & complete & np.asarray(report.judged)[fan.first_row]

    def median(a):
        return float(np.median(a[judged])) if judged.any() else None

    band = None
    if report.band is not None and judged.any():
        ends = {end: _group_ttft(fan, report.band["runs"][end]) for end in ("low", "high")}
        band = {"first_child_s": [median(ends[e][0]) for e in ("low", "high")],
                "last_child_s": [median(ends[e][1]) for e in ("low", "high")]}
    return {
        "groups": int(multi.sum()), "children": int(fan.n[multi].sum()), "max_n": int(fan.n.max(initial=1)),
        "block_size": block_size, "engine_style": fan.style,
        "rule": ("SGLang 0.5.23: a prefill-only request caches the prompt, then the n samples hit "
                 "floor((L - 1) / page) of its pages" if sglang else
                 "vLLM 0.33.0: children hit floor((L - 1) / block_size) prompt blocks") + "; blocks at each child's last token",
        "prefill_only_requests": int(fan.prefill_only.sum()),
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
