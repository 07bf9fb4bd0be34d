"""kvreplay's ``vllm`` policy against the real vLLM v1 KV cache manager, request by request.

Opt-in (downloads the wheels, ~280 MB each, once, into tests/real_engines/.cache/):

    KVREPLAY_ENGINES=1 python -m pytest tests/real_engines/test_vllm_engine.py
    python -m pytest -m engines tests/real_engines            # the same
    KVREPLAY_VLLM_VERSIONS="0.24.0 0.28.0" ...           # other versions

No GPU and no vLLM install: the wheel's pure-Python modules that make up the prefix cache
(``vllm/v1/core/{block_pool,kv_cache_utils,kv_cache_manager,kv_cache_coordinator,
single_type_kv_cache_manager,kv_cache_metrics}.py``, ``vllm/v1/kv_cache_interface.py``,
``vllm/envs.py``, ``vllm/utils/{math_utils,hashing}.py``, ...) are loaded from the wheel as they
are; every other module they import (torch, the config system, the request class, metrics,
KV events...) is replaced by an inert stub. The test then plays the scheduler's part for one
request at a time, as ``Scheduler.schedule`` and ``_free_request_blocks`` do for a new request
that fits: ``KVCacheManager.get_computed_blocks`` -> ``allocate_slots`` (whole prompt at once)
-> ``free``. Token ids are synthesised so that vLLM's own chained block hashes correspond one
to one with the trace's hash ids (each block's tokens are its id repeated; with chained ids
every id has one parent, so one vLLM hash), and the test checks that correspondence.

Compared with kvreplay's ``vllm`` (both engines): per-request hit tokens, and at the end the
whole free queue (block ids in order, with the hash each still holds) and which blocks hold
each hash, in the order a lookup picks them.

Overlapping requests (``test_overlapping_requests``): starts and finishes interleaved as in
engine/lifecycle.py, a start refused when ``allocate_slots`` returns None; compared: hits,
refusals, blocks each request holds, and the free queue after every event.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kvreplay
from kvreplay.engine import driver
from kvreplay.policies.vllm import VLLM
from conftest import MOONCAKE, shared_path

if str(Path(__file__).resolve().parent) not in sys.path:  # (the stubs beside it; pytest runs with --import-mode=importlib)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_stubs import StubModule, engine_modules  # noqa: E402
from wheel_files import extract_once  # noqa: E402

pytestmark = pytest.mark.engines

CACHE = Path(__file__).resolve().parent / ".cache"
VERSIONS = os.environ.get("KVREPLAY_VLLM_VERSIONS", "0.24.0 0.33.0").split()

# Loaded from the wheel as they are; every other vllm.* module is a stub.
REAL_MODULES = {
    "vllm.envs",
    "vllm.utils.math_utils",
    "vllm.utils.hashing",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.kv_cache_spec_registry",
    "vllm.v1.core.block_pool",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.core.kv_cache_coordinator",
    "vllm.v1.core.single_type_kv_cache_manager",
    "vllm.v1.core.kv_cache_metrics",
}


# ---- inert stubs ------------------------------------------------------------------------------------

class _StubModule(StubModule):
    real = frozenset(REAL_MODULES)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """vllm.*: real modules from the extracted wheel, stub packages for the rest; and (as
    ``fallback``, last on sys.meta_path) a stub for any other module that is not installed."""

    def __init__(self, root: Path | None):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if self.root is None:  # fallback: whatever no other finder found (torch, zmq, cbor2, ...)
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if name != "vllm" and not name.startswith("vllm."):
            return None
        if name in REAL_MODULES:
            return importlib.util.spec_from_file_location(name, self.root / (name.replace(".", "/") + ".py"))
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def _owned(name, module) -> bool:
    return name == "vllm" or name.startswith("vllm.") or isinstance(module, _StubModule)


class RealVLLM:
    """One vLLM version's prefix-cache modules, loaded from its wheel into a private module set."""

    def __init__(self, version: str):
        self.version = version
        self.root = _extract(version)
        self.saved: dict = {}
        with self.active():
            self.utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
            self.interface = importlib.import_module("vllm.v1.kv_cache_interface")
            self.manager_module = importlib.import_module("vllm.v1.core.kv_cache_manager")
            self.hashing = importlib.import_module("vllm.utils.hashing")
            self.utils.init_none_hash(self.hashing.sha256)

    def active(self):
        """vllm.* resolves to this version (and lazy imports inside vLLM keep working) meanwhile."""
        return engine_modules(self, _owned, _Finder(self.root), _Finder(None))

    def new_manager(self, capacity: int, block_size: int, max_model_len: int):
        """A KVCacheManager over ``capacity`` usable blocks (plus vLLM's null block), one
        full-attention group, prefix caching on."""
        spec_class = self.interface.FullAttentionSpec
        spec = spec_class(**_required(spec_class, block_size=block_size, num_kv_heads=1, head_size=1, dtype=None))
        group = self.interface.KVCacheGroupSpec(**_required(self.interface.KVCacheGroupSpec, layer_names=["layer.0"], kv_cache_spec=spec))
        config = self.interface.KVCacheConfig(**_required(self.interface.KVCacheConfig, num_blocks=capacity + 1, kv_cache_tensors=[], kv_cache_groups=[group]))
        manager_class = self.manager_module.KVCacheManager
        wanted = dict(kv_cache_config=config, max_model_len=max_model_len, scheduler_block_size=block_size,
                      hash_block_size=block_size, enable_caching=True, log_stats=False)
        accepted = inspect.signature(manager_class).parameters
        return manager_class(**{k: v for k, v in wanted.items() if k in accepted})


