"""kvreplay's SGLang-style serving simulator against SGLang 0.5.23's own scheduler code, request by request.

Opt-in (marker ``engines``). It needs torch (a CPU build is enough: SGLang's ScheduleBatch, memory
pools and RadixCache hold torch tensors) and msgspec, besides kvreplay's own dependencies:

    pip install torch --index-url https://download.pytorch.org/whl/cpu   # or any CPU torch
    KVREPLAY_ENGINES=1 python -m pytest tests/real_engines/test_sglang_scheduler.py

The sglang 0.5.23 wheel is found as tests/real_engines/sglang_scheduler.py says
($KVREPLAY_SGLANG_WHEEL, tests/real_engines/.cache/, /tmp/engines/), else downloaded with
``pip download`` into tests/real_engines/.cache/; without it, or without torch, the tests skip.

Both sides serve the same trace (512-token pages, arrivals = the trace's timestamps, a constant
10 ms step: a polynomial profile with one constant term) on one instance, and for every request
five fields are compared (times to 1e-6 s): first scheduled time, prefix-hit tokens at its first
schedule, first token time, finish time, preemptions:

- ``sglang_scheduler.run``: SGLang's own Scheduler methods, SchedulePolicy, PrefillAdder,
  PrefillBudget, ScheduleBatch, Req, RadixCache, paged allocator (tests/real_engines/sglang_scheduler.py);
- ``kvreplay.simulate(trace, policy="radix", capacity=C, engine_style="sglang", time_model=<10 ms>,
  scheduler=Scheduler(style="sglang", schedule_policy=..., ...), compare_sequential=False)``.

Cases (``test_same_requests_as_sglang``): requests 0-299 and 2000-2299 of ../shared's Mooncake
conversation trace, a light pool (4000 pages) and a tight one (300 pages; the largest request
needs 237), fcfs and lpm, and fcfs without chunked prefill. A case fails unless every request
agrees. Requests agreeing on all five fields, when this test was written (e779a1f), after the rules
the step tests isolate were adopted (docs/fidelity.md, "Against SGLang's own scheduler"), and now
that a request holds its KV as SGLang's scheduler does (chunk by chunk, its computed pages
checkpointed into the tree, a finished request's whole pages taken by it):

    case (of 300)                 light fcfs        light lpm         tight fcfs       tight lpm        light no-chunk    tight no-chunk
    conversation 0-299            272 -> 300 -> 300 270 -> 300 -> 300 20 -> 300 -> 300 20 -> 223 -> 300 299 -> 300 -> 300 159 -> 300 -> 300
    conversation 2000-2299        248 -> 290 -> 300 275 -> 300 -> 300 36 -> 300 -> 300 36 -> 300 -> 300 300 -> 300 -> 300 116 -> 300 -> 300

The focused tests (``test_prefill_step_*``, ``STEPS``) give SGLang's PrefillAdder one waiting
queue and state (built by a short trace) and compare the requests it admits and the tokens it
gives each -- and every step end and request -- with the same step in kvreplay;
test_prefill_step_sglang pins SGLang's own decision, and test_prefill_step_kvreplay is an
expected failure, with SGLang's file:line as the reason, where kvreplay departs. Each scenario was
the first divergence of some whole-trace case (same-batch prefix hits at t=0; the continuing chunk
charged its raw tokens; a chunked request's whole prompt counted as taken; no batch_is_full gate;
...); all but one now agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import MOONCAKE, shared_path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
import sglang_scheduler as harness  # noqa: E402
import per_request  # noqa: E402

pytestmark = pytest.mark.engines

PAGE = 512
STEP_S = 0.010
FIELDS = ("scheduled_s", "hit_tokens", "first_token_s", "finish_s", "preemptions")


@pytest.fixture(scope="module")
def real():
    return harness.real_or_skip()


def kvreplay_run(trace, settings: harness.Settings):
    import kvreplay
    from kvreplay.serving.simulate import Scheduler
    from kvreplay.serving.timing import PolynomialProfile

    profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                          "terms": [{"coef": settings.step_seconds}]})
    chunking = settings.chunked_prefill_size is not None
    return kvreplay.simulate(
        trace, policy="radix", capacity=settings.num_pages, block_size=settings.page_size, engine_style="sglang",
        time_model=profile,
        scheduler=Scheduler(style="sglang", schedule_policy=settings.schedule_policy,
                            chunked_prefill=chunking, chunked_prefill_size=settings.chunked_prefill_size or 8192,
                            max_prefill_tokens=settings.max_prefill_tokens,
                            max_num_seqs=settings.max_running_requests),
        compare_sequential=False)


# ---- traces ---------------------------------------------------------------------------------------

def slice_rows(name: str, start: int, n: int) -> list:
    return per_request.slice_rows(shared_path(MOONCAKE / name), start, n)


# ---- the comparison -------------------------------------------------------------------------------

def as_requests(rows: list, settings: harness.Settings):
    """`rows` as kvreplay's trace and as the harness's requests (the trace's arrival times)."""
    import kvreplay
    from kvreplay.serving.simulate import arrivals

    trace = kvreplay.Trace.from_requests(rows, block_size=settings.page_size)
    return trace, harness.requests_from_trace(trace, arrivals(trace))


def compare(real, rows: list, settings: harness.Settings) -> dict:
    """Serve `rows` on both; per field the share of requests that agree, and the disagreements."""
    trace, requests = as_requests(rows, settings)
    engine = harness.run(requests, settings, real)
    ours = kvreplay_run(trace, settings)
    n = len(requests)
    agreement, share, diffs = per_request.compare(engine, ours, FIELDS)
    return {"agreement": agreement, "fields": share, "diffs": diffs, "n": n, "engine": engine,
            "ours": ours}


def report(result: dict) -> str:
    return per_request.report(result, "SGLang")


# ---- whole traces ---------------------------------------------------------------------------------

LIGHT, TIGHT = 4000, 300  # pool in 512-token pages (the slices' largest request needs 237)
SLICES = {"conversation-0-300": ("conversation_trace.jsonl", 0, 300),
          "conversation-2000-2300": ("conversation_trace.jsonl", 2000, 300)}
CASES = {}
for _slice in SLICES:
    for _pool, _pages in (("light", LIGHT), ("tight", TIGHT)):
        for _policy in ("fcfs", "lpm"):
            CASES[f"{_slice}-{_pool}-{_policy}"] = (_slice, dict(num_pages=_pages, schedule_policy=_policy))
    for _pool, _pages in (("light", LIGHT), ("tight", TIGHT)):
        CASES[f"{_slice}-{_pool}-fcfs-no-chunked-prefill"] = (_slice, dict(num_pages=_pages, chunked_prefill_size=None))


@pytest.mark.parametrize("case", list(CASES))
def test_same_requests_as_sglang(real, case):
    kind, params = CASES[case]
    settings = harness.Settings(page_size=PAGE, step_seconds=STEP_S, **params)
    result = compare(real, slice_rows(*SLICES[kind]), settings)
    rejected_sglang = [i for i, r in enumerate(result["engine"].requests) if r.status != "finished"]
    assert rejected_sglang == [], "SGLang finishes every request of these traces"
    assert result["agreement"] == 1.0, report(result)


# ---- one prefill step: SGLang's PrefillAdder against the same step in kvreplay --------------------
#
# Each scenario is a short trace (16-token pages, times in ms) that builds a state -- a tree,
# running requests, a request being chunked, a waiting queue -- and then one step of SGLang's
# _get_new_batch_prefill_raw (its SchedulePolicy and PrefillAdder) that decides the outcome. A
# step lasts 10 ms + 1 us per prompt token it computes, so that in kvreplay (where a step's
# requests are not visible) the step ends (SimReport.series) give each step's prompt tokens.
# test_prefill_step_sglang pins what SGLang does at the deciding step (the requests in the batch,
# each one's cached prefix and the tokens it is given); test_prefill_step_kvreplay compares every
# step end and the five fields of every request with kvreplay; where kvreplay departs, it is an
# expected failure whose reason cites SGLang's source (sglang 0.5.23 wheel, file:line) and
# kvreplay's (src/kvreplay/serving/kernel).

SP = "sglang/srt/managers/schedule_policy.py"
SCHED = "sglang/srt/managers/scheduler.py"
SB = "sglang/srt/managers/schedule_batch.py"
ALLOC = "sglang/srt/mem_cache/allocation.py"
BUDGET = "sglang/srt/mem_cache/prefill_budget.py"


def small(**kw) -> harness.Settings:
    base = dict(page_size=16, num_pages=100, chunked_prefill_size=64, max_prefill_tokens=128, step_seconds=0.01,
                step_seconds_per_prefill_token=1e-6, log_steps=True)
    base.update(kw)
    return harness.Settings(**base)


# name: (rows (hash_ids, prompt tokens, arrival ms, outputs), settings, deciding step index,
#        SGLang's batch at that step [(request, cached prefix, tokens given)], departure or None)
STEPS = {
    # request 1 shares page 1 with request 0, admitted in the same batch: SGLang matches it against the
    # tree before admission (scheduler.py:4260 init_next_round_input) and a prefix enters the tree only
    # once computed (batch_result_processor.py:394 checkpoint_kv_cache), so it hits 0 and computes 48
    # tokens (kvreplay too: its tree takes a prompt's pages at the same checkpoint, requests.c
    # req_prefilled)
    "same-batch-prefix": (
        [([1, 2, 3], 48, 0.0, 2), ([1, 4, 5], 48, 0.0, 2)], small(chunked_prefill_size=256), 0,
        [(0, 0, 48), (1, 0, 48)], None),
    # the continuing chunk (20 tokens) is charged ceil_paged(20) = 32 to rem_chunk_tokens and
    # rem_input_tokens (schedule_policy.py:917, 938, 943 _update_prefill_budget, from add_chunked_req :1207), leaving 32:
    # request 1 (30 -> 32) fills it and request 2 waits a step
    "continuing-chunk-charged-whole-pages": (
        [(list(range(1, 7)), 84, 0.0, 2), ([11, 12], 30, 0.0, 2), ([21], 10, 0.0, 2)], small(), 1,
        [(0, 64, 20), (1, 0, 30)], None),
    # after the continuing chunk (60 -> 64) nothing is left; with 4 tokens left SGLang would still not
    # start a chunk below a page (schedule_policy.py:1665 floor to whole pages, :1672 extend_len <= 0 -> OTHER)
    "no-sub-page-chunk": (
        [(list(range(1, 9)), 124, 0.0, 2), ([11, 12, 13], 40, 0.0, 2)], small(), 1,
        [(0, 64, 60)], None),
    # SGLang allocates a chunked request chunk by chunk: its last chunk (36) is still free KV and is
    # reserved once, ceil(36) + a page + its outputs (schedule_policy.py:1207, prefill_budget.py:156-168 reserve), leaving 62 > 30 +
    # 2 + 16 for request 1 (kvreplay too: requests.c tree_start, req_extend)
    "chunked-prompt-not-held": (
        [(list(range(1, 8)), 100, 0.0, 2), ([11, 12], 30, 0.0, 2)], small(num_pages=12), 1,
        [(0, 64, 36), (1, 0, 16)], None),
    # request 2's 64-token prefix is evictable; SGLang locks it before checking the budget (schedule_policy.py:1431
    # _lock_node, prefill_budget.py:91-101 remaining_total = available + evictable) so it has 173.9 - 64 = 109.9 < 32
    # + 70 + 16 and decodes instead (then batch_is_full keeps it out until request 1 finishes)
    "own-prefix-locked": (
        [([1, 2, 3, 4], 64, 0.0, 1), ([10, 11, 12, 13], 64, 0.0, 100), ([1, 2, 3, 4, 5, 6], 96, 50.0, 70)],
        small(num_pages=20, chunked_prefill_size=256), 5, [(1, None, 1)], None),
    # request 1 does not fit at 50 ms; SGLang then sets batch_is_full (scheduler.py:4282) and forms no prefill
    # batch while it is set (scheduler.py:4099) -- it is cleared when a running request leaves, here when request
    # 0 finishes at 40 s
    "batch-is-full": (
        [([1, 2, 3, 4], 64, 0.0, 4000), ([11, 12], 32, 50.0, 1290)],
        small(num_pages=260, chunked_prefill_size=256), 5, [(0, None, 1)], None),
    # every decode step SGLang evicts the tree until a page per running request is free
    # (allocation.py:584-585 alloc_paged_token_slots_decode, besides check_decode_mem's exact need): the
    # cached 4-page prefix of request 0 goes at the first decode though neither request needs a page,
    # and request 3 hits 0 (kvreplay: sglang.c decode_batch, req_evict_ahead)
    "decode-evicts-ahead": (
        [([1, 2, 3, 4], 64, 0.0, 1), ([10, 11], 17, 0.0, 10), ([12, 13], 17, 0.0, 10),
         ([1, 2, 3, 4, 99], 70, 50.0, 2)], small(num_pages=9, chunked_prefill_size=256, max_prefill_tokens=512),
        2, [(1, None, 1), (2, None, 1)], None),
    "max-new-tokens-clipped": (
        [([1, 2, 3, 4, 5, 6], 96, 0.0, 60)], small(num_pages=10, chunked_prefill_size=256), 0,
        [(0, 0, 96)],
        "prompt 96 + 60 outputs + a page does not fit 160 tokens: SGLang clips max_new_tokens to "
        f"160 - 96 - 16 - 1 = 47 when the request arrives ({SCHED}:2723 init_req_max_new_tokens, "
        "mem_cache/allocator/base.py:104) and serves it; kvreplay rejects it on arrival (loop.c:100)"),
    # lpm: request 1 has no cached prefix but shares 48 tokens with request 0 in the waiting queue, so
    # SGLang sorts it last (schedule_policy.py:365-383 temporary_deprioritized, :441
    # _sort_by_longest_prefix) and cuts it to the 32 tokens left (kvreplay compares the blocks that
    # hold the first 32 tokens: sglang.c shares_short_prefix)
    "in-batch-prefix-deprioritized": (
        [([1, 2, 3, 4], 64, 0.0, 2), ([1, 2, 3, 5], 64, 0.0, 2), ([7, 8], 32, 0.0, 2)],
        small(chunked_prefill_size=128, max_prefill_tokens=256, schedule_policy="lpm"), 0,
        [(0, 0, 64), (2, 0, 32), (1, 0, 32)], None),
    # both requests have as many outputs and as long a prompt when the pool runs out (request 1's prefill
    # paused request 0's decode); SGLang's retraction order sorts them stably and pops the last (schedule_batch.py:3576
    # sort(reverse=True), :3467 pop()): request 1 is retracted
    "retraction-tie": (
        [([1], 16, 0.0, 300), ([2], 16, 10.0, 300)], small(num_pages=36, chunked_prefill_size=256), 1,
        [(1, 0, 16)], None),
    # request 0 finishes with 40 + 25 - 1 = 64 tokens in KV: SGLang's tree takes all 4 pages, the 2
    # pages past its prompt's 2 full ones (the prompt's last 8 tokens filled by outputs, then 16
    # outputs) as one leaf below its prompt (mem_cache/common.py:431 release_kv_cache ->
    # radix_cache.py:510 checkpoint, :450 _insert_cache); request 1's 64 tokens + a page find 64
    # free, so the allocator evicts 16 tokens (allocation.py:192 conservative_num_tokens,
    # allocator/base.py:166 evict_to_free_tokens): the whole output leaf, the least recent leaf,
    # and request 2 still hits the prompt's 32 tokens (kvreplay: requests.c req_finish, radix.c
    # radix_cache_finished)
    "finished-output-pages-on-path": (
        [([1, 2, 3], 40, 0.0, 25), ([5, 6, 7, 8], 64, 1000.0, 1), ([1, 2, 9], 40, 2000.0, 1)],
        small(num_pages=8, chunked_prefill_size=256), 26, [(2, 32, 8)], None),
    # request 0's 96 tokens in 3 chunks of 32: SGLang takes each chunk's 2 pages when it schedules it
    # (allocation.py:374 alloc_for_extend) and caches the computed ones after each step, a node per
    # chunk (batch_result_processor.py:394 checkpoint_kv_cache, radix_cache.py:510 checkpoint), so
    # after its first step it holds 2 pages locked and 2 of its own, 80 tokens free; finished, its 6
    # pages are 3 nodes. Request 1 (64 tokens, 2 chunks) needs 2 pages evicted at its second chunk:
    # the least recent leaf, request 0's last chunk (radix_cache.py:552 evict: whole leaves), and
    # request 2 hits the first two chunks' 64 tokens (kvreplay: requests.c tree_start, req_extend,
    # req_prefilled)
    "chunk-nodes-evicted-last-first": (
        [(list(range(1, 7)), 96, 0.0, 1), ([7, 8, 10, 11], 64, 1000.0, 1), ([1, 2, 3, 4, 9], 80, 2000.0, 1)],
        small(num_pages=9, chunked_prefill_size=32), 5, [(2, 64, 16)], None),
    # where the two agree
    "lpm-order": (
        [([1, 2, 3, 4], 64, 0.0, 1), ([5, 6], 32, 0.0, 1), ([9, 10, 11], 40, 1000.0, 2), ([5, 6, 7], 40, 1000.0, 2),
         ([1, 2, 3, 4, 8], 70, 1000.0, 2)], small(chunked_prefill_size=32, schedule_policy="lpm"), 3,
        [(4, 64, 6), (3, 32, 8)], None),
    "budget-fits": (
        [(list(range(1, 8)), 100, 0.0, 2), ([11, 12], 30, 0.0, 2)], small(num_pages=14), 1,
        [(0, 64, 36), (1, 0, 16)], None),
    "no-chunked-prefill-first-excepted": (
        [(list(range(1, 11)), 150, 0.0, 2), ([21, 22], 20, 0.0, 2), ([31], 10, 0.0, 2)],
        small(chunked_prefill_size=None, max_prefill_tokens=32), 0, [(0, 0, 150)], None),
}


def run_steps(real, name):
    rows, settings, _, _, _ = STEPS[name]
    trace, requests = as_requests(rows, settings)
    engine = harness.run(requests, settings, real)
    ours = kvreplay_step_run(trace, settings)
    return engine, ours


def kvreplay_step_run(trace, settings):
    from kvreplay.serving.timing import PolynomialProfile

    profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                          "terms": [{"coef": settings.step_seconds},
                                                    {"coef": settings.step_seconds_per_prefill_token,
                                                     "prefill_tokens": 1}]})
    chunking = settings.chunked_prefill_size is not None
    from kvreplay.serving import run as run_module

    points, run_module.SERIES_POINTS = run_module.SERIES_POINTS, 1 << 16  # every step end, not thinned
    try:
        return _simulate_steps(trace, settings, profile, chunking)
    finally:
        run_module.SERIES_POINTS = points


