"""SGLang 0.5.23's own scheduler code, unmodified, on CPU, over a trace.

A harness (not a test: pytest does not collect it) that serves a trace through SGLang's own
scheduling code -- ``Scheduler.get_next_batch_to_run`` and the methods it calls, ``SchedulePolicy``
(fcfs, lpm), ``PrefillAdder`` with its ``PrefillBudget``, ``ScheduleBatch`` (prepare, filter, merge,
``check_decode_mem``, ``retract_decode``), ``Req``, ``NewTokenRatioTracker``, the real
``RadixCache`` over a real ``PagedTokenToKVPoolAllocator`` and ``ReqToTokenPool``, and the real
result processing (``SchedulerBatchResultProcessor``) -- in simulated time with a constant step
time, so that kvreplay's ``engine_style="sglang"`` simulator can be checked against the real thing
request by request (tests/real_engines/test_sglang_scheduler.py).

Needs: the sglang 0.5.23 wheel (a zip: its ``sglang/**/*.py`` are extracted once, nothing is
installed; looked for in $KVREPLAY_SGLANG_WHEEL, tests/real_engines/.cache/ and /tmp/engines/; an
extracted tree in $KVREPLAY_SGLANG_ROOT is used as is) and, in the interpreter, torch (a CPU build
is enough), numpy and msgspec. No GPU.

    python tests/real_engines/sglang_scheduler.py ../shared/traces/mooncake/conversation_trace.jsonl \\
        --pages 300 --page-size 512 --schedule-policy lpm --step-ms 10 --limit 300 -o out.json

What is SGLang's code
---------------------
Loaded from the wheel as they are (``REAL_MODULES``): ``sglang/srt/managers/{scheduler,
schedule_policy,schedule_batch}.py``, ``managers/scheduler_components/{batch_result_processor,
new_token_ratio_tracker}.py``, ``mem_cache/{radix_cache,base_prefix_cache,evict_policy,utils,
cache_init_params,prefill_budget,common,memory_pool,allocation,allocation_sizing}.py``,
``mem_cache/allocator/{__init__,base,paged}.py``, ``mem_cache/unified_cache/component_type.py``,
``sampling/sampling_params.py``, ``beam_search/batch_tail.py``, ``environ.py`` (every ``SGLANG_*``
knob at its default unless the environment sets it), and the base classes of Req and
ScheduleBatch (``dllm/mixin/req.py``, ``disaggregation/decode_schedule_batch_mixin.py``: a stub
base would turn every missing attribute into a stub; the harness checks that no loaded class
derives from a stub).

Of ``Scheduler`` (whose mixins are stubs) only these methods are used, taken from the class as
they are and set on a plain object that holds nothing else (``SCHEDULER_METHODS``):
get_next_batch_to_run, get_new_batch_prefill, _get_new_batch_prefill_raw, update_running_batch,
get_num_allocatable_reqs, get_prefill_adder_class, stash_chunked_request,
process_pending_chunked_abort, _process_hicache_events, _should_defer_prefill,
_arm_prefill_decode_interval, _add_request_to_queue, _set_or_validate_priority,
_abort_on_queued_limit, _prefetch_kvcache, _reqs_finishing_inflight, init_req_max_new_tokens,
is_fully_idle, _pp_microbatches_drained. Every attribute they read is set by make_scheduler (a read
it did not foresee raises), each as Scheduler.__init__ sets it for this configuration.

Single definitions compiled from the wheel's source into otherwise stubbed modules
(``DEFS_FROM_WHEEL``, ``UTILS_FROM_WHEEL``), because the loaded code compares against them or
computes with them and their modules import a model runner, a web server or CUDA: ForwardMode,
CaptureHiddenMode, get_required_capture_hidden_mode, get_server_return_hidden_states_mode
(model_executor/forward_batch_info.py), DisaggregationMode (disaggregation/utils.py),
SpeculativeAlgorithm (speculative/spec_info.py), page_interleave_shard_size
(mem_cache/allocator/page_interleave.py), mamba_checkpoint_grid and mamba_track_grid
(runtime_context.py; the Mamba path), and from utils/common.py ceil_div, ceil_align,
next_power_of_2, get_num_new_pages, get_bool_env_var, get_int_env_var, flatten_nested_list,
flatten_arrays_to_pinned_cpu, async_h2d, is_pin_memory_available, is_hip, is_cuda, is_xpu,
is_mps, is_gfx95_supported, support_triton, is_cpu, is_npu.

What is the harness's, and why
------------------------------
- The model forward (``Scheduler.run_batch`` -> TpModelWorker, attention backends, CUDA graphs,
  sampling) does not run: it is what needs a GPU and weights. A batch takes a constant step
  (``Settings.step_seconds``, optionally + ``step_seconds_per_prefill_token`` x its prompt
  tokens) and returns one new token per request (``_Result``, a GenerationBatchResult without
  logprobs or speculative outputs); tokens are unique ids, never EOS, so a request stops at
  ``max_new_tokens`` (the trace's output_length). With it, ``SamplingBatchInfo`` (the sampling
  tensors) is a stub: its penalizer_orchestrator.is_required is false, as for requests without
  penalties.
- Triton kernels do not run on CPU: ``current_platform`` says no triton, so SGLang's own torch
  twins run -- alloc_extend_naive / alloc_decode_naive (allocator/paged.py), the Python write loop
  of write_cache_indices and get_last_loc_torch (allocation.py, attention backend
  "torch_native"); no pinned memory.
- The outer loop is ``event_loop_normal`` (scheduler.py:2026) played in simulated time: at time t,
  every request that arrived by t is added (the tokenizer manager's part: a Req with a normalized
  SamplingParams, then the real init_req_max_new_tokens and _add_request_to_queue, as
  handle_generate_request does); get_next_batch_to_run (prefill batch if one can be formed, else
  the decode batch, with check_decode_mem and retract_decode inside update_running_batch); the
  step; the real process_batch_result_prefill / _decode (Scheduler.process_batch_result only adds
  load publishing and metrics around them); last_batch = batch. With no batch, on_idle's one
  scheduling effect, the new-token ratio reset when is_fully_idle() (scheduler.py:5318), and time
  jumps to the next arrival after a second empty pass.
- Configuration: the runtime config bags (runtime_context.get_schedule() & co.) are harness
  objects holding, for each field the loaded code reads, the ServerArgs default
  (arg_groups/fields/*.py) or the run's setting (schedule_policy, chunked_prefill_size,
  max_prefill_tokens, page_size; pp_max_micro_batch_size = max_running_requests); a field not
  listed raises (default_config). Publishing the real context needs a full ServerArgs resolution
  (model config, GPU memory).
- Components with nothing to do in this configuration are small harness classes that say so:
  grammar manager (no structured output), beam coordinator (no beam search), DP-attention
  adapter (off: returns the batch), ngram-embedding and dLLM managers, output streamer, metrics
  reporter (counters only), the memory saver (null contexts), the scheduler-stage timing
  decorator (identity), routed-experts / indexer capturers (none).
- Every other ``sglang.*`` module, and triton, sgl_kernel, psutil, ... when not installed, is an
  inert stub (false, empty). A run may read only the stubs in ``ALLOWED_STUB_READS`` (request time
  stamps, prefill metrics, disabled KV events, the sampling tensors); any other read fails the run.

Hybrid SWA models (``Settings.sliding_window``)
----------------------------------------------
With a window W (tokens), make_scheduler builds what SGLang builds for a model with sliding-window
and full-attention layers (``make_hybrid_swa_cache``; tests/real_engines/test_sglang_hybrid_scheduler.py
compares it with kvreplay): the real ``SWAKVPool`` (one SWA and one full layer, head_num = head_dim =
1: tiny real buffers), ``SWATokenToKVPoolAllocator`` over it (two ``PagedTokenToKVPoolAllocator``:
``num_pages`` full pages and int(full tokens x ``swa_full_tokens_ratio``) page-aligned SWA tokens,
as pool_configurator.py _solve_pool_sizes), and ``UnifiedRadixCache`` with its FULL and SWA
components (``sliding_window_size`` W, tree components as registry.py create_unified_radix_cache).
The scheduler seat gets ``is_hybrid_swa`` True and ``sliding_window_size`` W; everything else the
loaded code does for SWA it derives itself from the allocator: PrefillAdder's ``SWAPrefillBudget``
(allocator.create_prefill_budget), ScheduleBatch's ``maybe_evict_swa`` / ``_evict_swa``,
``check_decode_mem``, ``retract_decode``, ``release_kv_cache`` / ``checkpoint_kv_cache`` on the
unified tree, ``init_req_max_new_tokens``' SWA clip (max_new_tokens_for_memory).
Loaded as they are for it (``HYBRID_MODULES``, part of ``REAL_MODULES``; a single-pool run never
reaches them): ``mem_cache/{unified_radix_cache,swa_memory_pool,base_swa_memory_pool,
hicache_storage}.py``, ``mem_cache/unified_cache/{__init__,cache_action,unified_tree_core,
unified_tree_core_interface,tree_core_registry,session_ref_tracker}.py``,
``mem_cache/unified_cache/components/{__init__,base,full,swa,mamba}.py``,
``mem_cache/allocator/{swa,token}.py``, ``session/streaming_session.py`` (the cache's streaming
session slots: no request is a streaming one), ``utils/{invariants,rank_consensus_checker}.py``
(invariant checks at their default level; the consensus decorator is the identity unless
SGLANG_ENABLE_RANK_CONSENSUS_CHECKER). Compiled from the wheel (``DEFS_FROM_WHEEL``):
``StorageMedium`` (disaggregation/kv_events.py, which imports zmq and pydantic; the tree core
hands StorageMedium.GPU to its event recorder). Platform probes: ``is_cuda_alike`` False
(MHATokenToKVPool: no alternate stream), ``get_paged_allocator_cls`` None (the in-tree paged
allocator, platforms/interface.py:164).
Harness choices on this path: the Python tree core (``Settings.tree_core``; SGLang's default
SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND is the Rust core, which test_sglang_hybrid.py checks
against the Python one at the cache level); KV events off (the recorder is a stub, as for
RadixCache: ALLOWED_STUB_READS); no HiCache / storage / linker (their attachments stay None);
``tp_worker.model_runner.prefill_aware_swa`` False and SGLANG_OPT_RELEASE_PREFILL_SWA at its
default (off). The same strictness holds: any other stub read fails the run.

Hybrid Mamba models (``Settings.mamba``)
----------------------------------------
With ``mamba=True`` make_scheduler builds what SGLang builds for a model with full-attention and
Mamba / linear-attention layers (Qwen3-Next) on its default (non-unified) memory pools, with
--mamba-radix-cache-strategy auto resolved to extra_buffer (tests/real_engines/
test_sglang_hybrid_scheduler.py compares it with kvreplay): the real ``HybridReqToTokenPool``
(``make_hybrid_req_to_token_pool``: object.__new__, the real ReqToTokenPool.__init__, then the
attributes its __init__ and _init_mamba_pool set, memory_pool.py:1360-1531), holding the real
``MambaSlotAllocator`` over ``mamba_slots`` slots (default num_pages + 4, kvreplay's) and two
ping-pong tracking slots a request (get_mamba_tracking_slots with the overlap schedule on, as
SGLang's default server sizes them, allocation_sizing.py:11; the loop below is the non-overlap
one, which works with either size); the plain ``PagedTokenToKVPoolAllocator`` for the full KV;
``UnifiedRadixCache`` with FULL and MAMBA components and enable_mamba_extra_buffer
(``make_hybrid_mamba_cache``; with ``sliding_window`` too: FULL, SWA and MAMBA over the SWA
allocator of the section above). Everything the loaded code does for Mamba then runs as it is:
the Mamba copy-on-write in match_prefix (init_next_round_input), the scheduler's
``alloc_group_begin`` / ``alloc_group_end`` around admissions and its freeing of a refused
request's slot (scheduler.py:4199-4303), PrefillAdder (``supports_mamba``; the unified-pool slot
budget is off: a plain allocator), ``ensure_mamba_capacity`` / ``alloc_req_slots`` (allocation.py
298-341), ``_mamba_radix_cache_v2_req_prepare_for_extend`` (the prefill's tracked state,
schedule_batch.py:3137-3238) and the deferred COW / clear lists, prepare_for_decode's tracking
mask (every mamba_track_grid tokens), the result processor's tracking
(``_handle_finish_state_updated_req``, ``_mamba_prefix_cache_update``,
batch_result_processor.py:1377-1577), checkpoint / release donating the tracked state, retraction
freeing the request's slots (free_mamba_cache).
Configuration: exec.mamba holds enable_mamba_extra_buffer True, enable_mamba_extra_buffer_lazy
False, mamba_max_states_per_path -1, mamba_track_interval 256 (ServerArgs defaults,
arg_groups/fields/exec_.py 459-540); ``runtime_context.mamba_cache_chunk_size`` is max(64, page)
(arg_groups/overrides.py:1897: the model's mamba_chunk_size, else FLA's CHUNK_SIZE 64, and the
page; it reads the published ServerArgs and the HF config), ``mamba_checkpoint_grid`` and
``mamba_track_grid`` are compiled from the wheel's runtime_context.py (DEFS_FROM_WHEEL); the
model config's hf_text_config.mamba_chunk_size is 64; the context reports the exec and parallel
namespaces published (schedule_policy.py mamba_prefill_chunk_grid then reads
enable_mamba_extra_buffer and dcp_enabled False: grid 1, as without the published context). Loaded
for it (``MAMBA_MODULES``): ``mem_cache/allocator/mamba.py``.
What is the harness's on this path, and why:
- ``MambaPool`` (the state tensors: conv and temporal states per layer, sized by the model's
  state shapes, which need the model config) is ``MambaPoolStandIn``: its size, ReplaySSM off,
  and ``copy_from`` / ``clear_slots`` that do nothing (no forward reads the states); any other
  attribute raises. HybridReqToTokenPool's PLE side pools (ShortConvPool, NGramPool: disabled
  and unregistered without a Qwen4-Exp config) and int8 checkpoint pool (off) are not built;
  nothing on this path reads them.
- ``Tensor.pin_memory`` is the identity during a Mamba run: prepare_for_decode stages the
  tracking mask through pinned memory unconditionally (schedule_batch.py:3830), which torch
  refuses without an accelerator.
The scheduler seat needs nothing more (no method of SCHEDULER_METHODS reads ``is_hybrid_ssm``);
the stub reads allowed are the same. ``RunResult.mamba`` holds the tree's Mamba states and the
free slots at the end; the step log adds the free, evictable and protected slots.

Not driven: the overlap scheduler (``event_loop_overlap``, SGLang's default unless
--disable-overlap-schedule: it schedules step k+1 before processing step k's result; kvreplay has
no such lag either), mixed chunked prefill, priority scheduling and preemption, DP attention,
pipeline parallelism, speculative decoding, hierarchical / storage caches, LoRA, multimodal inputs,
the prefill delayer, and the ServerArgs resolution that sizes chunked_prefill_size and
max_running_requests from GPU memory (given explicitly here).

Tokens
------
Page j of a prompt is ``id*P .. id*P+P-1`` for its j-th block id (the partial tail: its first
tokens), as test_radix_engine.py synthesises them (P = page size = kvreplay's block size): equal
ids give equal pages. Generated tokens are unique (a counter from 2**61), so a page filled by
decoding is cached by SGLang (release_kv_cache) but never hit by another request.
``time.monotonic`` inside radix_cache.py is a counter that ticks on every read (deterministic LRU).

Per request (trace order): ``scheduled_s`` (start of the first prefill step that holds it, before
any retraction), ``hit_tokens`` (its prefix_len then: the device prefix match, page-aligned, at
most L - 1), ``first_token_s`` and ``finish_s`` (end of the step that gave it its first / last
token), ``preemptions`` (Req.retraction_count), ``max_new_tokens`` (after
init_req_max_new_tokens, which clips it to what the pool can ever hold).
"""

