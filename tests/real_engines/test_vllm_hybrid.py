"""kvreplay's hybrid semantics (hybrid/coordinator.py) against vLLM 0.33.0's own hybrid KV cache
manager, request by request.

Opt-in, as test_vllm_engine.py (whose wheel loader and stubs this reuses):

    KVREPLAY_ENGINES=1 python -m pytest tests/real_engines/test_vllm_hybrid.py

Loaded from the wheel as they are: ``vllm/v1/core/{kv_cache_manager, kv_cache_coordinator,
single_type_kv_cache_manager, block_pool, kv_cache_utils}.py``, ``vllm/v1/kv_cache_interface.py``
and, for Mamba models only, ``vllm/v1/core/sched/scheduler.py`` (its
``Scheduler._mamba_block_aligned_split``, which decides where a Mamba prefill chunk ends, called on
a stand-in with the scheduler fields it reads: token budget = the chunk size, no EAGLE, no prefill
checkpoint blocks, no partial hits). Everything else is an inert stub, as in the BlockPool test.

The test plays the scheduler for one request at a time: ``new_step_starts`` before every step,
``get_computed_blocks`` (the scheduler keeps the returned shared-prefix boundary), then one
``allocate_slots`` per prefill chunk of at most ``chunk`` tokens (Mamba's ends moved by vLLM's own
split), then ``free``: no decode, as kvreplay. Groups: full + sliding window (gpt-oss style), full +
3 sliding groups (gemma-3 style), full + chunked local (Llama 4 style), full + Mamba, full + sliding
window + Mamba; vLLM's default ``prefix_cache_retention_interval`` 0 and dense (None); two pool sizes;
on a multi-turn workload and on Mooncake's conversation trace (its 512-token blocks as 16-token ones).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

import kvreplay
from conftest import MOONCAKE, shared_path
from kvreplay.hybrid.coordinator import Group

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
from hybrid_workloads import BS, mooncake, multi_turn  # noqa: E402
from test_vllm_engine import REAL_MODULES, FakeRequest, RealVLLM, _ENGINES, _required, synth_tokens  # noqa: E402

pytestmark = pytest.mark.engines

GROUPS = {
    "full+sliding128": [Group("sliding_window", window=128), Group("full")],
    "full+3xsliding64": [Group("sliding_window", 3, window=64), Group("full")],
    "full+chunked128": [Group("chunked_local", chunk=128), Group("full")],
    "full+mamba": [Group("full"), Group("mamba")],
    "full+sliding64+mamba": [Group("full"), Group("sliding_window", window=64), Group("mamba")],
}


@pytest.fixture(scope="module")
def real() -> RealVLLM:
    REAL_MODULES.add("vllm.v1.core.sched.scheduler")  # (imported only for Mamba's chunk split)
    if "0.33.0" not in _ENGINES:
        _ENGINES["0.33.0"] = RealVLLM("0.33.0")
    return _ENGINES["0.33.0"]


def specs_of(real, groups) -> list:
    i = real.interface
    out = []
    for g in groups:
        for _ in range(g.copies):
            common = dict(block_size=BS, num_kv_heads=8, head_size=64, dtype="bf16")
            if g.kind == "full":
                out.append(i.FullAttentionSpec(**_required(i.FullAttentionSpec, **common)))
            elif g.kind == "sliding_window":
                out.append(i.SlidingWindowSpec(**_required(i.SlidingWindowSpec, **common, sliding_window=g.window)))
            elif g.kind == "chunked_local":
                out.append(i.ChunkedLocalAttentionSpec(**_required(i.ChunkedLocalAttentionSpec, **common,
                                                                   attention_chunk_size=g.chunk)))
            else:
                out.append(i.MambaSpec(**_required(i.MambaSpec, block_size=BS, shapes=((4, 64), (8, 64, 16)),
                                                   dtypes=("bf16", "bf16"), mamba_cache_mode="align")))
    return out


def mamba_split(scheduler, request, n: int, hit: int, chunk: int) -> int:
    """vLLM's own Scheduler._mamba_block_aligned_split on a stand-in holding the fields it reads."""
    me = types.SimpleNamespace(
        cache_config=types.SimpleNamespace(block_size=BS), block_size=BS, hash_block_size=BS,
        mamba_partial_cache_hit=False, use_eagle_block_drop=False, num_hash_lookahead_tokens=0,
        mamba_has_prefill_checkpoint_blocks=False, mamba_prefill_checkpoint_alignment=None,
        max_num_scheduled_tokens=chunk, scheduler_config=types.SimpleNamespace(long_prefill_token_threshold=0),
        mamba_shared_prefix_checkpoint=False)
    return scheduler.Scheduler._mamba_block_aligned_split(me, request, n, hit, 0)


