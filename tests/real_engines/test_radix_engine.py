"""kvreplay's ``radix`` policy against SGLang's real ``RadixCache``, request by request.

Opt-in (downloads the sglang wheel, ~40 MB, once, into tests/real_engines/.cache/; needs torch,
CPU build is enough):

    KVREPLAY_ENGINES=1 python -m pytest tests/real_engines/test_radix_engine.py
    python -m pytest -m engines tests/real_engines                  # the same
    KVREPLAY_SGLANG_VERSION=0.5.22 ...                          # another version

No GPU and no sglang install: ``sglang/srt/mem_cache/{radix_cache,base_prefix_cache,
evict_policy,utils,cache_init_params}.py`` are loaded from the wheel as they are; every other
``sglang.*`` module they import (the allocator and memory pools, KV events, metrics, kernels)
is replaced by an inert stub. ``time.monotonic`` inside radix_cache.py is replaced by a counter
that ticks on every read, so that LRU order is deterministic (on Linux the real clock is
strictly increasing between reads too).

The test plays the scheduler's part for one request at a time, as SGLang does for a request
that fits, calling the real tree for everything it owns:

- ``Req.init_next_round_input`` -> ``match_kv_cache``: ``match_prefix`` on the prompt with
  ``limit = L - 1`` (``_compute_max_prefix_len``);
- ``PrefillAdder``: ``lock(last_node)``;
- ``alloc_paged_token_slots_extend`` / ``alloc_token_slots`` + ``evict_to_free_tokens``: ask for
  ``L - prefix`` tokens, plus one page when ``page_size > 1``, evict the shortfall with
  ``evict_for_alloc``, then take ``ceil(L/P) - prefix/P`` pages from a page allocator;
- ``release_kv_cache(checkpoint=True)``: the real ``RadixCache.checkpoint(req, up_to=L)``
  (insert, free the duplicates, re-match, re-lock), then free the row's tail and ``unlock``.

Token ids are synthesised so that page ``j`` of a request is ``id*P .. id*P+P-1`` for its
``j``-th (dense) block id: equal ids give equal pages, different ids different ones.

Compared with kvreplay's ``radix`` (reference and compiled engines): per-request hit
tokens, pages freed by eviction, final pages in the tree, and, against the reference
engine's tree, the whole final tree (every node's path and pages) and the LRU order of
its leaves.

Overlapping requests (``test_overlapping_requests``): starts and finishes interleaved as in
engine/lifecycle.py, one request-to-token row per request, ``checkpoint_kv_cache`` after each
prefill and ``release_kv_cache(checkpoint=True)`` at each finish; admission is kvreplay's rule
over the real tree's counts. Compared: hits, refusals, (tree, evictable, protected, free) pages
after every event, the final tree and its leaves' LRU order.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time as real_time
from array import array
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import kvreplay
from kvreplay.engine import driver
from kvreplay.policies.radix import Radix
from conftest import MOONCAKE, shared_path

if str(Path(__file__).resolve().parent) not in sys.path:  # (engine_stubs and wheel_files beside it; pytest runs with --import-mode=importlib)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_stubs import StubModule  # noqa: E402
from wheel_files import extract_once  # noqa: E402

pytestmark = pytest.mark.engines

CACHE = Path(__file__).resolve().parent / ".cache"
VERSION = os.environ.get("KVREPLAY_SGLANG_VERSION", "0.5.23")
MEM_CACHE = "sglang.srt.mem_cache"
REAL_MODULES = {f"{MEM_CACHE}.{name}" for name in ("radix_cache", "base_prefix_cache", "evict_policy", "utils", "cache_init_params")}


# ---- loading radix_cache.py from the wheel, with stubs for the rest of sglang ------------------------

class _StubModule(StubModule):
    real = frozenset(REAL_MODULES)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if name != "sglang" and not name.startswith("sglang."):
            return None
        if name in REAL_MODULES:
            return importlib.util.spec_from_file_location(name, self.root / (name.replace(".", "/") + ".py"))
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def _extract(version: str) -> Path:
    root = CACHE / f"sglang-{version}"
    if (root / ".complete").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    ignore = CACHE / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")  # downloaded wheels never belong in the repository
    wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if not wheels:
        # The .py files are the same in every platform's wheel: ask for one that exists.
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
                   "--platform", "manylinux_2_34_x86_64", f"sglang=={version}", "-d", str(CACHE)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"cannot download sglang=={version}: {e}")
        wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
        if done.returncode != 0 or not wheels:
            pytest.skip(f"cannot download sglang=={version} (offline?): {done.stderr.strip()[-300:]}")
    wanted = {name.replace(".", "/") + ".py" for name in REAL_MODULES}
    return extract_once(wheels[0], root, wanted.__contains__)


class Counter:
    """time.monotonic for radix_cache.py: strictly increasing, one tick per read."""

    def __init__(self):
        self.now = 0

    def monotonic(self):
        self.now += 1
        return float(self.now)

    perf_counter = staticmethod(real_time.perf_counter)


@pytest.fixture(scope="module")
def sglang():
    pytest.importorskip("torch", reason="SGLang's RadixCache needs torch (the CPU build is enough)")
    root = _extract(VERSION)
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if n == "sglang" or n.startswith("sglang.")}
    finder = _Finder(root)
    sys.meta_path.insert(0, finder)
    try:
        radix_cache = importlib.import_module(f"{MEM_CACHE}.radix_cache")
        base = importlib.import_module(f"{MEM_CACHE}.base_prefix_cache")
    finally:
        sys.meta_path.remove(finder)
        for n in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[n]  # the loaded modules keep what they imported
        sys.modules.update(saved)
    return SimpleNamespace(version=VERSION, rc=radix_cache, base=base)


# ---- playing the scheduler ---------------------------------------------------------------------------

class PageAllocator:
    """SGLang's paged token allocator, as far as the tree and the release path use it."""

    def __init__(self, num_pages: int, page_size: int):
        self.page_size = page_size
        self.device = "cpu"
        self.free_pages = list(range(num_pages))
        self.free_set = set(self.free_pages)

    def available_size(self) -> int:
        return len(self.free_pages) * self.page_size

    def alloc_pages(self, n: int) -> list:
        assert n <= len(self.free_pages), "the request does not fit: kvreplay should have refused it"
        pages, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        self.free_set.difference_update(pages)
        return pages

    def free_segment(self, indices, start_pos: int = 0) -> None:
        # A paged free releases every page that holds one of the indices.
        for page in sorted(set((np.asarray(indices, dtype=np.int64) // self.page_size).tolist())):
            assert page not in self.free_set, f"page {page} freed twice"
            self.free_pages.append(page)
            self.free_set.add(page)


class RowPool:
    """ReqToTokenPool with one row: the running request's token slots."""

    def __init__(self, torch, max_len: int):
        self.req_to_token = torch.zeros((1, max(1, max_len)), dtype=torch.int64)

    def write(self, where, values):
        row, cols = where
        self.req_to_token[row, cols] = values


def synth_tokens(ids, length: int, page_size: int) -> array:
    return array("q", (int(ids[j // page_size]) * page_size + j % page_size for j in range(length)))


def run_sglang(sglang, trace, capacity: int, page_size: int) -> dict:
    """Replay the trace through SGLang's RadixCache; per-request prefix lengths and the final tree."""
    import torch

    rc, base = sglang.rc, sglang.base
    rc.time = Counter()
    allocator = PageAllocator(capacity, page_size)
    tree = rc.RadixCache.create_simulated(mock_allocator=allocator, page_size=page_size)
    pool = RowPool(torch, int(trace.input_length.max(initial=1)))
    tree.req_to_token_pool = pool
    P = page_size
    hits, evicted_tokens, refused = [], 0, 0
    for i in range(len(trace)):
        ids = trace.blocks[trace.offsets[i]:trace.offsets[i + 1]]
        L = int(trace.input_length[i])
        pages = -(-L // P)
        assert len(ids) == pages, "these tests use traces whose hash_ids cover the prompt exactly"
        if pages > capacity:  # SGLang refuses a prompt longer than its pool (validate_input_length)
            hits.append(0)
            refused += 1
            continue
        tokens = synth_tokens(ids, L, P)
        # Req.init_next_round_input -> match_kv_cache: at most L - 1 tokens.
        match = tree.match_prefix(base.MatchPrefixParams(key=rc.RadixKey(tokens, None, limit=max(L - 1, 0))))
        prefix, node = match.device_prefix_len, match.last_device_node
        hits.append(prefix)
        lock = tree.lock(node)
        # alloc_for_extend: evict the shortfall of a conservative demand, then allocate.
        demand = (L - prefix) + (P if P > 1 else 0)
        shortfall = demand - allocator.available_size()
        if shortfall > 0:
            evicted_tokens += tree.evict_for_alloc(base.EvictParams(num_tokens=shortfall)).num_tokens_evicted
        new_pages = allocator.alloc_pages(pages - prefix // P)
        slots = torch.tensor([p * P + t for p in new_pages for t in range(P)], dtype=torch.int64)
        row = torch.cat([tree.path_device_indices(node)[:prefix], slots])[:L]
        pool.req_to_token[0, :L] = row
        req = SimpleNamespace(
            full_untruncated_fill_ids=tokens, origin_input_ids=tokens, extra_key=None, cache_salt=None,
            priority=None, lock=lock, last_node=node,
            kv=SimpleNamespace(req_pool_idx=0, swa_evict_floor=0, cache_inserted_len=0, cache_protected_len=prefix),
        )
        # release_kv_cache(checkpoint=True): the tree keeps the full pages, the rest is freed.
        tree.checkpoint(req, up_to=L)
        protected = req.kv.cache_protected_len
        if protected < L:
            allocator.free_segment(pool.req_to_token[0, protected:L])
        tree.unlock(req.lock)
        assert allocator.available_size() + tree.total_size() == capacity * P, "pages leaked"
        assert tree.protected_size() == 0 and tree.evictable_size() == tree.total_size()
    return {"hits": hits, "evicted_pages": evicted_tokens // P, "final_pages": tree.total_size() // P,
            "refused": refused, "tree": sglang_tree(tree, P)}


def sglang_tree(tree, P):
    """(nodes as sorted (path pages, own pages), leaves oldest first by last access)."""
    nodes, leaves = [], []
    stack = [(tree.root_node, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            own = tuple(int(child.key.token_ids[j]) // P for j in range(0, len(child.key), P))
            nodes.append((path, own))
            if not child.children:
                leaves.append((child.last_access_time, path + own))
            stack.append((child, path + own))
    return sorted(nodes), [p for _, p in sorted(leaves)]


def kvreplay_tree(cache: Radix):
    nodes, leaves = [], []
    stack = [(cache.root, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            own = tuple(child.blocks)
            nodes.append((path, own))
            if not child.children:
                leaves.append((child.last_access, child.id, path + own))
            stack.append((child, path + own))
    return sorted(nodes), [p for _, _, p in sorted(leaves)]


def check_same(sglang, trace, capacity: int, page_size: int) -> dict:
    real = run_sglang(sglang, trace, capacity, page_size)
    expected = np.minimum(np.array(real["hits"], dtype=np.int64), trace.input_length)
    for engine in ("reference", "compiled"):
        r = kvreplay.replay(trace, "radix", capacity, page_size, engine=engine)
        bad = np.flatnonzero(r.hit_tokens != expected)
        assert bad.size == 0, f"{engine}: first difference at request {bad[0]}: SGLang {expected[bad[0]]}, kvreplay {r.hit_tokens[bad[0]]}"
        assert r.counters["evictions"] == real["evicted_pages"], engine
        assert r.final_cache_blocks == real["final_pages"], engine
        assert r.counters["rejected"] == real["refused"], engine
    cache = Radix(capacity)
    hit_blocks = np.zeros(len(trace), dtype=np.int64)
    driver.replay_reference(trace.offsets, trace.blocks, trace.input_length, page_size, cache, hit_blocks, np.zeros_like(hit_blocks))
    nodes, leaves = kvreplay_tree(cache)
    assert nodes == real["tree"][0], "the final trees differ"
    assert leaves == real["tree"][1], "the leaves' LRU order differs"
    return {"hits": real["hits"], "evicted_pages": real["evicted_pages"], "final_pages": real["final_pages"],
            "splits": r.counters["node_splits"]}


def trace_of(requests, page_size):
    """(hash_ids, prompt tokens) -> Trace; every request's ids cover its prompt exactly."""
    return kvreplay.Trace.from_requests([(ids, length) for ids, length in requests], block_size=page_size)


# ---- the checks --------------------------------------------------------------------------------------

HAND = [
    (["a", "b", "c", "d"], 4),
    (["a", "b", "x"], 3),       # a b hit; the match splits [a b c d] after b
    (["a", "b", "c", "d"], 4),  # a b c (at most L - 1); splits [c d]
    (["e", "f"], 2),
    (["a", "b", "x"], 3),
    (["g", "h", "i"], 3),
    (["a", "b", "c", "d", "y"], 5),
    (["e", "f", "z"], 3),
    (["a", "b"], 2),
]


@pytest.mark.parametrize("capacity", [4, 5, 6, 8, 100])
def test_hand_trace_page_size_1(sglang, capacity):
    out = check_same(sglang, trace_of(HAND, 1), capacity, 1)
    if capacity == 100:
        assert out["hits"] == [0, 2, 3, 0, 2, 0, 4, 2, 1] and out["evicted_pages"] == 0


@pytest.mark.parametrize("capacity", [3, 5, 6, 9, 100])
def test_hand_trace_page_size_4(sglang, capacity):
    # Same ids, 4-token pages; lengths leave a partial tail page on some requests.
    reqs = [(ids, 4 * len(ids) - (i % 3)) for i, (ids, _) in enumerate(HAND)]
    check_same(sglang, trace_of(reqs, 4), capacity, 4)


def tree_trace(seed: int, num_requests: int, page_size: int, alphabet: int = 30):
    """Requests that extend or branch off earlier ones (ids may repeat under different parents)."""
    rng = np.random.default_rng(seed)
    reqs = []
    for _ in range(num_requests):
        if reqs and rng.random() < 0.7:
            parent = reqs[int(rng.integers(len(reqs)))][0]
            ids = parent[: int(rng.integers(0, len(parent) + 1))]
        else:
            ids = []
        ids = ids + [int(x) for x in rng.integers(0, alphabet, size=int(rng.integers(1 if not ids else 0, 6)))]
        if not ids:
            ids = [int(rng.integers(0, alphabet))]
        length = (len(ids) - 1) * page_size + int(rng.integers(1, page_size + 1))
        reqs.append((ids, length))
    return trace_of(reqs, page_size)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("page_size,capacity", [(1, 8), (1, 25), (4, 12), (4, 40), (16, 30)])
def test_random_prefix_trees(sglang, seed, page_size, capacity):
    out = check_same(sglang, tree_trace(seed, 300, page_size), capacity, page_size)
    assert out["evicted_pages"] > 0 and sum(out["hits"]) > 0


@pytest.mark.parametrize("capacity", [200, 1000, 4096])
def test_conversation_trace_first_500(sglang, capacity):
    full = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    trace = full.take(np.arange(500))
    out = check_same(sglang, trace, capacity, 512)
    assert sum(out["hits"]) > 0
    if capacity < 4096:
        assert out["evicted_pages"] > 0


# ---- overlapping requests: kvreplay's pin_request / unpin_request against the real tree ---------------

def run_sglang_lifecycle(sglang, trace, capacity: int, page_size: int, events) -> dict:
    """Play `events` (engine/lifecycle.py: i starts request i, -i - 1 finishes it) through SGLang's
    RadixCache, one request-to-token row per request. A start: match (limit L - 1), lock, then
    admission as kvreplay decides it (the pages beyond the prefix must fit in the allocator's
    free pages plus the tree's evictable_size(); SGLang's PrefillAdder also reserves decode
    tokens, which a trace does not have), evict the shortfall, allocate, and
    ``checkpoint_kv_cache`` after the prefill (insert, re-match, re-lock). A finish:
    ``release_kv_cache(checkpoint=True)`` (checkpoint, free the row's tail, unlock).
    (total, evictable, protected, free) pages after every event, and the final tree."""
    import torch

    rc, base = sglang.rc, sglang.base
    rc.time = Counter()
    allocator = PageAllocator(capacity, page_size)
    tree = rc.RadixCache.create_simulated(mock_allocator=allocator, page_size=page_size)
    pool = RowPool(torch, int(trace.input_length.max(initial=1)))
    pool.req_to_token = torch.zeros((len(trace), pool.req_to_token.shape[1]), dtype=torch.int64)
    tree.req_to_token_pool = pool
    P = page_size
    n = len(trace)
    hits, refused, running, sizes = [0] * n, [False] * n, {}, []
    for e in events:
        i = e if e >= 0 else -e - 1
        L = int(trace.input_length[i])
        pages = -(-L // P)
        if e >= 0 and pages <= capacity:
            ids = trace.blocks[trace.offsets[i]:trace.offsets[i + 1]]
            tokens = synth_tokens(ids, L, P)
            match = tree.match_prefix(base.MatchPrefixParams(key=rc.RadixKey(tokens, None, limit=max(L - 1, 0))))
            prefix, node = match.device_prefix_len, match.last_device_node
            hits[i] = prefix
            lock = tree.lock(node)
            if pages - prefix // P > (allocator.available_size() + tree.evictable_size()) // P:
                tree.unlock(lock)
                refused[i] = True
            else:
                shortfall = (L - prefix) + (P if P > 1 else 0) - allocator.available_size()
                if shortfall > 0:
                    tree.evict_for_alloc(base.EvictParams(num_tokens=shortfall))
                new_pages = allocator.alloc_pages(pages - prefix // P)
                slots = torch.tensor([p * P + t for p in new_pages for t in range(P)], dtype=torch.int64)
                pool.req_to_token[i, :L] = torch.cat([tree.path_device_indices(node)[:prefix], slots])[:L]
                req = SimpleNamespace(
                    full_untruncated_fill_ids=tokens, origin_input_ids=tokens, extra_key=None, cache_salt=None,
                    priority=None, lock=lock, last_node=node,
                    kv=SimpleNamespace(req_pool_idx=i, swa_evict_floor=0, cache_inserted_len=0, cache_protected_len=prefix),
                )
                tree.checkpoint(req, up_to=L)  # checkpoint_kv_cache: the prefill is done, decoding goes on
                running[i] = req
        elif e < 0 and i in running:
            req = running.pop(i)
            tree.checkpoint(req, up_to=L)  # release_kv_cache(checkpoint=True)
            protected = req.kv.cache_protected_len
            if protected < L:
                allocator.free_segment(pool.req_to_token[i, protected:L])
            tree.unlock(req.lock)
        sizes.append((tree.total_size() // P, tree.evictable_size() // P, tree.protected_size() // P, allocator.available_size() // P))
    return {"hits": hits, "refused": refused, "sizes": sizes, "tree": sglang_tree(tree, P)}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("page_size,capacity,width", [(1, 8, 3), (1, 20, 5), (4, 12, 4), (16, 30, 6)])
def test_overlapping_requests(sglang, seed, page_size, capacity, width):
    from kvreplay.engine.lifecycle import replay_lifecycle

    trace = tree_trace(seed, 300, page_size)
    rng = np.random.default_rng(seed)
    events, running = [], []
    for i in range(len(trace)):
        while running and (len(running) >= width or rng.random() < 0.4):
            events.append(-running.pop(int(rng.integers(len(running)))) - 1)
        events.append(i)
        running.append(i)
    events += [-i - 1 for i in running]
    real = run_sglang_lifecycle(sglang, trace, capacity, page_size, events)
    sizes, last = [], {}

    def look(k, cache):
        sizes.append((cache.tree_pages, cache.tree_pages - cache.protected, cache.protected, capacity - cache.tree_pages - cache.outside))
        last["cache"] = cache

    ref = replay_lifecycle(trace, "radix", capacity, events, page_size, engine="reference", on_event=look)
    comp = replay_lifecycle(trace, "radix", capacity, events, page_size)
    expected = np.minimum(np.array(real["hits"], dtype=np.int64), trace.input_length).tolist()
    for ours in (ref, comp):
        assert ours.hit_tokens.tolist() == expected
        assert ours.refused.tolist() == real["refused"]
        assert ours.counters == ref.counters and ours.held_at_end == 0
    for k, (mine, theirs) in enumerate(zip(sizes, real["sizes"])):
        assert mine == theirs, f"(tree, evictable, protected, free) pages differ after event {k} ({events[k]})"
    nodes, leaves = kvreplay_tree(last["cache"])
    assert nodes == real["tree"][0], "the final trees differ"
    assert leaves == real["tree"][1], "the leaves' LRU order differs"
    assert any(real["refused"]) and ref.counters["evictions"] > 0
