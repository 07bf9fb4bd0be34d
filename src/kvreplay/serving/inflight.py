"""TensorRT-LLM's in-flight batching scheduler (``--engine-style trtllm``): the reference.

One step's decision as TensorRT-LLM's executor makes it, in two passes over its active requests
(arrival order):

1. the **capacity scheduler** picks the requests that may run with the KV blocks there are:
   ``GUARANTEED_NO_EVICT`` (the default: a request starts only if the blocks every scheduled
   request needs to finish are free) or ``MAX_UTILIZATION`` (a request starts if the blocks of its
   next step are free; when one does not fit, the newest started request behind it is paused:
   its blocks freed, its generated tokens moved into its prompt to recompute);
2. the **micro-batch scheduler** fits them to ``max_batch_size`` and ``max_num_tokens``, chunking
   contexts (``FIRST_COME_FIRST_SERVED`` or ``EQUAL_PROGRESS``, in units of a KV block).

serving/kernel/trtllm.c is the compiled twin, function for function (the simulator runs it);
tests/serving/test_trtllm_scheduler.py replays TensorRT-LLM's own scheduler unit tests on both
and holds them equal on random states.

Sources (TensorRT-LLM, Apache-2.0, read, not copied; the repository is too large to fetch whole,
so each is cited by file, the commit read, and function):

- CS: cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp @ 02a10fed:
  ``GuaranteedNoEvictScheduler::impl``, ``MaxUtilizationScheduler::operator()``,
  ``trySchedulingRequestMaxUtilization``, ``beneficialToSkip``,
  ``prefillWithChunkedContextsAlreadyExecuting``;
- SBM: cpp/tensorrt_llm/batch_manager/scheduledBlocksManager.cpp @ ca64fd93:
  ``NoEvictScheduledBlocksManager``, ``MaxUtilizationScheduledBlocksManager``;
- KVM: cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (the version read in 2026-12):
  ``getNeededBlocksOneStep``, ``getRemainingBlocksToCompletion``;
- MBS: cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp @ 0a949d31: ``operator()``,
  ``setCtxRequestsChunkSize`` (both policies);
- LR: cpp/include/tensorrt_llm/batch_manager/llmRequest.h: ``setContextChunkSize`` (clamped to
  the remaining context), ``pause``, ``setPrepopulatedPromptLen``.

A request is described by arrays in active-request order: ``kind`` (CONTEXT_NEW: waiting, its
first chunk not run; CONTEXT_STARTED: a chunked context part done; GENERATION), ``prompt``
(TensorRT-LLM's mPromptLen: the tokens to compute before decoding, generated ones included after
a pause), ``position`` (a context's current position; a generation request's tokens in KV),
``final`` (the tokens in KV at its end: prompt + max new tokens, or the prompt alone when
outputs take no KV), ``allocated`` (blocks it holds), ``releasable`` (of them, the blocks a pause
frees: those no other running request holds), ``new_block`` (the first block of its prompt the cache lacks, -1: none or no block
reuse). Beam width 1, no draft tokens, no LoRA pages, one attention window, no sink tokens.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import native
from ..errors import ConfigError

CONTEXT_NEW, CONTEXT_STARTED, GENERATION = 0, 1, 2
POLICIES = ("guaranteed_no_evict", "max_utilization")
CHUNKING = ("none", "first_come_first_served", "equal_progress")
#: the compiled decision's settings, in kernel/trtllm.c's order (kv_layout_trtllm_cfg)
CFG_SLOTS = ("T_POLICY", "T_MAX_BATCH", "T_MAX_TOKENS", "T_CHUNKING", "T_BLOCK_SIZE", "T_MAX_CONTEXT", "T_FREE")


@dataclass(frozen=True)
class Config:
    """One instance's scheduler settings (0: no limit for max_num_tokens and max_context_length)."""

    policy: str = "guaranteed_no_evict"
    max_batch_size: int = 2048  # the capacity scheduler's maxNumRequests too (one micro-batch)
    max_num_tokens: int = 8192
    chunking: str = "none"
    block_size: int = 32  # tokens per block; the chunk unit (chunkUnitSize = tokensPerBlock)
    max_context_length: int = 0
    free_blocks: int = 0  # free blocks at the step's start (cached blocks no request holds count as free)

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ConfigError(f"unknown capacity scheduler policy {self.policy!r} (known: {', '.join(POLICIES)})")
        if self.chunking not in CHUNKING:
            raise ConfigError(f"unknown context chunking policy {self.chunking!r} (known: {', '.join(CHUNKING)})")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def remaining_blocks(final: int, allocated: int, bs: int) -> int:
    """KVM getRemainingBlocksToCompletion at beam width 1: the blocks of `final` tokens beyond
    those held (its context/generation split sums to this at beam width 1)."""
    return _ceil(final, bs) - allocated


