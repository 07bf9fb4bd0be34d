"""kvreplay's SGLang hybrid reference (hybrid/unified_radix.py) against SGLang 0.5.23's own
``UnifiedRadixCache`` with FULL+SWA, FULL+MAMBA and FULL+SWA+MAMBA components, request by request.

Opt-in, as the other real-engine tests:

    PYTHONPATH=/tmp/h4_torch KVREPLAY_SGLANG_ROOT=/tmp/sgl KVREPLAY_ENGINES=1 \\
        python -m pytest -q tests/real_engines/test_sglang_hybrid.py

Needs torch (a CPU build) and SGLang's source tree: ``$KVREPLAY_SGLANG_ROOT`` (an extracted wheel
used as is, which also holds the bundled Rust tree core), else the ``.py`` files of the 0.5.23
wheel, found or downloaded and extracted by tests/real_engines/sglang_scheduler.py's
``extracted_root`` (the Rust core's tests are then skipped). Token ids come from
test_radix_engine.py's ``synth_tokens`` (page j of a prompt is id*P .. id*P+P-1 for its j-th block
id: equal ids, equal pages).

SGLang's code that runs, unmodified: ``mem_cache/unified_radix_cache.py`` (UnifiedRadixCache),
the tree cores (``unified_cache/unified_tree_core.py`` and the Rust ``RustUnifiedTreeCore``,
both), ``unified_cache/components/{full,swa,mamba}.py``; the pools and allocators
(``SWAKVPool`` with tiny real buffers, ``SWATokenToKVPoolAllocator``, ``TokenToKVPoolAllocator``,
``PagedTokenToKVPoolAllocator``, ``ReqToTokenPool``, ``MambaSlotAllocator``, the methods of
``HybridReqToTokenPool``); the scheduler-side helpers ``match_kv_cache``, ``checkpoint_kv_cache``,
``release_kv_cache`` (``mem_cache/common.py``), ``alloc_req_slots``, ``alloc_token_slots``,
``alloc_paged_token_slots_extend`` (``mem_cache/allocation.py``), ``ScheduleBatch.maybe_evict_swa``
and, for where an extra_buffer prefill keeps its Mamba state,
``ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend``; ``ReqKvInfo``.

The test plays the scheduler for one request at a time, as kvreplay serves a trace: match
(limit L - 1) and lock (``PrefillAdder``), then per prefill chunk ``alloc_for_extend``'s calls in
its order, and after the forward ``checkpoint_kv_cache`` (a chunk that is not the last) or
``release_kv_cache(checkpoint=True)`` (the request finishes with its first token: kvreplay has no
decode). Where the chunks end is the test's choice, the same as kvreplay's (the first cut at
``floorP(chunk)`` when the page-rounded rest exceeds it, later ones at ``chunk``: what PrefillAdder
does when no budget binds; PrefillAdder itself is not driven).

Stubbed, because this path never reaches them or they need a model / GPU:
- third-party modules not installed here (orjson, psutil, pybase64, starlette, pydantic_core, zmq,
  IPython, pydantic, aiohttp, tvm_ffi, transformers, triton, dill, openai, partial_json_parser,
  regex) and SGLang's model layers, model executor, model configs, kernels, grammar, parsers and
  the overlap-scheduler utilities: inert stubs (imported at module level by files the cache code
  imports, not called); ``sglang`` and ``sglang.srt.configs`` are imported without their
  ``__init__`` (it patches HF transformers); ``torch.compile`` is the identity while loading;
- the runtime config bags (published from a resolved ServerArgs, which needs a model): strict
  bags holding the ServerArgs defaults of the fields this path reads, anything else raises;
  ``get_parallel().dcp_enabled`` False; ``is_unified_kv_triton`` False (its value off ROCm);
- ``mamba_cache_chunk_size`` = max(64, page size) and ``mamba_checkpoint_grid`` (they read the
  published ServerArgs / HF config: 64 is FLA's CHUNK_SIZE, the default model mamba_chunk_size);
- ``MambaPool`` (the state tensors; it needs the model's state shapes): a stand-in whose copies do
  nothing, inside the real ``HybridReqToTokenPool`` (built with ``object.__new__``, the real
  ``ReqToTokenPool.__init__`` and the attributes its ``__init__`` sets, the real
  ``MambaSlotAllocator``; extra_buffer with the overlap scheduler's two ping-pong slots);
- ``Req`` and ``ScheduleBatch``: small stand-ins holding the fields these functions read (the real
  ``ReqKvInfo`` inside); the model forward does not run.

Compared after every request: its hit tokens, and the free pages of each pool, the free Mamba
slots, the tree's full-KV pages, its live-SWA pages and its Mamba states. Workloads: the hand
cases of tests/policies/test_radix_hybrid.py; a multi-turn workload (300 requests: conversations
growing over three shared system prompts, as test_vllm_hybrid.py's) at block size 16 with full
only (the UnifiedRadixCache(FULL) 0.5.23 builds for a plain model), full + sliding window 128,
full + Mamba (extra_buffer), full + sliding window 100 (not a whole number of pages) + Mamba, two
pool sizes (the small one evicts) and two chunk sizes (8192: none; 256), and at block size 1 with
full + sliding window 8 and full + Mamba (no_buffer); Mooncake's conversation trace (its first 400
requests, each 512-token block a 16-token one, chunks of 512) with the four block-size-16
layouts at two pool sizes. Each on the Python and on the Rust tree core.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import math
import os
import sys
import types
from array import array
from pathlib import Path

import pytest

from conftest import MOONCAKE, shared_path
from kvreplay.hybrid.coordinator import Group
from kvreplay.hybrid.unified_radix import UnifiedRadix

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
from engine_stubs import StubModule, engine_modules  # noqa: E402
from sglang_scheduler import SGLangMissing, extracted_root, hybrid_req_to_token_pool  # noqa: E402
from hybrid_workloads import BS, mooncake, multi_turn  # noqa: E402
from test_radix_engine import VERSION, synth_tokens  # noqa: E402

pytestmark = pytest.mark.engines

THIRD_PARTY_STUBS = ("orjson", "psutil", "pybase64", "starlette", "pydantic_core", "zmq", "IPython", "pydantic",
                     "aiohttp", "tvm_ffi", "transformers", "triton", "dill", "openai", "partial_json_parser", "regex")
SGLANG_STUBS = ("sglang.srt.layers", "sglang.srt.model_executor", "sglang.srt.configs", "sglang.kernels",
                "sglang.srt.constrained", "sglang.srt.parser", "sglang.srt.function_call",
                "sglang.srt.managers.overlap_utils")
BARE_PACKAGES = ("sglang", "sglang.srt.configs")  # imported without their __init__
MAMBA_CHUNK = 64


# ---- loading SGLang's cache modules with inert stubs for the rest ----------------------------------

class _StubModule(StubModule):
    """(no real submodules: SGLang's cache modules are loaded by the finder)"""


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in THIRD_PARTY_STUBS or any(name == p or name.startswith(p + ".") for p in SGLANG_STUBS):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def _owned(name, module) -> bool:
    return name == "sglang" or name.startswith("sglang.") or isinstance(module, _StubModule)


class _Bag:
    """A strict config bag: the fields this path reads, at their ServerArgs defaults."""

    def __init__(self, name, **fields):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_fields", fields)

    def __getattr__(self, key):
        fields = object.__getattribute__(self, "_fields")
        if key in fields:
            return fields[key]
        raise AttributeError(f"config bag {object.__getattribute__(self, '_name')!r}: {key!r} is not set by the test")


class RealSGLang:
    """SGLang's unified cache modules, loaded from a source tree into a private module set."""

    def __init__(self, root: Path):
        import torch

        self.root = root
        self.saved: dict = {}
        self.page = None
        compile_ = torch.compile
        torch.compile = lambda fn=None, *a, **k: (lambda f: f) if fn is None else fn
        try:
            with self.active():
                for pkg in BARE_PACKAGES:
                    module = types.ModuleType(pkg)
                    module.__path__ = [str(root.joinpath(*pkg.split(".")))]
                    sys.modules[pkg] = module
                imp = importlib.import_module
                rc = imp("sglang.srt.runtime_context")
                rc._CONTEXT._config_bags = {
                    "disagg": _Bag("disagg", disaggregation_mode="null",
                                   disaggregation_decode_retraction_backup="none"),
                    "memory": _Bag("memory"),
                    "exec": _Bag("exec", mamba=_Bag("exec.mamba", mamba_max_states_per_path=-1,
                                                    enable_mamba_extra_buffer_lazy=False, mamba_track_interval=256)),
                    "serving": _Bag("serving", strip_thinking_cache=False),
                    "spec": _Bag("spec", speculative_algorithm=None),
                    "schedule": _Bag("schedule"),
                }
                rc.get_parallel = lambda: _Bag("parallel", dcp_enabled=False)
                imp("sglang.srt.layers.attention.dsv4.unified_kv_gate").is_unified_kv_triton = lambda: False
                self.batch = imp("sglang.srt.managers.schedule_batch")
                self.allocation = imp("sglang.srt.mem_cache.allocation")
                self.common = imp("sglang.srt.mem_cache.common")
                self.mamba_alloc = imp("sglang.srt.mem_cache.allocator.mamba")
                self.swa_alloc = imp("sglang.srt.mem_cache.allocator.swa")
                self.paged = imp("sglang.srt.mem_cache.allocator.paged")
                self.token = imp("sglang.srt.mem_cache.allocator.token")
                self.params = imp("sglang.srt.mem_cache.cache_init_params")
                self.pools = imp("sglang.srt.mem_cache.memory_pool")
                self.swa_pool = imp("sglang.srt.mem_cache.swa_memory_pool")
                self.components = imp("sglang.srt.mem_cache.unified_cache.components")
                self.mamba_comp = imp("sglang.srt.mem_cache.unified_cache.components.mamba")
                self.unified = imp("sglang.srt.mem_cache.unified_radix_cache")
                self.allocation.get_parallel = rc.get_parallel
                self.batch.get_parallel = rc.get_parallel
                try:
                    self.rust = imp("sglang.srt.mem_cache.rust_tree_core.adapter")
                except Exception as e:  # only the .py files were extracted
                    self.rust = None
                    self.rust_missing = repr(e)
        finally:
            torch.compile = compile_

    def active(self):
        """sglang.* resolves to this copy (and lazy imports inside SGLang keep working) meanwhile."""
        return engine_modules(self, _owned, _Finder(), path=self.root)

    def set_page_size(self, P: int) -> None:
        """mamba_cache_chunk_size / mamba_checkpoint_grid as the published ServerArgs give them."""
        chunk = max(MAMBA_CHUNK, P)
        for module in (self.mamba_comp, self.batch) + ((self.rust,) if self.rust is not None else ()):
            module.mamba_cache_chunk_size = lambda: chunk
            if hasattr(module, "mamba_checkpoint_grid"):
                module.mamba_checkpoint_grid = lambda p: math.lcm(chunk, p)

    def build(self, core: str, groups, P: int, full_pages: int, swa_pages: int, mamba_slots: int, strategy: str,
              max_len: int):
        import torch

        self.set_page_size(P)
        ct = self.components.ComponentType
        swa = [g for g in groups if g.kind == "sliding_window"]
        mamba = any(g.kind == "mamba" for g in groups)
        full_tokens = full_pages * P
        rows = 4
        if swa:
            kv = self.swa_pool.SWAKVPool(size=full_tokens, size_swa=swa_pages * P, page_size=P, dtype=torch.bfloat16,
                                         head_num=1, head_dim=1, swa_attention_layer_ids=[0],
                                         full_attention_layer_ids=[1], device="cpu")
            allocator = self.swa_alloc.SWATokenToKVPoolAllocator(full_tokens, swa_pages * P, P, torch.bfloat16, "cpu",
                                                                 kv, need_sort=False)
        elif P == 1:
            allocator = self.token.TokenToKVPoolAllocator(full_tokens, torch.bfloat16, "cpu", None, False)
        else:
            allocator = self.paged.PagedTokenToKVPoolAllocator(full_tokens, P, torch.bfloat16, "cpu", None, False)
        if mamba:
            r2t = self._hybrid_req_to_token_pool(rows, max_len, mamba_slots, strategy == "extra_buffer")
        else:
            r2t = self.pools.ReqToTokenPool(size=rows, max_context_len=max_len, device="cpu", enable_memory_saver=False)
        components = (ct.FULL,) + ((ct.SWA,) if swa else ()) + ((ct.MAMBA,) if mamba else ())
        params = self.params.CacheInitParams(
            disable=False, req_to_token_pool=r2t, token_to_kv_pool_allocator=allocator, page_size=P,
            sliding_window_size=swa[0].window if swa else None,
            enable_mamba_extra_buffer=mamba and strategy == "extra_buffer",
            tree_components=components, tree_core_backend=core)
        return self.unified.UnifiedRadixCache(params)

    def _hybrid_req_to_token_pool(self, size, max_len, mamba_slots, extra_buffer):
        """The real HybridReqToTokenPool minus the MambaPool tensors (sglang_scheduler.py's
        hybrid_req_to_token_pool), two ping-pong slots a request with extra_buffer."""
        return hybrid_req_to_token_pool(self.pools, self.mamba_alloc, size=size, max_context_len=max_len,
                                        mamba_slots=mamba_slots, extra_buffer=extra_buffer, ping_pong=2,
                                        initial_tracking=2)


@pytest.fixture(scope="module")
def real() -> RealSGLang:
    pytest.importorskip("torch", reason="SGLang's cache needs torch (the CPU build is enough)")
    env = os.environ.get("KVREPLAY_SGLANG_ROOT")
    try:
        root = Path(env) if env else extracted_root(download=True)
    except SGLangMissing as e:
        pytest.skip(str(e))
    if not (root / "sglang" / "srt" / "mem_cache" / "unified_radix_cache.py").exists():
        pytest.skip(f"{root} holds no SGLang {VERSION} source tree")
    return RealSGLang(root)


# ---- playing the scheduler ---------------------------------------------------------------------------

class _Finished:
    """A finish reason (the length limit)."""


class Req:
    """The fields of schedule_batch.Req that the cache and the helpers read."""

    def __init__(self, real, rid, tokens):
        self.rid = rid
        self.origin_input_ids = array("q", tokens)
        self.output_ids = array("q")
        self.full_untruncated_fill_ids = array("q")
        self.kv = real.batch.ReqKvInfo()
        self.extra_key = self.cache_salt = self.priority = self.session = self.session_id = None
        self.kv_rotation_base = self.lock = self.last_node = None
        self.prefix_len = 0
        self.extend_end = None
        self.swa_branching_seqlen = self.mamba_branching_seqlen = None
        self.finished_reason = self.finished_len = self.to_finish = None
        self.decode_batch_idx = self.extend_batch_idx = 0
        self.skip_radix_cache_insert = False
        self.return_logprob = False
        self.dllm_config = None
        self.last_host_node = self.best_match_node = None
        self.host_hit_length = self.swa_host_hit_length = self.mamba_host_hit_length = 0
        self.num_matched_prefix_tokens = 0

    def finished(self):
        return self.finished_reason is not None

    @property
    def seqlen(self):
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def extend_len(self):
        return self.extend_end - self.prefix_len

    def refresh_fill_ids(self):
        n_have = len(self.full_untruncated_fill_ids) - len(self.origin_input_ids)
        if n_have < 0:
            self.full_untruncated_fill_ids = array("q", self.origin_input_ids)
            n_have = 0
        self.full_untruncated_fill_ids.extend(self.output_ids[n_have:])

    def get_fill_ids(self):
        return self.full_untruncated_fill_ids[: self.extend_end]

    def _compute_max_prefix_len(self, input_len):  # schedule_batch.py:1766 (no logprobs, no dLLM)
        return max(input_len - 1, 0)

    def owned_kv_len(self):  # schedule_batch.py:1552 with finished_len None
        return self.kv.kv_committed_len


class Batch:
    """The ScheduleBatch fields its borrowed methods read."""

    class _Mode:
        def is_decode(self):
            return False

        def is_extend(self):
            return True

    def __init__(self, real, tree, reqs):
        self.maybe_evict_swa = types.MethodType(real.batch.ScheduleBatch.maybe_evict_swa, self)
        self._swa_eviction_trigger = types.MethodType(real.batch.ScheduleBatch._swa_eviction_trigger, self)
        self._evict_swa = types.MethodType(real.batch.ScheduleBatch._evict_swa, self)
        batch_class = real.batch.ScheduleBatch
        self.prepare_mamba = types.MethodType(batch_class._mamba_radix_cache_v2_req_prepare_for_extend, self)
        self.tree_cache = tree
        self.token_to_kv_pool_allocator = tree.token_to_kv_pool_allocator
        self.req_to_token_pool = tree.req_to_token_pool
        self.model_config = types.SimpleNamespace(hf_text_config=types.SimpleNamespace(mamba_chunk_size=MAMBA_CHUNK))
        self.reqs = reqs
        self.forward_mode = Batch._Mode()
        self.prefix_lens = [r.prefix_len for r in reqs]
        self.enable_overlap = False
        self.forward_iter = 0


def chunk_ends(hit: int, L: int, chunk: int | None, P: int) -> list:
    """Where PrefillAdder cuts a prompt when no budget binds: add_one_req (schedule_policy.py:1655-1672)
    cuts the first chunk at floorP(chunk) when ceilP(rest) exceeds it; add_chunked_req (1140-1220) the
    next ones at chunk."""
    ends, pos = [], hit
    while pos < L:
        if chunk is None:
            end = L
        elif not ends:
            end = L if -(-(L - pos) // P) * P <= chunk else pos + chunk // P * P
        else:
            end = pos + min(L - pos, chunk)
        ends.append(end)
        pos = end
    return ends


def run_sglang(real, core, requests, groups, P, *, full_pages, swa_pages, mamba_slots, strategy, chunk):
    """Serve (hash ids, prompt tokens) requests one at a time through SGLang's own cache: per request
    (hit tokens, free full pages, free SWA pages, free Mamba slots, tree pages, live-SWA pages, states)."""
    import torch

    with real.active():
        max_len = max(length for _, length in requests) + P
        tree = real.build(core, groups, P, full_pages, swa_pages, mamba_slots, strategy, max_len)
        allocation, common = real.allocation, real.common
        allocator = tree.token_to_kv_pool_allocator
        swa = tree.supports_swa()
        mamba = tree.supports_mamba()
        extra_buffer = getattr(tree, "enable_mamba_extra_buffer", False)
        out = []
        for k, (ids, L) in enumerate(requests):
            req = Req(real, f"r{k}", synth_tokens(ids, L, P))
            req.refresh_fill_ids()
            # Req.init_next_round_input -> match_kv_cache (limit L - 1); PrefillAdder locks the match
            common.match_kv_cache(req, tree, req.full_untruncated_fill_ids, cow_mamba=mamba,
                                  max_prefix_len=req._compute_max_prefix_len(L))
            req.kv.cache_protected_len = req.prefix_len
            hit = req.prefix_len
            req.lock = tree.lock(req.last_node)
            for end in chunk_ends(hit, L, chunk, P):
                req.extend_end = end
                # alloc_for_extend (allocation.py:374-488)
                batch = Batch(real, tree, [req])
                batch.maybe_evict_swa()
                prefix = req.prefix_len
                row_prefix = (tree.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :prefix].to(torch.int64)
                              if req.kv.holds_kv else
                              tree.prefix_device_indices(req) if prefix else torch.empty(0, dtype=torch.int64))
                allocation.alloc_req_slots(tree.req_to_token_pool, [req], tree)
                n = end - prefix
                if P == 1:
                    loc = allocation.alloc_token_slots(tree, n)
                else:
                    last = row_prefix[-1:] if len(row_prefix) else torch.full((1,), -1, dtype=torch.int64)
                    pl = torch.tensor([prefix], dtype=torch.int64)
                    sl = torch.tensor([end], dtype=torch.int64)
                    loc = allocation.alloc_paged_token_slots_extend(tree, pl, pl, sl, sl, last, n)
                row = tree.req_to_token_pool.req_to_token[req.kv.req_pool_idx]
                row[:prefix] = row_prefix.to(row.dtype)
                row[prefix:end] = loc.to(row.dtype)
                req.kv.kv_allocated_len = req.kv.kv_committed_len = end
                req.extend_batch_idx += 1
                if extra_buffer:  # ScheduleBatch.prepare_for_extend's Mamba tracking (schedule_batch.py:2999)
                    batch.prepare_mamba(req)
                # the forward; process_batch_result_prefill
                if end < L:
                    common.checkpoint_kv_cache(req, tree)  # stash_chunked_request
                    req.refresh_fill_ids()  # init_next_round_input of the chunked request
                else:
                    req.output_ids.append(10**12 + k)
                    req.finished_reason = _Finished()
                    common.release_kv_cache(req, tree, checkpoint=True)
            out.append((hit,) + sizes(tree, allocator, swa, mamba, P))
    return out


def sizes(tree, allocator, swa, mamba, P):
    """(free full pages, free SWA pages, free Mamba slots, tree pages, live-SWA pages, Mamba states)."""
    assert tree.full_protected_size() == 0, "a lock outlived its request"
    if swa:
        full_free, swa_free = allocator.full_available_size() // P, allocator.swa_available_size() // P
        live = (tree.swa_evictable_size() + tree.swa_protected_size()) // P
    else:
        full_free, swa_free, live = allocator.available_size() // P, 0, 0
    states = tree.mamba_evictable_size() + tree.mamba_protected_size() if mamba else 0
    slots = tree.req_to_token_pool.mamba_allocator.available_size() if mamba else 0
    return full_free, swa_free, slots, tree.full_evictable_size() // P, live, states


def run_kvreplay(requests, groups, P, *, full_pages, swa_pages, mamba_slots, strategy, chunk):
    cache = UnifiedRadix(groups, P, full_pages=full_pages, swa_pages=swa_pages, mamba_slots=mamba_slots,
                         chunk_tokens=chunk, mamba_strategy=strategy)
    out = []
    for ids, L in requests:
        hit = cache.serve(ids, L)
        cache.check()
        out.append((hit * P, cache.pools.full_free, cache.pools.swa_free, cache.pools.mamba_free, cache.resident_count(),
                    cache.swa_resident_count(), cache.mamba_state_count()))
    return out, cache.stats


def compare(real, core, requests, groups, P, **pools):
    if core == "rust" and real.rust is None:
        pytest.skip(f"the Rust tree core is not in this source tree: {real.rust_missing}")
    engine = run_sglang(real, core, requests, groups, P, **pools)
    ours, stats = run_kvreplay(requests, groups, P, **pools)
    for k, (theirs, mine) in enumerate(zip(engine, ours)):
        assert mine == theirs, (f"request {k}: SGLang (hit, full free, swa free, mamba free, tree pages, live swa, "
                                f"states) {theirs}, kvreplay {mine}")
    assert len(engine) == len(ours) == len(requests)
    return [h for h, *_ in engine], stats


# ---- workloads ----------------------------------------------------------------------------------------



LAYOUTS = {
    "full": [Group("full")],
    "full+sliding128": [Group("full"), Group("sliding_window", window=128)],
    "full+mamba": [Group("full"), Group("mamba")],
    "full+sliding100+mamba": [Group("full"), Group("sliding_window", window=100), Group("mamba")],
}
CORES = ["python", "rust"]


def _hand_cases():
    """tests/policies/test_radix_hybrid.py's HAND_CASES (each number there derived by hand)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "policies" / "test_radix_hybrid.py"
    spec = importlib.util.spec_from_file_location("test_radix_hybrid_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HAND_CASES


HAND_CASES = _hand_cases()


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("name", list(HAND_CASES))
def test_hand_cases(real, core, name):
    config, requests = HAND_CASES[name]
    config = dict(config)
    groups, P = config.pop("groups"), config.pop("block_size")
    ours = UnifiedRadix(groups, P, **config)  # its resolved pools (defaults included)
    numbers = {}
    requests = [([numbers.setdefault(x, len(numbers)) for x in ids], L) for ids, L in requests]
    compare(real, core, requests, groups, P, full_pages=ours.pools.full_pages, swa_pages=ours.pools.swa_pages,
            mamba_slots=ours.pools.mamba_slots_total, chunk=ours.chunk_tokens,
            strategy="extra_buffer" if ours.extra_buffer or not ours.has_mamba else "no_buffer")


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("pool", ["small", "large"])
@pytest.mark.parametrize("chunk", [8192, 256])
def test_multi_turn(real, core, layout, pool, chunk):
    requests = multi_turn()
    full = 400 if pool == "small" else 4000
    pools = dict(full_pages=full, swa_pages=int(full * 0.8) if pool == "large" else 160,
                 mamba_slots=24 if pool == "small" else 4000, strategy="extra_buffer", chunk=chunk)
    hits, stats = compare(real, core, requests, LAYOUTS[layout], BS, **pools)
    assert sum(hits) > 0
    if pool == "small":
        assert stats["evictions"] + stats["swa_evictions"] + stats["mamba_evictions"] > 0


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("layout", ["full+sliding8", "full+mamba-no_buffer"])
@pytest.mark.parametrize("pool", ["small", "large"])
def test_multi_turn_page_size_1(real, core, layout, pool):
    # block size 1: every page one token; windows of a few tokens; Mamba's no_buffer strategy
    requests = [(ids[:40], min(40, len(ids))) for ids, _ in multi_turn(seed=2, n=200)]
    groups = ([Group("full"), Group("sliding_window", window=8)] if layout == "full+sliding8"
              else [Group("full"), Group("mamba")])
    pools = dict(full_pages=150 if pool == "small" else 3000, swa_pages=90 if pool == "small" else 2400,
                 mamba_slots=10 if pool == "small" else 3000,
                 strategy="no_buffer" if "mamba" in layout else "extra_buffer", chunk=16)
    hits, stats = compare(real, core, requests, groups, 1, **pools)
    assert sum(hits) > 0
    if pool == "small":
        assert stats["evictions"] + stats["swa_evictions"] + stats["mamba_evictions"] > 0


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("pool", ["small", "large"])
def test_mooncake_conversation(real, core, layout, pool):
    requests = mooncake(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    full = 3000 if pool == "small" else 6000
    pools = dict(full_pages=full, swa_pages=int(full * 0.8) if pool == "large" else 1000,
                 mamba_slots=300 if pool == "small" else 6000, strategy="extra_buffer", chunk=512)
    hits, stats = compare(real, core, requests, LAYOUTS[layout], BS, **pools)
    assert sum(hits) > 0
    if pool == "small":
        assert stats["evictions"] + stats["swa_evictions"] + stats["mamba_evictions"] > 0
