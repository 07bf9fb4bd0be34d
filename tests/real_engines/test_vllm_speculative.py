"""Speculative decoding in kvreplay's vLLM-style simulator against vLLM 0.33.0's real v1 Scheduler,
request by request (opt-in: ``KVREPLAY_ENGINES=1``, as test_vllm_scheduler.py, whose harness and
comparison it uses).

vLLM's own Scheduler and KVCacheManager run with a speculative config of the method
(tests/real_engines/vllm_scheduler.py ``speculative_config_view``: num_speculative_tokens,
num_lookahead_tokens, the EAGLE block drop, the draft model's drafting slot). After each step the
harness proposes k draft tokens for every request that sampled (``update_draft_token_ids``) and
stubs the verification: a request whose step verified d drafts samples 1 + a tokens, a drawn by
kvreplay's own seeded generator (``spec_accepted``: per request in arrival order and output
position), so both sides see the same acceptances; update_from_output then takes the rejected
drafts back (scheduler.py:2346-2364). Both serve the trace at a constant 10 ms step; every
request's first schedule, hit tokens, first token, finish and preemptions must agree exactly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import conftest  # noqa: F401 - tests/conftest.py, which test_vllm_scheduler imports, before this directory's

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
import vllm_scheduler as harness  # noqa: E402
from test_vllm_scheduler import (BLOCK, HEAVY, LIGHT, STEP_S, TIGHT, compare, mooncake_rows,  # noqa: E402
                                 multi_turn_rows, real, report)  # noqa: F401 (real: the fixture)

pytestmark = pytest.mark.engines

ACCEPT = {"ngram": (0.8, 0.7, 0.6), "eagle": (0.7, 0.5, 0.4), "mtp": (0.875, 0.5), "draft": (0.6, 0.5, 0.4)}


@pytest.fixture(scope="module")
def kvreplay_simulate():
    import kvreplay
    from kvreplay.serving.simulate import Scheduler, arrivals
    from kvreplay.serving.timing import PolynomialProfile

    def simulate(trace, settings: harness.Settings):
        profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                              "terms": [{"coef": settings.step_seconds}]})
        method = settings.spec_method
        # (a draft model's name: any catalog model, its roofline is not used at a constant step time)
        speculative = "draft:Llama-3.2-1B-Instruct" if method == "draft" else method
        return kvreplay.simulate(
            trace, policy="vllm", capacity=settings.usable_blocks, block_size=settings.block_size,
            engine_style="vllm", time_model=profile, seed=settings.spec_seed,
            scheduler=Scheduler(max_num_batched_tokens=settings.max_num_batched_tokens,
                                max_num_seqs=settings.max_num_seqs, chunked_prefill=settings.enable_chunked_prefill),
            compare_sequential=False, speculative=speculative, num_speculative_tokens=settings.spec_k,
            acceptance=",".join(str(a) for a in settings.spec_accept))

    simulate.Trace, simulate.arrivals = kvreplay.Trace, arrivals
    return simulate


CASES = {f"{kind}-{method}-{load}": (kind, method, params)
         for kind in ("mooncake", "multiturn")
         for method in ("ngram", "eagle", "mtp", "draft")
         for load, params in (("light", LIGHT), ("heavy250", HEAVY), ("tight", TIGHT))}


@pytest.mark.parametrize("case", list(CASES))
def test_same_requests_as_vllm_with_speculation(real, kvreplay_simulate, case):
    kind, method, params = CASES[case]
    accept = ACCEPT[method]
    settings = harness.Settings(block_size=BLOCK, step_seconds=STEP_S, spec_method=method, spec_k=len(accept),
                                spec_accept=accept, spec_seed=3, **params)
    rows = mooncake_rows(300) if kind == "mooncake" else multi_turn_rows()
    result = compare(real, kvreplay_simulate, rows, settings)
    rejected_ours = np.flatnonzero(np.isnan(np.asarray(result["ours"].scheduled_s, dtype=np.float64))).tolist()
    assert rejected_ours == result["rejected_engine"], "different requests rejected as never fitting the pool"
    assert result["agreement"] == 1.0, report(result)
    m = result["ours"].speculative["measured"]
    assert m["accepted_tokens"] > 0 and m["verification_steps"] > 0


def test_harness_draws_the_kernels_acceptances(real):
    # one request, prompt 8 tokens (block 4), 10 outputs, k = 2, every draft accepted: the prefill
    # gives token 1 at 1 s, then each verification gives 3 tokens (2-4, 5-7, 8-10): done at 4 s,
    # as tests/serving/test_speculative.py works out for the simulator
    settings = harness.Settings(block_size=4, usable_blocks=20, max_num_batched_tokens=64, max_num_seqs=4,
                                step_seconds=1.0, spec_method="ngram", spec_k=2, spec_accept=(1.0, 1.0))
    out = harness.run([harness.TraceRequest([1, 2], 8, 10, 0.0)], settings, real)
    assert (out.requests[0].first_token_s, out.requests[0].finish_s) == (1.0, 4.0)
    assert harness.spec_accepted(0, 0, 5, 3, (0.0, 1.0, 1.0)) == 0
    assert harness.spec_accepted(0, 0, 5, 3, (1.0, 1.0, 1.0)) == 3