from __future__ import annotations

import contextlib
import heapq
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

if str(Path(__file__).resolve().parent) not in sys.path:  # (engine_stubs and wheel_files beside it; pytest runs with --import-mode=importlib)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_stubs import NOT_OVERRIDDEN, StubMeta, StubModule, Stubs, engine_modules  # noqa: E402
from wheel_files import extract_once  # noqa: E402

VERSION = os.environ.get("KVREPLAY_SGLANG_VERSION", "0.5.23")
HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"

REAL_MODULES = {
    "sglang.srt.environ",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.schedule_policy",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.managers.scheduler_components.batch_result_processor",
    "sglang.srt.managers.scheduler_components.new_token_ratio_tracker",
    "sglang.srt.mem_cache.radix_cache",
    "sglang.srt.mem_cache.base_prefix_cache",
    "sglang.srt.mem_cache.evict_policy",
    "sglang.srt.mem_cache.utils",
    "sglang.srt.mem_cache.cache_init_params",
    "sglang.srt.mem_cache.prefill_budget",
    "sglang.srt.mem_cache.common",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.allocation",
    "sglang.srt.mem_cache.allocation_sizing",
    "sglang.srt.mem_cache.allocator",
    "sglang.srt.mem_cache.allocator.base",
    "sglang.srt.mem_cache.allocator.paged",
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.beam_search.batch_tail",
    "sglang.srt.mem_cache.unified_cache.component_type",
    # base classes of Req and ScheduleBatch (a stub base would make every missing attribute a stub)
    "sglang.srt.dllm.mixin.req",
    "sglang.srt.disaggregation.decode_schedule_batch_mixin",
}
#: The hybrid SWA path (Settings.sliding_window): SGLang's UnifiedRadixCache with its FULL and SWA
#: components over SWAKVPool / SWATokenToKVPoolAllocator, as the cache-level test
#: (test_sglang_hybrid.py) builds them, loaded with the rest (a single-pool run never reaches them).
HYBRID_MODULES = {
    "sglang.srt.mem_cache.unified_radix_cache",
    "sglang.srt.mem_cache.unified_cache",
    "sglang.srt.mem_cache.unified_cache.cache_action",
    "sglang.srt.mem_cache.unified_cache.unified_tree_core",
    "sglang.srt.mem_cache.unified_cache.unified_tree_core_interface",
    "sglang.srt.mem_cache.unified_cache.tree_core_registry",
    "sglang.srt.mem_cache.unified_cache.session_ref_tracker",
    "sglang.srt.mem_cache.unified_cache.components",
    "sglang.srt.mem_cache.unified_cache.components.base",
    "sglang.srt.mem_cache.unified_cache.components.full",
    "sglang.srt.mem_cache.unified_cache.components.swa",
    "sglang.srt.mem_cache.unified_cache.components.mamba",
    "sglang.srt.mem_cache.swa_memory_pool",
    "sglang.srt.mem_cache.base_swa_memory_pool",
    "sglang.srt.mem_cache.allocator.swa",
    "sglang.srt.mem_cache.allocator.token",
    "sglang.srt.utils.invariants",
    "sglang.srt.mem_cache.hicache_storage",
    "sglang.srt.session.streaming_session",
    "sglang.srt.utils.rank_consensus_checker",
}
#: The Mamba path (Settings.mamba): MambaSlotAllocator, the free list of HybridReqToTokenPool's
#: state slots (memory_pool.py, real already, holds HybridReqToTokenPool itself).
MAMBA_MODULES = {
    "sglang.srt.mem_cache.allocator.mamba",
}
REAL_MODULES |= HYBRID_MODULES | MAMBA_MODULES
REAL_PACKAGES = {"sglang.srt.mem_cache.allocator", "sglang.srt.mem_cache.unified_cache",
                 "sglang.srt.mem_cache.unified_cache.components"}