def _simulate_steps(trace, settings, profile, chunking):
    import kvreplay
    from kvreplay.serving.simulate import Scheduler

    return kvreplay.simulate(
        trace, policy="radix", capacity=settings.num_pages, block_size=settings.page_size, engine_style="sglang",
        time_model=profile,
        scheduler=Scheduler(style="sglang", schedule_policy=settings.schedule_policy, chunked_prefill=chunking,
                            chunked_prefill_size=settings.chunked_prefill_size or 8192,
                            max_prefill_tokens=settings.max_prefill_tokens, max_num_seqs=settings.max_running_requests),
        compare_sequential=False)


def step_ends(engine, settings) -> list:
    out = []
    for st in engine.steps:
        tokens = sum(x[2] for x in st["reqs"]) if st["mode"] == "extend" else 0
        out.append(st["t"] + (settings.step_seconds + settings.step_seconds_per_prefill_token * tokens))
    return out


@pytest.mark.parametrize("name", list(STEPS))
def test_prefill_step_sglang(real, name):
    """SGLang's own decision at the deciding step (what the kvreplay comparison is about)."""
    _, settings, k, batch, _ = STEPS[name]
    engine, _ = run_steps(real, name)
    got = [(i, prefix, tokens) for i, prefix, tokens in engine.steps[k]["reqs"]]
    assert got == batch, f"step {k} at t={engine.steps[k]['t']:.6f}: {engine.steps[k]}"
    if name == "max-new-tokens-clipped":
        assert engine.requests[0].max_new_tokens == 47 and engine.requests[0].status == "finished"
    if name == "decode-evicts-ahead":
        assert engine.steps[1]["evictable"] == 64 and engine.steps[2]["evictable"] == 0
        assert engine.requests[3].hit_tokens == 0
    if name == "own-prefix-locked":
        (kind, i, before, prefix, given, verdict), = engine.steps[k]["adder"]
        assert (i, prefix, given, verdict) == (2, 64, None, "NO_TOKEN")
        assert before["rem_total"] > 32 + 70 + 16 > before["rem_total"] - 64
    if name == "batch-is-full":
        assert engine.requests[1].scheduled_s == pytest.approx(engine.requests[0].finish_s)
    if name == "finished-output-pages-on-path":  # the output leaf (2 pages) went, the prompt's 2 stayed
        assert (engine.steps[24]["evictable"], engine.steps[24]["protected"]) == (0, 32)
        assert (engine.steps[25]["evictable"], engine.steps[25]["available"]) == (32, 32)
    if name == "chunk-nodes-evicted-last-first":  # 2 pages locked, 2 its own; then [5, 6] evicted
        assert (engine.steps[1]["protected"], engine.steps[1]["available"]) == (32, 80)
        assert (engine.steps[3]["evictable"], engine.steps[4]["evictable"]) == (96, 64)
    if name == "retraction-tie":
        assert [r.preemptions for r in engine.requests] == [0, 1]