def _required(cls, **values):
    """The keyword arguments a dataclass needs: the given ones it has, None for its other required fields."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            out[f.name] = values[f.name]
        elif f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            out[f.name] = None
    return out


def _extract(version: str) -> Path:
    root = CACHE / f"vllm-{version}"
    if (root / ".complete").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(CACHE.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={version}", "-d", str(CACHE)],
                capture_output=True, text=True, timeout=900,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"cannot download vllm=={version}: {e}")
        wheels = sorted(CACHE.glob(f"vllm-{version}-*.whl"))
        if done.returncode != 0 or not wheels:
            pytest.skip(f"cannot download vllm=={version} (offline?): {done.stderr.strip()[-300:]}")
    return extract_once(wheels[0], root, lambda n: n.startswith("vllm/") and n.endswith(".py"))


_ENGINES: dict = {}


@pytest.fixture(scope="module", params=VERSIONS)
def real(request) -> RealVLLM:
    version = request.param
    if version not in _ENGINES:
        _ENGINES[version] = RealVLLM(version)
    return _ENGINES[version]


# ---- playing the scheduler --------------------------------------------------------------------------

class FakeRequest:
    """What the KV cache manager reads of vllm.v1.request.Request, for a plain text prompt."""

    def __init__(self, request_id: str, token_ids: list, block_hasher, status):
        self.request_id = request_id
        self.prompt_token_ids = token_ids
        self.all_token_ids = token_ids
        self.num_prompt_tokens = len(token_ids)
        self.num_computed_tokens = 0
        self.num_preemptions = 0
        self.num_in_flight_tokens = 0  # 0.33: tokens of steps still running on the GPU
        self.shared_prefix_boundary = 0  # 0.33: set by the scheduler from get_computed_blocks
        self.status = status
        self.lora_request = None
        self.mm_features = []
        self.cache_salt = None
        self.session_id = None
        self.skip_reading_prefix_cache = False
        self.sampling_params = None
        self.pooling_params = None
        self.prompt_embeds = None
        self.block_hashes = []
        self.block_hashes.extend(block_hasher(self))  # as Request.update_block_hashes does

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return len(self.all_token_ids)


def synth_tokens(ids: list, length: int, block_size: int) -> list:
    """Prompt tokens whose block j is ids[j] repeated (the partial tail: its first tokens)."""
    tokens = []
    for h in ids:
        tokens.extend([int(h)] * block_size)
    assert len(tokens) >= length, "the trace must give every prompt block an id"
    return tokens[:length]


def run_real(real: RealVLLM, requests: list, capacity: int, block_size: int, chunk_tokens: int | None = None) -> dict:
    """Replay (ids, input_length) requests one at a time through the real KVCacheManager.

    chunk_tokens: prefill in steps of at most this many tokens (chunked prefill), as the
    scheduler does when a prompt exceeds its token budget; None: the whole prompt at once.
    """
    max_len = max(length for _, length in requests) + block_size
    with real.active():
        manager = real.new_manager(capacity, block_size, max_len)
        pool = manager.block_pool
        hasher = real.utils.get_request_block_hasher(block_size, real.hashing.sha256)
        status = importlib.import_module("vllm.v1.request").RequestStatus
        trace_id_of: dict = {}  # vLLM block hash -> trace id
        hits = []
        for i, (ids, length) in enumerate(requests):
            request = FakeRequest(f"r{i}", synth_tokens(ids, length, block_size), hasher, status.WAITING)
            assert len(request.block_hashes) == length // block_size  # vLLM hashes full blocks only
            for h, trace_id in zip(request.block_hashes, ids):
                assert trace_id_of.setdefault(bytes(h), trace_id) == trace_id, "hashes must map 1:1 to trace ids"
            computed = manager.get_computed_blocks(request)
            blocks, hit_tokens = computed[0], computed[1]
            if len(computed) > 2:  # 0.33 returns the shared-prefix boundary too; the scheduler keeps it
                request.shared_prefix_boundary = computed[2]
            step = length - hit_tokens if chunk_tokens is None else min(chunk_tokens, length - hit_tokens)
            new = manager.allocate_slots(request, step, hit_tokens, blocks)
            assert new is not None, f"request {i} does not fit in {capacity} blocks: vLLM would not schedule it"
            request.status = status.RUNNING
            request.num_computed_tokens = hit_tokens + step
            while request.num_computed_tokens < length:  # the next prefill chunks
                step = min(chunk_tokens, length - request.num_computed_tokens)
                assert manager.allocate_slots(request, step) is not None
                request.num_computed_tokens += step
            manager.free(request)  # finished; output tokens are not modelled
            hits.append(hit_tokens)
        assert len(set(trace_id_of.values())) == len(trace_id_of), "two vLLM hashes share a trace id"

        def trace_id(block):
            return None if block.block_hash is None else trace_id_of[bytes(real.utils.get_block_hash(block.block_hash))]

        free_queue = [(b.block_id, trace_id(b)) for b in pool.free_block_queue.get_all_free_blocks()]
        holders = {}
        for b in pool.blocks:
            if b.block_hash is not None:
                holders.setdefault(trace_id(b), set()).add(b.block_id)
        # Which block a lookup of each hash returns (the first holder in caching order).
        lookup = {h: pool.get_cached_block(vllm_hash, [0])[0].block_id
                  for vllm_hash, h in trace_id_of.items() if h in holders}
        assert pool.get_num_free_blocks() == capacity  # every request finished: all blocks free
    return {"hits": hits, "free_queue": free_queue, "holders": holders, "lookup": lookup}


def run_kvreplay(requests: list, capacity: int, block_size: int) -> dict:
    trace = kvreplay.Trace.from_requests(requests)
    ids = trace.original_ids
    ref = VLLM(capacity, trace)
    hit_blocks = np.zeros(len(trace), dtype=np.int64)
    hit_tokens = np.zeros(len(trace), dtype=np.int64)
    driver.replay_reference(trace.offsets, trace.blocks, trace.input_length, block_size, ref, hit_blocks, hit_tokens)
    compiled = kvreplay.replay(trace, "vllm", capacity, block_size)
    assert compiled.hit_tokens.tolist() == hit_tokens.tolist()
    assert compiled.final_cache_blocks == ref.size()
    assert compiled.counters == ref.counters()
    free_queue = [(b, ids[ref.block_hash[b]] if b in ref.block_hash else None) for b in ref.free_queue()]
    holders = {ids[h]: set(bs) for h, bs in ref.holders.items()}
    lookup = {ids[h]: next(iter(bs)) for h, bs in ref.holders.items()}
    return {"hits": hit_tokens.tolist(), "free_queue": free_queue, "holders": holders, "lookup": lookup,
            "counters": ref.counters()}


def check_same(real: RealVLLM, requests: list, capacity: int, block_size: int, chunk_tokens: int | None = None) -> dict:
    engine = run_real(real, requests, capacity, block_size, chunk_tokens)
    ours = run_kvreplay(requests, capacity, block_size)
    assert ours["hits"] == engine["hits"]
    assert ours["free_queue"] == engine["free_queue"]
    assert ours["holders"] == engine["holders"]
    assert ours["lookup"] == engine["lookup"]
    return ours


# ---- the checks ---------------------------------------------------------------------------------

# Block size 4. Ids are chained (every id always follows the same parent), as block hashes are.
HAND = [
    ([1, 2, 3], 10),        # 2 full blocks + partial tail (id 3 never cached)
    ([1, 2, 3], 10),        # hits 1, 2
    ([1, 2, 4, 5], 16),     # block-aligned: 1, 2 hit; 4, 5 cached
    ([1, 2, 4, 5], 16),     # exact resend: hits 1, 2, 4 (never the last block); 5 cached again
    ([6, 7], 8),            # new chain: evicts from the head of the free queue
    ([1, 2, 4], 12),        # hits 1, 2 only (cap (12 - 1) // 4 = 2)
    ([8, 9, 10], 9),
    ([6, 7], 8),
    ([1, 2, 4, 5], 16),
    ([1, 11], 5),
    ([1, 2, 3], 12),        # id 3 as a full block now
    ([1, 2, 3], 10),
]


@pytest.mark.parametrize("capacity", [4, 5, 6, 8, 64])
def test_hand_trace(real, capacity):
    ours = check_same(real, HAND, capacity, 4)
    # At capacity 4 the exact resend has to reuse the block of its own last hash: no duplicate.
    assert (ours["counters"]["duplicate_blocks"] > 0) == (capacity > 4)
    assert (ours["counters"]["evictions"] > 0) == (capacity < 64)


def tree_trace(seed: int, num_requests: int, block_size: int, max_blocks: int) -> list:
    """Prompts that walk a random prefix tree (so ids are chained) with popular branches."""
    rng = np.random.default_rng(seed)
    children: dict = {}
    next_id = [0]
    out = []
    for _ in range(num_requests):
        n = int(rng.integers(1, max_blocks + 1))
        ids, parent = [], -1
        for _ in range(n):
            kids = children.setdefault(parent, [])
            if kids and rng.random() < 0.8:
                node = kids[min(int(rng.zipf(1.5)) - 1, len(kids) - 1)]
            else:
                node = next_id[0]
                next_id[0] += 1
                kids.append(node)
            ids.append(node)
            parent = node
        aligned = rng.random() < 0.3
        length = n * block_size if aligned else int(rng.integers((n - 1) * block_size + 1, n * block_size + 1))
        out.append((ids, length))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [8, 13, 40])
def test_random_prefix_trees(real, seed, capacity):
    requests = tree_trace(seed, 400, 4, 8)
    ours = check_same(real, requests, capacity, 4)
    assert ours["counters"]["evictions"] > 0 and ours["counters"]["duplicate_blocks"] > 0


@pytest.mark.parametrize("chunk_tokens", [1, 5, 8])
def test_chunked_prefill_leaves_the_same_state(real, chunk_tokens):
    # One request at a time, prefilling in chunks only interleaves allocation and caching:
    # same hits, same free queue, same holders as the whole prompt at once.
    check_same(real, HAND, 6, 4, chunk_tokens)
    check_same(real, tree_trace(7, 300, 4, 8), 11, 4, chunk_tokens)


@pytest.mark.parametrize("capacity", [256, 1000, 4096])
def test_conversation_trace_first_500(real, capacity):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    requests = [(trace.request_blocks(i).tolist(), int(trace.input_length[i])) for i in range(500)]
    assert max(-(-length // 512) for _, length in requests) <= capacity
    ours = check_same(real, requests, capacity, 512)
    assert sum(ours["hits"]) > 0


def test_request_larger_than_the_pool_is_not_scheduled(real):
    # On an idle pool of 4 blocks, a 4-block prompt is admitted and a 5-block one is not (its
    # hit blocks count too: they would leave the free queue). kvreplay documents what it does
    # instead (serves the first `capacity` blocks, counts oversize_requests).
    with real.active():
        manager = real.new_manager(4, 4, 64)
        hasher = real.utils.get_request_block_hasher(4, real.hashing.sha256)
        status = importlib.import_module("vllm.v1.request").RequestStatus
        fits = FakeRequest("fits", synth_tokens([1, 2, 3, 4], 16, 4), hasher, status.WAITING)
        assert manager.allocate_slots(fits, 16) is not None
        manager.free(fits)
        too_big = FakeRequest("too_big", synth_tokens([1, 2, 3, 4, 5], 17, 4), hasher, status.WAITING)
        computed = manager.get_computed_blocks(too_big)
        assert computed[1] == 16  # 4 blocks hit...
        assert manager.allocate_slots(too_big, 1, computed[1], computed[0]) is None  # ...but 5 do not fit


# ---- overlapping requests: kvreplay's pin_request / unpin_request against the real manager -----------

def run_real_lifecycle(real: RealVLLM, requests: list, capacity: int, block_size: int, events: list) -> dict:
    """Play `events` (engine/lifecycle.py: i starts request i, -i - 1 finishes it) through the real
    KVCacheManager: a start is ``get_computed_blocks`` then ``allocate_slots`` for the whole prompt
    (None: refused, the request is never scheduled); a finish is ``free``. The free queue (block
    ids with the hash each holds) after every event."""
    max_len = max(length for _, length in requests) + block_size
    with real.active():
        manager = real.new_manager(capacity, block_size, max_len)
        pool = manager.block_pool
        hasher = real.utils.get_request_block_hasher(block_size, real.hashing.sha256)
        status = importlib.import_module("vllm.v1.request").RequestStatus
        trace_id_of: dict = {}
        n = len(requests)
        hits, held, refused, running, queues = [0] * n, [0] * n, [False] * n, {}, []

        def trace_id(block):
            return None if block.block_hash is None else trace_id_of[bytes(real.utils.get_block_hash(block.block_hash))]

        for e in events:
            if e >= 0:
                ids, length = requests[e]
                request = FakeRequest(f"r{e}", synth_tokens(ids, length, block_size), hasher, status.WAITING)
                for h, tid in zip(request.block_hashes, ids):
                    assert trace_id_of.setdefault(bytes(h), tid) == tid
                computed = manager.get_computed_blocks(request)
                if len(computed) > 2:
                    request.shared_prefix_boundary = computed[2]
                hits[e] = computed[1]
                if manager.allocate_slots(request, length - computed[1], computed[1], computed[0]) is None:
                    refused[e] = True
                else:
                    request.status = status.RUNNING
                    request.num_computed_tokens = length
                    running[e] = request
                    held[e] = len(manager.get_blocks(request.request_id).get_block_ids()[0])
            elif -e - 1 in running:
                manager.free(running.pop(-e - 1))
            queues.append([(b.block_id, trace_id(b)) for b in pool.free_block_queue.get_all_free_blocks()])
    return {"hits": hits, "held": held, "refused": refused, "queues": queues}


def overlapping_events(seed: int, n: int, width: int) -> list:
    """Requests start in order; each start first finishes random running ones (at most `width` run)."""
    rng = np.random.default_rng(seed)
    events, running = [], []
    for i in range(n):
        while running and (len(running) >= width or rng.random() < 0.4):
            events.append(-running.pop(int(rng.integers(len(running)))) - 1)
        events.append(i)
        running.append(i)
    events += [-i - 1 for i in running]
    return events


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("capacity,width", [(8, 2), (10, 4), (16, 6), (64, 8)])
def test_overlapping_requests(real, seed, capacity, width):
    # Every prompt fits the pool (at most 8 blocks), so vLLM refuses a start only because
    # running requests hold too many blocks: allocate_slots' all-or-nothing check.
    from kvreplay.engine.lifecycle import replay_lifecycle

    requests = tree_trace(seed, 200, 4, 8)
    events = overlapping_events(seed, len(requests), width)
    engine = run_real_lifecycle(real, requests, capacity, 4, events)
    trace = kvreplay.Trace.from_requests(requests)
    ids = trace.original_ids
    queues = []

    def look(k, pool):
        queues.append([(b, ids[pool.block_hash[b]] if b in pool.block_hash else None) for b in pool.free_queue()])

    ref = replay_lifecycle(trace, "vllm", capacity, events, 4, engine="reference", on_event=look)
    comp = replay_lifecycle(trace, "vllm", capacity, events, 4)
    for ours in (ref, comp):
        assert ours.hit_tokens.tolist() == engine["hits"]
        assert ours.refused.tolist() == engine["refused"]
        assert ours.held_blocks.tolist() == engine["held"]
        assert ours.counters == ref.counters and ours.held_at_end == 0
    for k, (mine, theirs) in enumerate(zip(queues, engine["queues"])):
        assert mine == theirs, f"free queues differ after event {k} ({events[k]})"
    assert any(engine["refused"]) == (capacity < 64)  # 8 running prompts of <= 8 blocks always fit in 64