THIRD_PARTY_STUBS = {"triton", "sgl_kernel", "cuda", "psutil", "setproctitle", "zmq", "pybase64", "orjson"}
STUBBED: set = set()
STUB_READS: dict = {}


class SGLangMissing(RuntimeError):
    pass


_STUBS = Stubs(STUB_READS)
OVERRIDES: dict = {}


class _StubModule(StubModule):
    stubs = _STUBS

    @property
    def real(self):
        return REAL_MODULES

    def override(self, name):
        return OVERRIDES.get(self.__name__, {}).get(name, NOT_OVERRIDDEN)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if self.root is None:
            if name.split(".")[0] not in THIRD_PARTY_STUBS:
                return None
            STUBBED.add(name)
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if name != "sglang" and not name.startswith("sglang."):
            return None
        if name in REAL_MODULES:
            rel = name.replace(".", "/")
            if name in REAL_PACKAGES:
                return importlib.util.spec_from_file_location(name, self.root / rel / "__init__.py",
                                                              submodule_search_locations=[])
            return importlib.util.spec_from_file_location(name, self.root / (rel + ".py"))
        STUBBED.add(name)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []
        for k, v in OVERRIDES.get(module.__name__, {}).items():
            setattr(module, k, v)


# ---- harness-provided modules: configuration and platform probes --------------------------------

class _Config:
    """A config bag (runtime_context.get_schedule() & co.): the fields this run reads, with the
    values SGLang's ServerArgs defaults give them (arg_groups/fields/*.py) unless the run sets them;
    any other field raises, so nothing the harness did not decide is read."""

    def __init__(self, path: str, values: dict):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name not in values:
            raise AttributeError(f"{object.__getattribute__(self, '_path')}.{name}: not set by the harness")
        CONFIG_READS.add(f"{object.__getattribute__(self, '_path')}.{name}")
        v = values[name]
        return _Config(f"{object.__getattribute__(self, '_path')}.{name}", v) if isinstance(v, dict) else v

    def __setattr__(self, name, value):
        raise AttributeError(f"{self._path} is read-only here")


CONFIG_READS: set = set()
CONFIG: dict = {}


def default_config(settings) -> dict:
    """The config namespaces the loaded code reads. Values: ServerArgs defaults
    (sglang/srt/arg_groups/fields/schedule.py: schedule_policy "fcfs", schedule_conservativeness 1.0,
    retraction_policy "length", prefill_max_requests None, enable_priority_scheduling False, ...),
    except what the run sets (schedule_policy, chunked_prefill_size, max_prefill_tokens, page_size)."""
    mamba = {"enable_mamba_extra_buffer": False, "enable_mamba_extra_buffer_lazy": False}
    if settings.mamba:
        # exec.mamba as ServerArgs resolves it for a hybrid Mamba model with the radix cache on and
        # --mamba-radix-cache-strategy auto -> extra_buffer (arg_groups/fields/exec_.py 459-540;
        # model_override_base.py:260 mamba_extra_buffer_of): not lazy, states per path unlimited,
        # decode tracking every 256 tokens
        mamba = {"enable_mamba_extra_buffer": True, "enable_mamba_extra_buffer_lazy": False,
                 "mamba_max_states_per_path": -1, "mamba_track_interval": MAMBA_TRACK_INTERVAL}
    out = {
        "schedule": {
            "schedule_policy": settings.schedule_policy,
            "schedule_conservativeness": 1.0,
            "retraction_policy": "length",
            "prefill_max_requests": None,
            "schedule_low_priority_values_first": False,
            "enable_priority_scheduling": False,
            "page_size": settings.page_size,
            "chunked_prefill_size": settings.chunked_prefill_size,
            "max_prefill_tokens": settings.max_prefill_tokens,
        },
        "disagg": {"disaggregation_mode": "null", "disaggregation_decode_retraction_backup": "none",
                   "disaggregation_decode_enable_radix_cache": False,
                   "disaggregation_decode_enable_offload_kvcache": False},
        "memory": {"radix_eviction_policy": "lru", "enable_hisparse": False, "enable_flexkv": False},
        "exec": {"features": {"enable_encoder_swa_bounded_replay": False, "return_hidden_states_mode": None,
                              "enable_return_hidden_states": False},
                 "mamba": mamba,
                 "kernel": {"attention_backend": "torch_native", "prefill_attention_backend": None,
                            "decode_attention_backend": None}},
        "spec": {"speculative_algorithm": None},
        "serving": {"strip_thinking_cache": False},
        "observability": {"enable_metrics": False},
        "parallel": {"pp_max_micro_batch_size": settings.max_running_requests, "pp_size": 1, "dcp_enabled": False,
                     "attn_tp_rank": 0, "tp_size": 1},
        "platform": {"is_cuda": False},
    }
    if settings.mamba:
        # runtime_context.mamba_cache_chunk_size (arg_groups/overrides.py:1897-1925): max(the
        # model's mamba_chunk_size, else FLA's CHUNK_SIZE 64, page size)
        out[MAMBA_CHUNK_KEY] = max(MAMBA_CHUNK_SIZE, settings.page_size)
    return out


MAMBA_CHUNK_SIZE = 64  # FLA's CHUNK_SIZE (kernels/ops/attention/fla/chunk_delta_h.py), the model's mamba_chunk_size
MAMBA_TRACK_INTERVAL = 256  # --mamba-track-interval default (arg_groups/fields/exec_.py:530)
MAMBA_CHUNK_KEY = "<mamba_cache_chunk_size>"  # not a bag: runtime_context.mamba_cache_chunk_size's value


class _Context:
    def is_config_namespace_published(self, name):  # schedule_policy.mamba_prefill_chunk_grid
        # a Mamba run: the exec and parallel bags are what a published context holds for the
        # fields read (enable_mamba_extra_buffer True, dcp_enabled False: the grid is 1)
        return MAMBA_CHUNK_KEY in CONFIG and name in ("exec", "parallel")


def _runtime_context_module():
    def bag(name):
        return lambda: _Config(name, CONFIG[name])
    names = {f"get_{n}": bag(n) for n in ("schedule", "disagg", "memory", "exec", "spec", "serving",
                                           "observability", "parallel", "platform")}
    names.update(
        get_context=lambda: _Context(),
        attention_backends=lambda: ("torch_native", "torch_native"),
        mamba_cache_chunk_size=_mamba_cache_chunk_size,
        # mamba_checkpoint_grid and mamba_track_grid: compiled from the wheel (DEFS_FROM_WHEEL)
        max_speculative_num_draft_tokens=_unreachable("max_speculative_num_draft_tokens"),
    )
    return names


def _mamba_cache_chunk_size():
    """runtime_context.mamba_cache_chunk_size for this run (a Mamba run only: default_config)."""
    if MAMBA_CHUNK_KEY not in CONFIG:
        raise AssertionError("mamba_cache_chunk_size is not reached on this path (mamba only)")
    return CONFIG[MAMBA_CHUNK_KEY]


def _unreachable(name):
    def f(*args, **kwargs):
        raise AssertionError(f"{name} is not reached on this path (mamba / speculative only)")
    return f


def _identity_decorator(*args, **kwargs):
    return lambda func: func


