"""Parallel sampling (n > 1) with the SGLang style against SGLang 0.5.23's own scheduler, request by request.

Opt-in (marker ``engines``); the same harness and needs as test_sglang_scheduler.py (SGLang's own
Scheduler methods, PrefillAdder, ScheduleBatch, RadixCache and paged allocator on CPU, with torch;
tests/real_engines/sglang_scheduler.py).

SGLang's tokenizer manager serves a request with n > 1 (TokenizerManager._handle_batch_request,
srt/managers/tokenizer_manager.py:2115-2182) by sending a prefill-only copy (max_new_tokens 0),
awaiting its response, then sending the n samples one after the other. The harness is given
exactly that: per group a request with max_new_tokens 0 at the parent's arrival, and n requests
sent when it finishes (TraceRequest.after), in that order; everything the scheduler does with them
is SGLang's code. kvreplay is given the parent trace and n (serving/samples.py fans it out the same
way and serves the samples through its closed-loop releases). Every row -- the prefill-only
requests and every sample -- must agree on the five fields of test_sglang_scheduler.py: first
scheduled time, prefix-hit tokens, first token time, finish time, preemptions.

What is not SGLang's code here: the tokenizer manager itself (tokenising, the ZMQ hops, output
aggregation) does not run: it does not schedule, and its hand-over is taken as instantaneous on
both sides (the samples arrive at the step end that finished the prefill-only request).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import MOONCAKE, shared_path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
import per_request  # noqa: E402
import sglang_scheduler as harness  # noqa: E402

pytestmark = pytest.mark.engines

FIELDS = ("scheduled_s", "hit_tokens", "first_token_s", "finish_s", "preemptions")


@pytest.fixture(scope="module")
def real():
    return harness.real_or_skip()


def engine_requests(trace, samples):
    """The requests SGLang's scheduler receives, in the order kvreplay fans them out: per parent
    with n > 1 its prefill-only request, then its n samples (each sent when that one finishes)."""
    from kvreplay.serving.simulate import arrivals

    parents = harness.requests_from_trace(trace, arrivals(trace))
    out = []
    for r, n in zip(parents, samples):
        if n == 1:
            out.append(r)
            continue
        lead = len(out)
        out.append(replace(r, max_new_tokens=0))
        out.extend(replace(r, after=lead) for _ in range(n))
    return out


def serve_both(real, trace, samples, settings: harness.Settings):
    """(SGLang's run, kvreplay's report) of `trace` with `samples` completions per request."""
    import kvreplay
    from kvreplay.serving.simulate import Scheduler
    from kvreplay.serving.timing import PolynomialProfile

    engine = harness.run(engine_requests(trace, samples), settings, real)
    profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                          "terms": [{"coef": settings.step_seconds}]})
    chunking = settings.chunked_prefill_size is not None
    ours = kvreplay.simulate(
        replace(trace, samples=np.asarray(samples, dtype=np.int64)), policy="radix", capacity=settings.num_pages,
        block_size=settings.page_size, engine_style="sglang", time_model=profile,
        scheduler=Scheduler(style="sglang", schedule_policy=settings.schedule_policy, chunked_prefill=chunking,
                            chunked_prefill_size=settings.chunked_prefill_size or 8192,
                            max_prefill_tokens=settings.max_prefill_tokens,
                            max_num_seqs=settings.max_running_requests),
        compare_sequential=False)
    return engine, ours


def test_eight_samples_hit_the_prefill_only_requests_992_tokens_in_sglang(real):
    # L = 1000, pages of 16, n = 8 (tests/serving/test_samples.py works it by hand): SGLang's
    # prefill-only request caches 62 whole pages; each sample's match stops at input_len - 1 = 999
    # tokens, so all eight hit 992; they arrive when it finishes (10 ms) and prefill together
    import kvreplay

    trace = kvreplay.Trace.from_requests([(list(range(63)), 1000, 0.0, 100)], block_size=16)
    settings = harness.Settings(page_size=16, num_pages=2000, step_seconds=0.01)
    engine, ours = serve_both(real, trace, [8], settings)
    assert engine.column("hit_tokens") == [0] + [992] * 8
    assert engine.column("first_token_s") == pytest.approx([0.01] + [0.02] * 8)
    agreement, share, diffs = per_request.compare(engine, ours, FIELDS)
    assert agreement == 1.0, (share, diffs[:9])
    assert ours.samples["later_children_hit_tokens"] == ours.samples["later_children_shared_tokens"] == 8 * 992


SETTINGS = {"light": dict(num_pages=4000), "tight": dict(num_pages=300),
            "tight-lpm": dict(num_pages=300, schedule_policy="lpm"),
            "tight-no-chunk": dict(num_pages=300, chunked_prefill_size=None)}
#: rows: 657 (537 samples and 120 requests or prefill-only ones); every one agrees on all five
#: fields. When this test was written 647 agreed in "tight" and 113 in "tight-lpm": kvreplay held an
#: admitted prompt whole as one node of its tree (SGLang caches a chunked prompt a node per chunk
#: and evicts whole leaves, so the first chunks outlive the rest) and cut a match at pages a request
#: in flight had still to compute, a finished sibling's pages among them; it now holds a request's
#: KV as SGLang's scheduler does (serving/kernel/requests.c req_tree_held)


@pytest.mark.parametrize("pool", list(SETTINGS))
def test_mooncake_groups_as_sglang_schedules_them(real, pool):
    # the first 120 conversation requests, n from 1 to 8 (seeded, as the vLLM test): the prefill-only
    # requests and every sample, their admission, retraction and hits under pressure
    import kvreplay

    rows = per_request.slice_rows(shared_path(MOONCAKE / "conversation_trace.jsonl"), 0, 120)
    trace = kvreplay.Trace.from_requests(rows, block_size=512)
    samples = np.random.default_rng(0).integers(1, 9, size=len(rows)).tolist()
    settings = harness.Settings(page_size=512, step_seconds=0.01, **SETTINGS[pool])
    engine, ours = serve_both(real, trace, samples, settings)
    agreement, share, diffs = per_request.compare(engine, ours, FIELDS)
    result = {"agreement": agreement, "fields": share, "diffs": diffs, "n": len(engine.requests)}
    rows = len(engine.requests)
    assert rows == len(ours.hit_tokens) == sum(samples) + sum(n > 1 for n in samples) == 657
    assert agreement == 1.0, per_request.report(result, "SGLang")
