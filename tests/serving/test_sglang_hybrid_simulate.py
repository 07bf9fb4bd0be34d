"""The simulator's SGLang hybrid mode (SGLang 0.5.23's UnifiedRadixCache under the SGLang scheduler
style: serving/kernel/sglang_hybrid.c over hybrid/unified_radix.c).

Requests served one at a time (far apart) must get, request by request, the hits of the compiled
sequential replay with the same outputs (tests/policies/test_radix_hybrid_compiled.py ties it to the
reference, which tests/real_engines/test_sglang_hybrid.py checks against SGLang's own cache code),
and leave the same tree. Overlapping requests on small pools must keep every pool accounted for (the
kernel checks each tree against its pools at the end: a failure raises). Then the public paths.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.hybrid.coordinator import Group
from kvreplay.hybrid.unified_radix import replay_radix_hybrid_compiled
from kvreplay.serving.run import run_once
from kvreplay.serving.simulate import Scheduler, simulate
from kvreplay.serving.timing import PolynomialProfile
from conftest import MOONCAKE, shared_path


def step(seconds: float) -> PolynomialProfile:
    return PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                       "terms": [{"coef": seconds}]})


@st.composite
def layouts(draw, page):
    shape = draw(st.sampled_from(["swa", "mamba", "swa_mamba"]))
    window = draw(st.integers(1, 6 * page))
    return {"swa": [Group("full"), Group("sliding_window", window=window)],
            "mamba": [Group("full"), Group("mamba")],
            "swa_mamba": [Group("full"), Group("sliding_window", window=window), Group("mamba")]}[shape]


@st.composite
def conversations(draw, page):
    """Requests over a few shared prefixes, each a prefix of an earlier one plus fresh ids."""
    rows, fresh = [], iter(range(1000, 10**6))
    for _ in range(draw(st.integers(1, 25))):
        ids = []
        if rows and draw(st.booleans()):
            parent = draw(st.sampled_from(rows))[0]
            ids = parent[: draw(st.integers(0, len(parent)))]
        ids = ids + [next(fresh) for _ in range(draw(st.integers(0 if ids else 1, 6)))]
        length = max(1, len(ids) * page - draw(st.integers(0, page - 1)))
        rows.append((ids, length, draw(st.one_of(st.integers(1, 3), st.integers(100, 400)))))
    return rows


def sequential_inputs(rows, page):
    """The replay's trace: each prompt's ids of its full pages only (the simulator keys a partial
    page, as its outputs, by the request alone), and the outputs."""
    trace = kvreplay.Trace.from_requests([(ids[: length // page], length) for ids, length, _ in rows],
                                         block_size=page)
    return trace, [o for _, _, o in rows]


def draw_workload(data):
    """A page size, conversations at it (rows of ids, prompt, outputs), a hybrid layout, and the
    longest request's pages (prompt and outputs)."""
    page = data.draw(st.sampled_from([1, 4, 16]))
    rows = data.draw(conversations(page))
    groups = data.draw(layouts(page))
    return page, rows, groups, max(-(-(length + o) // page) for _, length, o in rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_requests_one_at_a_time_hit_as_the_sequential_replay(data):
    page, rows, groups, longest = draw_workload(data)
    chunk = data.draw(st.integers(1, 6)) * page * 4
    # room for any request beside the locked prefix (the admission budgets never bind), small
    # enough that the tree evicts in every pool
    full_pages = data.draw(st.integers(3 * longest + 8, 5 * longest + 20))
    trace = kvreplay.Trace.from_requests([(ids, length, 1e7 * k, o) for k, (ids, length, o) in enumerate(rows)],
                                         block_size=page)
    sim = run_once(trace, policy="radix", capacity=full_pages, block_size=page, time_model=step(0.01),
                   arrival_s=np.arange(len(rows)) * 1e4, kv_groups=groups, kv_engine="sglang",
                   scheduler=Scheduler(style="sglang", chunked_prefill_size=chunk, max_prefill_tokens=10**6))
    seq_trace, outputs = sequential_inputs(rows, page)
    hits, stats, pages, swa_pages, states = replay_radix_hybrid_compiled(seq_trace, groups, page, full_pages=full_pages,
                                                                         chunk_tokens=chunk, outputs=outputs)
    assert sim.counters["rejected"] == 0 and sim.counters["preemptions"] == 0
    assert (sim.status == 3).all()  # FINISHED
    assert sim.hit_tokens.tolist() == (hits * page).tolist()
    tree = {k: sim.policy_counters[k] for k in ("resident_blocks", "swa_resident_pages", "mamba_states")}
    assert tree == {"resident_blocks": pages, "swa_resident_pages": swa_pages, "mamba_states": states}
    for name in ("admissions", "evictions", "swa_evictions", "mamba_evictions", "node_splits"):
        assert sim.policy_counters[name] == stats[name], name


def test_one_request_by_hand():
    # page 16, window 32, a 64-token prompt (4 full pages) and 400 outputs, alone (the hand case of
    # test_radix_hybrid_compiled.py): a chunk of 64 tokens, then 399 decode steps. The tree ends
    # with 28 full pages and 6 live SWA pages; the same prompt later hits its 3 full pages before
    # the last token (limit (64 - 1) // 16 = 3), the window live behind them
    rows = [([0, 1, 2, 3], 64, 0.0, 400), ([0, 1, 2, 3], 64, 1e7, 1)]
    trace = kvreplay.Trace.from_requests(rows, block_size=16)
    sim = run_once(trace, policy="radix", capacity=100, block_size=16, time_model=step(0.01),
                   arrival_s=np.array([0.0, 1e4]), kv_groups=[Group("full"), Group("sliding_window", window=32)],
                   kv_engine="sglang", scheduler=Scheduler(style="sglang"))
    assert sim.hit_tokens.tolist() == [0, 48]
    assert sim.policy_counters["resident_blocks"] == 28 and sim.policy_counters["swa_resident_pages"] == 6
    assert sim.first_token_s[0] == pytest.approx(0.01) and sim.finish_s[0] == pytest.approx(4.0)


@pytest.mark.parametrize("outputs, finished", [(85, True), (86, False)])
def test_a_request_whose_window_pages_outgrow_the_swa_pool_alone_is_aborted(outputs, finished):
    # 4-token pages, a 1-token window, 28 full pages and int(28 x 4 x 0.8) // 4 = 22 SWA pages. The
    # prompt's page goes into the tree and stays SWA-locked (it is the window); maybe_evict_swa frees
    # nothing before 128 decoded tokens. 85 outputs: 4 + 84 = 88 tokens, 22 pages: it finishes after
    # 1 prefill and 84 decode steps of 0.01 s. 86: its 23rd page does not fit even alone, and SGLang
    # aborts the last request of a decode batch (retract_decode): rejected, counted as aborted
    trace = kvreplay.Trace.from_requests([([1000], 4, 0.0, outputs)], block_size=4)
    groups = [Group("full", 1), Group("sliding_window", 1, window=1)]
    sim = run_once(trace, policy="radix", capacity=28, block_size=4, time_model=step(0.01),
                   arrival_s=np.zeros(1), kv_groups=groups, kv_engine="sglang",
                   scheduler=Scheduler(style="sglang", chunked_prefill_size=16, max_num_seqs=1))
    if finished:
        assert sim.status.tolist() == [3] and sim.finish_s[0] == pytest.approx(0.85)
        assert sim.counters["aborted"] == 0
    else:
        assert sim.status.tolist() == [4] and np.isnan(sim.finish_s[0])
        assert sim.counters["aborted"] == 1 and sim.counters["rejected"] == 1


def test_a_chunked_prefill_that_can_never_get_swa_room_is_aborted_and_the_queue_goes_on():
    # 16-token pages, a 49-token window, 9 full pages and int(9 x 16 x 0.8) // 16 = 7 SWA pages,
    # chunks of 64 tokens. The 112-token prompt passes SWAPrefillBudget (15 + 49 + 16 = 80 tokens <
    # 112); its first chunk (4 pages) goes into the tree and stays SWA-locked (64 tokens >= the
    # window), so the next chunk gets 3 x 16 - 16 = 32 tokens; after it the 6 pages are all locked
    # (the 2-page leaf covers 32 < 49 tokens, so the lock reaches the 4-page node), 1 page is free,
    # and available_chunk_tokens has 16 - 16 = 0 for ever. It is aborted; the 1-page request behind
    # it is then served at once: two steps of 0.01 s (64 and 32 tokens), then its own prefill
    trace = kvreplay.Trace.from_requests([([1, 2, 3, 4, 5, 6, 7], 112, 0.0, 1), ([9], 16, 0.0, 1)], block_size=16)
    groups = [Group("full", 1), Group("sliding_window", 1, window=49)]
    sim = run_once(trace, policy="radix", capacity=9, block_size=16, time_model=step(0.01),
                   arrival_s=np.zeros(2), kv_groups=groups, kv_engine="sglang",
                   scheduler=Scheduler(style="sglang", chunked_prefill_size=64, max_num_seqs=1))
    assert sim.status.tolist() == [4, 3]
    assert sim.counters["aborted"] == 1 and sim.counters["rejected"] == 1
    assert sim.first_token_s[1] == pytest.approx(0.03)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_overlapping_requests_on_small_pools_keep_every_pool_accounted_for(data):
    # many requests at once on pools that make the budgets bind, retract decodes and evict in every
    # pool: every request finishes (or is rejected on arrival), and the kernel's end-of-run check of
    # each tree against its pools passes (else run_once raises)
    page, rows, groups, longest = draw_workload(data)
    full_pages = data.draw(st.integers(max(2, longest // 2), 3 * longest + 4))
    trace = kvreplay.Trace.from_requests([(ids, length, 0.0, o) for ids, length, o in rows], block_size=page)
    instances = data.draw(st.integers(1, 2))
    sim = run_once(trace, policy="radix", capacity=full_pages, block_size=page, time_model=step(0.01),
                   arrival_s=np.asarray(data.draw(st.lists(st.floats(0, 2), min_size=len(rows), max_size=len(rows)))),
                   kv_groups=groups, kv_engine="sglang", instances=instances,
                   router="kv-aware" if instances > 1 else None,
                   scheduler=Scheduler(style="sglang", chunked_prefill_size=data.draw(st.integers(1, 4)) * 4 * page,
                                       max_num_seqs=data.draw(st.integers(1, 8)),
                                       schedule_policy=data.draw(st.sampled_from(["fcfs", "lpm"]))))
    assert set(sim.status.tolist()) <= {3, 4}  # FINISHED, REJECTED
    lengths = np.asarray(trace.input_length)
    assert (sim.hit_tokens < np.maximum(lengths, 1)).all() or (sim.hit_tokens == 0).all()
    assert (sim.hit_tokens % page == 0).all()


def test_simulate_serves_a_hybrid_model_with_sglangs_trees():
    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    trace = kvreplay.load_trace(path).take(np.arange(600))
    hybrid = simulate(trace, model="gpt-oss-120b", gpu="H200", tp=8, engine_style="sglang", capacity="40GiB")
    full = simulate(trace, model="gpt-oss-120b", gpu="H200", tp=8, engine_style="sglang", capacity="40GiB",
                    kv_semantics="full")
    note = hybrid.kv_semantics
    assert note["semantics"] == "hybrid" and note["engine"] == "sglang"
    # 40 GiB at 512-token pages: 18 full layers and 0.8 x 18 sliding ones, 2 x 8 x 64 x 2 bytes a token
    # a layer: 32.4 x 2,048 x 512 = 33,973,862 bytes a page (truncated), 1,264 pages; the SWA pool
    # int(1,264 x 512 x 0.8) // 512 = 1,011
    assert (note["full_pages"], note["swa_pages"]) == (1264, 1011)
    assert full.kv_semantics["semantics"] == "full"
    assert hybrid.hit_rate != full.hit_rate


def test_the_sglang_style_refuses_hybrid_with_another_policy():
    trace = kvreplay.Trace.from_requests([([1, 2], 32, 0, 1)], block_size=16)
    with pytest.raises(ConfigError, match="a policy other than radix"):
        simulate(trace, model="gpt-oss-120b", engine_style="sglang", policy="lru", capacity=100,
                 kv_semantics="hybrid")
