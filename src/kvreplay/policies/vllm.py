"""vLLM v1's prefix cache (automatic prefix caching), request by request, as its block pool does it.

Source: vLLM v1, ``vllm/v1/core/block_pool.py`` (BlockPool, BlockHashToBlockMap),
``kv_cache_utils.py`` (FreeKVCacheBlockQueue, KVCacheBlock), ``single_type_kv_cache_manager.py``
(FullAttentionManager) and ``kv_cache_manager.py`` (KVCacheManager) of vLLM 0.24.0 to 0.33.0;
checked request by request against the real code of 0.24.0, 0.28.0 and 0.33.0 by
``tests/real_engines/test_vllm_engine.py`` (hit tokens, free queue order, hash holders).
The trace's hash ids stand for vLLM's block hashes; a full-attention model, one KV cache group.

A sequential replay schedules, prefills and finishes each request before the next one starts,
so at every prefix scan nothing is running and every block of the pool is free. Overlapping
requests (engine/lifecycle.py) keep their blocks between start and finish: see Holds below.

State: a pool of ``capacity`` blocks (vLLM's ``num_gpu_blocks - 1``: vLLM also keeps a null
block that never holds data). Each block has a reference count (requests using it) and at most
one hash id. Free blocks (ref_cnt 0) sit in one free queue, head = reused first. A free block
may still hold its hash: it stays cached (hittable) until it is reused. A hash id may be held
by several blocks at once (vLLM does not deduplicate); a lookup returns the one that got the
hash first among those still holding it (``get_one_block`` takes the first entry of an
insertion-ordered dict).

Resident: a hash id held by at least one block, free or not.

A request with hash ids ``ids`` and ``L`` prompt tokens (block size ``bs``):

1. Hit: the longest prefix of ``ids`` whose hashes are resident, at most ``(L - 1) // bs``
   blocks (vLLM recomputes at least the last prompt token to get logits, so a block-aligned
   exact resend hits all its blocks but the last; ``max_cache_hit_length = num_tokens - 1``) or
   ``L // bs`` with ``last_token_recompute=0``. Never the partial tail block: vLLM hashes
   full blocks only. The hit blocks are touched: removed from the free queue and pinned
   (ref_cnt + 1). A hit does not move a block to the recent end by itself; its place in
   the queue is decided when it is freed again (step 4).
2. Allocation: the request holds ``ceil(L / bs)`` blocks (its prompt, trailing partial block
   included). Those beyond the hits are popped from the head of the free queue; a popped
   block that held a hash loses it (an eviction; the hash stays resident only if another
   block still holds it).
3. Prefill: its full blocks, the first ``min(len(ids), L // bs)``, are cached under their ids
   (hits already are). A block-aligned exact resend therefore recomputes its last block
   into a NEW block and caches it under the hash an older block already holds: two blocks,
   one hash (``duplicate_blocks``), unless that older block is the only free one: then it is
   itself popped, loses the hash and gets it back. A hash repeated within a request is
   likewise cached once per position.
4. Finish: the blocks are freed tail block first (``KVCacheManager.free`` frees in reverse).
   Freed blocks that hold a hash are appended to the tail of the free queue in that order, so
   the request's last block is evicted before its first; freed blocks without a hash (the
   partial tail, blocks past ``len(ids)``) are put at the head, to be reused first, the
   request's last one foremost (``BlockPool.free_blocks``: prepend the hashless, append the
   hashed).

A request's start (``pin_request``) is steps 1 to 3, vLLM's ``allocate_slots``; it keeps its
blocks until its finish (``unpin_request``), step 4; a sequential replay does both at once.

Hence the free queue is always: [freed blocks without a hash] + [never used blocks] +
[freed blocks with a hash, least recently freed first]: an LRU over release time, the tail of
each request's chain ahead of its head.

A request needing more than ``capacity`` blocks would never be scheduled by vLLM (its hit
blocks count against the free blocks too, so ``allocate_slots`` fails even on an idle pool;
in practice vLLM refuses to start unless the KV cache holds ``max_model_len`` tokens, and
rejects longer prompts). kvreplay serves it with the blocks that fit: it holds ``capacity`` blocks, the
first ``capacity`` blocks of its prompt, as if truncated (never fewer than its hits: a hash
repeated within a request hits one block several times). Counted in ``oversize_requests``.
Among overlapping requests it is held the same way (so running requests one at a time is the
sequential replay): it needs the whole pool free, and is refused while anything else runs.

Holds (pin): a running request holds its blocks by their ref_cnt, as in vLLM. A held block is
not in the free queue, so eviction (popping the queue head) never reaches it: nothing is
skipped or requeued, the next free block goes; a hit on a block another running request holds
shares it (ref_cnt 2, it needs no free block). Allocation is all or nothing, as
``allocate_slots``: a start needs its new blocks plus its hit blocks that are free (touching
takes them out of the free queue); when that exceeds the free blocks (capacity minus the
blocks running requests hold) the start is refused: nothing is touched or counted, and vLLM's
scheduler would keep it waiting (``watermark`` 0, no decode blocks). A free block hit twice by
a repeated hash counts once here, per position in vLLM (chained hashes never repeat).
``held_count``: blocks with ref_cnt > 0 (the hashless tail too); a hash is held iff one of its
blocks is; ``everything_held``: the free blocks are too few for the start last refused (with
none waiting: no block is free). Checked against the real manager, free queue after every
start and finish, by tests/real_engines/test_vllm_engine.py::test_overlapping_requests.

Not modelled, because a hash-id trace cannot express it: output tokens (no decode blocks are
allocated, and the partial prompt tail, which decode would fill and vLLM would then cache
under a hash including output tokens, stays uncached); the scheduler around concurrent
requests (batching limits, preemption, the ``watermark``, decode blocks; see Holds for what
overlapping requests do model); chunked prefill (with a single request at a time it only
interleaves steps 2 and 3 and leaves the same state, which the engine test checks);
sliding-window and hybrid models (several KV cache groups); EAGLE's dropped last hit block; LoRA,
multimodal and ``cache_salt`` extra keys (they only change the hashes: give them distinct hash
ids); KV connectors and offloading. vLLM's prefix-cache metric counts every lookup of a
request's ``num_tokens`` as "queries" and the hit tokens as "hits"; here that is prompt_tokens
and hit_tokens, one lookup per request (vLLM counts a preempted request's lookups apart).

Eviction log (base.py): a hash is logged when its last holding block is reused (step 2); a
duplicated hash stays resident, and unlogged, while another block holds it.

Parameters: ``last_token_recompute`` (1; 0 lifts the ``L - 1`` cap to ``L // bs`` blocks, a
what-if: no vLLM version does that).
Counters: ``admissions`` (blocks cached), ``evictions`` (blocks that lost their hash on
reuse), ``duplicate_blocks`` (blocks cached under a hash another block already held),
``pinned_peak`` (most blocks pinned at once, by all running requests), ``oversize_requests``.
``final_cache_blocks``: blocks holding a hash at the end (a duplicated hash counts twice).
"""

