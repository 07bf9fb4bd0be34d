"""--engine-style trtllm: TensorRT-LLM's capacity and micro-batch schedulers (serving/inflight.py,
the reference, and serving/kernel/trtllm.c, the compiled twin).

The scenarios are TensorRT-LLM's own unit tests, replayed with their harnesses' mock of the
executor: cpp/tests/unit_tests/batch_manager/capacitySchedulerTest.cpp @ 08c2acfa (CST, runTest:
each scheduled context runs its chunk, allocates its prompt's blocks at its first chunk, and
emits a token at its last; each generation step adds a token and the block it opens; a paused
request gives its blocks back and recomputes its prompt and outputs) and
microBatchSchedulerTest.cpp @ 05ce661f (MBST, forward: no capacity scheduler, one micro-batch).
The expected per-iteration schedules are the tests' own numbers (ExpectedState: iterations
[begin, end), active request ids, scheduled ids with max new tokens, prompt length, tokens
generated and context position at `begin`). TensorRT-LLM's scheduler needs its CUDA build, so the
C++ tests' numbers stand in for running it. Scenarios with LoRA pages, beam width > 1, draft
tokens, encoder-decoder (cross) caches, priorities or pipeline overlap are not expressed
(kvreplay's requests have none of them).

Then the two engines are held equal, step by step, on random request states (hypothesis), and
the simulator serves with them end to end.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from conftest import DATA, MOONCAKE, shared_path
from kvreplay.errors import ConfigError
from kvreplay.serving import inflight
from kvreplay.serving.inflight import CONTEXT_NEW, CONTEXT_STARTED, GENERATION, Config
from kvreplay.serving.simulate import Scheduler

ENGINES = ("reference", "compiled")


def _capacity(engine):
    return inflight.capacity if engine == "reference" else inflight.capacity_compiled


def _micro(engine):
    return inflight.micro_batch if engine == "reference" else inflight.micro_batch_compiled


class Req:
    def __init__(self, rid, prompt, max_new, chunk=None):
        self.id, self.prompt, self.max_new = rid, prompt, max_new
        self.chunk = prompt if chunk is None else chunk  # LlmRequest's context chunk size (its prompt by default)
        self.kind, self.position, self.generated, self.allocated, self.kv = CONTEXT_NEW, 0, 0, 0, 0

    def state(self):
        return (self.max_new, self.prompt, self.generated, self.position)


def _ceil(a, b):
    return -(-a // b)


def run_capacity(engine, policy, kv_tokens, bs, max_requests, reqs, added=None, max_input_len=1000):
    """CST runTest: the capacity scheduler alone, each scheduled request runs its chunk or token.
    Returns (iterations, per iteration: (active ids, {scheduled id: state at the iteration's start}))."""
    free, active, log, it = _ceil(kv_tokens, bs), list(reqs), [], 0
    while active:
        active += (added or {}).get(it, [])
        kind = [r.kind for r in active]
        position = [r.kv if r.kind == GENERATION else r.position for r in active]
        alloc = [r.allocated for r in active]
        cfg = Config(policy=policy, max_batch_size=max_requests, block_size=bs, free_blocks=free)
        scheduled, paused = _capacity(engine)(cfg, kind, [r.prompt for r in active], position,
                                              [r.prompt + r.max_new for r in active], alloc, alloc, [-1] * len(active))
        log.append(([r.id for r in active], {active[a].id: active[a].state() for a in scheduled}))
        for a in paused:  # removeSequence, then LlmRequest::pause
            r = active[a]
            free += r.allocated
            grown = min(max_input_len, r.prompt + r.generated)
            r.max_new -= grown - r.prompt
            r.prompt, r.chunk = grown, grown
            r.kind, r.position, r.generated, r.allocated, r.kv = CONTEXT_NEW, 0, 0, 0, 0
        for a in scheduled:
            r = active[a]
            if r.kind != GENERATION:
                if r.kind == CONTEXT_NEW:  # addSequence: the whole prompt's blocks
                    r.allocated, r.kv = _ceil(r.prompt, bs), r.prompt
                    free -= r.allocated
                r.position += min(r.chunk, r.prompt - r.position)
                r.kind = CONTEXT_STARTED
                if r.position == r.prompt:
                    r.kind, r.generated = GENERATION, r.generated + 1
            else:  # addToken: a block when the token opens one
                grow = _ceil(r.kv + 1, bs) - _ceil(r.kv, bs)
                r.kv, r.allocated, free, r.generated = r.kv + 1, r.allocated + grow, free - grow, r.generated + 1
            assert free >= 0
            if r.generated == r.max_new:
                free += r.allocated
                r.kind = None
        active = [r for r in active if r.kind is not None]
        it += 1
    return it, log


def check_expected(log, expected):
    """CST's checks: at every iteration of [begin, end) the active ids and the scheduled ids; at
    `begin`, each scheduled request's (max new, prompt, generated, position)."""
    for begin, end, active, scheduled in expected:
        for it in range(begin, end):
            got_active, got = log[it]
            assert got_active == active, f"iteration {it}"
            assert sorted(got) == sorted(scheduled), f"iteration {it}"
        for rid, state in scheduled.items():
            want = state + (0,) * (4 - len(state))
            assert log[begin][1][rid] == want, f"iteration {begin}, request {rid}"


# ---- capacitySchedulerTest.cpp ----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("policy", inflight.POLICIES)
def test_simple_should_fit(engine, policy):
    # CST SimpleShouldFit: 200 tokens of KV in blocks of 10, two requests of 10 + 80 tokens
    n, log = run_capacity(engine, policy, 200, 10, 2, [Req(0, 10, 80), Req(1, 10, 80)])
    check_expected(log, [(0, 80, [0, 1], {0: (80, 10, 0), 1: (80, 10, 0)})])
    assert n == 80


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("policy", inflight.POLICIES)
def test_simple_should_fit_in_chunk(engine, policy):
    # CST SimpleShouldFitInChunk: prompts of 50 in chunks of 20
    n, log = run_capacity(engine, policy, 200, 10, 2, [Req(0, 50, 40, 20), Req(1, 50, 40, 20)])
    check_expected(log, [(0, 1, [0, 1], {0: (40, 50, 0, 0), 1: (40, 50, 0, 0)}),
                         (1, 2, [0, 1], {0: (40, 50, 0, 20), 1: (40, 50, 0, 20)}),
                         (2, 3, [0, 1], {0: (40, 50, 0, 40), 1: (40, 50, 0, 40)}),
                         (3, 4, [0, 1], {0: (40, 50, 1, 50), 1: (40, 50, 1, 50)}),
                         (4, 42, [0, 1], {0: (40, 50, 2, 50), 1: (40, 50, 2, 50)})])
    assert n == 42


@pytest.mark.parametrize("engine", ENGINES)
def test_simple_doesnt_fit_max_utilization(engine):
    # CST SimpleDoesntFitMaxUtilization: 10 blocks; at iteration 41 request 0 needs a block and
    # request 1 is paused; it comes back with its 41 tokens in its prompt (51, 39 left)
    n, log = run_capacity(engine, "max_utilization", 100, 10, 2, [Req(0, 10, 80), Req(1, 10, 80)])
    check_expected(log, [(0, 41, [0, 1], {0: (80, 10, 0), 1: (80, 10, 0)}),
                         (41, 80, [0, 1], {0: (80, 10, 41, 10)}),
                         (80, 120 - 1, [1], {1: (39, 51, 0)})])
    assert n == 119


@pytest.mark.parametrize("engine", ENGINES)
def test_simple_doesnt_fit_guaranteed_completion(engine):
    # CST SimpleDoesntFitGuaranteedCompletion: request 1 starts only once request 0 is done
    n, log = run_capacity(engine, "guaranteed_no_evict", 100, 10, 2, [Req(0, 10, 80), Req(1, 10, 80)])
    check_expected(log, [(0, 80, [0, 1], {0: (80, 10, 0)}), (80, 160, [1], {1: (80, 10, 0)})])
    assert n == 160


@pytest.mark.parametrize("engine", ENGINES)
def test_simple_doesnt_fit_guaranteed_completion_in_chunk(engine):
    # CST SimpleDoesntFitGuaranteedCompletionInChunk
    n, log = run_capacity(engine, "guaranteed_no_evict", 100, 10, 2, [Req(0, 30, 60, 20), Req(1, 30, 60, 20)])
    check_expected(log, [(0, 1, [0, 1], {0: (60, 30, 0, 0)}), (1, 2, [0, 1], {0: (60, 30, 0, 20)}),
                         (2, 3, [0, 1], {0: (60, 30, 1, 30)}), (3, 61, [0, 1], {0: (60, 30, 2, 30)}),
                         (61, 62, [1], {1: (60, 30, 0, 0)}), (62, 63, [1], {1: (60, 30, 0, 20)}),
                         (63, 64, [1], {1: (60, 30, 1, 30)}), (64, 122, [1], {1: (60, 30, 2, 30)})])
    assert n == 122


@pytest.mark.parametrize("engine", ENGINES)
def test_simple_doesnt_fit_max_utilization_in_chunk(engine):
    # CST SimpleDoesntFitMaxUtilizationInChunk: request 1, paused at 22, recomputes 51 tokens whole
    n, log = run_capacity(engine, "max_utilization", 100, 10, 2, [Req(0, 30, 60, 20), Req(1, 30, 60, 20)])
    check_expected(log, [(0, 2, [0, 1], {0: (60, 30, 0, 0), 1: (60, 30, 0, 0)}),
                         (2, 22, [0, 1], {0: (60, 30, 1, 30), 1: (60, 30, 1, 30)}),
                         (22, 61, [0, 1], {0: (60, 30, 21, 30)}),
                         (61, 100, [1], {1: (39, 51, 0, 0)})])
    assert n == 100


@pytest.mark.parametrize("engine", ENGINES)
def test_simple_doesnt_fit_max_utilization_in_chunked_cache(engine):
    # CST SimpleDoesntFitMaxUtilizationInChunkedCache: a 70-token prompt takes 7 of 10 blocks
    n, log = run_capacity(engine, "max_utilization", 100, 10, 2, [Req(0, 70, 20, 40), Req(1, 70, 20, 40)])
    check_expected(log, [(0, 1, [0, 1], {0: (20, 70, 0, 0)}), (1, 2, [0, 1], {0: (20, 70, 0, 40)}),
                         (2, 21, [0, 1], {0: (20, 70, 1, 70)}), (21, 22, [1], {1: (20, 70, 0, 0)}),
                         (22, 23, [1], {1: (20, 70, 0, 40)}), (23, 24, [1], {1: (20, 70, 1, 70)}),
                         (24, 42, [1], {1: (20, 70, 2, 70)})])
    assert n == 42


@pytest.mark.parametrize("engine", ENGINES)
def test_simple_doesnt_fit_adding_new_requests_max_utilization(engine):
    # CST SimpleDoesntFitAddingNewRequestsMaxUtilization: two more requests at iteration 10, four
    # at most; pauses at 21 (two), 41, 90 and 139
    added = {10: [Req(2, 10, 80), Req(3, 10, 80)]}
    n, log = run_capacity(engine, "max_utilization", 100, 10, 4, [Req(0, 10, 80), Req(1, 10, 80)], added)
    check_expected(log, [(0, 10, [0, 1], {0: (80, 10, 0), 1: (80, 10, 0)}),
                         (10, 21, [0, 1, 2, 3], {0: (80, 10, 10, 10), 1: (80, 10, 10, 10), 2: (80, 10, 0),
                                                 3: (80, 10, 0)}),
                         (21, 41, [0, 1, 2, 3], {0: (80, 10, 21, 10), 1: (80, 10, 21, 10)}),
                         (41, 80, [0, 1, 2, 3], {0: (80, 10, 41, 10)}),
                         (80, 90, [1, 2, 3], {1: (39, 51, 0, 0), 2: (69, 21, 0)}),
                         (90, 119, [1, 2, 3], {1: (39, 51, 10, 51)}),
                         (119, 139, [2, 3], {2: (59, 31, 0), 3: (69, 21, 0)}),
                         (139, 177, [2, 3], {2: (59, 31, 20, 31)}),
                         (178, 227, [3], {3: (49, 41, 0)})])
    assert n == 227


# ---- microBatchSchedulerTest.cpp --------------------------------------------------------------------


def run_micro(engine, reqs, iterations, max_batch, max_tokens=0, chunking="none", unit=0, max_context=0):
    """MBST forward (one micro-batch in flight): the micro-batch scheduler over the active
    requests; per iteration {scheduled id: (generated, context position) after the step}."""
    active, log = list(reqs), []
    cfg = Config(max_batch_size=max_batch, max_num_tokens=max_tokens, chunking=chunking, block_size=unit or 1,
                 max_context_length=max_context)
    for _ in range(iterations):
        tokens = _micro(engine)(cfg, list(range(len(active))), [r.kind for r in active], [r.prompt for r in active],
                                [r.position for r in active])
        for a, m in tokens.items():
            r = active[a]
            if r.kind != GENERATION:
                r.position += m
                r.kind = CONTEXT_STARTED
                if r.position == r.prompt:
                    r.kind, r.generated = GENERATION, r.generated + 1
            else:
                assert m == 1
                r.generated += 1
        log.append({active[a].id: (active[a].generated, active[a].position) for a in tokens})
        active = [r for r in active if r.generated < r.max_new]
    return log


@pytest.mark.parametrize("engine", ENGINES)
def test_micro_simple_no_overlap(engine):
    # MBST SimpleNoOverlap: batch size 2, four requests of 10 + 80 tokens
    log = run_micro(engine, [Req(i, 10, 80) for i in range(4)], 170, 2)
    for it, got in enumerate(log):
        if it < 80:
            assert {k: v[0] for k, v in got.items()} == {0: it + 1, 1: it + 1}
        elif it < 160:
            assert {k: v[0] for k, v in got.items()} == {2: it - 79, 3: it - 79}
        else:
            assert got == {}


@pytest.mark.parametrize("engine", ENGINES)
def test_micro_simple_no_overlap_max_num_tokens(engine):
    # MBST SimpleNoOverlapMaxNumTokens: 7 tokens a step, equal-progress chunks of 5
    log = run_micro(engine, [Req(0, 12, 5), Req(1, 12, 5)], 9, 2, max_tokens=7, chunking="equal_progress", unit=5)
    assert log[0] == {0: (0, 5)}
    assert log[1] == {0: (1, 12)}  # the last chunk may exceed the unit when the budget holds it
    assert log[2] == {0: (2, 12), 1: (0, 5)}
    assert log[3] == {0: (3, 12), 1: (0, 10)}  # 7 left by the generation token: chunked again
    for it in (4, 5):
        assert log[it] == {0: (it, 12), 1: (it - 3, 12)}
    for it in (6, 7, 8):
        assert {k: v[0] for k, v in log[it].items()} == {1: it - 3}


@pytest.mark.parametrize("engine", ENGINES)
def test_micro_simple_no_overlap_max_context_length(engine):
    # MBST SimpleNoOverlapMaxContextLength: contexts of at most 12 tokens, units of 5
    reqs = [Req(0, 10, 5), Req(1, 10, 5), Req(2, 10, 5), Req(3, 17, 5)]
    log = run_micro(engine, reqs, 12, 2, chunking="equal_progress", unit=5, max_context=12)
    assert log[0] == {0: (1, 10), 1: (1, 10)}
    for it in range(1, 5):
        assert {k: v[0] for k, v in log[it].items()} == {0: it + 1, 1: it + 1}
    assert log[5] == {2: (1, 10), 3: (0, 10)}  # request 3 chunked by max_context_length
    assert log[6] == {2: (2, 10), 3: (1, 17)}
    for it in range(7, 10):
        assert {k: v[0] for k, v in log[it].items()} == {2: it - 4, 3: it - 5}
    assert {k: v[0] for k, v in log[10].items()} == {3: 5}
    assert log[11] == {}


@pytest.mark.parametrize("engine", ENGINES)
def test_micro_simple_max_num_tokens_bw1(engine):
    # MBST SimpleMaxNumTokensBW1: 12 tokens a step, no chunking: one context and two generations,
    # or three generations, never a context with three
    log = run_micro(engine, [Req(i, 10, 10) for i in range(4)], 21, 4, max_tokens=12)
    for it in range(3):
        assert len(log[it]) == it + 1
    for it in range(3, 10):
        assert set(log[it]) == {0, 1, 2}
    assert set(log[10]) == {1, 2, 3}
    assert set(log[11]) == {2, 3}
    assert log[20] == {}


@pytest.mark.parametrize("engine", ENGINES)
def test_fcfs_chunks_fill_the_budget_in_order(engine):
    # FIRST_COME_FIRST_SERVED (MBS setCtxRequestsChunkSize, hand-worked): 100 tokens, units of 16,
    # a generation token first: 99 left; request 1 takes floor(99/16)*16 = 96, request 2 the 3
    # left floored to 0 (not batched)
    cfg = Config(max_batch_size=8, max_num_tokens=100, chunking="first_come_first_served", block_size=16)
    out = _micro(engine)(cfg, [0, 1, 2], [GENERATION, CONTEXT_NEW, CONTEXT_NEW], [40, 300, 50], [40, 0, 0])
    assert out == {0: 1, 1: 96}


# ---- the engines agree ------------------------------------------------------------------------------


@st.composite
def states(draw):
    n = draw(st.integers(0, 14))
    bs = draw(st.sampled_from([1, 4, 16]))
    kind, prompt, position, final, alloc, newb = [], [], [], [], [], []
    for _ in range(n):
        k = draw(st.sampled_from([CONTEXT_NEW, CONTEXT_STARTED, GENERATION]))
        p = draw(st.integers(1, 120))
        f = p + draw(st.integers(0, 60))
        pos = 0 if k == CONTEXT_NEW else draw(st.integers(1, p - 1)) if k == CONTEXT_STARTED and p > 1 else p
        if k == CONTEXT_STARTED and p == 1:
            k = CONTEXT_NEW
            pos = 0
        if k == GENERATION:
            pos = draw(st.integers(p, max(p, f - 1)))
        kind.append(k)
        prompt.append(p)
        position.append(pos)
        final.append(f)
        alloc.append(0 if k == CONTEXT_NEW else _ceil(max(p, pos), bs))
        newb.append(draw(st.sampled_from([-1, -1, 0, 1, 2])) if k != GENERATION else -1)
    cfg = Config(policy=draw(st.sampled_from(inflight.POLICIES)), max_batch_size=draw(st.integers(1, 16)),
                 max_num_tokens=draw(st.sampled_from([0, 1, 7, 32, 200])), chunking=draw(st.sampled_from(inflight.CHUNKING)),
                 block_size=bs, max_context_length=draw(st.sampled_from([0, 0, 8, 50])),
                 free_blocks=draw(st.integers(0, 80)))
    releasable = [draw(st.integers(0, a)) for a in alloc]
    return cfg, kind, prompt, position, final, alloc, releasable, newb


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=states())
def test_engines_agree_on_random_states(case):
    cfg, kind, prompt, position, final, alloc, releasable, newb = case
    ref = inflight.capacity(cfg, kind, prompt, position, final, alloc, releasable, newb)
    got = inflight.capacity_compiled(cfg, kind, prompt, position, final, alloc, releasable, newb)
    assert (list(ref[0]), list(ref[1])) == (list(got[0]), list(got[1]))
    assert inflight.micro_batch(cfg, ref[0], kind, prompt, position) == \
        inflight.micro_batch_compiled(cfg, ref[0], kind, prompt, position)


@settings(max_examples=200, deadline=None)
@given(case=states())
def test_a_step_keeps_its_limits(case):
    # whatever the state: at most max_batch_size requests, at most max_num_tokens tokens, chunks
    # within the context, a paused request was started, GUARANTEED_NO_EVICT reserves what it admits
    cfg, kind, prompt, position, final, alloc, releasable, newb = case
    tokens, paused = inflight.step(cfg, kind, prompt, position, final, alloc, releasable, newb)
    assert len(tokens) <= cfg.max_batch_size
    if cfg.max_num_tokens:
        assert sum(tokens.values()) <= cfg.max_num_tokens
    for i, m in tokens.items():
        assert 0 < m <= (prompt[i] - position[i] if kind[i] != GENERATION else 1)
        assert i not in paused
    assert all(kind[k] != CONTEXT_NEW for k in paused)
    if cfg.policy == "guaranteed_no_evict":
        # a context is admitted only while the blocks every scheduled request needs to finish fit
        assert paused == []
        scheduled, _ = inflight.capacity(cfg, kind, prompt, position, final, alloc, releasable, newb)
        if any(kind[i] != GENERATION for i in scheduled):
            assert sum(_ceil(final[i], cfg.block_size) - alloc[i] for i in scheduled) <= cfg.free_blocks


def test_prepopulated_chunk_ends_on_a_block():
    # LR setPrepopulatedPromptLen: 48 of 100 tokens reused, a chunk of 40 planned from 0: it runs
    # 48..80 (floored to a block of 16), 32 tokens; a chunk reaching the end keeps the end
    assert inflight.prepopulated_chunk(40, 48, 100, 16) == 32
    assert inflight.prepopulated_chunk(64, 48, 100, 16) == 52
    assert inflight.prepopulated_chunk(40, 0, 100, 16) == 40


# ---- the simulator serves with it -------------------------------------------------------------------


def _trace(n=40, seed=0):
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(n):
        ids = [f"sys{i % 3}", f"doc{i % 3}"] + [f"u{i}_{k}" for k in range(int(rng.integers(1, 6)))]
        reqs.append((ids, len(ids) * 16 - int(rng.integers(0, 15)), float(i * 20), int(rng.integers(5, 80))))
    return kvreplay.Trace.from_requests(reqs)


def _serve(t, **scheduler):
    return kvreplay.simulate(t, capacity=30, block_size=16, engine_style="trtllm", model="llama-3.1-8b", gpu="h100",
                             time_model="roofline-raw", scheduler=Scheduler.for_style("trtllm", **scheduler))


def test_no_evict_never_pauses_and_max_utilization_packs_more():
    t = _trace()
    gne = _serve(t, max_num_batched_tokens=256)
    mu = _serve(t, capacity_scheduler_policy="max_utilization", max_num_batched_tokens=256)
    assert (gne.status == 3).all() and (mu.status == 3).all()
    assert int(gne.preemptions.sum()) == 0 and int(mu.preemptions.sum()) > 0
    assert mu.counters["peak_running"] > gne.counters["peak_running"]
    # reuse: every request after the first of its system prompt reuses its two shared blocks
    # while they stay cached (storeContextBlocks at the end of a context, not at release)
    assert int(gne.hit_tokens.sum()) > 0
    assert gne.scheduler["capacity_scheduler_policy"] == "guaranteed_no_evict"


def test_without_chunked_context_a_prompt_beyond_max_num_tokens_is_rejected():
    t = _trace()
    r = _serve(t, max_num_batched_tokens=64)
    too_long = np.asarray(t.input_length) > 64
    assert (r.status[too_long] == 4).all() and (r.status[~too_long] == 3).all()
    chunked = _serve(t, max_num_batched_tokens=64, chunked_prefill=True)
    assert (chunked.status == 3).all()


def test_flags_that_cannot_apply_are_refused():
    t = _trace(4)
    base = dict(capacity=30, block_size=16, engine_style="trtllm", time_model="instant")
    with pytest.raises(ConfigError, match="--capacity"):
        kvreplay.simulate(t, **{**base, "capacity": None}, model="llama-3.1-8b", gpu="h100")
    with pytest.raises(ConfigError, match="--tiers"):
        kvreplay.simulate(t, **base, tiers="dram=1GiB@10GB/s")
    with pytest.raises(ConfigError, match="policy 'trtllm'"):
        kvreplay.simulate(t, **base, policy="lru")
    with pytest.raises(ConfigError, match="policy 'trtllm'"):
        kvreplay.simulate(t, capacity=30, block_size=16, policy="trtllm", time_model="instant")
    with pytest.raises(ConfigError, match="TensorRT-LLM's"):
        Scheduler(style="vllm", capacity_scheduler_policy="max_utilization")


def test_cli_flags_of_another_style_are_refused():
    from test_cli import fails

    assert fails("simulate", DATA / "bailian_chat.jsonl", "--capacity", "50", "--time-model", "instant",
                 "--context-chunking", "equal_progress") == \
        "kvreplay: --context-chunking is TensorRT-LLM's: add --engine-style trtllm"
    assert "--chunked-prefill-size is SGLang's" in fails("simulate", DATA / "bailian_chat.jsonl", "--capacity", "50",
                                                          "--time-model", "instant", "--engine-style", "trtllm",
                                                          "--chunked-prefill-size", "64")


def test_documented_figures():
    # docs/engines.md, "TensorRT-LLM": the two capacity policies on the conversation trace
    from test_cli import ok

    trace = shared_path(MOONCAKE / "conversation_trace.jsonl")
    base = ("simulate", trace, "--engine-style", "trtllm", "--capacity", "300", "--model", "llama-3.1-8b", "--gpu",
            "h100", "--speedup", "0.2", "--context-chunking", "first_come_first_served")
    rows = {"guaranteed_no_evict": ("1.90 s   1.79 s - 2.53 s    9.49 s   8.69 s - 14.26 s",
                                    "14.2 ms  13.4 ms - 18.2 ms", "299 blocks", "0 preemptions of 0 requests"),
            "max_utilization": ("1.89 s   1.78 s - 2.51 s    9.29 s   8.49 s - 14.11 s", "14.3 ms  13.5 ms - 18.3 ms",
                                "300 blocks", "37 preemptions of 36 requests (30,210 tokens recomputed)")}
    for policy, (ttft, tpot, held, pauses) in rows.items():
        out = ok(*base, "--capacity-scheduler-policy", policy)
        assert ttft in out and tpot in out, out
        assert "hit rate   4.35% of prompt tokens" in out and "same policy and pool: 4.37%" in out
        assert f"peak held by running requests {held}" in out and pauses in out
        assert "10,507" in out
