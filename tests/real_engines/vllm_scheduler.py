"""vLLM 0.33.0's real v1 ``Scheduler`` and ``KVCacheManager``, unmodified, on CPU, over a trace.

A harness (not a test: pytest does not collect it) that serves a trace through vLLM's own
``vllm/v1/core/sched/scheduler.py`` ``Scheduler`` -- with its own ``KVCacheManager``,
``BlockPool``, ``Request``, ``SamplingParams``, ``SchedulerConfig`` and ``CacheConfig`` -- in
simulated time with a constant step time, so that kvreplay's ``engine_style="vllm"`` simulator
can be checked against the real thing request by request (tests/real_engines/test_vllm_scheduler.py).
The rules it exercises are written out, with file:line citations, in docs/vllm-scheduler.md.

Needs: the vLLM 0.33.0 wheel (it is a zip: its ``vllm/**/*.py`` are extracted once, nothing is
installed) and, in the interpreter, ``numpy``, ``msgspec`` and ``pydantic`` (vLLM's
``SchedulerConfig``, ``CacheConfig`` and ``SamplingParams`` are pydantic / msgspec classes). No
torch, no GPU. The wheel is looked for in $KVREPLAY_VLLM_WHEEL, tests/real_engines/.cache/ (where
test_vllm_engine.py downloads it) and /tmp/engines/; an extracted tree in $KVREPLAY_VLLM_ROOT
is used as is.

    .venv-vllm/bin/python tests/real_engines/vllm_scheduler.py \\
        ../shared/traces/mooncake/conversation_trace.jsonl --blocks 200 --block-size 512 \\
        --max-seqs 32 --max-batched 256 --step-ms 10 --limit 300 -o out.json

What is real and what is stubbed
--------------------------------
Loaded from the wheel as they are (``REAL_MODULES``), 31 modules: the scheduler
(``vllm/v1/core/sched/{scheduler,interface,output,request_queue,utils}.py``), the KV cache
manager (``vllm/v1/core/{kv_cache_manager,kv_cache_coordinator,single_type_kv_cache_manager,
block_pool,kv_cache_utils,kv_cache_metrics,encoder_cache_manager}.py``,
``vllm/v1/kv_cache_interface.py``, ``vllm/v1/kv_cache_spec_registry.py``), the request
(``vllm/v1/request.py``), its sampling parameters and their helpers (``vllm/sampling_params.py``,
``vllm/v1/serial_utils.py``, ``vllm/v1/structured_output/request.py``, ``vllm/v1/utils.py``,
``vllm/utils/__init__.py``), the engine-core output structs (``vllm/v1/engine/__init__.py``), the
metrics structs the request and scheduler build (``vllm/v1/metrics/stats.py``), the model-runner
output dataclass (``vllm/v1/outputs.py``), the configs (``vllm/config/{scheduler,cache,utils}.py``:
the real ``SchedulerConfig`` and ``CacheConfig``, so their defaults and validation are vLLM's),
and ``vllm/envs.py``, ``vllm/logger.py``, ``vllm/exceptions.py``,
``vllm/utils/{math_utils,hashing}.py``.

Everything else is stubbed, and none of it is reached on this configuration's scheduling path
(one full-attention group, prefix caching, FCFS, no LoRA / multimodal / structured output / spec
decode / KV connector / KV events / async scheduling / PP, ``log_stats=False``):

- every other ``vllm.*`` module is an inert stub package (any attribute is a class that accepts
  anything, is false and iterates empty). What a run imports from them: ``vllm`` and
  ``vllm.config`` themselves (``VllmConfig``, ``ModelConfig``, ...), ``vllm.config.{kv_events,
  ec_manager_config}``, ``vllm.distributed.*`` (KV / EC / aux-output connectors, KV events: the
  Scheduler builds an event publisher that is never given an event), ``vllm.compilation.cuda_graph``,
  ``vllm.multimodal.*`` (``strip_covered_mm_data`` fills ``NewRequestData.mm_features``, which only
  a model runner reads), ``vllm.lora.request``, ``vllm.outputs`` (``RequestError``),
  ``vllm.pooling_params``, ``vllm.tokenizers``, ``vllm.platforms``, ``vllm.usage.usage_lib``,
  ``vllm.logging_utils``, ``vllm.utils.{torch_utils,import_utils,mistral,network_utils,
  system_utils}``, ``vllm.v1.attention.backends.registry``, ``vllm.v1.kv_cache_layout``,
  ``vllm.v1.kv_hints``, ``vllm.v1.hisparse.block_pool``, ``vllm.v1.metrics.{perf,cache_hit_source}``,
  ``vllm.v1.spec_decode.*``, ``vllm.v1.structured_output`` (its manager) and
  ``vllm.v1.structured_output.{backend_types,utils}``;
- third-party packages, only when they are not installed (``THIRD_PARTY_STUBS``): torch (and
  ``torch.autograd.profiler``), zmq, cloudpickle, uvloop, cbor2, xxhash (other hash algorithms;
  the harness hashes with vLLM's default ``sha256``, config/cache.py:259);
- the Scheduler's constructor arguments: ``vllm_config`` is ``vllm_config_view`` below (the
  attributes Scheduler reads, with the values VllmConfig gives this configuration, each with its
  config/vllm.py line) around the real SchedulerConfig and CacheConfig; ``structured_output_manager``
  is ``_NoStructuredOutput``, which accepts every token (as the real one does for a request without
  structured output); ``log_stats=False``.

The stubs fake no value anything depends on: a stub is false, empty and no number, so code that
branched on one would take the "absent" branch this configuration takes anyway, and code that
computed with one would fail. (Checked by logging every stub access during a run: the event
publisher's construction (``EventPublisherFactory.create``), ``strip_covered_mm_data`` once per
new request, the logger's ``is_local_first_rank`` (logging only), and, when the KV cache spec
registry first fills itself, ``get_current_vllm_config_or_none`` and the platform hook
``register_custom_kv_cache_specs`` (out-of-tree specs only). ``run`` asserts that the manager is
vLLM's ``UnitaryKVCacheCoordinator`` over a ``FullAttentionManager``.)

Hybrid layer groups
-------------------
``Settings.groups`` (full, sliding_window and chunked_local groups, as kvreplay's layouts give
them) builds a hybrid ``KVCacheConfig``, with ``prefix_cache_retention_interval`` from
``Settings.retention``, vLLM's default 0. The same wheel modules then run vLLM's
``HybridKVCacheCoordinator`` with its ``SlidingWindowManager`` and
``ChunkedLocalAttentionManager``, and for a ``mamba`` group its ``MambaManager`` in "align" mode
(``CacheConfig(mamba_cache_mode="align")``, so the real ``Scheduler`` also runs its
``_mamba_block_aligned_split``; vLLM's defaults otherwise: no speculative or prefill-checkpoint
blocks, block hashes at the block size, no shared-prefix checkpoint); ``run`` asserts those
managers. Every attention group has one KV head of size 1 and a Mamba group a one-element state,
so page sizes never enter (the pool is counted in blocks).

Tokens
------
Prompt block j of a request is its trace hash id repeated ``block_size`` times (the partial tail:
its first tokens), so vLLM's chained block hashes map one to one to the trace's chained hash ids
(checked while running: a vLLM hash that meets two trace ids, or a trace id two hashes, raises).
Generated tokens are negative and unique over the whole run (``-1, -2, -3, ...`` in the order
they are sampled), so a block filled by decoding -- the prompt's partial tail plus generated
tokens -- has a hash no other request's block ever has: it is cached (vLLM caches it) but only the
request that generated it can hit it again (after a preemption, when it recomputes its own
prompt and outputs). EOS never comes: ``SamplingParams(max_tokens=O, ignore_eos=True)``; a request
finishes after ``max(O, 1)`` tokens (vllm/v1/core/sched/utils.py ``check_stop``).

The clock
---------
At time t: (1) the outputs of the step that ended at t are applied (``update_from_output``);
(2) every request with arrival <= t is added (``add_request``, in arrival order, ties in trace
order); (3) ``schedule()``. A step that scheduled tokens lasts ``step_seconds`` and ends at
t + step; the fake model output of that step gives every scheduled request whose prompt (or
recomputation) is complete after it -- ``not request.is_prefill_chunk`` -- one sampled token.
When a schedule is empty (nothing runs, or nothing that waits can be admitted and nothing runs)
time jumps to the next arrival; empty with no arrival left while requests wait is a wedge
(a request vLLM can never admit) and raises.

Per request (trace order): ``scheduled_s`` (start of the step that first scheduled it),
``hit_tokens`` (its local prefix-cache hit at that first schedule: vLLM's
``PrefillStats.num_local_cached_tokens``, the ``num_cached_tokens`` it reports),
``first_token_s`` and ``finish_s`` (end of the step that sampled its first / last token),
``preemptions`` (``Request.num_preemptions``), ``status`` (``finished`` or ``rejected``).

Rejected on arrival (never given to vLLM), as kvreplay does: a request whose prompt plus outputs
need more KV blocks than the usable pool, ``ceil((L + max(O, 1) - 1) / block_size) > usable``
(with hybrid groups, that many blocks in each group, a sliding-window or chunked-local group's
capped by its spec's own ``max_admission_blocks_per_request`` and a Mamba group's by the 2 state
pages of ``MambaSpec.max_memory_usage_bytes`` in align mode, summed over the groups). vLLM itself would admit such a request if its prompt fits, then preempt everything, itself
included, and wedge; with ``max_model_len`` set from the pool, the input processor would refuse
the prompt or ``check_stop`` would cut its outputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # (the stubs beside it; pytest runs with --import-mode=importlib)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_stubs import StubModule, engine_modules  # noqa: E402
from wheel_files import extract_once  # noqa: E402

VERSION = "0.33.0"
HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"

# Loaded from the wheel as they are; every other vllm.* module is an inert stub.
REAL_MODULES = {
    "vllm.envs",
    "vllm.logger",
    "vllm.exceptions",
    "vllm.utils",
    "vllm.utils.math_utils",
    "vllm.utils.hashing",
    "vllm.config.utils",
    "vllm.config.scheduler",
    "vllm.config.cache",
    "vllm.sampling_params",
    "vllm.v1.serial_utils",
    "vllm.v1.utils",
    "vllm.v1.engine",
    "vllm.v1.outputs",
    "vllm.v1.metrics.stats",
    "vllm.v1.request",
    "vllm.v1.structured_output.request",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.kv_cache_spec_registry",
    "vllm.v1.core.block_pool",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.core.kv_cache_coordinator",
    "vllm.v1.core.single_type_kv_cache_manager",
    "vllm.v1.core.kv_cache_metrics",
    "vllm.v1.core.encoder_cache_manager",
    "vllm.v1.core.sched.interface",
    "vllm.v1.core.sched.output",
    "vllm.v1.core.sched.request_queue",
    "vllm.v1.core.sched.utils",
    "vllm.v1.core.sched.scheduler",
}

# Packages whose __init__ is real (a package's own module file is vllm/x/__init__.py).
REAL_PACKAGES = {"vllm.v1.engine", "vllm.utils"}


#: Third-party packages stubbed when they are not installed (what vLLM's loaded modules import at
#: top level; none of it is called on the scheduling path).
THIRD_PARTY_STUBS = {"torch", "zmq", "cloudpickle", "uvloop", "cbor2", "xxhash"}
#: The modules that did get a stub (filled in while loading).
STUBBED: set = set()


class VLLMMissing(RuntimeError):
    """The wheel, or a Python package its modules need (pydantic, msgspec, numpy), is missing."""


# ---- inert stubs --------------------------------------------------------------------------------

class _StubModule(StubModule):
    real = frozenset(REAL_MODULES)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """vllm.*: real modules from the extracted wheel, stub packages for the rest; and (as
    ``fallback``, last on sys.meta_path) a stub for any other module that is not installed."""

    def __init__(self, root: Path | None):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if self.root is None:  # fallback: a third-party module no other finder found (torch, zmq, ...)
            if name.split(".")[0] not in THIRD_PARTY_STUBS:
                return None  # anything else missing stays missing (e.g. _winapi, numpy's optional parts)
            STUBBED.add(name)
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if name != "vllm" and not name.startswith("vllm."):
            return None
        if name in REAL_MODULES:
            rel = name.replace(".", "/")
            if name in REAL_PACKAGES:
                file = self.root / rel / "__init__.py"
                return importlib.util.spec_from_file_location(name, file, submodule_search_locations=[])
            return importlib.util.spec_from_file_location(name, self.root / (rel + ".py"))
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def _owned(name, module) -> bool:
    return name == "vllm" or name.startswith("vllm.") or isinstance(module, _StubModule)


# ---- the wheel ----------------------------------------------------------------------------------

def find_wheel() -> Path | None:
    env = os.environ.get("KVREPLAY_VLLM_WHEEL")
    if env:
        return Path(env)
    for folder in (CACHE, Path("/tmp/engines")):
        wheels = sorted(folder.glob(f"vllm-{VERSION}-*.whl"))
        if wheels:
            return wheels[0]
    return None


def extracted_root(download: bool = False) -> Path:
    """The extracted wheel's root (holding vllm/): $KVREPLAY_VLLM_ROOT, or the wheel's .py files
    extracted once into tests/real_engines/.cache/vllm-0.33.0 (the layout test_vllm_engine.py uses)."""
    env = os.environ.get("KVREPLAY_VLLM_ROOT")
    if env:
        return Path(env)
    root = CACHE / f"vllm-{VERSION}"
    if (root / ".complete").exists():
        return root
    wheel = find_wheel()
    if wheel is None and download:
        CACHE.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={VERSION}", "-d", str(CACHE)],
                           capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise VLLMMissing(f"cannot download vllm=={VERSION}: {e}") from None
        wheel = find_wheel()
    if wheel is None or not wheel.exists():
        raise VLLMMissing(f"no vllm-{VERSION} wheel: set KVREPLAY_VLLM_WHEEL, or put it in {CACHE} "
                          f"(pip download --no-deps vllm=={VERSION} -d {CACHE})")
    return extract_once(wheel, root, lambda n: n.startswith("vllm/") and n.endswith(".py"))


def check_python_packages() -> None:
    missing = [m for m in ("numpy", "msgspec", "pydantic") if importlib.util.find_spec(m) is None]
    if missing:
        raise VLLMMissing(f"vLLM's scheduler modules need {', '.join(missing)}: "
                          f"pip install {' '.join(missing)} (e.g. in a venv of its own: python -m venv .venv-vllm; "
                          ".venv-vllm/bin/pip install numpy msgspec pydantic)")


class RealVLLM:
    """vLLM 0.33.0's scheduler modules, loaded from the wheel into a private module set."""

    def __init__(self, root: Path | None = None, download: bool = False):
        check_python_packages()
        self.root = root or extracted_root(download)
        self.saved: dict = {}
        with self.active():
            self.sched = importlib.import_module("vllm.v1.core.sched.scheduler")
            self.request_module = importlib.import_module("vllm.v1.request")
            self.interface = importlib.import_module("vllm.v1.kv_cache_interface")
            self.utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
            self.hashing = importlib.import_module("vllm.utils.hashing")
            self.sampling = importlib.import_module("vllm.sampling_params")
            self.outputs = importlib.import_module("vllm.v1.outputs")
            self.scheduler_config = importlib.import_module("vllm.config.scheduler")
            self.cache_config = importlib.import_module("vllm.config.cache")
            self.utils.init_none_hash(self.hashing.sha256)

    def active(self):
        """vllm.* resolves to this copy (and lazy imports inside vLLM keep working) meanwhile."""
        return engine_modules(self, _owned, _Finder(self.root), _Finder(None))