def _step_param(name):
    departure = STEPS[name][4]
    marks = [pytest.mark.xfail(strict=True, reason=departure)] if departure else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_step_param(n) for n in STEPS])
def test_prefill_step_kvreplay(real, name):
    """kvreplay against SGLang on the same short trace: every step end (so each step's prompt
    tokens) and every request's five fields and outcome."""
    rows, settings, _, _, _ = STEPS[name]
    engine, ours = run_steps(real, name)
    theirs_ends = step_ends(engine, settings)
    mine_ends = list(ours.series_columns()["time_s"])
    rejected = [i for i in range(len(rows)) if np.isnan(ours.scheduled_s[i])]
    assert rejected == [i for i, r in enumerate(engine.requests) if r.status != "finished"], "rejected requests"
    for i, r in enumerate(engine.requests):
        if i in rejected:
            continue
        theirs = (r.scheduled_s, r.hit_tokens, r.first_token_s, r.finish_s, r.preemptions)
        mine = (float(ours.scheduled_s[i]), int(ours.hit_tokens[i]), float(ours.first_token_s[i]),
                float(ours.finish_s[i]), int(ours.preemptions[i]))
        assert np.allclose(theirs, mine, atol=1e-9, rtol=0), f"request {i}: SGLang {theirs}, kvreplay {mine}"
    assert np.allclose(theirs_ends, mine_ends, atol=1e-9, rtol=0), "step ends differ"