def run_real(real, requests, capacity: int, groups, retention, chunk: int) -> list:
    with real.active():
        i = real.interface
        kv_groups = [i.KVCacheGroupSpec(**_required(i.KVCacheGroupSpec, layer_names=[f"g{k}.layer"], kv_cache_spec=s))
                     for k, s in enumerate(specs_of(real, groups))]
        config = i.KVCacheConfig(**_required(i.KVCacheConfig, num_blocks=capacity + 1, kv_cache_tensors=[],
                                             kv_cache_groups=kv_groups, prefix_cache_retention_interval=retention))
        manager = real.manager_module.KVCacheManager(
            kv_cache_config=config, max_model_len=max(p for _, p in requests) + BS, scheduler_block_size=BS,
            hash_block_size=BS, enable_caching=True, log_stats=False)
        hasher = real.utils.get_request_block_hasher(BS, real.hashing.sha256)
        status = importlib.import_module("vllm.v1.request").RequestStatus
        mamba = any(g.kind == "mamba" for g in groups)
        scheduler = importlib.import_module("vllm.v1.core.sched.scheduler") if mamba else None
        hits = []
        for k, (ids, length) in enumerate(requests):
            request = FakeRequest(f"r{k}", synth_tokens(ids, length, BS), hasher, status.WAITING)
            manager.new_step_starts()
            blocks, hit, boundary = manager.get_computed_blocks(request)
            request.shared_prefix_boundary = boundary
            first = True
            while first or request.num_computed_tokens < length:
                start = hit if first else request.num_computed_tokens
                n = min(chunk, length - start)
                if mamba:
                    n = mamba_split(scheduler, request, n, hit if first else 0, chunk)
                new = manager.allocate_slots(request, n, hit, blocks) if first else manager.allocate_slots(request, n)
                assert new is not None, f"request {k} does not fit in {capacity} blocks"
                request.num_computed_tokens = start + n
                request.status = status.RUNNING
                first = False
                manager.new_step_starts()
            manager.free(request)
            hits.append(hit)
    return hits


def kvreplay_hits(requests, capacity: int, groups, retention, chunk: int) -> tuple[list, int]:
    """Per-request hit tokens and the evictions (so a test knows its pool was under pressure)."""
    trace = kvreplay.Trace.from_requests(requests)
    r = kvreplay.replay(trace, "vllm", capacity, BS, kv_groups=groups, kv_retention=retention, prefill_chunk=chunk)
    return r.hit_tokens.tolist(), r.counters["evictions"]


@pytest.mark.parametrize("groups", list(GROUPS))
@pytest.mark.parametrize("retention", [0, None], ids=["retention0", "dense"])
@pytest.mark.parametrize("capacity", [500, 3000])
def test_multi_turn(real, groups, retention, capacity):
    requests = multi_turn()
    for chunk in (8192, 64, 10):  # (10: a block wider than the budget, sub-block Mamba chunks)
        engine = run_real(real, requests, capacity, GROUPS[groups], retention, chunk)
        ours, evictions = kvreplay_hits(requests, capacity, GROUPS[groups], retention, chunk)
        assert ours == engine
        assert sum(engine) > 0 and (evictions > 0 or capacity > 500)  # (the small pool evicts)


@pytest.mark.parametrize("groups", ["full+sliding128", "full+mamba"])
@pytest.mark.parametrize("capacity", [1500, 6000])
def test_mooncake_conversation(real, groups, capacity):
    requests = mooncake(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    engine = run_real(real, requests, capacity, GROUPS[groups], 0, 512)
    ours, evictions = kvreplay_hits(requests, capacity, GROUPS[groups], 0, 512)
    assert ours == engine
    assert sum(engine) > 0 and evictions > 0


@pytest.mark.parametrize("retention", [None, 0], ids=["dense", "retention0"])
def test_pr_43447_collapse_and_its_fix(real, retention):
    # benchmarks/hybrid_retention.py's scenario, at the pool where the sessions' full-attention
    # blocks fill 25% of it: with every sliding-window block cached (before vLLM PR #43447) the
    # warm rounds hit nothing; with retention 0 (the fix, 0.33.0's default) they hit ~99%. vLLM's
    # own manager agrees request by request in both modes
    spec = importlib.util.spec_from_file_location(
        "hybrid_retention", Path(__file__).resolve().parents[2] / "benchmarks" / "hybrid_retention.py")
    scenario = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scenario)
    from kvreplay.catalog.kv_groups import layout

    groups = list(layout("gemma-3-27b-it", BS).groups)
    requests = scenario.sessions_round_robin(5, 21000)
    capacity = 4 * sum(len(ids) for ids, _ in requests[-5:])
    engine = run_real(real, requests, capacity, groups, retention, 8192)
    ours, _ = kvreplay_hits(requests, capacity, groups, retention, 8192)
    assert ours == engine
    warm = sum(engine[5:]) / sum(length for _, length in requests[5:])
    assert (warm < 0.01) if retention is None else (warm > 0.95)