_REAL: dict = {}


def real_vllm(download: bool = False) -> RealVLLM:
    if "v" not in _REAL:
        _REAL["v"] = RealVLLM(download=download)
    return _REAL["v"]


# ---- what the scheduler reads of VllmConfig ----------------------------------------------------

class _NoStructuredOutput:
    """StructuredOutputManager for requests without structured output: every token accepted."""

    def accept_tokens(self, request, tokens) -> bool:
        return True

    def validate_tokens(self, request, spec_tokens):
        # (structured_output/__init__.py:362-365: a request without structured output keeps its drafts)
        return spec_tokens


def speculative_config_view(method: str | None, k: int):
    """What Scheduler reads of a SpeculativeConfig (scheduler.py:323-345, 720-721), as
    config/speculative.py gives it for `method` (use_eagle:2116-2120 for eagle and mtp,
    needs_eagle_block_drop:2122-2129, use_eagle_block_drop:2147-2149 with disable_eagle_block_drop
    False, max_num_new_slots_for_drafting:2058-2097: 1 for a draft model, else 0), or None."""
    if method is None:
        return None
    eagle = method in ("eagle", "mtp")
    return types.SimpleNamespace(
        method=method, num_speculative_tokens=k, num_speculative_tokens_per_batch_size=None,
        use_eagle=lambda: eagle, needs_eagle_block_drop=lambda: eagle, use_eagle_block_drop=lambda: eagle,
        disable_eagle_block_drop=False, max_num_new_slots_for_drafting=1 if method == "draft" else 0)


