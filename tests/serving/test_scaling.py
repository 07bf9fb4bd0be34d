"""What keeps a run's cost linear in its work (docs/performance.md, "The simulator at scale"):
the kernel's block layout built in one pass, instances' id spaces grown in the run, and the
routers' scans through bitsets. Each fast path is held to the slower one it replaced, whole
simulate JSON byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.cli.common import encode_json
from kvreplay.serving import run as run_module
from kvreplay.serving.run import Growth, Sizing, decode_trace, grown_spaces, grown_state, hashed_prompts, kernel_layout
from kvreplay.serving.simulate import simulate
from kvreplay.policies.registry import get_policy
from kvreplay.trace.synth import synth

from conftest import MOONCAKE, shared_path
from sim_cases import small_traces, trace_of

SERVED = ("vllm", "lru", "s3fifo", "fifo", "sieve", "arc", "2q", "lfu", "clock", "ttl", "lru-tail", "belady", "radix",
          "infinite")


def agentic(n=600, seed=3):
    """Agent sessions resending a growing history, 64-token blocks (the shape the scaling benchmark runs)."""
    return synth(n, mix="agent=1", block_size=64, seed=seed, agent_steps=20, prefix_scale=4, arrival_rate=0.5,
                 burst=3, agent_reply_tokens=300, max_context=40_000)


def as_json(report) -> bytes:
    return encode_json(report.to_dict(per_request=True))


# ------------------------------------------------------------------------------------------
# The layout: one pass of the core, equal to the numpy reference


@settings(max_examples=60, deadline=None)
@given(small_traces(), st.randoms(use_true_random=False), st.sampled_from([1, 3, 4, 5]), st.booleans(), st.booleans())
def test_layout_equals_the_numpy_reference(trace, rnd, block_size, output_kv, paged):
    order = np.arange(len(trace))
    rnd.shuffle(order)
    taken = trace.take(order)
    want_ext, want_p = decode_trace(hashed_prompts(taken, block_size) if paged else taken, block_size, output_kv)
    ext, p = kernel_layout(trace, order, block_size, output_kv, paged)
    assert ext.offsets.tolist() == want_ext.offsets.tolist() and ext.blocks.tolist() == want_ext.blocks.tolist()
    assert p.tolist() == want_p.tolist() and ext.num_blocks == want_ext.num_blocks
    assert ext.input_length.tolist() == taken.input_length.tolist()
    assert ext.output_length.tolist() == taken.output_length.tolist()
    assert ext.timestamp.tolist() == taken.timestamp.tolist()


def test_layout_by_hand_and_kept_with_the_trace():
    # block size 4: A 6 tokens [a, b] 5 outputs; B 8 tokens [a, c] 1 output. In arrival order B, A.
    t = trace_of((["a", "b"], 6, 10, 5), (["a", "c"], 8, 0, 1))
    order = np.array([1, 0])
    ext, p = kernel_layout(t, order, 4, True, True)
    # B: its 2 full blocks a=0, c=2, no decode block (8 + 1 - 1 tokens fit 2 blocks); A: its full
    # block a=0, a fresh id 3 for its partial last block (vLLM never caches it), then
    # ceil((6 + 5 - 1) / 4) - ceil(6 / 4) = 1 decode id, numbered after every prompt id
    assert ext.blocks.tolist() == [0, 2, 0, 3, 4] and ext.offsets.tolist() == [0, 2, 5]
    assert p.tolist() == [2, 2] and ext.num_blocks == 5
    assert kernel_layout(t, order, 4, True, True)[0] is ext  # laid out once per trace and order


# ------------------------------------------------------------------------------------------
# Id spaces grown in the run


def test_grown_spaces_extrapolate_from_the_arrivals():
    # 8 of 10 requests not arrived (status 0): x1.25 x 10 / 2 = 6.25; the one that ran out at least doubles
    status = np.array([1, 3] + [0] * 8, dtype=np.int8)
    out = grown_spaces(np.array([100, 100, 100]), np.array([True, False, False]), status, 10_000)
    assert out.tolist() == [625, 625, 625]
    assert grown_spaces(np.array([100, 50]), np.array([False, True]), np.ones(10, np.int8), 10_000).tolist() == [125, 100]
    assert grown_spaces(np.array([100]), np.array([True]), np.zeros(4, np.int8), 300).tolist() == [300]  # at most every id


def test_grown_state_keeps_every_id_and_refuses_below_the_rings():
    trace = trace_of((list(range(40)), 160, 0, 1))
    spec = get_policy("lru")
    small = spec.make_state(5, Sizing(trace, 21))
    small.cached[[3, 20]] = 1
    small.prev[20] = 3
    grown = grown_state(spec.make_state, 5, trace, {}, small, 21, 40, None)
    assert grown.cached.shape == (40,) and grown.cached[[3, 20]].tolist() == [1, 1] and grown.cached[21:].sum() == 0
    assert grown.prev[20] == 3 and (grown.prev[21:] == -1).all()
    # an id space within 4 x the capacity: rings sized min(capacity, ids) could still follow it
    assert grown_state(spec.make_state, 5, trace, {}, spec.make_state(5, Sizing(trace, 20)), 20, 40, None) is None


def _force_small_spaces(monkeypatch, space):
    grown = []
    monkeypatch.setattr(run_module, "id_spaces", lambda ext, assigned, n, routed: np.full(n, space, dtype=np.int64))
    call = Growth.__call__
    monkeypatch.setattr(Growth, "__call__", lambda self, k, want: grown.append(call(self, k, want)) or grown[-1])
    return grown


@pytest.mark.parametrize("policy", [p for p in SERVED if p != "infinite"])  # (infinite: every id from the start)
def test_grown_in_the_run_equals_every_id_from_the_start(policy, monkeypatch):
    trace = agentic(400)
    kw = dict(engine_style="sglang" if policy == "radix" else "vllm", instances=6, router="kv-aware", capacity=200,
              block_size=64, time_model="roofline", model="Llama-3.1-8B", gpu="H100", speedup=3,
              compare_sequential=False)
    with monkeypatch.context() as m:
        m.setattr(run_module, "id_spaces", lambda ext, assigned, n, routed: np.full(n, ext.num_blocks, dtype=np.int64))
        whole = as_json(simulate(trace, policy, **kw))
    grown = _force_small_spaces(monkeypatch, 801)
    assert as_json(simulate(trace, policy, **kw)) == whole
    assert grown and all(grown)  # every instance that ran out grew, none was refused


# ------------------------------------------------------------------------------------------
# Routers' scans through bits: every instance in one pass, held to each instance's own scan


def _both(monkeypatch, trace, policy, **kw):
    fast = as_json(simulate(trace, policy, **kw))
    monkeypatch.setattr(run_module, "REFERENCE_SCANS", True)
    slow = as_json(simulate(trace, policy, **kw))
    monkeypatch.setattr(run_module, "REFERENCE_SCANS", False)
    return fast, slow


@pytest.mark.parametrize("router", ["kv-aware", "llm-d", "mooncake", "sglang"])
@pytest.mark.parametrize("policy", SERVED)
def test_bits_equal_each_instances_own_scan(policy, router, monkeypatch):
    # 70 instances: two words of bits an id; a small pool, so blocks are evicted and cached again
    trace = agentic(500, seed=5)
    kw = dict(engine_style="sglang" if policy == "radix" else "vllm", instances=70 if policy == "vllm" else 5,
              router=router, capacity=240, block_size=64, time_model="roofline", model="Llama-3.1-8B", gpu="H100",
              speedup=6, compare_sequential=False, band_runs=False)
    fast, slow = _both(monkeypatch, trace, policy, **kw)
    assert fast == slow


@settings(max_examples=40, deadline=None)
@given(small_traces(), st.sampled_from(["vllm", "lru", "s3fifo", "sieve", "lfu", "belady"]),
       st.sampled_from(["kv-aware", "llm-d", "sglang"]), st.integers(2, 5), st.integers(10, 20))
def test_bits_equal_each_instances_own_scan_on_small_traces(trace, policy, router, instances, capacity):
    kw = dict(instances=instances, router=router, capacity=capacity, time_model="roofline", model="Llama-3.1-8B",
              gpu="H100", speedup=50, compare_sequential=False, band_runs=False)
    fast = as_json(simulate(trace, policy, **kw))
    run_module.REFERENCE_SCANS = True
    try:
        slow = as_json(simulate(trace, policy, **kw))
    finally:
        run_module.REFERENCE_SCANS = False
    assert fast == slow