#: Functions taken verbatim from the wheel's sglang/srt/utils/common.py (compiled from its source,
#: one by one: the module as a whole imports a web server, PIL, psutil, triton, ...).
UTILS_FROM_WHEEL = ("ceil_div", "ceil_align", "next_power_of_2", "get_num_new_pages", "get_bool_env_var",
                    "get_int_env_var", "flatten_nested_list", "flatten_arrays_to_pinned_cpu", "async_h2d",
                    "is_pin_memory_available", "is_hip", "is_cuda", "is_xpu", "is_mps", "is_gfx95_supported",
                    "support_triton", "is_cpu", "is_npu")


class _Platform:
    """sglang.srt.platforms.current_platform on a CPU box: no triton (the allocator's torch kernels,
    alloc_extend_naive / alloc_decode_naive, paged.py), no pinned memory."""

    class capabilities:
        supports_triton = False

    @staticmethod
    def is_pin_memory_available(device=None):
        return False

    @staticmethod
    def is_cuda_alike():  # MHATokenToKVPool: no alternate CUDA stream (memory_pool.py ~2297)
        return False

    @staticmethod
    def get_paged_allocator_cls():
        # platforms/interface.py:164: None, the in-tree PagedTokenToKVPoolAllocator (SWATokenToKVPoolAllocator's sub-allocators)
        return None


def _utils_module(root: Path) -> dict:
    import ast
    import functools
    import logging

    import numpy as np
    import torch

    path = root / "sglang/srt/utils/common.py"
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    ns = {"torch": torch, "np": np, "os": os, "logging": logging, "logger": logging.getLogger("sglang.srt.utils"),
          "lru_cache": functools.lru_cache, "functools": functools, "array": array, "Optional": object,
          "List": list, "_warned_bool_env_var_keys": set(), "current_platform": _Platform,
          "is_confidential_compute": lambda: False, "__name__": "sglang.srt.utils.common"}
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in UTILS_FROM_WHEEL:
            module = ast.Module(body=[node], type_ignores=[])
            exec(compile(module, str(path), "exec"), ns)
            found.add(node.name)
    missing = set(UTILS_FROM_WHEEL) - found
    if missing:
        raise SGLangMissing(f"{path}: no {', '.join(sorted(missing))}")
    out = {name: ns[name] for name in UTILS_FROM_WHEEL}
    # platform predicates that read the machine: this run is CPU-only
    out.update(cpu_has_amx_support=lambda: False)
    return out


#: Definitions compiled one by one from the wheel into otherwise stubbed modules: enums the loaded
#: code compares against (a stub never equals an enum member) and their helpers.
DEFS_FROM_WHEEL = {
    "sglang.srt.model_executor.forward_batch_info": ("ForwardMode", "CaptureHiddenMode",
                                                     "get_required_capture_hidden_mode",
                                                     "get_server_return_hidden_states_mode"),
    "sglang.srt.disaggregation.utils": ("DisaggregationMode",),
    "sglang.srt.speculative.spec_info": ("SpeculativeAlgorithm",),
    # 1 for every allocator but the page-interleaved (sharded) one, which this run does not build
    "sglang.srt.mem_cache.allocator.page_interleave": ("page_interleave_shard_size",),
    # the storage tier a KV event names (the unified tree core passes StorageMedium.GPU to its
    # event recorder and release paths; the module itself imports zmq and pydantic)
    "sglang.srt.disaggregation.kv_events": ("StorageMedium",),
    # lcm(mamba_cache_chunk_size(), page) and its lcm with get_exec().mamba.mamba_track_interval
    # (the Mamba path; outside it mamba_cache_chunk_size raises)
    "sglang.srt.runtime_context": ("mamba_checkpoint_grid", "mamba_track_grid"),
}


class _NotBuilt:
    """A class no object of this run is an instance of (isinstance checks against it are False)."""


def _defs_from_wheel(root: Path, module: str, names) -> dict:
    import __future__
    import ast
    import enum
    import functools
    import math

    path = root / (module.replace(".", "/") + ".py")
    source = path.read_text(encoding="utf-8")
    import typing

    ns = {"enum": enum, "IntEnum": enum.IntEnum, "Enum": enum.Enum, "auto": enum.auto, "total_ordering": functools.total_ordering,
          "Optional": typing.Optional, "Union": typing.Union, "Type": typing.Type, "SpecInput": object,
          "CustomSpecAlgo": object, "PageInterleavePoolAllocator": _NotBuilt, "__name__": module, "math": math,
          **_runtime_context_module()}
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec",
                           flags=__future__.annotations.compiler_flag, dont_inherit=True)
            exec(code, ns)
            found.add(node.name)
    if set(names) - found:
        raise SGLangMissing(f"{path}: no {', '.join(sorted(set(names) - found))}")
    return {n: ns[n] for n in names}


class _MemorySaver:
    """TorchMemorySaverAdapter (torch_memory_saver, off by default): regions are plain contexts."""

    @staticmethod
    def create(enable=False):
        assert not enable
        return _MemorySaver()

    def region(self, *args, **kwargs):
        import contextlib
        return contextlib.nullcontext()


def _overrides(root: Path) -> dict:
    utils = _utils_module(root)
    out = {
        "sglang.srt.runtime_context": _runtime_context_module(),
        "sglang.srt.utils": utils,
        "sglang.srt.utils.common": utils,
        "sglang.srt.platforms": {"current_platform": _Platform},
        "sglang.srt.utils.torch_memory_saver_adapter": {"TorchMemorySaverAdapter": _MemorySaver},
        # no routed-experts / indexer top-k capture (batch_result_processor.py _maybe_collect_*)
        "sglang.srt.state_capturer.indexer_topk": {"get_global_indexer_capturer": lambda: None},
        "sglang.srt.state_capturer.routed_experts": {"get_global_experts_capturer": lambda: None},
        # decorators that only time or trace a method (observability/scheduler_stage_metrics.py)
        "sglang.srt.observability.scheduler_stage_metrics": {"scheduler_stage_method": _identity_decorator},
    }
    for module, names in DEFS_FROM_WHEEL.items():
        out.setdefault(module, {}).update(_defs_from_wheel(root, module, names))
    return out


def _owned(name, module) -> bool:
    return name == "sglang" or name.startswith("sglang.") or isinstance(module, _StubModule)


# ---- the wheel --------------------------------------------------------------------------------------

def find_wheel() -> Path | None:
    env = os.environ.get("KVREPLAY_SGLANG_WHEEL")
    if env:
        return Path(env)
    for folder in (CACHE, Path("/tmp/engines")):
        wheels = sorted(folder.glob(f"sglang-{VERSION}-*.whl"))
        if wheels:
            return wheels[0]
    return None