def spec_uniform(x: int) -> float:
    """kvreplay's seeded draw (serving/kernel/batch.c spec_uniform: splitmix64), in Python."""
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    x ^= x >> 31
    return (x >> 11) * (1.0 / 9007199254740992.0)


def spec_accepted(seed: int, i: int, generated: int, drafted: int, rates) -> int:
    """The draft tokens kvreplay's kernel accepts for request i (arrival order) after `generated`
    outputs (batch.c spec_draw): the stub acceptance the harness gives vLLM's scheduler."""
    m = (1 << 64) - 1
    base = ((seed * 0x100000001B3) & m) ^ ((i * 0xD1B54A32D192ED03) & m) ^ ((generated * 0x8CB92BA72F3D8DD7) & m)
    acc = 0
    while acc < drafted and spec_uniform((base + acc * 0x9E3779B97F4A7C15) & m) < rates[acc]:
        acc += 1
    return acc


def vllm_config_view(real: RealVLLM, scheduler_config, cache_config, max_model_len: int, settings=None):
    """The attributes of VllmConfig that Scheduler.__init__ / schedule / update_from_output read,
    as a decoder-only text model, one GPU, no LoRA / spec decode / connectors / KV events has them
    (config/vllm.py: num_speculative_tokens:612, num_lookahead_tokens:626 (no speculative config:
    0), num_prefill_lookahead_tokens:655 (0), num_hash_lookahead_tokens:678 (0),
    max_concurrent_batches:588 (no async scheduling, PP 1: 1), max_in_flight_tokens:601,
    is_mm_encoder_only:579 (False))."""
    ns = types.SimpleNamespace
    model_config = ns(uses_mrope=False, max_model_len=max_model_len, runner_type="generate", is_diffusion=False,
                      is_encoder_decoder=False, supports_multimodal_inputs=False, return_sampling_mask=False)
    parallel_config = ns(data_parallel_index=0, data_parallel_size=1, decode_context_parallel_size=1,
                         prefill_context_parallel_size=1, pipeline_parallel_size=1)
    observability_config = ns(per_request_spec_decode_metrics="none", kv_cache_metrics=False,
                              kv_cache_metrics_sample=0.0, enable_mfu_metrics=False,
                              enable_logging_iteration_details=False)
    return ns(
        scheduler_config=scheduler_config, cache_config=cache_config, model_config=model_config,
        parallel_config=parallel_config, observability_config=observability_config,
        lora_config=None, kv_events_config=None, kv_transfer_config=None, ec_transfer_config=None,
        speculative_config=speculative_config_view(getattr(settings, "spec_method", None), getattr(settings, "spec_k", 0)),
        diffusion_config=None,
        ec_manager_config=ns(get_encoder_cache_manager_obj=lambda: None),
        aux_output_config=ns(enabled=False),
        is_mm_encoder_only=False, num_speculative_tokens=getattr(settings, "spec_k", 0),
        # (vllm.py:626-652: k for EAGLE, MTP and a draft model, 0 for n-gram)
        num_lookahead_tokens=(getattr(settings, "spec_k", 0) if getattr(settings, "spec_method", None)
                              in ("eagle", "mtp", "draft") else 0),
        num_prefill_lookahead_tokens=0, num_hash_lookahead_tokens=0, use_v2_model_runner=False,
        max_concurrent_batches=1, max_in_flight_tokens=scheduler_config.max_num_batched_tokens,
    )