from __future__ import annotations

from collections import OrderedDict, deque, namedtuple

import numpy as np

from ..hybrid.coordinator import replay_groups
from .base import Param, PolicySpec, ReferencePolicy, hold_arrays, in_range, meta_slots

COUNTERS = ("admissions", "evictions", "duplicate_blocks", "pinned_peak", "oversize_requests")


def max_hit_blocks(num_blocks: int, input_length: int, block_size: int, last_token_recompute: int = 1) -> int:
    """The most blocks a request may hit: full blocks only, and by default not the one with the last token."""
    cap = (input_length - 1) // block_size if last_token_recompute else input_length // block_size
    return max(0, min(num_blocks, cap))


class VLLM(ReferencePolicy):
    """Reference vLLM block pool: numbered blocks, reference counts and one free queue.

    Block ids are vLLM's: 1..capacity in first-use order (0 is vLLM's null block), so the
    engine test can compare this pool with the real one block by block.
    """

    def __init__(self, capacity: int, trace=None, last_token_recompute: int = 1):
        self.capacity = capacity
        self.last_token_recompute = last_token_recompute
        self.ref_cnt: dict = {}  # block -> requests holding it (absent: 0)
        self.block_hash: dict = {}  # block -> the hash id it is cached under (absent: none)
        self.holders: dict = {}  # hash id -> {block: None} in caching order (vLLM's cached_block_hash_to_block)
        # The free queue, head first, in its three runs (see the module docstring):
        self.free_hashless: deque = deque()  # freed blocks without a hash, prepended
        self.next_unused = 1  # never used blocks: next_unused..capacity, in id order
        self.free_cached: OrderedDict = OrderedDict()  # freed blocks with a hash, appended
        self.stats = dict.fromkeys(COUNTERS, 0)
        self.busy = 0  # blocks held by running requests (ref_cnt > 0)
        self.waiting = None  # the last refused start: (its hit blocks, its new blocks), until a start is admitted

    def resident(self, h) -> bool:
        return h in self.holders

    def cached_blocks(self, num_blocks: int, input_length: int, block_size: int) -> int:
        """Its full blocks (at most the pool): a partial tail is never cached."""
        return min(num_blocks, input_length // block_size, self.capacity)

    def hit_limit(self, num_blocks: int, input_length: int, block_size: int) -> int:
        return max_hit_blocks(num_blocks, input_length, block_size, self.last_token_recompute)

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        handles = self.pin_request(request, blocks, hits, input_length, block_size)
        self.unpin_request(request, blocks, input_length, block_size, handles)

    def pin_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> list:
        """Schedule the request (``allocate_slots``): touch its hits, allocate, cache its full
        blocks, and keep them all. Its held blocks in position order, or [] when refused."""
        need = -(-input_length // block_size)
        held_count = max(hits, min(need, self.capacity))
        # all or nothing: the new blocks and the free hit blocks (they leave the free queue)
        # must fit in the free blocks
        held = [next(iter(self.holders[h])) for h in blocks[:hits]]
        demand = held_count - hits + len({b for b in held if self.ref_cnt.get(b, 0) == 0})
        if demand > self.capacity - self.busy:
            self.waiting = (held, held_count - hits)
            self.refuse()
            return []
        self.waiting = None
        if need > self.capacity:
            self.stats["oversize_requests"] += 1
        full = min(len(blocks), input_length // block_size, held_count)
        # 1. touch the hit blocks: the first holder of each hash
        for b in held:
            self._touch(b)
        # 2. the rest from the head of the free queue
        held += [self._pop_free() for _ in range(held_count - hits)]
        self.stats["pinned_peak"] = max(self.stats["pinned_peak"], self.busy)
        # 3. prefill: cache the full blocks
        for j in range(hits, full):
            self._cache(held[j], blocks[j])
        return held

    def unpin_request(self, request: int, blocks: list, input_length: int, block_size: int, handles: list) -> None:
        """Finish the request (``KVCacheManager.free``): free its blocks, tail block first."""
        self._free(reversed(handles))

    def access(self, b) -> None:  # pragma: no cover - vLLM works request by request
        raise NotImplementedError("vllm accesses blocks through access_request")

    def _touch(self, b) -> None:
        if self.ref_cnt.get(b, 0) == 0:
            del self.free_cached[b]  # a hit block has a hash, so it is in the cached run
            self.busy += 1
        self.ref_cnt[b] = self.ref_cnt.get(b, 0) + 1

    def _pop_free(self) -> int:
        if self.free_hashless:
            b = self.free_hashless.popleft()
        elif self.next_unused <= self.capacity:
            b = self.next_unused
            self.next_unused += 1
        else:
            b, _ = self.free_cached.popitem(last=False)
            h = self.block_hash.pop(b)
            del self.holders[h][b]
            if not self.holders[h]:
                del self.holders[h]
                self.note_evicted(h)  # its last holder: the hash is resident no more
            self.stats["evictions"] += 1
        self.ref_cnt[b] = 1
        self.busy += 1
        return b

    def _cache(self, b, h) -> None:
        if h in self.holders:
            self.stats["duplicate_blocks"] += 1
        self.holders.setdefault(h, {})[b] = None
        self.block_hash[b] = h
        self.stats["admissions"] += 1

    def _free(self, ordered) -> None:
        hashless = []
        for b in ordered:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.busy -= 1
                if b in self.block_hash:
                    self.free_cached[b] = None
                else:
                    hashless.append(b)
        self.free_hashless.extendleft(reversed(hashless))  # hashless[0] ends up at the head

    def free_queue(self) -> list:
        """Every free block id, head (reused first) to tail."""
        return [*self.free_hashless, *range(self.next_unused, self.capacity + 1), *self.free_cached]

    def size(self) -> int:
        return len(self.block_hash)

    def counters(self) -> dict:
        return dict(self.stats)

    def resident_blocks(self):
        return self.holders.keys()

    # ---- holds: the reference counts, read as the contract's pins (recounted, not the running tally) ----

    @property
    def pins(self) -> dict:
        """Hash id -> holds on its blocks, for the hashes one of whose blocks is in use."""
        out = {}
        for b, n in self.ref_cnt.items():
            if n > 0 and b in self.block_hash:
                h = self.block_hash[b]
                out[h] = out.get(h, 0) + n
        return out

    def held(self, h) -> bool:
        return any(self.ref_cnt.get(b, 0) > 0 for b in self.holders.get(h, ()))

    def held_count(self) -> int:
        """Pool blocks in use by running requests (hashless ones included)."""
        return sum(1 for n in self.ref_cnt.values() if n > 0)

    def everything_held(self) -> bool:
        """Allocation is all or nothing: True when the free blocks are too few for the start last
        refused (its new blocks plus its free hit blocks; ``allocate_slots``' check); with no
        start waiting, when no block is free at all."""
        free = self.capacity - self.held_count()
        if self.waiting is None:
            return free <= 0
        hit_blocks, new = self.waiting
        return new + len({b for b in hit_blocks if self.ref_cnt.get(b, 0) == 0}) > free


# ---- compiled engine --------------------------------------------------------------------------------
#
# Blocks without a hash are interchangeable, and the free ones all sit at the head of the free
# queue (they are only ever prepended; blocks with a hash only ever appended), whatever runs. So
# the kernel counts the free ones (HASHLESS_FREE; held ones count in hold[HELD] only) and gives
# an identity, a "slot", only to blocks that hold a hash: at most min(capacity,
# trace.num_accesses) of them exist at once (a block gets a hash from one position of one
# request), so no array is sized by a huge capacity. An evicted block gives its slot back; a
# block that gets a hash takes one. The reference engine keeps every block by id; the
# differential tests hold the two together.

META = meta_slots("vllm")  # the meta array's slots, by the names vllm.c gives them
CAPACITY, RECOMPUTE, HASHLESS_FREE, QUEUE_HEAD, QUEUE_TAIL, FREE_SLOTS, CACHED_BLOCKS = META.CAPACITY, META.RECOMPUTE, META.HASHLESS_FREE, META.QUEUE_HEAD, META.QUEUE_TAIL, META.FREE_SLOTS, META.CACHED_BLOCKS
ADMISSIONS, EVICTIONS, DUPLICATES, PINNED_PEAK, OVERSIZE = META.ADMISSIONS, META.EVICTIONS, META.DUPLICATES, META.PINNED_PEAK, META.OVERSIZE
META_SLOTS = len(META)

VLLMState = namedtuple("VLLMState", [
    "holder_head", "holder_tail",  # per hash id: its holders in caching order (head = what a lookup
                                   # returns; -1: no holder, the hash is not resident)
    "slot_hash", "slot_ref",  # per slot: hash id, ref_cnt
    "queue_prev", "queue_next",  # per slot: the free queue's run of blocks with a hash (ref_cnt 0)
    "holder_prev", "holder_next",  # per slot: neighbours among the holders of its hash
    "slot_stack",  # unused slots
    "handles",  # the sequential replay's pin_request handles: per cached position, the slot of its block
    "meta",
    "pins", "hold",  # holds of running requests (base.hold_arrays)
])


def make_state(capacity: int, trace, last_token_recompute: int = 1) -> VLLMState:
    num_hashes = trace.num_blocks  # exact: resident_mask is indexed by hash id (an empty trace has none)
    slots = max(1, min(capacity, trace.num_accesses))
    lengths = np.diff(trace.offsets)
    meta = np.zeros(META_SLOTS, dtype=np.int64)
    meta[[CAPACITY, RECOMPUTE, HASHLESS_FREE, FREE_SLOTS]] = capacity, last_token_recompute, capacity, slots
    meta[[QUEUE_HEAD, QUEUE_TAIL]] = -1
    return VLLMState(
        holder_head=np.full(num_hashes, -1, dtype=np.int32),
        holder_tail=np.full(num_hashes, -1, dtype=np.int32),
        slot_hash=np.full(slots, -1, dtype=np.int32),
        slot_ref=np.zeros(slots, dtype=np.int32),
        queue_prev=np.full(slots, -1, dtype=np.int32),
        queue_next=np.full(slots, -1, dtype=np.int32),
        holder_prev=np.full(slots, -1, dtype=np.int32),
        holder_next=np.full(slots, -1, dtype=np.int32),
        slot_stack=np.arange(slots - 1, -1, -1, dtype=np.int32),
        handles=np.zeros(max(1, int(lengths.max(initial=0))), dtype=np.int64),
        meta=meta,
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: VLLMState) -> tuple[int, dict]:
    m = state.meta
    slots = (ADMISSIONS, EVICTIONS, DUPLICATES, PINNED_PEAK, OVERSIZE)
    return int(m[CACHED_BLOCKS]), {name: int(m[s]) for name, s in zip(COUNTERS, slots)}


def resident_mask(state: VLLMState) -> np.ndarray:
    return state.holder_head >= 0


POLICY = PolicySpec(
    name="vllm",
    native="vllm",
    summary="vLLM v1 prefix cache: pinned running blocks, LRU free queue filled tail block first",
    reference=VLLM,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    params=(
        Param("last_token_recompute", 1, int,
              "1: never hit the block holding the last prompt token (vLLM); 0: hit every full block",
              in_range(0, 1)),
    ),
    request_level=True,
    residency_bits=True,
    below_capacity="vLLM's free queue also holds blocks without a hash (partial tails), which cache nothing",
    replay_groups=replay_groups,
    group_miss_account=True,
)