def extracted_root(download: bool = False) -> Path:
    """The wheel's sglang/**/*.py extracted once into tests/real_engines/.cache/sglang-src-VERSION
    ($KVREPLAY_SGLANG_ROOT: an extracted tree used as is)."""
    env = os.environ.get("KVREPLAY_SGLANG_ROOT")
    if env:
        return Path(env)
    root = CACHE / f"sglang-src-{VERSION}"
    if (root / ".complete").exists():
        return root
    wheel = find_wheel()
    if wheel is None and download:
        CACHE.mkdir(parents=True, exist_ok=True)
        ignore = CACHE / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n")
        # The .py files are the same in every platform's wheel: ask for one that exists.
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                   "3.11", "--platform", "manylinux_2_34_x86_64", f"sglang=={VERSION}", "-d", str(CACHE)]
        try:
            subprocess.run(command, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SGLangMissing(f"cannot download sglang=={VERSION}: {e}") from None
        wheel = find_wheel()
    if wheel is None or not wheel.exists():
        raise SGLangMissing(f"no sglang-{VERSION} wheel: set KVREPLAY_SGLANG_WHEEL, or put it in {CACHE} "
                            f"(pip download --no-deps sglang=={VERSION} -d {CACHE})")
    return extract_once(wheel, root, lambda n: n.startswith("sglang/") and n.endswith(".py"))


def check_python_packages() -> None:
    missing = [m for m in ("torch", "numpy", "msgspec") if importlib.util.find_spec(m) is None]
    if missing:
        raise SGLangMissing(f"SGLang's scheduler modules need {', '.join(missing)} (a CPU torch is enough): "
                            f"pip install {' '.join(missing)}")


class Counter:
    """time.monotonic for radix_cache.py: strictly increasing, one tick per read (LRU order is
    deterministic; on Linux the real clock is strictly increasing between reads too)."""

    def __init__(self):
        self.now = 0

    def monotonic(self):
        self.now += 1
        return float(self.now)

    def __getattr__(self, name):
        import time
        return getattr(time, name)


class RealSGLang:
    """SGLang's scheduler modules, loaded from the wheel into a private module set."""

    def __init__(self, root: Path | None = None, download: bool = False):
        check_python_packages()
        self.root = root or extracted_root(download)
        self.saved: dict = {}
        OVERRIDES.clear()
        OVERRIDES.update(_overrides(self.root))
        with self.active():
            imp = importlib.import_module
            self.scheduler = imp("sglang.srt.managers.scheduler")
            self.policy = imp("sglang.srt.managers.schedule_policy")
            self.batch = imp("sglang.srt.managers.schedule_batch")
            self.results = imp("sglang.srt.managers.scheduler_components.batch_result_processor")
            self.ratio = imp("sglang.srt.managers.scheduler_components.new_token_ratio_tracker")
            self.radix = imp("sglang.srt.mem_cache.radix_cache")
            self.base = imp("sglang.srt.mem_cache.base_prefix_cache")
            self.params = imp("sglang.srt.mem_cache.cache_init_params")
            self.memory_pool = imp("sglang.srt.mem_cache.memory_pool")
            self.paged = imp("sglang.srt.mem_cache.allocator.paged")
            self.sampling = imp("sglang.srt.sampling.sampling_params")
            self.common = imp("sglang.srt.mem_cache.common")
            self.forward = imp("sglang.srt.model_executor.forward_batch_info")
            self.disagg = imp("sglang.srt.disaggregation.utils")
            self.environ = imp("sglang.srt.environ")
            self.spec = imp("sglang.srt.speculative.spec_info")
            # the hybrid SWA path (Settings.sliding_window)
            self.unified = imp("sglang.srt.mem_cache.unified_radix_cache")
            self.components = imp("sglang.srt.mem_cache.unified_cache.components")
            self.swa_pool = imp("sglang.srt.mem_cache.swa_memory_pool")
            self.swa_alloc = imp("sglang.srt.mem_cache.allocator.swa")
            # the Mamba path (Settings.mamba)
            self.mamba_alloc = imp("sglang.srt.mem_cache.allocator.mamba")
            self.sizing = imp("sglang.srt.mem_cache.allocation_sizing")
        self.radix.time = Counter()
        # no class of a loaded module may derive from a stub: its missing attributes would be stubs
        bad = []
        for name in REAL_MODULES:
            module = self.saved.get(name)
            for obj in vars(module).values() if module is not None else ():
                if (isinstance(obj, type) and getattr(obj, "__module__", None) == name and isinstance(obj, StubMeta)
                        and obj.__qualname__ != "Scheduler"):  # only its methods are used (SCHEDULER_METHODS)
                    bad.append(f"{name}.{obj.__qualname__}")
        if bad:
            raise SGLangMissing(f"classes of the loaded modules derive from stubs: {', '.join(sorted(bad))}")

    def active(self):
        """sglang.* resolves to this copy (and lazy imports inside SGLang keep working) meanwhile."""
        return engine_modules(self, _owned, _Finder(self.root), _Finder(None))


_REAL: dict = {}


def real_sglang(download: bool = False) -> RealSGLang:
    if "s" not in _REAL:
        _REAL["s"] = RealSGLang(download=download)
    return _REAL["s"]


def real_or_skip() -> RealSGLang:
    """For the opt-in tests: SGLang's code (downloading the wheel if needed), or pytest.skip saying
    what is missing (torch, the wheel)."""
    import pytest

    if importlib.util.find_spec("torch") is None:
        pytest.skip("SGLang's scheduler code needs torch (a CPU build is enough): pip install torch "
                    "--index-url https://download.pytorch.org/whl/cpu")
    try:
        return real_sglang(download=True)
    except SGLangMissing as e:
        pytest.skip(str(e))


# ---- the run --------------------------------------------------------------------------------------

@dataclass
class Settings:
    page_size: int = 512
    num_pages: int = 200  # the KV pool in pages (kvreplay's capacity in blocks)
    schedule_policy: str = "fcfs"  # fcfs | lpm
    chunked_prefill_size: int | None = 8192  # None: chunked prefill off
    max_prefill_tokens: int = 16384
    max_running_requests: int = 256
    step_seconds: float = 0.01
    step_seconds_per_prefill_token: float = 0.0  # a step lasts step_seconds + this x its prompt tokens
    max_req_len: int | None = None  # default: longer than any request (never binds)
    log_steps: bool = False
    # hybrid SWA model (sliding-window + full attention layers): the window in tokens, None: a
    # single-pool model. The SWA pool holds int(full tokens x ratio) tokens, page-aligned
    # (--swa-full-tokens-ratio, default 0.8: model_executor/pool_configurator.py _solve_pool_sizes)
    sliding_window: int | None = None
    swa_full_tokens_ratio: float = 0.8
    tree_core: str = "python"  # UnifiedRadixCache's tree core: python | rust (SGLang's default, if built)
    # hybrid Mamba model (full attention + Mamba / linear-attention layers, as Qwen3-Next): the
    # MAMBA component and HybridReqToTokenPool's state slots, extra_buffer strategy. mamba_slots:
    # the MambaPool's slots (--max-mamba-cache-size); None: num_pages + 4, kvreplay's default
    # (hybrid/unified_radix.py UnifiedRadix: more than the tree can hold)
    mamba: bool = False
    mamba_slots: int | None = None


@dataclass
class TraceRequest:
    hash_ids: list
    input_length: int
    output_length: int
    arrival_s: float
    # parallel sampling as the tokenizer manager sends it (tokenizer_manager.py:2115-2182): its
    # prefill-only request has max_new_tokens 0; each sample is sent when the request at index
    # `after` (its group's prefill-only one) has finished (arrival_s is then not read)
    max_new_tokens: int | None = None  # None: the output length (at least 1)
    after: int | None = None


def requests_from_trace(trace, arrival_s) -> list:
    """TraceRequests from a kvreplay Trace (its dense block ids) and arrival times in seconds (e.g.
    ``kvreplay.serving.simulate.arrivals(trace)``, so that both simulators see the same floats)."""
    return [TraceRequest([int(x) for x in trace.request_blocks(i)], int(trace.input_length[i]),
                         int(trace.output_length[i]), float(arrival_s[i])) for i in range(len(trace))]


@dataclass
class RequestResult:
    scheduled_s: float | None = None
    hit_tokens: int = 0
    first_token_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    status: str = "pending"
    max_new_tokens: int | None = None  # as SGLang set it (init_req_max_new_tokens may clip it)


@dataclass
class RunResult:
    requests: list
    steps: list = field(default_factory=list)
    end_s: float = 0.0
    # a Mamba run: the tree's Mamba states and the free state slots at the end (diagnostics)
    mamba: dict = field(default_factory=dict)

    def column(self, name: str) -> list:
        return [getattr(r, name) for r in self.requests]


def prompt_tokens(ids, length: int, page_size: int) -> array:
    """Page j of a prompt is id*P .. id*P+P-1 for its j-th block id (the partial tail: its first
    tokens), as tests/real_engines/test_radix_engine.py synthesises them: equal ids give equal
    pages, different ids different ones."""
    num_pages = -(-length // page_size)
    if num_pages > len(ids):
        raise ValueError(f"a prompt of {length} tokens needs {num_pages} hash ids, the trace gives {len(ids)}")
    return array("q", (int(ids[j // page_size]) * page_size + j % page_size for j in range(length)))


class _Grammars:
    """GrammarManager without structured-output requests: nothing ever waits for a grammar."""

    grammar_queue: list = []

    def has_waiting_grammars(self):
        return False


class _NoBeams:
    """BeamCoordinator without beam-search requests (beam_width None): no member rows."""

    def pending_member_rows(self, batch):
        return 0

    def commit_decode(self, batch):
        return set()

    def retire_group(self, req):
        raise AssertionError("no beam groups here")


class _NoDPAttention:
    """DPAttnAdapter with DP attention off (require_mlp_sync False): dp_attn.py
    maybe_prepare_mlp_sync_batch returns the batch when need_sync is False (:773), and
    maybe_convert_decode_to_extend returns it when not batch.is_extend_in_batch (:792)."""

    def maybe_prepare_mlp_sync_batch(self, batch, need_sync=None):
        assert not need_sync
        return batch

    def maybe_convert_decode_to_extend(self, batch):
        assert batch is None or not getattr(batch, "is_extend_in_batch", False)
        return batch


class _NoDllm:
    """DllmManager without diffusion LLM requests (dllm_config None)."""

    def any_staging_reqs(self):
        return False


class _NoNgram:
    """NgramEmbeddingManager without engram / ngram embeddings (prepare_for_forward returns the batch)."""

    def prepare_for_forward(self, batch, *, chunked_req=None):
        return batch


class _Outputs:
    """SchedulerOutputStreamer: records what would be streamed (nothing is sent)."""

    def stream_output(self, reqs, return_logprob, skip_req=None):
        pass


class _Metrics:
    """SchedulerMetricsReporter: the counters the loaded code updates (read by nothing here) and
    its reports as no-ops."""

    enable_metrics = False

    def __init__(self):
        self.num_retracted_reqs = 0
        self.num_generated_tokens = 0
        self.forward_ct_decode = 0

    def report_decode_stats(self, *args, **kwargs):
        pass

    def report_prefill_stats(self, *args, **kwargs):
        pass


class _Result:
    """GenerationBatchResult of a forward that sampled `tokens` (one per request of the batch),
    without logprobs, hidden states or speculative outputs."""

    def __init__(self, tokens):
        import torch
        self.next_token_ids = torch.tensor(tokens, dtype=torch.int64)
        self.logits_output = None
        self.copy_done = None
        self.auxiliary_host_output = None
        self.routed_experts_output = None
        self.indexer_topk_output = None
        self.extend_input_len_per_req = None
        self.extend_logprob_start_len_per_req = None
        self.can_run_cuda_graph = False
        self.grammar_advanced = False
        self.num_correct_drafts_per_req_cpu = None

    def get_num_generated_tokens(self, batch_size):
        return batch_size


#: Scheduler methods taken from SGLang's Scheduler class as they are (scheduler.py).
SCHEDULER_METHODS = (
    "get_next_batch_to_run", "get_new_batch_prefill", "_get_new_batch_prefill_raw", "update_running_batch",
    "get_num_allocatable_reqs", "get_prefill_adder_class", "stash_chunked_request", "process_pending_chunked_abort",
    "_process_hicache_events", "_should_defer_prefill", "_arm_prefill_decode_interval", "_add_request_to_queue",
    "_set_or_validate_priority", "_abort_on_queued_limit", "_prefetch_kvcache", "_reqs_finishing_inflight",
    "init_req_max_new_tokens", "is_fully_idle", "_pp_microbatches_drained",
)


def make_scheduler_class(real: RealSGLang):
    """A class holding SGLang's own Scheduler methods (SCHEDULER_METHODS), and nothing else: the
    harness sets every attribute they read (make_scheduler), so a read it did not foresee fails."""
    Scheduler = real.scheduler.Scheduler
    body = {}
    for name in SCHEDULER_METHODS:
        fn = Scheduler.__dict__.get(name)
        if fn is None or not callable(fn):
            raise SGLangMissing(f"Scheduler.{name} is not a function in this SGLang")
        body[name] = fn
    return type("SchedulerSeat", (), body)


Strict = SimpleNamespace  # a namespace: a missing attribute raises


VOCAB_SIZE = 1 << 62  # generated token ids are unique and below it (schedule_batch.py _check_vocab_boundary_finish)


ADDER_LOG: list = []


def recording_adder(PrefillAdder):
    """PrefillAdder as it is, recording each candidate's budget before and the verdict after
    (diagnostics, Settings.log_steps: the calls and their results are unchanged)."""

    class RecordingAdder(PrefillAdder):
        def _budget(self):
            return {"rem_total": float(self.rem_total_tokens), "cur_rem": float(self.cur_rem_tokens),
                    "rem_chunk": self.rem_chunk_tokens, "rem_input": self.rem_input_tokens}

        def add_chunked_req(self, req):
            before = self._budget()
            out = super().add_chunked_req(req)
            ADDER_LOG.append(("chunked", req.rid, before, req.extend_len, out is not None))
            return out

        def add_one_req(self, req, has_chunked_req, truncation_align_size):
            before = self._budget()
            out = super().add_one_req(req, has_chunked_req, truncation_align_size)
            added = bool(self.can_run_list) and self.can_run_list[-1] is req
            ADDER_LOG.append(("one", req.rid, before, req.prefix_len, req.extend_len if added else None, out.name))
            return out

    return RecordingAdder


def swa_pool_tokens(settings: Settings) -> int:
    """The SWA pool in tokens: int(full tokens x --swa-full-tokens-ratio), page-aligned
    (model_executor/pool_configurator.py _solve_pool_sizes, ~881)."""
    P = settings.page_size
    return int(settings.num_pages * P * settings.swa_full_tokens_ratio) // P * P


def make_hybrid_swa_cache(real: RealSGLang, settings: Settings, req_to_token_pool):
    """What SGLang builds for a hybrid SWA model (one sliding-window and one full-attention layer
    here): SWAKVPool with tiny real buffers (head_num = head_dim = 1; model_runner_kv_cache_mixin
    ~2532), SWATokenToKVPoolAllocator(full tokens, SWA tokens) (the allocator SGLang pairs with it),
    and UnifiedRadixCache with FULL and SWA components (mem_cache/registry.py
    create_unified_radix_cache) given sliding_window_size (kv_cache_builder.py ~389)."""
    import torch

    P = settings.page_size
    full_tokens, swa_tokens = settings.num_pages * P, swa_pool_tokens(settings)
    if settings.sliding_window + P >= swa_tokens:  # pool_configurator.py:198 validate_swa_pool_size
        raise ValueError(f"SWA pool ({swa_tokens} tokens) cannot hold even one request")
    kv = real.swa_pool.SWAKVPool(size=full_tokens, size_swa=swa_tokens, page_size=P, dtype=torch.bfloat16,
                                 head_num=1, head_dim=1, swa_attention_layer_ids=[0], full_attention_layer_ids=[1],
                                 device="cpu")
    allocator = real.swa_alloc.SWATokenToKVPoolAllocator(full_tokens, swa_tokens, P, torch.bfloat16, "cpu", kv,
                                                         need_sort=False)
    ct = real.components.ComponentType
    params = real.params.CacheInitParams(disable=False, req_to_token_pool=req_to_token_pool,
                                         token_to_kv_pool_allocator=allocator, page_size=P,
                                         chunked_prefill_size=settings.chunked_prefill_size,
                                         sliding_window_size=settings.sliding_window,
                                         enable_mamba_extra_buffer=settings.mamba,  # (False: CacheInitParams' default)
                                         tree_components=(ct.FULL, ct.SWA) + ((ct.MAMBA,) if settings.mamba else ()),
                                         tree_core_backend=settings.tree_core)
    return allocator, real.unified.UnifiedRadixCache(params)


class MambaPoolStandIn:
    """MambaPool (memory_pool.py:505) without its state tensors, which need the model's state
    shapes: its size, and copies / clears that do nothing (the forward that would read the
    states does not run either). Any other attribute raises (a plain class)."""

    replayssm_write_pos = None  # ReplaySSM off (--enable-linear-replayssm False)
    replayssm_spec_write_pos = None

    def __init__(self, size: int):
        self.size = size

    def copy_from(self, src_indices, dst_indices):
        pass

    def clear_slots(self, indices):
        pass


def mamba_slots(settings: Settings) -> int:
    return settings.num_pages + 4 if settings.mamba_slots is None else settings.mamba_slots


def hybrid_req_to_token_pool(pools, mamba_alloc, *, size: int, max_context_len: int, mamba_slots: int,
                             extra_buffer: bool, ping_pong: int, initial_tracking: int):
    """The real HybridReqToTokenPool (memory_pool.py:1355), built as its __init__ and
    _init_mamba_pool build it (1360-1531) with the MambaPool's tensors left out (object.__new__,
    the real ReqToTokenPool.__init__, then the attributes they set): the real MambaSlotAllocator
    over `mamba_slots` slots (`pools`, `mamba_alloc`: SGLang's memory_pool and allocator/mamba
    modules); with extra_buffer, `ping_pong` tracking slots a request and `initial_tracking`; no
    ReplaySSM, no PLE side states (ShortConvPool / NGramPool: disabled without a Qwen4-Exp
    config, so never registered), no int8 checkpoint pool (--enable-int8-mamba-checkpoint off), no
    memory saver; one Mamba layer (mamba_map {0: 0}). test_sglang_hybrid.py builds its pools here
    too."""
    import torch

    pool = object.__new__(pools.HybridReqToTokenPool)
    pools.ReqToTokenPool.__init__(pool, size=size, max_context_len=max_context_len, device="cpu",
                                  enable_memory_saver=False)
    pool.mamba_ping_pong_track_buffer_size = ping_pong
    pool.mamba_initial_tracking_slots = initial_tracking if extra_buffer else 0
    pool.enable_mamba_extra_buffer = extra_buffer
    pool.enable_mamba_extra_buffer_lazy = False
    pool.enable_memory_saver = False
    pool.start_layer = 0
    pool.layer_transfer_counter = None
    pool.ple_window_cache = None
    pool.mamba_pool = MambaPoolStandIn(mamba_slots)
    pool.mamba_allocator = mamba_alloc.MambaSlotAllocator(size=mamba_slots, device="cpu")
    pool.mamba_map = {0: 0}
    pool.mamba_ckpt_pool = None
    pool.device = "cpu"
    rows = pool.req_to_token.shape[0]
    pool.req_index_to_mamba_index_mapping = torch.zeros(rows, dtype=torch.int32)
    if extra_buffer:
        pool.req_index_to_mamba_ping_pong_track_buffer_mapping = torch.zeros((rows, ping_pong), dtype=torch.int64)
    return pool


def make_hybrid_req_to_token_pool(real: RealSGLang, settings: Settings, max_context_len: int):
    """hybrid_req_to_token_pool for the scheduler: max_running_requests rows, extra_buffer with the
    tracking slots get_mamba_tracking_slots gives SGLang's default server (overlap schedule on: 2
    ping-pong slots a request, allocation_sizing.py:11)."""
    slots = real.sizing.get_mamba_tracking_slots
    return hybrid_req_to_token_pool(real.memory_pool, real.mamba_alloc, size=settings.max_running_requests,
                                    max_context_len=max_context_len, mamba_slots=mamba_slots(settings),
                                    extra_buffer=True, ping_pong=slots(extra_buffer=True, overlap=True),
                                    initial_tracking=slots(extra_buffer=True, overlap=True, lazy=False))


def make_hybrid_mamba_cache(real: RealSGLang, settings: Settings, req_to_token_pool):
    """What SGLang builds for a full-attention + Mamba model (the default, non-unified memory
    pool): the plain PagedTokenToKVPoolAllocator for the full-attention KV (num_pages pages) and
    UnifiedRadixCache with FULL and MAMBA components (registry.py create_unified_radix_cache:
    is_hybrid_ssm), enable_mamba_extra_buffer from exec.mamba (kv_cache_builder.py:413)."""
    import torch

    P = settings.page_size
    allocator = real.paged.PagedTokenToKVPoolAllocator(size=settings.num_pages * P, page_size=P, dtype=torch.float16,
                                                       device="cpu", kvcache=None, need_sort=False)
    ct = real.components.ComponentType
    params = real.params.CacheInitParams(disable=False, req_to_token_pool=req_to_token_pool,
                                         token_to_kv_pool_allocator=allocator, page_size=P,
                                         chunked_prefill_size=settings.chunked_prefill_size,
                                         enable_mamba_extra_buffer=True, enable_mamba_extra_buffer_lazy=False,
                                         tree_components=(ct.FULL, ct.MAMBA), tree_core_backend=settings.tree_core)
    return allocator, real.unified.UnifiedRadixCache(params)


def make_scheduler(real: RealSGLang, settings: Settings, max_len: int):
    """SGLang's memory pools and tree cache, and a scheduler seat with the attributes Scheduler's
    methods read, each as Scheduler.__init__ sets it for this configuration (scheduler.py lines)."""
    import torch

    P = settings.page_size
    W = settings.sliding_window
    # ReqToTokenPool(size=max_running_requests) (kv_cache_configurator.py ~1691; +1 padding row inside)
    if settings.mamba:
        req_to_token_pool = make_hybrid_req_to_token_pool(real, settings, max_len + P)
    else:
        req_to_token_pool = real.memory_pool.ReqToTokenPool(size=settings.max_running_requests,
                                                            max_context_len=max_len + P, device="cpu",
                                                            enable_memory_saver=False)
    if settings.mamba and W is None:
        allocator, tree_cache = make_hybrid_mamba_cache(real, settings, req_to_token_pool)
    elif W is None:
        # the pool holds num_pages pages (page 0 is the padding page, paged.py clear())
        allocator = real.paged.PagedTokenToKVPoolAllocator(size=settings.num_pages * P, page_size=P,
                                                           dtype=torch.float16, device="cpu", kvcache=None,
                                                           need_sort=False)
        params = real.params.CacheInitParams(disable=False, req_to_token_pool=req_to_token_pool,
                                             token_to_kv_pool_allocator=allocator, page_size=P,
                                             chunked_prefill_size=settings.chunked_prefill_size)
        tree_cache = real.radix.RadixCache(params)
    else:
        allocator, tree_cache = make_hybrid_swa_cache(real, settings, req_to_token_pool)
    # Scheduler.init_schedule_policy (scheduler.py ~2470)
    policy = real.policy.SchedulePolicy(settings.schedule_policy, tree_cache, False, False, False)
    model_config = Strict(vocab_size=VOCAB_SIZE, is_encoder_decoder=False, self_opened_think_start_ids=None,
                          think_end_ids=None, hf_eos_token_id=None, is_multimodal=False)
    if settings.mamba:  # _mamba_radix_cache_v2_req_prepare_for_extend reads the model's mamba_chunk_size
        model_config.hf_text_config = Strict(mamba_chunk_size=MAMBA_CHUNK_SIZE)
    seat = make_scheduler_class(real)()
    Mode = real.disagg.DisaggregationMode
    seat.__dict__.update(
        # pools and cache
        req_to_token_pool=req_to_token_pool, token_to_kv_pool_allocator=allocator, tree_cache=tree_cache,
        policy=policy, model_config=model_config, page_size=P, device="cpu",
        max_total_num_tokens=settings.num_pages * P, kv_shard_widening=1, sliding_window_size=W,
        max_req_len=max_len, max_new_tokens_limit=None,
        # queues and batches (scheduler.py 1326-1338)
        waiting_queue=[], running_batch=real.batch.ScheduleBatch(reqs=[], batch_is_full=False), last_batch=None,
        chunked_req=None, _pending_chunked_abort_req=None, forward_ct=0, processed_tokens_counter=0,
        # chunked prefill (init_chunked_prefill, 1351-1378)
        chunked_prefill_size=settings.chunked_prefill_size, max_prefill_tokens=settings.max_prefill_tokens,
        is_mixed_chunk=False, prefill_decode_interval=0, _prefill_decode_interval_remaining=0,
        prefill_decode_interval_min_bs=0, dynamic_chunk_sizer=None, truncation_align_size=None,
        # new-token ratio (1474)
        new_token_ratio_tracker=real.ratio.NewTokenRatioTracker.from_config(),
        # off in this configuration
        enable_priority_scheduling=False, enable_priority_preemption=False, abort_on_priority_when_disabled=False,
        priority_scheduling_preemption_threshold=10, schedule_low_priority_values_first=False,
        max_queued_requests=None, max_running_requests=settings.max_running_requests, max_prefill_bs=0,
        prefill_delayer=None, min_free_slots_delayer=None, is_hybrid_swa=W is not None,
        enable_lora=False,
        enable_hierarchical_cache=False, enable_hicache_storage=False, enable_lmcache=False,
        enable_unified_cache_external_linker=False, enable_hisparse=False, hisparse_coordinator=None,
        dllm_config=None, disaggregation_mode=Mode.NULL, require_mlp_sync=False, enable_overlap=False,
        enable_skip_finishing_decode=False, decode_offload_manager=None,
        spec_algorithm=real.spec.SpeculativeAlgorithm.NONE,
        # components that have nothing to do here
        grammar_manager=_Grammars(), beam_coordinator=_NoBeams(), dp_attn_adapter=_NoDPAttention(),
        ngram_embedding_manager=_NoNgram(), dllm_manager=_NoDllm(),
        tp_worker=Strict(model_runner=Strict(attn_backend=Strict(), prefill_aware_swa=False)),
        # observability: counters only (the loaded code writes them; nothing reads them back here)
        metrics_reporter=_Metrics(),
        load_inquirer=Strict(_get_num_pending_tokens=lambda **kw: 0),
    )
    results = real.results.SchedulerBatchResultProcessor(
        is_generation=True, disaggregation_mode=Mode.NULL, enable_overlap=False, enable_overlap_mlx=False,
        model_config=model_config, token_to_kv_pool_allocator=allocator, tree_cache=tree_cache,
        hisparse_coordinator=None, req_to_token_pool=req_to_token_pool, decode_offload_manager=None,
        metrics_collector=None, metrics_reporter=seat.metrics_reporter, draft_worker=None,
        model_worker=Strict(), logprob_result_processor=None, output_streamer=_Outputs(),
        beam_coordinator=_NoBeams(), abort_request=_unreachable("abort_request"))
    if settings.log_steps:
        adder = recording_adder(real.policy.PrefillAdder)
        seat.get_prefill_adder_class = lambda: adder
    return seat, results


def run(requests: list, settings: Settings, real: RealSGLang | None = None) -> RunResult:
    """Serve `requests` (TraceRequest, any order) through SGLang's scheduler; results in the given order."""
    real = real or real_sglang()
    P = settings.page_size
    n = len(requests)
    results = [RequestResult() for _ in range(n)]
    order = sorted(range(n), key=lambda i: (requests[i].arrival_s, i))
    longest = max((r.input_length + max(r.output_length, 1) for r in requests), default=1)
    max_len = settings.max_req_len or longest + P
    CONFIG.clear()
    CONFIG.update(default_config(settings))
    steps: list = []
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the allocator's CPU kernels on small tensors: threads only add overhead
    try:
        with _no_pinned_memory() if settings.mamba else contextlib.nullcontext():
            return _run(requests, settings, real, results, order, max_len, steps)
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _no_pinned_memory():
    """Tensor.pin_memory() is the tensor itself meanwhile. ScheduleBatch.prepare_for_decode's
    Mamba tracking mask is staged through pinned memory unconditionally
    (``track_mask_cpu.pin_memory().to(device, non_blocking=True)``, schedule_batch.py:3830), which
    torch refuses without an accelerator; on a CPU box the copy to device "cpu" is the tensor."""
    import torch

    saved = torch.Tensor.pin_memory
    torch.Tensor.pin_memory = lambda self, device=None: self
    try:
        yield
    finally:
        torch.Tensor.pin_memory = saved


#: What a run may read of a stub (checked after every run): per-request time stamps, prefill
#: metrics, KV events (off: RadixCache's recorder is built disabled) and the sampling tensors a
#: forward would use (SamplingBatchInfo; its penalizer_orchestrator.is_required is false, as it is
#: for requests without penalties). Anything else means the loaded code reached a path the
#: harness did not provide for.
ALLOWED_STUB_READS = (
    "sglang.srt.observability.req_time_stats.SchedulerReqTimeStats()",
    "sglang.srt.managers.scheduler_components.metrics_reporter.PrefillStats.from_adder",
    "sglang.srt.mem_cache.events.KVCacheEventRecorder()",
    "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.from_schedule_batch",
)


def _run(requests, settings, real, results, order, max_len, steps) -> RunResult:
    STUB_READS.clear()
    try:
        return _serve(requests, settings, real, results, order, max_len, steps)
    finally:
        unexpected = sorted(k for k in STUB_READS if not k.startswith(ALLOWED_STUB_READS))
        if unexpected:
            raise AssertionError(f"the run read stubs it should not have: {unexpected[:10]}")


def _serve(requests, settings, real, results, order, max_len, steps) -> RunResult:
    P = settings.page_size
    n = len(requests)
    with real.active():
        seat, processor = make_scheduler(real, settings, max_len)
        Req = real.batch.Req
        SamplingParams = real.sampling.SamplingParams
        index_of: dict = {}
        next_token = [VOCAB_SIZE // 2]
        t = 0.0
        done = 0
        # what arrives, by (time, index): the requests that wait for nothing at their arrival; a
        # sample of a parallel-sampling group when its prefill-only request finishes
        due = [(requests[i].arrival_s, i) for i in order if requests[i].after is None]
        heapq.heapify(due)
        followers: dict = {}
        for i, r in enumerate(requests):
            if r.after is not None:
                followers.setdefault(r.after, []).append(i)
        while True:
            # ingest_requests: every request that arrived by now (scheduler.py event_loop_normal)
            while due and due[0][0] <= t:
                _, i = heapq.heappop(due)
                r = requests[i]
                tokens = prompt_tokens(r.hash_ids, r.input_length, P)
                # the tokenizer manager's sampling parameters: normalize(tokenizer) (tokenizer_manager.py:1566)
                sampling = SamplingParams(max_new_tokens=max(r.output_length, 1) if r.max_new_tokens is None
                                          else r.max_new_tokens)
                sampling.normalize(None)
                req = Req(f"r{i}", "", tokens, sampling, vocab_size=VOCAB_SIZE,
                          disagg_mode=real.disagg.DisaggregationMode.NULL)
                index_of[req.rid] = i
                # handle_generate_request: init_req_max_new_tokens, then _add_request_to_queue
                seat.init_req_max_new_tokens(req)
                results[i].max_new_tokens = req.sampling_params.max_new_tokens
                seat._add_request_to_queue(req)
            ADDER_LOG.clear()
            plan = seat.get_next_batch_to_run(running_batch=seat.running_batch, last_batch=seat.last_batch)
            seat.running_batch = plan.running_batch
            batch = plan.batch_to_run
            if batch:
                is_extend = batch.forward_mode.is_extend()
                for req in batch.reqs:
                    i = index_of[req.rid]
                    if is_extend and results[i].scheduled_s is None and req.retraction_count == 0:
                        results[i].scheduled_s = t
                        results[i].hit_tokens = req.prefix_len
                if settings.log_steps:
                    steps.append(step_log(t, batch, seat, index_of))
                seat.forward_ct += 1
                tokens = []
                for _ in batch.reqs:
                    next_token[0] += 1
                    tokens.append(next_token[0])
                result = _Result(tokens)
                before = {req.rid: len(req.output_ids) for req in batch.reqs}
                prefill_tokens = sum(req.extend_len for req in batch.reqs) if is_extend else 0
                t = t + (settings.step_seconds + settings.step_seconds_per_prefill_token * prefill_tokens)
                if is_extend:
                    processor.process_batch_result_prefill(batch, result)
                else:
                    processor.process_batch_result_decode(batch, result)
                for req in batch.reqs:
                    i = index_of[req.rid]
                    if len(req.output_ids) > before[req.rid] and results[i].first_token_s is None:
                        results[i].first_token_s = t
                    if req.finished() and results[i].status != "finished":
                        results[i].finish_s = t
                        results[i].status = "finished"
                        results[i].preemptions = req.retraction_count
                        done += 1
                        for f in followers.get(i, ()):
                            heapq.heappush(due, (t, f))  # (the manager sends them on the response)
            else:
                # on_idle: the new-token ratio resets only when fully idle (scheduler.py 5241-5318)
                if seat.is_fully_idle():
                    seat.new_token_ratio_tracker.reset()
                if seat.last_batch is None:
                    # a second empty pass in a row: nothing happens until the next arrival
                    if not due:
                        if done < n:
                            stuck = [r.rid for r in seat.waiting_queue]
                            raise RuntimeError(f"SGLang's scheduler is wedged at t={t}: {len(stuck)} requests "
                                               f"wait and none can be admitted (first: {stuck[:5]})")
                        break
                    t = max(t, due[0][0])
            seat.last_batch = batch
    end = max((r.finish_s for r in results if r.finish_s is not None), default=0.0)
    out = RunResult(requests=results, steps=steps, end_s=end)
    if settings.mamba:
        tree = seat.tree_cache
        out.mamba = {"states": tree.mamba_evictable_size() + tree.mamba_protected_size(),
                     "free_slots": seat.req_to_token_pool.mamba_allocator.available_size()}
    return out


def step_log(t, batch, seat, index_of) -> dict:
    return {"t": t, "mode": "extend" if batch.forward_mode.is_extend() else "decode",
            "reqs": [(index_of[r.rid], r.prefix_len if batch.forward_mode.is_extend() else None,
                      r.extend_len if batch.forward_mode.is_extend() else 1) for r in batch.reqs],
            "waiting": [index_of[r.rid] for r in seat.waiting_queue],
            "running": [index_of[r.rid] for r in seat.running_batch.reqs],
            "ratio": seat.new_token_ratio_tracker.current,
            "available": seat.token_to_kv_pool_allocator.available_size(),
            "evictable": seat.tree_cache.evictable_size(), "protected": seat.tree_cache.protected_size(),
            "batch_is_full": seat.running_batch.batch_is_full,
            **({"mamba_free": seat.req_to_token_pool.mamba_allocator.available_size(),
                "mamba_evictable": seat.tree_cache.mamba_evictable_size(),
                "mamba_protected": seat.tree_cache.mamba_protected_size()}
               if hasattr(seat.req_to_token_pool, "mamba_allocator") else {}),
            "adder": [(e[0], index_of[e[1]]) + tuple(e[2:]) for e in ADDER_LOG]}


# ---- traces and the CLI --------------------------------------------------------------------------

def load_jsonl(path, limit: int | None = None, speedup: float = 1.0) -> list:
    """Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids): TraceRequests with
    arrivals in seconds from the first timestamp, divided by `speedup`."""
    import json

    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
                if limit is not None and len(rows) >= limit:
                    break
    t0 = min((r["timestamp"] for r in rows), default=0)
    return [TraceRequest(hash_ids=list(r["hash_ids"]), input_length=int(r["input_length"]),
                         output_length=int(r["output_length"]), arrival_s=(r["timestamp"] - t0) / 1000.0 / speedup)
            for r in rows]


def main(argv=None) -> int:
    import argparse
    import dataclasses
    import json

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="Mooncake-style JSONL trace")
    p.add_argument("--pages", type=int, default=200, help="KV pool in pages")
    p.add_argument("--page-size", type=int, default=512)
    p.add_argument("--schedule-policy", choices=("fcfs", "lpm"), default="fcfs")
    p.add_argument("--chunked-prefill-size", type=int, default=8192, help="-1: chunked prefill off")
    p.add_argument("--max-prefill-tokens", type=int, default=16384)
    p.add_argument("--max-running-requests", type=int, default=256)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--speedup", type=float, default=1.0, help="divide the trace's timestamps by this")
    p.add_argument("--limit", type=int, default=None, help="first N requests")
    p.add_argument("--steps", action="store_true", help="also write the per-step log")
    p.add_argument("--mamba", action="store_true", help="a full-attention + Mamba model (extra_buffer)")
    p.add_argument("-o", "--output", default="-", help="JSON output (default: stdout)")
    a = p.parse_args(argv)
    settings = Settings(page_size=a.page_size, num_pages=a.pages, schedule_policy=a.schedule_policy,
                        chunked_prefill_size=None if a.chunked_prefill_size <= 0 else a.chunked_prefill_size,
                        max_prefill_tokens=a.max_prefill_tokens, max_running_requests=a.max_running_requests,
                        step_seconds=a.step_ms / 1000.0, log_steps=a.steps, mamba=a.mamba)
    result = run(load_jsonl(a.trace, a.limit, a.speedup), settings, real_sglang(download=False))
    doc = {"engine": f"sglang {VERSION} scheduler (real, tests/real_engines/sglang_scheduler.py)",
           "settings": dataclasses.asdict(settings), "end_s": result.end_s,
           "requests": [dataclasses.asdict(r) for r in result.requests],
           **({"steps": result.steps} if result.steps else {})}
    text = json.dumps(doc, indent=1, default=str)
    if a.output == "-":
        print(text)
    else:
        Path(a.output).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