# ---- the run --------------------------------------------------------------------------------------

@dataclass
class Settings:
    block_size: int = 512
    usable_blocks: int = 200  # vLLM's num_gpu_blocks - 1 (block 0 is its null block); kvreplay's capacity
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 32
    enable_chunked_prefill: bool = True
    step_seconds: float = 0.01
    max_model_len: int | None = None  # default: every request's prompt + outputs + a block (never binds)
    log_steps: bool = False
    #: KV cache groups (kvreplay.catalog.kv_groups.Group: full, sliding_window, chunked_local, mamba), in
    #: vLLM's order, for its HybridKVCacheCoordinator; None: one full-attention group
    groups: list | None = None
    retention: int | None = 0  # KVCacheConfig.prefix_cache_retention_interval (vLLM's default 0; None: dense)
    #: speculative decoding: the method (ngram, eagle, mtp, draft; None: off), k draft tokens, the
    #: conditional acceptance per position and the seed of kvreplay's draw (spec_accepted), which
    #: stubs the sampler: a verification returns 1 + that many tokens
    spec_method: str | None = None
    spec_k: int = 0
    spec_accept: tuple = ()
    spec_seed: int = 0

    @property
    def num_gpu_blocks(self) -> int:
        return self.usable_blocks + 1


@dataclass
class TraceRequest:
    hash_ids: list
    input_length: int
    output_length: int
    arrival_s: float


