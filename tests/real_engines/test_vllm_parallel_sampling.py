"""Parallel sampling (n > 1): kvreplay's fan-out against vLLM 0.33.0's real v1 Scheduler, request by request.

Opt-in (marker ``engines``); the same harness and needs as test_vllm_scheduler.py (vLLM's own
Scheduler and KVCacheManager on CPU, tests/real_engines/vllm_scheduler.py).

vLLM's frontend turns a request with n > 1 into n child requests (vllm/v1/engine/llm_engine.py:
293-311, ParentRequest in parallel_sampling.py: ids ``f"{index}_{parent}"``, sampling n = 1) and
adds them one after the other to the engine core: what the scheduler receives is the parent's
prompt n times, back to back, with the parent's arrival. The harness is given exactly that list;
kvreplay is given the parent trace and n (serving/samples.py fans it out). Every child must agree on
the five fields of test_vllm_scheduler.py: first scheduled time, prefix-hit tokens, first token
time, finish time, preemptions. The frontend itself (tokenising, output aggregation) is not run:
it does not schedule.
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
import vllm_scheduler as harness  # noqa: E402
from test_vllm_scheduler import FIELDS, real  # noqa: E402,F401 (real: the fixture)

pytestmark = pytest.mark.engines


def serve_both(real, trace, samples, settings):
    """(vLLM's run of the children, kvreplay's report): trace's requests with `samples` completions each."""
    import kvreplay
    from kvreplay.serving.simulate import Scheduler, arrivals
    from kvreplay.serving.timing import PolynomialProfile

    parents = harness.requests_from_trace(trace, arrivals(trace))
    children = [r for r, n in zip(parents, samples) for _ in range(n)]  # llm_engine.py:304-311's order
    engine = harness.run(children, settings, real)
    profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                          "terms": [{"coef": settings.step_seconds}]})
    ours = kvreplay.simulate(
        replace(trace, samples=np.asarray(samples, dtype=np.int64)), policy="vllm", capacity=settings.usable_blocks,
        block_size=settings.block_size, engine_style="vllm", time_model=profile,
        scheduler=Scheduler(max_num_batched_tokens=settings.max_num_batched_tokens, max_num_seqs=settings.max_num_seqs),
        compare_sequential=False)
    return engine, ours


def test_eight_samples_hit_the_first_childs_62_blocks_in_vllm(real):
    # L = 1000, blocks of 16, n = 8 (tests/serving/test_samples.py works it by hand): in vLLM's own
    # KVCacheManager the seven later children, scheduled in the first child's step, hit its 62 full
    # blocks (992 tokens), and the run holds 62 + 8 x 7 = 118 blocks at its peak
    import kvreplay

    trace = kvreplay.Trace.from_requests([(list(range(63)), 1000, 0.0, 100)], block_size=16)
    settings = harness.Settings(block_size=16, step_seconds=0.01, usable_blocks=2000, max_num_seqs=256,
                                max_num_batched_tokens=8192)
    engine, ours = serve_both(real, trace, [8], settings)
    assert engine.column("hit_tokens") == [0] + [992] * 7
    agreement, share, diffs = per_request.compare(engine, ours, FIELDS)
    assert agreement == 1.0, (share, diffs[:8])
    assert ours.samples["group_blocks"] == ours.counters["peak_held_blocks"] == 118


SETTINGS = {"heavy250": dict(usable_blocks=250, max_num_seqs=64, max_num_batched_tokens=512),
            "tight": dict(usable_blocks=200, max_num_seqs=32, max_num_batched_tokens=256),
            "light": dict(usable_blocks=4000, max_num_seqs=256, max_num_batched_tokens=8192)}


@pytest.mark.parametrize("pool", list(SETTINGS))
def test_mooncake_children_as_vllm_schedules_them(real, pool):
    # the first 120 conversation requests, n from 1 to 8 (seeded): admission, preemption and hits of
    # every child under pressure
    import kvreplay

    rows = per_request.slice_rows(shared_path(MOONCAKE / "conversation_trace.jsonl"), 0, 120)
    trace = kvreplay.Trace.from_requests(rows, block_size=512)
    samples = np.random.default_rng(0).integers(1, 9, size=len(rows)).tolist()
    settings = harness.Settings(block_size=512, step_seconds=0.01, **SETTINGS[pool])
    engine, ours = serve_both(real, trace, samples, settings)
    agreement, share, diffs = per_request.compare(engine, ours, FIELDS)
    result = {"agreement": agreement, "fields": share, "diffs": diffs, "n": len(engine.requests)}
    assert agreement == 1.0, per_request.report(result, "vLLM")
