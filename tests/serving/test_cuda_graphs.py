"""The host's kernel launches on the steps vLLM runs without a CUDA graph (models.eager_step,
host.with_cuda_graphs, step.c calibrated()): vLLM 0.33.0's capture ceiling, the step's time by hand,
the compiled kernel against the Python reference, floors that stay bounds, and a run end to end."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.serving.simulate import Scheduler, simulate
from kvreplay.serving.timing import aggregates, packed, roofline_window, step_seconds
from kvreplay.serving.timing.host import HostTerms, calibrated, graph_ceiling, with_cuda_graphs
from kvreplay.serving.timing.models import StepBatch, eager_step
from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

from sim_cases import trace_of

LAUNCH = 200e-6  # a layer's launches, seconds (a round figure for the hand-worked cases)


def launched(tm, max_num_seqs=4, gpu="H100", launch=LAUNCH, **kw):
    return with_cuda_graphs(tm, HostTerms(launch_layer_s=launch), max_num_seqs, gpu, **kw)


def test_the_capture_ceiling_is_vllms():
    # vLLM 0.33.0 config/vllm.py:2463-2471: min(2 x max_num_seqs x decode_query_len, 512; 1,024 on
    # data-centre Blackwell), on the grid 1, 2, 4, 8..248 by 8, 256.. by 16
    assert graph_ceiling(4, "H100") == 8
    assert graph_ceiling(100, "H100") == 200
    assert graph_ceiling(130, "H100") == 256  # 260: the grid's 256
    assert graph_ceiling(256, "H100") == 512
    assert graph_ceiling(256, "B200") == 512
    assert graph_ceiling(512, "B200") == 1024
    assert graph_ceiling(1024, "B200") == 1024
    assert graph_ceiling(4, "H100", decode_query_len=3) == 24  # speculative: 1 + 2 draft tokens a request
    assert graph_ceiling(256, "H100", max_num_batched_tokens=300) == 300  # within the ceiling: captured, every step
    assert graph_ceiling(256, "H100", enforce_eager=True) == 0


def test_an_eager_step_takes_the_longer_of_the_gpu_and_the_launches():
    # gpt-oss-120b (36 layers) on one B200 at max_num_seqs 4: steps of more than 8 tokens run eager,
    # 36 x 200 us = 7.2 ms of launches
    base = CalibratedRooflineTimeModel("gpt-oss-120b", "B200", 1, dtype="int4")
    tm = launched(base, gpu="B200")
    assert (tm.launch_layer_s, tm.eager_above) == (LAUNCH, 8.0)
    prefill, small, captured = StepBatch((1024,), (0,)), StepBatch((), (), (1000,) * 9), StepBatch((), (), (1000,) * 8)
    assert base.step_time(prefill) > 36 * LAUNCH  # the GPU's work is longer: unchanged
    assert tm.step_time(prefill) == base.step_time(prefill)
    assert base.step_time(small) < 36 * LAUNCH  # 9 decodes, eager: the launches
    assert tm.step_time(small) == pytest.approx(36 * LAUNCH, rel=1e-12)
    assert tm.step_time(captured) == base.step_time(captured)  # 8 tokens: in a graph
    # --enforce-eager: every step eager
    eager = launched(base, gpu="B200", enforce_eager=True)
    assert eager.step_time(captured) == pytest.approx(36 * LAUNCH, rel=1e-12)
    assert eager_step(0.001, 1, 36, LAUNCH, 0.0) == pytest.approx(36 * LAUNCH)
    assert eager_step(0.001, 1, 36, 0.0, 0.0) == 0.001  # no launch cost: the GPU's


def test_only_the_calibrated_roofline_with_launches_takes_them():
    base = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1)
    assert with_cuda_graphs(base, HostTerms(), 4) is base  # no launch cost
    from kvreplay.serving.timing.models import InstantTimeModel, RooflineTimeModel

    for other in (InstantTimeModel(), RooflineTimeModel("Llama-3.1-8B", "H100")):
        assert with_cuda_graphs(other, HostTerms(launch_layer_s=LAUNCH), 4) is other
    assert calibrated().launch_layer_s >= 0


MODELS = [launched(CalibratedRooflineTimeModel("gpt-oss-120b", "B200", 1, dtype="int4"), gpu="B200"),
          launched(CalibratedRooflineTimeModel("MiniMax-M2.5", "H200", 4, dtype="fp8").at_band("high"), 16, "H200"),
          launched(CalibratedRooflineTimeModel("Llama-3.1-8B", "H100", 1), 2, launch=400e-6).at_band("low"),
          launched(CalibratedRooflineTimeModel("gemma-2-9b", "A100", 1), 8, "A100", enforce_eager=True)]


@settings(max_examples=200, deadline=None)
@given(prefill=st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 20000)), max_size=3),
       decode=st.lists(st.integers(1, 40000), max_size=40))
def test_the_kernel_is_the_python_reference(prefill, decode):
    batch = StepBatch(tuple(n for n, _ in prefill), tuple(c for _, c in prefill), tuple(decode))
    for m in MODELS:
        tm = packed(m)
        got = step_seconds(tm, aggregates(batch, roofline_window(tm)))
        assert got == pytest.approx(m.step_time(batch), rel=1e-12, abs=1e-15), m.model.name


@settings(max_examples=100, deadline=None)
@given(prefill=st.lists(st.tuples(st.integers(1, 2000), st.integers(0, 20000)), min_size=1, max_size=3),
       decode=st.lists(st.integers(1, 40000), max_size=20), more=st.lists(st.integers(1, 40000), max_size=20))
def test_the_floor_bounds_every_step_with_more_work(prefill, decode, more):
    # floors.py: step_floor(batch, d) is at most the time of any step holding batch's work and more,
    # with up to d decodes; the launches grow with the tokens (0 at or below the ceiling), so they keep it
    batch = StepBatch(tuple(n for n, _ in prefill), tuple(c for _, c in prefill), tuple(decode))
    bigger = StepBatch(batch.prefill_new, batch.prefill_cached, tuple(decode) + tuple(more))
    for m in MODELS:
        floor = m.step_floor(batch, decodes=len(bigger.decode_context))
        assert floor <= m.step_time(bigger) * (1 + 1e-12)
        assert floor <= m.step_time(batch) * (1 + 1e-12)


def test_a_run_with_launches_and_enforce_eager():
    # one 700-token prompt, then its decodes, Llama-3.1-8B on one H100, 8 sequences: the prefill (700
    # tokens > 16) runs eager; host terms all 0 but the launches of 32 layers x 1 ms = 32 ms, longer
    # than the prefill's GPU work; decodes of 1 token stay in graphs, unless --enforce-eager
    trace = trace_of((list(range(2)), 700, 0, 5), block_size=512)
    run = dict(time_model="roofline", model="Llama-3.1-8B", gpu="H100", scheduler=Scheduler(max_num_seqs=8),
               compare_sequential=False, band_runs=False)
    plain = simulate(trace, "vllm", None, 16, host=HostTerms(), **run)
    graphs = simulate(trace, "vllm", None, 16, host=HostTerms(launch_layer_s=1e-3), **run)
    eager = simulate(trace, "vllm", None, 16, host=HostTerms(launch_layer_s=1e-3), enforce_eager=True, **run)
    ttft = lambda r: float(r.first_token_s[0] - r.arrival_s[0])  # noqa: E731
    decode = lambda r: float((r.finish_s[0] - r.first_token_s[0]) / 4)  # noqa: E731
    assert ttft(plain) < 0.032
    assert ttft(graphs) == pytest.approx(0.032, rel=1e-9)
    assert decode(graphs) == pytest.approx(decode(plain), rel=1e-12)
    assert decode(plain) < 0.032
    assert ttft(eager) == pytest.approx(0.032, rel=1e-9)
    assert decode(eager) == pytest.approx(0.032, rel=1e-9)