@dataclass
class RequestResult:
    scheduled_s: float | None = None
    hit_tokens: int = 0
    first_token_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    status: str = "pending"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class RunResult:
    requests: list
    steps: list = field(default_factory=list)
    end_s: float = 0.0
    settings: dict = field(default_factory=dict)

    def column(self, name: str) -> list:
        return [getattr(r, name) for r in self.requests]

    def to_dict(self) -> dict:
        return {"engine": f"vllm {VERSION} v1 Scheduler (real, tests/real_engines/vllm_scheduler.py)",
                "settings": self.settings, "end_s": self.end_s,
                "requests": [r.to_dict() for r in self.requests],
                **({"steps": self.steps} if self.steps else {})}


_MANAGERS = {"full": "FullAttentionManager", "sliding_window": "SlidingWindowManager",
             "chunked_local": "ChunkedLocalAttentionManager", "mamba": "MambaManager"}


def _kv_cache_config(real: RealVLLM, settings: Settings):
    """One full-attention group, or settings.groups (attention groups with one KV head of size 1,
    Mamba groups in align mode with a one-element state: the pool is counted in blocks)."""
    i, bs = real.interface, settings.block_size
    common = dict(block_size=bs, num_kv_heads=1, head_size=1, dtype=None)
    if settings.groups is None:
        specs = [i.FullAttentionSpec(**common)]
    else:
        specs = []
        for g in settings.groups:
            if g.kind not in _MANAGERS:
                raise ValueError(f"the harness drives full, sliding_window, chunked_local and mamba groups, "
                                 f"not {g.kind!r}")
            for _ in range(g.copies):
                if g.kind == "full":
                    specs.append(i.FullAttentionSpec(**common))
                elif g.kind == "sliding_window":
                    specs.append(i.SlidingWindowSpec(**common, sliding_window=g.window))
                elif g.kind == "chunked_local":
                    specs.append(i.ChunkedLocalAttentionSpec(**common, attention_chunk_size=g.chunk))
                else:  # a state of one element: vLLM's page-size unification pads it to the attention page
                    specs.append(i.MambaSpec(block_size=bs, shapes=((1,),), dtypes=(None,), page_size_padded=None,
                                             mamba_cache_mode="align"))
    groups = [i.KVCacheGroupSpec(layer_names=[f"layer.{k}"], kv_cache_spec=s) for k, s in enumerate(specs)]
    extra = {} if settings.groups is None else {"prefix_cache_retention_interval": settings.retention}
    return i.KVCacheConfig(num_blocks=settings.num_gpu_blocks, kv_cache_tensors=[], kv_cache_groups=groups, **extra)