def one_step_blocks(kind: int, prompt: int, position: int, final: int, bs: int) -> int:
    """KVM getNeededBlocksOneStep (no two-step lookahead): a first chunk needs its whole prompt's
    blocks (addSequence allocates them all); a generation step the block its next token may open;
    a later context chunk nothing (its blocks are held)."""
    if kind == CONTEXT_NEW:
        return _ceil(min(prompt, final), bs)
    if kind == GENERATION:
        add = min(1, final - position)
        return _ceil(position + add, bs) - _ceil(position, bs)
    return 0


def _skip(i: int, kind, new_block, contributed: set) -> bool:
    """CS beneficialToSkip: a waiting request whose first missing block an earlier request of
    this step will compute waits, to reuse it. Evaluating a request adds its block to the set
    (oneManagerBeneficialToSkip), whether it is then scheduled or not."""
    if kind[i] != CONTEXT_NEW or new_block[i] < 0:
        return False
    if new_block[i] in contributed:
        return True
    contributed.add(new_block[i])
    return False


def _already_contributed(kind, new_block) -> set:
    """CS prefillWithChunkedContextsAlreadyExecuting: the blocks contexts mid-chunking compute."""
    return {int(new_block[i]) for i in range(len(kind)) if kind[i] == CONTEXT_STARTED and new_block[i] >= 0}


def capacity(cfg: Config, kind, prompt, position, final, allocated, releasable, new_block):
    """The capacity scheduler: (the scheduled requests' indices, in the order the micro-batch
    scheduler sees them; the paused ones')."""
    if cfg.policy == "guaranteed_no_evict":
        return _no_evict(cfg, kind, prompt, final, allocated, new_block), []
    return _max_utilization(cfg, kind, prompt, position, final, releasable, new_block)


def _no_evict(cfg, kind, prompt, final, allocated, new_block) -> list:
    """CS GuaranteedNoEvictScheduler::impl: generation requests first (each reserves the blocks
    it needs to finish), then the others in order while their blocks to finish fit what is left;
    the first that does not fit stops the pass (SBM NoEvictScheduledBlocksManager)."""
    bs, limit = cfg.block_size, cfg.max_batch_size
    contributed = _already_contributed(kind, new_block)
    available = cfg.free_blocks
    scheduled, pending = [], []
    for i in range(len(kind)):
        if len(scheduled) >= limit:
            break
        if kind[i] == GENERATION:
            scheduled.append(i)
            available -= remaining_blocks(final[i], allocated[i], bs)
        else:
            pending.append(i)
    for i in pending:
        if _skip(i, kind, new_block, contributed):
            continue
        if len(scheduled) >= limit:
            break
        need = remaining_blocks(final[i], allocated[i], bs)
        if need > available:
            break
        scheduled.append(i)
        available -= need
    return scheduled


