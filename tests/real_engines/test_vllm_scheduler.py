"""kvreplay's vLLM-style serving simulator against vLLM 0.33.0's real v1 Scheduler, request by request.

Opt-in (marker ``engines``), and it needs what vLLM's scheduler modules import: numpy, msgspec and
pydantic (vLLM's SchedulerConfig / CacheConfig / SamplingParams), besides kvreplay's own
dependencies; the test extra has no pydantic, so a venv of its own does it (no torch, no GPU):

    python -m venv .venv-vllm && .venv-vllm/bin/pip install pydantic -e ".[test]"
    KVREPLAY_ENGINES=1 .venv-vllm/bin/python -m pytest tests/real_engines/test_vllm_scheduler.py

The vLLM 0.33.0 wheel is found as tests/real_engines/vllm_scheduler.py says ($KVREPLAY_VLLM_WHEEL,
tests/real_engines/.cache/, /tmp/engines/), else downloaded with ``pip download`` into
tests/real_engines/.cache/ (as test_vllm_engine.py does); without it the tests skip.

Both sides serve the same trace (512-token blocks, arrivals = the trace's timestamps, a constant
10 ms step: a polynomial profile with one constant term) on one instance, and for every request
these five fields must agree exactly (times to 1e-6 s): first scheduled time, prefix-hit tokens at
its first schedule, first token time, finish time, preemptions:

- ``vllm_scheduler.run``: vLLM's own Scheduler + KVCacheManager (tests/real_engines/vllm_scheduler.py);
- ``kvreplay.simulate(trace, policy="vllm", capacity=C, engine_style="vllm", time_model=<10 ms>,
  scheduler=Scheduler(max_num_batched_tokens=..., max_num_seqs=...), compare_sequential=False)``.

Cases: the first 300 requests of ../shared's Mooncake conversation trace at a light load (4000
blocks, 256 sequences, 8192-token budget), heavy loads (250 and 200 blocks, 64 sequences, 512
tokens), the tight setting (200 blocks, 32 sequences, 256 tokens) and without chunked prefill; and
a multi-turn trace derived from it (sessions whose every turn resends the previous turn's prompt
blocks; ``multi_turn_rows``) at the heavy and tight settings. The pool C is vLLM's usable pool,
``num_gpu_blocks - 1``.

Also: other slices of both Mooncake traces (800 conversation requests; synthetic requests 0-599
and 2000-2499) at five pools from light to very tight (4000 blocks down to 150 with 16 sequences).

Hybrid layer groups under concurrency (``HYBRID_CASES``): sliding-window, chunked-local and Mamba
(align mode) layouts beside full attention, against the simulator's hybrid mode; with Mamba, the
real Scheduler's block-aligned prefill split and MambaManager's one-state-per-step rule are in
play (each of them, removed from the simulator, breaks agreement on most requests).

The harness's hybrid groups (``Settings.groups``) are checked too. Requests that run one at a
time, each with one output token, must get the hits of kvreplay's hybrid replay, which
test_vllm_hybrid.py checks against vLLM's KVCacheManager.

What makes them agree (serving/kernel/requests.c, the PAGED mode; docs/engines.md, "vLLM v1"):
vLLM 0.33.0 admits a request only if its whole sequence fits (``scheduler_reserve_full_isl``),
allocates its blocks chunk by chunk, caches only the blocks filled by the tokens scheduled so
far, hashes decode-filled blocks (the prompt's partial tail included) and frees a request last
block first, blocks without a hash to the head of the free queue. Before kvreplay did the same,
the tight setting agreed on 87% of requests and the heavy 200-block one on 20%.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import MOONCAKE, shared_path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
import vllm_scheduler as harness  # noqa: E402
import per_request  # noqa: E402

pytestmark = pytest.mark.engines

BLOCK = 512
STEP_S = 0.010
FIELDS = ("scheduled_s", "hit_tokens", "first_token_s", "finish_s", "preemptions")


@pytest.fixture(scope="module")
def real():
    try:
        return harness.real_vllm(download=True)
    except harness.VLLMMissing as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def kvreplay_simulate():
    import kvreplay
    from kvreplay.serving.simulate import Scheduler, arrivals
    from kvreplay.serving.timing import PolynomialProfile

    def simulate(trace, settings: harness.Settings):
        profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                              "terms": [{"coef": settings.step_seconds}]})
        return kvreplay.simulate(
            trace, policy="vllm", capacity=settings.usable_blocks, block_size=settings.block_size,
            engine_style="vllm", time_model=profile,
            scheduler=Scheduler(max_num_batched_tokens=settings.max_num_batched_tokens,
                                max_num_seqs=settings.max_num_seqs, chunked_prefill=settings.enable_chunked_prefill),
            compare_sequential=False)

    simulate.Trace, simulate.arrivals = kvreplay.Trace, arrivals
    return simulate


# ---- traces ---------------------------------------------------------------------------------------

def mooncake_rows(n: int) -> list:
    """The first n requests of the Mooncake conversation trace: (hash_ids, L, timestamp_ms, O)."""
    rows = []
    with open(shared_path(MOONCAKE / "conversation_trace.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            rows.append((r["hash_ids"], r["input_length"], float(r["timestamp"]), r["output_length"]))
            if len(rows) >= n:
                break
    return rows


def multi_turn_rows(sessions: int = 60, seed: int = 0, max_prompt: int = 60000) -> list:
    """Multi-turn sessions derived from the Mooncake conversation trace: session s opens with its
    request s (prompt, hash ids, output capped at 400 tokens) at its timestamp + U(0, 60) s; each
    of its 2-6 turns arrives U(2, 15) s after the previous one, with the previous prompt + its
    output + a U(50, 1500)-token user message as prompt (the previous prompt's full blocks keep
    their ids, every later block is new: the block holding the previous prompt's partial tail and
    outputs is new content) and U(20, 400) output tokens; prompts stay under `max_prompt` tokens.
    Sorted by arrival (stable)."""
    rng = np.random.default_rng(seed)
    out, next_id = [], 10**7
    for ids, L, ts, O in mooncake_rows(sessions):
        ids, O, t = list(ids[: -(-L // BLOCK)]), min(O, 400), ts + float(rng.uniform(0, 60000))
        for _ in range(int(rng.integers(2, 7))):
            out.append((list(ids), L, t, O))
            longer = L + O + int(rng.integers(50, 1500))
            if longer > max_prompt:
                break
            keep = L // BLOCK
            fresh = -(-longer // BLOCK) - keep
            ids = ids[:keep] + list(range(next_id, next_id + fresh))
            next_id += fresh
            L, O, t = longer, int(rng.integers(20, 400)), t + float(rng.uniform(2000, 15000))
    order = sorted(range(len(out)), key=lambda i: out[i][2])
    return [out[i] for i in order]


# ---- the comparison -------------------------------------------------------------------------------

def compare(real, simulate, rows: list, settings: harness.Settings) -> dict:
    """Serve `rows` on both; per field the share of requests that agree, and the disagreements."""
    trace = simulate.Trace.from_requests(rows, block_size=settings.block_size)
    arrival = simulate.arrivals(trace)
    requests = harness.requests_from_trace(trace, arrival)
    engine = harness.run(requests, settings, real)
    ours = simulate(trace, settings)
    n = len(requests)
    agreement, share, diffs = per_request.compare(engine, ours, FIELDS)
    rejected_engine = [i for i, r in enumerate(engine.requests) if r.status == "rejected"]
    return {"agreement": agreement, "fields": share, "diffs": diffs, "n": n,
            "rejected_engine": rejected_engine, "engine": engine, "ours": ours}


def report(result: dict) -> str:
    return per_request.report(result, "vLLM")


LIGHT = dict(usable_blocks=4000, max_num_seqs=256, max_num_batched_tokens=8192)
HEAVY = dict(usable_blocks=250, max_num_seqs=64, max_num_batched_tokens=512)
HEAVY_200 = dict(usable_blocks=200, max_num_seqs=64, max_num_batched_tokens=512)
TIGHT = dict(usable_blocks=200, max_num_seqs=32, max_num_batched_tokens=256)
# Without chunked prefill vLLM refuses a budget below max_model_len (SchedulerConfig.verify_max_model_len).
NO_CHUNKING = dict(usable_blocks=250, max_num_seqs=64, max_num_batched_tokens=131072, enable_chunked_prefill=False,
                   max_model_len=131072)

CASES = {
    "mooncake300-light": ("mooncake", LIGHT),
    "mooncake300-heavy250": ("mooncake", HEAVY),
    "mooncake300-heavy200": ("mooncake", HEAVY_200),
    "mooncake300-tight": ("mooncake", TIGHT),
    "mooncake300-no-chunked-prefill": ("mooncake", NO_CHUNKING),
    "multiturn-heavy250": ("multiturn", HEAVY),
    "multiturn-tight": ("multiturn", TIGHT),
}


SLICES = {"conversation-800": ("conversation_trace.jsonl", 0, 800),
          "synthetic-0-600": ("synthetic_trace.jsonl", 0, 600),
          "synthetic-2000-2500": ("synthetic_trace.jsonl", 2000, 500)}
POOLS = {"light": LIGHT, "medium": dict(usable_blocks=600, max_num_seqs=128, max_num_batched_tokens=2048),
         "tight": TIGHT, "tiny": dict(usable_blocks=150, max_num_seqs=16, max_num_batched_tokens=1024)}
for _slice, _pool in ((s, p) for s in SLICES for p in POOLS):
    CASES[f"{_slice}-{_pool}"] = (_slice, POOLS[_pool])


def slice_rows(name: str, start: int, n: int) -> list:
    return per_request.slice_rows(shared_path(MOONCAKE / name), start, n)


def rows_for(kind: str) -> list:
    if kind in SLICES:
        return slice_rows(*SLICES[kind])
    return mooncake_rows(300) if kind == "mooncake" else multi_turn_rows()


@pytest.mark.parametrize("case", list(CASES))
def test_same_requests_as_vllm(real, kvreplay_simulate, case):
    kind, params = CASES[case]
    settings = harness.Settings(block_size=BLOCK, step_seconds=STEP_S, **params)
    result = compare(real, kvreplay_simulate, rows_for(kind), settings)
    rejected_ours = np.flatnonzero(np.isnan(np.asarray(result["ours"].scheduled_s, dtype=np.float64))).tolist()
    assert rejected_ours == result["rejected_engine"], "different requests rejected as never fitting the pool"
    assert result["agreement"] == 1.0, report(result)


def test_harness_clock(real):
    # One request alone, by hand: budget 8 per step, block size 4, a 3-block prompt of 10 tokens
    # (no hit), 3 outputs: prefill 8 + 2 tokens (2 steps), the first token at the end of step 2,
    # the two others at the ends of steps 3 and 4. A second identical prompt arriving after the
    # first finished hits 2 blocks (8 tokens: at most num_tokens - 1 = 9, full blocks only) and
    # computes 2 tokens in one step.
    settings = harness.Settings(block_size=4, usable_blocks=10, max_num_batched_tokens=8, max_num_seqs=4,
                                step_seconds=1.0)
    reqs = [harness.TraceRequest([1, 2, 3], 10, 3, 0.0), harness.TraceRequest([1, 2, 3], 10, 2, 10.0)]
    out = harness.run(reqs, settings, real)
    a, b = out.requests
    assert (a.scheduled_s, a.hit_tokens, a.first_token_s, a.finish_s, a.preemptions) == (0.0, 0, 2.0, 4.0, 0)
    assert (b.scheduled_s, b.hit_tokens, b.first_token_s, b.finish_s, b.preemptions) == (10.0, 8, 11.0, 12.0, 0)


def test_harness_rejects_what_never_fits(real):
    # 3 usable blocks of 4 tokens hold 12 tokens: L + O - 1 = 13 never fits, 12 does.
    settings = harness.Settings(block_size=4, usable_blocks=3, max_num_batched_tokens=16, max_num_seqs=4,
                                step_seconds=1.0)
    reqs = [harness.TraceRequest([1, 2, 3], 10, 4, 0.0), harness.TraceRequest([4, 5, 6], 10, 3, 0.0)]
    out = harness.run(reqs, settings, real)
    assert [r.status for r in out.requests] == ["rejected", "finished"]
    assert out.requests[1].finish_s == 3.0


@pytest.mark.parametrize("groups, capacity", [
    ("sliding128", 300), ("sliding128", 3000), ("3xsliding64", 600), ("chunked1024", 600)])
def test_harness_hybrid_groups_one_request_at_a_time(real, groups, capacity):
    # The harness's hybrid path (vLLM's HybridKVCacheCoordinator under the real Scheduler): requests
    # 1000 s apart with one output token each run alone and finish after their prefill, which is
    # the sequential replay kvreplay's hybrid engine checks against vLLM's KVCacheManager
    # (test_vllm_hybrid.py). So every request's hit at its first schedule must equal
    # kvreplay.replay(..., kv_groups=...)'s.
    import kvreplay
    from kvreplay.catalog.kv_groups import Group

    layouts = {"sliding128": [Group("sliding_window", window=128), Group("full")],
               "3xsliding64": [Group("sliding_window", 3, window=64), Group("full")],
               "chunked1024": [Group("chunked_local", chunk=1024), Group("full")]}
    rows = [(ids, L, 1e6 * k, 1) for k, (ids, L, _, _) in enumerate(mooncake_rows(300))]
    trace = kvreplay.Trace.from_requests(rows, block_size=BLOCK)
    settings = harness.Settings(block_size=BLOCK, usable_blocks=capacity, max_num_batched_tokens=8192,
                                max_num_seqs=256, step_seconds=STEP_S, groups=layouts[groups])
    from kvreplay.serving.simulate import arrivals

    requests = harness.requests_from_trace(trace, arrivals(trace))
    engine = harness.run(requests, settings, real)
    ours = kvreplay.replay(trace, "vllm", capacity, BLOCK, kv_groups=layouts[groups])
    # (a request too long for the pool is rejected by the harness and oversize in the replay)
    served = [k for k, r in enumerate(engine.requests) if r.status == "finished"]
    assert len(served) >= 250
    hits = np.asarray(ours.hit_tokens)
    assert [engine.requests[k].hit_tokens for k in served] == [int(hits[k]) for k in served]
    assert sum(engine.requests[k].hit_tokens for k in served) > 0


# ---- hybrid layer groups under concurrency ---------------------------------------------------------

HYBRID_LAYOUTS = {"sliding128": [("sliding_window", 1, 128), ("full", 1, None)],
                  "3xsliding64": [("sliding_window", 3, 64), ("full", 1, None)],
                  "chunked1024": [("chunked_local", 1, 1024), ("full", 1, None)],
                  "mamba": [("full", 1, None), ("mamba", 1, None)],
                  "sliding128+mamba": [("full", 1, None), ("sliding_window", 1, 128), ("mamba", 1, None)]}
HYBRID_POOLS = {"heavy": HEAVY, "tight": TIGHT}
HYBRID_CASES = {f"{kind}-{layout}-{pool}": (kind, layout, HYBRID_POOLS[pool])
                for kind in ("mooncake", "multiturn") for layout in HYBRID_LAYOUTS for pool in HYBRID_POOLS}
HYBRID_CASES["conversation-800-sliding128-tiny"] = ("conversation-800", "sliding128", POOLS["tiny"])
HYBRID_CASES["conversation-800-sliding128-medium"] = ("conversation-800", "sliding128", POOLS["medium"])


def hybrid_groups(layout: str) -> list:
    from kvreplay.catalog.kv_groups import Group

    return [Group(kind, copies, window=size if kind == "sliding_window" else None,
                  chunk=size if kind == "chunked_local" else None) for kind, copies, size in HYBRID_LAYOUTS[layout]]


@pytest.mark.parametrize("case", list(HYBRID_CASES))
def test_same_requests_as_vllm_hybrid(real, case):
    # vLLM's HybridKVCacheCoordinator under its real Scheduler against the simulator's hybrid mode
    # (serving/kernel/hybrid.c) with the same groups: every request's five fields agree exactly.
    from kvreplay.serving.run import run_once
    from kvreplay.serving.simulate import Scheduler
    from kvreplay.serving.timing import PolynomialProfile

    kind, layout, params = HYBRID_CASES[case]
    groups = hybrid_groups(layout)
    rows = rows_for(kind)
    max_len = max(L + max(O, 1) for _, L, _, O in rows) + BLOCK  # the harness's default
    settings = harness.Settings(block_size=BLOCK, step_seconds=STEP_S, groups=groups, max_model_len=max_len, **params)

    def simulate(trace, settings):
        from kvreplay.serving.simulate import arrivals

        profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                              "terms": [{"coef": settings.step_seconds}]})
        return run_once(trace, policy="vllm", capacity=settings.usable_blocks, block_size=BLOCK, time_model=profile,
                        scheduler=Scheduler(max_num_batched_tokens=settings.max_num_batched_tokens,
                                            max_num_seqs=settings.max_num_seqs),
                        arrival_s=arrivals(trace), kv_groups=groups, max_model_len=max_len)

    import kvreplay
    from kvreplay.serving.simulate import arrivals

    simulate.Trace, simulate.arrivals = kvreplay.Trace, arrivals
    result = compare(real, simulate, rows, settings)
    rejected_ours = np.flatnonzero(np.isnan(np.asarray(result["ours"].scheduled_s, dtype=np.float64))).tolist()
    assert rejected_ours == result["rejected_engine"], "different requests rejected as never fitting the pool"
    assert result["agreement"] == 1.0, report(result)
    assert sum(r.hit_tokens for r in result["engine"].requests) > 0


def test_simulate_gpt_oss_hybrid_as_vllm(real):
    # The public path: kvreplay.simulate(model="gpt-oss-120b") picks hybrid semantics by itself, and
    # serves the multi-turn trace as vLLM's scheduler does with gpt-oss-120b's groups (a 128-token
    # window and full attention), at its context limit.
    import kvreplay
    from kvreplay.catalog.kv_groups import layout
    from kvreplay.serving.simulate import Scheduler, arrivals
    from kvreplay.serving.timing import PolynomialProfile

    groups = list(layout("gpt-oss-120b", BLOCK).groups)
    settings = harness.Settings(block_size=BLOCK, step_seconds=STEP_S, groups=groups, max_model_len=131072, **HEAVY)
    profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                          "terms": [{"coef": STEP_S}]})

    def simulate(trace, settings):
        return kvreplay.simulate(trace, policy="vllm", capacity=settings.usable_blocks, block_size=BLOCK,
                                 model="gpt-oss-120b", time_model=profile, compare_sequential=False,
                                 scheduler=Scheduler(max_num_batched_tokens=settings.max_num_batched_tokens,
                                                     max_num_seqs=settings.max_num_seqs))

    simulate.Trace, simulate.arrivals = kvreplay.Trace, arrivals
    result = compare(real, simulate, multi_turn_rows(), settings)
    assert result["ours"].kv_semantics["semantics"] == "hybrid"
    assert result["agreement"] == 1.0, report(result)


def claude_code_rows(name: str) -> list:
    """A Claude Code sample (64-token blocks): (hash_ids, L, timestamp_ms, O) per request. Its ids
    cover full blocks only; a prompt's partial tail gets an id of its own (as vLLM never hashes a
    partial block, no other request can share it)."""
    import kvreplay

    from conftest import CLAUDE_CODE

    t = kvreplay.load_trace(str(shared_path(CLAUDE_CODE / name)))
    rows = []
    for i in range(len(t)):
        ids, L = t.blocks[t.offsets[i]:t.offsets[i + 1]].tolist(), int(t.input_length[i])
        ids += [10**8 + i] * (-(-L // 64) - len(ids))
        rows.append((ids, L, float(t.timestamp[i]), int(t.output_length[i])))
    return rows


@pytest.mark.parametrize("sample, model, capacity", [
    ("trace_0291.json", "gpt-oss-120b", 2000), ("trace_0291.json", "gpt-oss-120b", 3000),
    ("trace_0291.json", "gemma-3-27b-it", 3000), ("trace_0291.json", "gemma-3-27b-it", 6000),
    ("trace_0291.json", "Qwen3-Next-80B-A3B", 2000), ("trace_0291.json", "Qwen3-Next-80B-A3B", 4000)])
def test_simulate_claude_code_hybrid_as_vllm(real, sample, model, capacity):
    # Claude Code sessions (64-token blocks, prompts up to ~100k tokens) through
    # kvreplay.simulate(model=...) and vLLM's Scheduler with the model's own groups: gpt-oss-120b
    # (a 128-token window and full attention) and gemma-3-27b-it (six 1,024-token window groups and
    # one full group, so a request holds 7 block tables from one pool) and Qwen3-Next-80B-A3B (three
    # Mamba groups in align mode and one full group), two pools each (hit rates 78-89%; 2 preemptions
    # at gpt-oss-120b's 2,000 block ids)
    import kvreplay
    from kvreplay.catalog.kv_groups import layout
    from kvreplay.serving.simulate import Scheduler, arrivals
    from kvreplay.serving.timing import PolynomialProfile

    bs = 64
    groups = list(layout(model, bs).groups)
    settings = harness.Settings(block_size=bs, step_seconds=STEP_S, groups=groups, max_model_len=131072,
                                usable_blocks=capacity, max_num_seqs=64, max_num_batched_tokens=8192)
    profile = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                          "terms": [{"coef": STEP_S}]})

    def simulate(trace, settings):
        return kvreplay.simulate(trace, policy="vllm", capacity=settings.usable_blocks, block_size=bs, model=model,
                                 time_model=profile, compare_sequential=False, max_model_len=131072,
                                 scheduler=Scheduler(max_num_batched_tokens=8192, max_num_seqs=64))

    simulate.Trace, simulate.arrivals = kvreplay.Trace, arrivals
    result = compare(real, simulate, claude_code_rows(sample), settings)
    assert result["ours"].kv_semantics["semantics"] == "hybrid"
    assert result["agreement"] == 1.0, report(result)
    assert sum(r.hit_tokens for r in result["engine"].requests) > 0