def prompt_tokens(ids, length: int, block_size: int) -> list:
    """Block j is ids[j] repeated (the partial tail: its first tokens)."""
    num_blocks = -(-length // block_size)
    if num_blocks > len(ids):
        raise ValueError(f"a prompt of {length} tokens needs {num_blocks} hash ids, the trace gives {len(ids)}")
    tokens = []
    for h in ids[:num_blocks]:
        tokens.extend([int(h)] * block_size)
    return tokens[:length]


def blocks_needed(r: TraceRequest, block_size: int, caps: list | None = None) -> int:
    """The blocks request r holds at its last token, alone: one group's, or with hybrid groups
    every group's, each capped by vLLM's own max_admission_blocks_per_request where vLLM caps it
    (caps: per group, None for no cap)."""
    slots = -(-(r.input_length + max(r.output_length, 1) - 1) // block_size)
    return slots if caps is None else sum(slots if c is None else min(slots, c) for c in caps)


def admission_caps(real: RealVLLM, kv_cache_config, settings: Settings, max_len: int) -> list | None:
    """Per KV cache group, the cap vLLM's admission gate puts on its blocks
    (single_type_kv_cache_manager.py get_manager_for_kv_cache_spec: sliding-window and
    chunked-local specs, from their own max_admission_blocks_per_request), None elsewhere."""
    if settings.groups is None:
        return None
    i = real.interface
    capped = (i.SlidingWindowSpec, i.ChunkedLocalAttentionSpec)

    def cap(spec):
        if isinstance(spec, capped):
            return spec.max_admission_blocks_per_request(max_in_flight_tokens=settings.max_num_batched_tokens,
                                                         max_model_len=max_len)
        if isinstance(spec, i.MambaSpec):  # align mode: max_memory_usage_bytes is 2 state pages
            return 2 + spec.num_speculative_blocks + spec.num_prefill_checkpoint_blocks
        return None

    return [cap(g.kv_cache_spec) for g in kv_cache_config.kv_cache_groups]


def run(requests: list, settings: Settings, real: RealVLLM | None = None) -> RunResult:
    """Serve `requests` (TraceRequest, any order) through vLLM's real Scheduler; results in the given order."""
    real = real or real_vllm()
    bs = settings.block_size
    n = len(requests)
    results = [RequestResult() for _ in range(n)]
    order = sorted(range(n), key=lambda i: (requests[i].arrival_s, i))
    longest = max((r.input_length + max(r.output_length, 1) for r in requests), default=1)
    max_len = settings.max_model_len or longest + bs  # default: never binds
    steps: list = []
    with real.active():
        sched_cfg = real.scheduler_config.SchedulerConfig(
            max_model_len=max_len, is_encoder_decoder=False,
            max_num_batched_tokens=settings.max_num_batched_tokens, max_num_seqs=settings.max_num_seqs,
            enable_chunked_prefill=settings.enable_chunked_prefill, async_scheduling=False)
        mamba = any(g.kind == "mamba" for g in settings.groups or ())
        cache_cfg = real.cache_config.CacheConfig(block_size=bs, enable_prefix_caching=True,
                                                  **({"mamba_cache_mode": "align"} if mamba else {}))
        cache_cfg.num_gpu_blocks = settings.num_gpu_blocks
        vllm_config = vllm_config_view(real, sched_cfg, cache_cfg, max_len, settings)
        rank = {i: r for r, i in enumerate(order)}  # arrival order: kvreplay's request index
        kv_cache_config = _kv_cache_config(real, settings)
        scheduler = real.sched.Scheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                                         structured_output_manager=_NoStructuredOutput(), block_size=bs,
                                         log_stats=False)
        caps = admission_caps(real, kv_cache_config, settings, max_len)
        coordinator = scheduler.kv_cache_manager.coordinator
        managers = [type(m).__name__ for m in coordinator.single_type_managers]
        expect = ("UnitaryKVCacheCoordinator", ["FullAttentionManager"]) if settings.groups is None else \
            ("HybridKVCacheCoordinator", [_MANAGERS[g.kind] for g in settings.groups for _ in range(g.copies)])
        assert (type(coordinator).__name__, managers) == expect, (type(coordinator).__name__, managers)
        Request = real.request_module.Request
        SamplingParams = real.sampling.SamplingParams
        hasher = real.utils.get_request_block_hasher(bs, real.hashing.sha256)
        pool = scheduler.kv_cache_manager.block_pool
        trace_id_of: dict = {}  # vLLM block hash -> trace id
        hash_of: dict = {}  # trace id -> vLLM block hash
        index_of: dict = {}  # request id -> trace index
        live: dict = {}  # request id -> Request, until it finishes
        next_token = [0]

        def check_hashes(i, request):
            for h, tid in zip(request.block_hashes, requests[i].hash_ids[: requests[i].input_length // bs]):
                h = bytes(h)
                if trace_id_of.setdefault(h, tid) != tid or hash_of.setdefault(tid, h) != h:
                    raise ValueError(f"request {i}: trace hash ids are not chained (id {tid}); vLLM's block "
                                     "hashes cannot map 1:1 to them")

        t = 0.0
        k = 0  # next arrival in `order`
        pending = None  # (scheduler_output, model_runner_output, end time) of the step that runs
        while True:
            if pending is not None:
                out, mro, t = pending
                pending = None
                engine_outputs = scheduler.update_from_output(out, mro)
                if settings.spec_k:  # the drafter proposes k tokens for every request that sampled
                    drafted = [rid for rid, toks in zip(mro.req_ids, mro.sampled_token_ids) if toks]
                    scheduler.update_draft_token_ids(real.outputs.DraftTokenIds(
                        req_ids=drafted, draft_token_ids=[[-7] * settings.spec_k for _ in drafted]))
                for eco in engine_outputs.values():
                    for o in eco.outputs:
                        i = index_of[o.request_id]
                        if o.new_token_ids and results[i].first_token_s is None:
                            results[i].first_token_s = t
                        if o.finish_reason is not None:
                            results[i].finish_s = t
                            results[i].status = "finished"
                            results[i].preemptions = live.pop(o.request_id).num_preemptions
            while k < n and requests[order[k]].arrival_s <= t:
                i = order[k]
                k += 1
                r = requests[i]
                if blocks_needed(r, bs, caps) > settings.usable_blocks or r.input_length >= max_len:
                    results[i].status = "rejected"
                    continue
                rid = f"r{i}"
                request = Request(request_id=rid, prompt_token_ids=prompt_tokens(r.hash_ids, r.input_length, bs),
                                  sampling_params=SamplingParams(max_tokens=max(r.output_length, 1), ignore_eos=True),
                                  pooling_params=None, arrival_time=r.arrival_s, block_hasher=hasher)
                check_hashes(i, request)
                index_of[rid] = i
                live[rid] = request
                scheduler.add_request(request)
            if not live:
                if k >= n:
                    break
                t = max(t, requests[order[k]].arrival_s)
                continue
            out = scheduler.schedule()
            if out.total_num_scheduled_tokens == 0:
                if out.preempted_req_ids:
                    continue  # a running request preempted itself and nothing ran: schedule again at t
                if k >= n:
                    waiting = [rid for rid in live]
                    raise RuntimeError(f"vLLM's scheduler is wedged at t={t}: {len(waiting)} requests can never be "
                                       f"scheduled (first: {waiting[0]}); {pool.get_num_free_blocks()} free blocks")
                t = max(t, requests[order[k]].arrival_s)
                continue
            for nr in out.scheduled_new_reqs:
                i = index_of[nr.req_id]
                if results[i].scheduled_s is None:
                    results[i].scheduled_s = t
                    results[i].hit_tokens = nr.num_computed_tokens
                    stats = scheduler.requests[nr.req_id].prefill_stats
                    assert stats is None or stats.num_local_cached_tokens == nr.num_computed_tokens
            req_ids = list(out.num_scheduled_tokens)
            sampled = []
            for rid in req_ids:
                request = scheduler.requests[rid]
                if request.is_prefill_chunk:
                    sampled.append([])
                else:
                    drafts = len(out.scheduled_spec_decode_tokens.get(rid, ()))
                    accepted = (spec_accepted(settings.spec_seed, rank[index_of[rid]], request.num_output_tokens,
                                              drafts, settings.spec_accept) if drafts else 0)
                    toks = []
                    for _ in range(1 + accepted):
                        next_token[0] += 1
                        toks.append(-next_token[0])
                    sampled.append(toks)
            mro = real.outputs.ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: j for j, r in enumerate(req_ids)},
                                                 sampled_token_ids=sampled)
            if settings.log_steps:
                steps.append({"t": t, "scheduled": {index_of[r]: v for r, v in out.num_scheduled_tokens.items()},
                              "preempted": sorted(index_of[r] for r in out.preempted_req_ids),
                              "free_blocks": pool.get_num_free_blocks(),
                              "running": [index_of[r.request_id] for r in scheduler.running],
                              "waiting": [index_of[r.request_id] for r in scheduler.waiting]})
            pending = (out, mro, t + settings.step_seconds)
    end = max((r.finish_s for r in results if r.finish_s is not None), default=0.0)
    return RunResult(requests=results, steps=steps, end_s=end,
                     settings={**dataclasses.asdict(settings), "num_gpu_blocks": settings.num_gpu_blocks,
                               "max_model_len": max_len})


# ---- traces and the CLI --------------------------------------------------------------------------

def load_jsonl(path, limit: int | None = None, speedup: float = 1.0) -> list:
    """Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids): TraceRequests with
    arrivals in seconds from the first timestamp, divided by `speedup`."""
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


def requests_from_trace(trace, arrival_s) -> list:
    """TraceRequests from a kvreplay Trace (its dense block ids: chained when the file's are) and
    arrival times in seconds (e.g. ``kvreplay.serving.simulate.arrivals(trace)``, so that both
    simulators see the same floats)."""
    return [TraceRequest(hash_ids=[int(x) for x in trace.request_blocks(i)], input_length=int(trace.input_length[i]),
                         output_length=int(trace.output_length[i]), arrival_s=float(arrival_s[i]))
            for i in range(len(trace))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="Mooncake-style JSONL trace")
    p.add_argument("--blocks", type=int, default=200, help="usable KV blocks (vLLM num_gpu_blocks - 1)")
    p.add_argument("--block-size", type=int, default=512)
    p.add_argument("--max-seqs", type=int, default=32)
    p.add_argument("--max-batched", type=int, default=256)
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--speedup", type=float, default=1.0, help="divide the trace's timestamps by this")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--limit", type=int, default=None, help="first N requests")
    p.add_argument("--steps", action="store_true", help="also write the per-step log")
    p.add_argument("-o", "--output", default="-", help="JSON output (default: stdout)")
    a = p.parse_args(argv)
    settings = Settings(block_size=a.block_size, usable_blocks=a.blocks, max_num_batched_tokens=a.max_batched,
                        max_num_seqs=a.max_seqs, enable_chunked_prefill=not a.no_chunked_prefill,
                        step_seconds=a.step_ms / 1000.0, max_model_len=a.max_model_len, log_steps=a.steps)
    result = run(load_jsonl(a.trace, a.limit, a.speedup), settings, real_vllm(download=False))
    text = json.dumps(result.to_dict(), indent=1)
    if a.output == "-":
        print(text)
    else:
        Path(a.output).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