def _max_utilization(cfg, kind, prompt, position, final, releasable, new_block):
    """CS MaxUtilizationScheduler::operator(): each request in order if the blocks of its next
    step fit the free ones (SBM MaxUtilizationScheduledBlocksManager); when one does not, the
    last started request from the end back to it is paused (its blocks freed for the rest of the
    pass: schedulingRemoveSequence) and it is tried again; none to pause stops the pass."""
    bs = cfg.block_size
    contributed = _already_contributed(kind, new_block)
    free, used = cfg.free_blocks, 0
    scheduled, paused = [], []
    i, end = 0, len(kind)
    while i < end:
        if _skip(i, kind, new_block, contributed):
            i += 1
            continue
        if len(scheduled) < cfg.max_batch_size:  # trySchedulingRequestMaxUtilization
            need = one_step_blocks(kind[i], prompt[i], position[i], final[i], bs)
            if used + need <= free:
                used += need
                scheduled.append(i)
                i += 1
                continue
        last = next((k for k in range(end - 1, i - 1, -1) if kind[k] != CONTEXT_NEW), None)
        if last is None:
            break
        paused.append(last)
        free += releasable[last]
        end = last
    return scheduled, paused


def micro_batch(cfg: Config, scheduled, kind, prompt, position) -> dict:
    """MBS operator(): {request index: tokens this step} over the capacity scheduler's requests
    in its order. Generation requests take 1 token each while the budget lasts; without chunking
    a context takes its whole prompt or stops the pass; with chunking every context is a
    candidate for its remaining tokens, cut (setCtxRequestsChunkSize) when they do not all fit
    what generation left, or exceed max_context_length. max_batch_size counts requests."""
    budget, max_ctx = cfg.max_num_tokens, cfg.max_context_length
    out, chunks = {}, {}
    tokens = chunked_tokens = count = 0
    all_fit = True
    for i in scheduled:
        if kind[i] != GENERATION:
            remaining = prompt[i] - position[i]
            if cfg.chunking == "none":
                if budget and tokens + remaining > budget:
                    break
                out[i] = remaining
                tokens += remaining
            else:
                chunks[i] = remaining
                want = remaining
                if max_ctx and max_ctx < want:
                    want, all_fit = max_ctx, False
                chunked_tokens += want
        else:
            if budget and tokens + 1 > budget:
                break
            out[i] = 1
            tokens += 1
        count += 1
        if count >= cfg.max_batch_size:
            break
    if budget and chunked_tokens > budget - tokens:
        all_fit = False
    if chunks and not all_fit:
        _cut(cfg, chunks, prompt, position, budget - tokens if budget else None)
    for i, size in chunks.items():
        if size > 0:
            out[i] = size
    return out


def _cut(cfg, chunks: dict, prompt, position, capacity) -> None:
    """MBS setCtxRequestsChunkSize: chunk sizes from 0, by the policy, each clamped to what is
    left of its context (LR setContextChunkSize)."""
    unit, max_ctx = cfg.block_size, cfg.max_context_length
    left = {i: prompt[i] - position[i] for i in chunks}
    for i in chunks:
        chunks[i] = 0
    if cfg.chunking == "equal_progress":
        total, grew = 0, 1
        while (capacity is None or total < capacity) and grew:
            grew = 0
            for i in chunks:
                past = chunks[i]
                size = min(past + unit, left[i])
                if (capacity is not None and total + size - past > capacity) or (max_ctx and size > max_ctx):
                    continue
                chunks[i] = size
                total += size - past
                grew += size - past
        return
    for i in chunks:  # first come, first served
        size = left[i]
        if capacity is not None:
            size = min(size, capacity)
        if max_ctx:
            size = min(size, max_ctx)
        if size != left[i]:
            size = size // unit * unit
        chunks[i] = size
        if capacity is not None:
            capacity -= size


def step(cfg: Config, kind, prompt, position, final, allocated, releasable=None, new_block=None):
    """One step: ({request index: tokens}, [paused indices])."""
    n = len(kind)
    releasable = allocated if releasable is None else releasable
    new_block = np.full(n, -1) if new_block is None else new_block
    scheduled, paused = capacity(cfg, kind, prompt, position, final, allocated, releasable, new_block)
    return micro_batch(cfg, scheduled, kind, prompt, position), paused


def prepopulated_chunk(chunk: int, hit: int, prompt: int, bs: int) -> int:
    """LR setPrepopulatedPromptLen: a first chunk whose first `hit` tokens were reused starts
    there and ends on a block boundary (or at the prompt's end)."""
    if hit <= 0:
        return chunk
    if hit + chunk < prompt:
        chunk = (hit + chunk) // bs * bs - hit
    return min(chunk, prompt - hit)


# ---- the compiled twin (kernel/trtllm.c), for the tests that hold the two equal ----------------------


@lru_cache(maxsize=None)
def _compiled():
    spec = ctypes.c_char.in_dll(native.lib(), "kv_layout_trtllm_cfg")  # (a char array: read from its address)
    names = ctypes.string_at(ctypes.addressof(spec)).decode().split()
    if tuple(names) != CFG_SLOTS:
        raise ConfigError(f"kernel/trtllm.c's settings {names} differ from inflight.CFG_SLOTS {CFG_SLOTS}: rebuild")
    p, i = ctypes.c_void_p, ctypes.c_int64
    return (native.function("kv_trtllm_capacity", i, p, i, p, p, p, p, p, p, p, p, p, p, p),
            native.function("kv_trtllm_micro_batch", None, p, i, p, p, p, p, p, p))


def _cfg_array(cfg: Config) -> np.ndarray:
    return np.array([POLICIES.index(cfg.policy), cfg.max_batch_size, cfg.max_num_tokens, CHUNKING.index(cfg.chunking),
                     cfg.block_size, cfg.max_context_length, cfg.free_blocks], dtype=np.int64)


def _arr(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=np.int64).reshape(-1))


def capacity_compiled(cfg: Config, kind, prompt, position, final, allocated, releasable, new_block):
    """capacity() by kernel/trtllm.c: (scheduled indices in order, paused indices in order)."""
    capacity_fn, _ = _compiled()
    n = len(kind)
    arrays = [_arr(a) for a in (kind, prompt, position, final, allocated, releasable, new_block)]
    scheduled, paused = np.zeros(n + 1, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)
    npaused = np.zeros(1, dtype=np.int64)
    scratch = np.zeros(16 * n + 64, dtype=np.int64)
    settings = _cfg_array(cfg)  # (held: the call reads it)
    ns = capacity_fn(native.ptr(settings), n, *(native.ptr(a) for a in arrays), native.ptr(scheduled),
                     native.ptr(paused), native.ptr(npaused), native.ptr(scratch))
    return scheduled[:ns].tolist(), paused[:int(npaused[0])].tolist()


def micro_batch_compiled(cfg: Config, scheduled, kind, prompt, position) -> dict:
    """micro_batch() by kernel/trtllm.c."""
    _, micro_fn = _compiled()
    n = len(kind)
    kind, prompt, position, order = _arr(kind), _arr(prompt), _arr(position), _arr(list(scheduled))
    tokens = np.zeros(n + 1, dtype=np.int64)
    scratch = np.zeros(2 * len(order) + 2, dtype=np.int64)
    settings = _cfg_array(cfg)
    micro_fn(native.ptr(settings), len(order), native.ptr(order), native.ptr(kind), native.ptr(prompt),
             native.ptr(position), native.ptr(tokens), native.ptr(scratch))
    return {int(i): int(tokens[i]) for i in order.tolist() if tokens[i] > 0}


def step_compiled(cfg: Config, kind, prompt, position, final, allocated, releasable=None, new_block=None):
    """step() by kernel/trtllm.c: ({request index: tokens}, [paused indices])."""
    n = len(kind)
    releasable = allocated if releasable is None else releasable
    new_block = np.full(n, -1) if new_block is None else new_block
    scheduled, paused = capacity_compiled(cfg, kind, prompt, position, final, allocated, releasable, new_block)
    return micro_batch_compiled(cfg, scheduled, kind, prompt, position), paused
