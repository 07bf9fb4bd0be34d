"""trtllm: TensorRT-LLM's KV cache block reuse (its radix tree of blocks and prioritized LRU).

Source: NVIDIA/TensorRT-LLM (Apache-2.0), ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``
at commit 002ba6a7cc5eb28f180d45d4a91142d9d927a606 (mid-2025, about v0.20-1.0rc; KVM below),
``evictionPolicy.cpp`` at fc07e755 (EP), ``executor.h``'s ``KvCacheRetentionConfig`` (EX) and
``kvCacheRetentionConfig.cpp`` (KRC). Checked against the numbers of its own unit tests
(``cpp/tests/unit_tests/batch_manager/kvCacheManagerTest.cpp`` at 000a01de and
``evictionPolicyTest.cpp``) in tests/policies/test_trtllm.py: the scenarios a block-level trace
can express, each expectation the test's own, cited. The wheel's block manager needs CUDA (its
constructor creates CUDA streams and pinned pools), so it cannot be driven here.

One request at a time (its prompt: outputs are not modelled, as in every sequential replay):

1. **Keys.** A request's lookup keys are the blocks of its first ``L - 1`` tokens (the last prompt
   token is never reused; KVM:1115-1121): the trace's ids for the ``floor((L - 1) / B)`` full
   ones, then the partial tail. It holds ``ceil(L / B)`` blocks (KVM:1892).
2. **Match** (``loadOrAllocateBlocks``, KVM:956-1081). From the tree's root, each key that is a
   child of the last matched block is reused: taken out of the free queue (``claimBlock``),
   onboarded first if it sits in the host pool (KVM:872-888), its priority replaced only if the
   request gives its tokens one. The first key that does not match ends matching; it and every
   later block come from ``getFreeBlock`` at the request's priority for them (default 35).
3. **getFreeBlock** (KVM:750-793, EP:106-122): the front of the lowest-priority non-empty queue
   of the GPU pool (101 FIFO queues, priorities 0-100). If that block holds KV, its priority is
   at least ``offload_min_priority`` (30, EP:33) and the host pool has a free block, it is
   offloaded: it moves to the host pool keeping its place in the tree, and the host pool's
   candidate (its lowest-priority front) gives up its slot and is dropped. Whatever block is
   reused is detached from the tree with its whole subtree (``freeChildren``, KVM:731-748); the
   subtree's blocks become free blocks without KV.
4. **Store at release** (KVM:1391-1447): the keys are walked from the root again; while a key
   exists, the request's own block there is not inserted; from the first one that does not, the
   request's blocks are inserted as a chain. Then its blocks are released, last first, each to
   the end of its priority's queue (EP:130-144).
5. **Which free blocks may go.** By default (``leaf_only`` 0) any free block, as the
   evictionPolicy.cpp read at fc07e755 does and as TensorRT-LLM does since PR #7922 (2025);
   evicting a block with cached children drops them too (step 3). ``leaf_only`` 1 is the earlier
   rule, inferred from that era's unit tests (three of them need it) and comments: a free block
   waits outside the queues while one of its children is free in the same pool, and joins the
   end of its queue when the last such child is claimed. The two differ most on long chains: on
   the conversation trace at 10,000 blocks, 21.56% (0) against 16.84% (1), because a parent that
   waited re-enters its queue behind newer blocks.
6. **Priorities** (EX:527-548, KRC:127-175): a trace's retention ranges (docs/formats.md) give
   a block the priority and duration of the range holding its first token; none: 35. A block
   whose priority is not 35 and that has a duration expires that long after its release: at the
   next request (``refreshBlocks``, EP:195-219) it goes to the end of the priority-35 queue.

What a hash-id trace cannot give: **partial reuse.** TensorRT-LLM also reuses part of a block
whose first tokens match (``enablePartialReuse``, on by default, copying it when another request
holds it). A trace names whole blocks, so only whole blocks are matched here; the partial tail of
a prompt is stored under a key no later request matches. TensorRT-LLM can reuse up to ``B - 1``
more tokens per hit (an extended prompt reuses all of its predecessor's ``L - 1`` tokens).

Engines: this module (the reference) and trtllm.c (compiled), held equal by hypothesis.
``simulate --engine-style trtllm`` serves it under TensorRT-LLM's scheduler (serving/inflight.py),
where ``store_request`` stores a running request's prompt once computed (storeContextBlocks).

Resident: a block whose id is in the tree, in either pool. ``final_cache_blocks`` counts the GPU
pool's; the capacity is the GPU pool's blocks (``host_blocks`` more sit in host memory).
Counters: ``reused_blocks``, ``missed_blocks``, ``offloaded``, ``onboarded``, ``dropped``
(blocks with KV detached from the tree: evicted, with their subtrees), ``expired``.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict, namedtuple

import numpy as np

from .base import Param, PolicySpec, ReferencePolicy, hold_arrays, in_range, meta_slots

DEFAULT_PRIORITY = 35  # kDefaultRetentionPriority, EX:529
LEVELS = 2  # the GPU pool (0) and the host pool (1)
COUNTERS = ("reused_blocks", "missed_blocks", "offloaded", "onboarded", "dropped", "expired")


class Block:
    __slots__ = ("id", "level", "key", "parent", "children", "refs", "priority", "duration", "expires", "queued",
                 "counted")

    def __init__(self, i: int, level: int):
        self.id, self.level = i, level
        self.key = None  # its block id in the trace (a partial tail: a key no one matches), None: no KV
        self.parent = None
        self.children: dict = {}
        self.refs = 0
        self.priority, self.duration, self.expires = DEFAULT_PRIORITY, None, None
        self.queued = False  # in its level's queue for its priority (else claimed, or waiting: leaf-only)
        self.counted = False  # a GPU block under a trace id in the tree (the key is resident through it)


#: the largest host pool given without a trace (with one, a pool is at most the trace's distinct blocks)
MAX_HOST_BLOCKS = 2 ** 31 - 1


def host_pool(host_blocks: int, trace) -> int:
    """The host pool's blocks: a pool larger than the trace's distinct blocks holds every block the
    trace has, so it replays as one of that many (a warning says so), never as billions of
    blocks the replay would allocate and scan."""
    if trace is not None and host_blocks > max(1, trace.num_blocks):
        used = max(1, trace.num_blocks)
        warnings.warn(f"trtllm: host_blocks (--host-blocks) {host_blocks:,} is more than the trace's {used:,} distinct "
                      f"blocks: a host pool of {used:,} already holds every one, so the replay uses that", stacklevel=3)
        return used
    return host_blocks


class TensorRTLLM(ReferencePolicy):
    """Reference: the block objects, the tree, 2 x 101 FIFO queues."""

    def __init__(self, capacity: int, trace=None, host_blocks: int = 0, leaf_only: int = 0,
                 offload_min_priority: int = 30):
        self.leaf_only, self.offload_min = bool(leaf_only), offload_min_priority
        host_blocks = host_pool(host_blocks, trace)
        self.blocks = [Block(i, 0) for i in range(capacity)] + [Block(capacity + i, 1) for i in range(host_blocks)]
        self.queues = [[OrderedDict() for _ in range(101)] for _ in range(LEVELS)]
        self.nonempty = [0] * LEVELS  # per level: bit p set while queue p holds a block
        for b in self.blocks:
            self._queue(b)
        self.root = Block(-1, 0)
        self.where: dict = {}  # key -> the blocks holding it in the tree
        self.times = trace.timestamp.tolist() if trace is not None else []
        self.retention = getattr(trace, "retention", None)
        self.now = self.times[0] if self.times else 0.0
        self.scan = None  # the prefix scan's node (hit_limit starts it at the root)
        self.expiring: dict = {}  # block id -> block, for the blocks whose priority runs out
        self.partial_keys = 0
        self.stats = dict.fromkeys(COUNTERS, 0)
        self.free_gpu = capacity  # GPU blocks no request holds
        self.capacity = capacity
        self.gpu_holders: dict = {}  # trace id -> GPU blocks holding it in the tree (its residency)

    # -- the queues ------------------------------------------------------------------------------

    def _queue(self, b: Block) -> None:
        self.queues[b.level][b.priority][b.id] = b
        self.nonempty[b.level] |= 1 << b.priority
        b.queued = True

    def _unqueue(self, b: Block) -> None:
        if b.queued:
            q = self.queues[b.level][b.priority]
            del q[b.id]
            if not q:
                self.nonempty[b.level] &= ~(1 << b.priority)
            b.queued = False

    def _has_free_child(self, b: Block) -> bool:
        return any(c.refs == 0 and c.level == b.level for c in b.children.values())

    def _release(self, b: Block) -> None:
        """releaseBlock: to the end of its queue (leaf-only: once no child of its pool is free)."""
        if b.duration is not None and b.priority != DEFAULT_PRIORITY:
            b.expires = self.now + b.duration
            self.expiring[b.id] = b
        if not (self.leaf_only and self._has_free_child(b)):
            self._queue(b)

    def _claim(self, b: Block) -> None:
        """claimBlock: out of the free queue; a waiting parent may become a leaf."""
        self._unqueue(b)
        b.expires = None
        self.expiring.pop(b.id, None)
        p = b.parent
        if self.leaf_only and p is not None and p is not self.root and p.refs == 0 and not p.queued \
                and p.level == b.level and not any(c is not b and c.refs == 0 and c.level == p.level
                                                   for c in p.children.values()):
            self._queue(p)

    def _front(self, level: int) -> Block | None:
        """The front of the level's lowest-priority non-empty queue (a bit per non-empty queue)."""
        mask = self.nonempty[level]
        if not mask:
            return None
        return next(iter(self.queues[level][(mask & -mask).bit_length() - 1].values()))

    # -- the tree --------------------------------------------------------------------------------

    def _detach(self, b: Block) -> None:
        """b and its subtree leave the tree (freeChildren); the subtree's free blocks become free
        blocks without KV (at the end of the priority-35 queue); a block of it that a running
        request holds (stored at its context's end, under a block that was free) keeps its KV
        for that request, out of the tree, and joins a queue when released. b was claimed: its
        parent has been told."""
        stack = list(b.children.values())
        self._unlink(b)
        while stack:
            c = stack.pop()
            stack.extend(c.children.values())
            self._unqueue(c)
            self._unlink(c)
            c.priority, c.duration, c.expires = DEFAULT_PRIORITY, None, None
            self.expiring.pop(c.id, None)
            if c.refs == 0:
                self._queue(c)

    def _unlink(self, b: Block) -> None:
        if b.key is not None and b.parent is not None:
            if b.parent.children.get(b.key) is b:
                del b.parent.children[b.key]
            holders = self.where[b.key]
            holders.discard(b)
            if not holders:
                del self.where[b.key]
            self._uncount(b)
            self.stats["dropped"] += 1
        b.parent, b.key, b.children = None, None, {}

    def _count(self, b: Block) -> None:
        """b, a GPU block, now holds its trace id in the tree."""
        if b.level == 0 and not b.counted and b.key is not None and not _partial(b.key):
            b.counted = True
            self.gpu_holders[b.key] = self.gpu_holders.get(b.key, 0) + 1

    def _uncount(self, b: Block) -> None:
        """b no longer holds its trace id on the GPU: the id leaves the resident set (the eviction
        log's entry) when no other GPU block holds it."""
        if b.counted:
            b.counted = False
            left = self.gpu_holders[b.key] - 1
            if left:
                self.gpu_holders[b.key] = left
            else:
                del self.gpu_holders[b.key]
                self.note_evicted(b.key)

    def _free_block(self, priority: int | None, duration) -> Block | None:
        """getFreeBlock: a block to hold new KV, or None when the GPU pool has none free."""
        b = self._front(0)
        if b is None:
            return None
        host = self._front(1) if b.key is not None and b.priority >= self.offload_min else None
        if host is not None:
            self._claim(b)
            self._claim(host)
            self._uncount(b)  # (host is detached below: its id never counts as resident on the GPU)
            b.level, host.level = 1, 0  # the slots swap: b keeps its place in the tree, now on the host
            b.duration, b.expires = None, None
            self.stats["offloaded"] += 1
            self._release(b)
            b = host
        else:
            self._claim(b)
        self._detach(b)
        b.priority = DEFAULT_PRIORITY if priority is None else priority
        b.duration = duration
        return b

    def _onboard(self, b: Block) -> bool:
        """A matched block on the host comes back to the GPU pool: False when no GPU block is free."""
        slot = self._free_block(None, None)
        if slot is None:
            return False
        slot.level, b.level = 1, 0
        self._count(b)
        self._release(slot)
        self.stats["onboarded"] += 1
        return True

    # -- a request -------------------------------------------------------------------------------

    def _ranges(self, request: int) -> list:
        return [] if self.retention is None else self.retention.ranges(request)

    @staticmethod
    def block_retention(ranges: list, j: int, block_size: int):
        """(priority, duration ms) of block j: the range holding its first token (KRC:127-175)."""
        first = j * block_size
        for start, end, priority, duration in ranges:
            if end is not None and end <= first:
                continue
            return (priority, duration) if first >= start else (None, None)
        return None, None

    def _walk(self, ids: list, input_length: int, block_size: int) -> list:
        """The matched blocks of the request's first floor((L - 1) / B) ids, touching nothing."""
        full = max(0, input_length - 1) // block_size
        node, out = self.root, []
        for key in ids[:full]:
            node = node.children.get(key)
            if node is None:
                break
            out.append(node)
        return out

    def hit_limit(self, num_blocks: int, input_length: int, block_size: int) -> int:
        """At most the blocks of the first L - 1 tokens (the last prompt token is never reused,
        KVM:1115-1121); the scan that follows walks the tree from its root."""
        self.scan = self.root
        return min(num_blocks, max(0, input_length - 1) // block_size)

    def resident(self, b) -> bool:
        """Is `b` the next block on the tree path the scan is following? Moves only the scan."""
        child = self.scan.children.get(b)
        if child is None:
            return False
        self.scan = child
        return True

    def in_hbm(self, b) -> bool:
        """Is block b anywhere in the tree (in either pool)? (resident() follows one path)"""
        return b in self.where

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        """One request alone: admitted (addSequence), then released (removeSequence)."""
        held = self.pin_request(request, blocks, hits, input_length, block_size)
        self.unpin_request(request, blocks, input_length, block_size, held)

    def pin_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> list:
        """addSequence: the matched blocks claimed (onboarded from the host), the rest from
        getFreeBlock; the blocks it holds, in order. Refused (nothing held) when the GPU pool has
        too few free blocks for them (TensorRT-LLM's scheduler would not admit it)."""
        if request < len(self.times):  # refreshBlocks, at the request's time
            self._refresh(self.times[request])
        ranges = self._ranges(request)
        matched = self._walk(blocks, input_length, block_size)[:hits]
        need = -(-input_length // block_size)
        onboard = sum(b.level == 1 for b in matched)
        free = self.free_gpu - sum(1 for b in matched if b.level == 0 and b.refs == 0)
        if need - len(matched) + onboard > free:
            self._refused = True
            self.refuse()
            return []
        self._refused = False
        held = []
        for j, b in enumerate(matched):
            self._claim(b)
            # held before it is onboarded: the onboarding claims a host block, and a claim lets a
            # free parent become a leaf; b, free until held, would be queued while being matched
            self._hold(b)
            if b.level == 1:
                self._onboard(b)
                self.free_gpu -= 1  # (held on the host, then on the GPU)
            priority, duration = self.block_retention(ranges, j, block_size)
            if priority is not None:
                b.priority = priority
            b.duration = duration
            held.append(b)
            self.stats["reused_blocks"] += 1
        for j in range(len(held), need):
            b = self._free_block(*self.block_retention(ranges, j, block_size))
            if b is None:  # (cannot happen: every free block is reachable once its free children go)
                raise RuntimeError("trtllm: the free queues ran dry after the admission check (a bug)")
            self._hold(b)
            held.append(b)
            self.stats["missed_blocks"] += 1
        return held

    def unpin_request(self, request: int, blocks: list, input_length: int, block_size: int, handles: list) -> None:
        """removeSequence: its blocks stored for reuse, then released last first (each to its
        queue once no other request holds it)."""
        self._store(blocks, handles, input_length, block_size, partial=True)
        for b in reversed(handles):
            b.refs -= 1
            if b.refs == 0:
                self.free_gpu += b.level == 0
                self._release(b)

    def store_request(self, request: int, blocks: list, input_length: int, block_size: int, handles: list) -> None:
        """storeContextBlocks: a running request whose prompt is computed stores its full blocks
        (the first ``floor((L - 1) / B)``) for reuse while it still holds them (KVM2:2046-2056:
        no partial tail); ``unpin_request`` stores the rest at its end."""
        self._store(blocks, handles, input_length, block_size, partial=False)

    def _hold(self, b: Block) -> None:
        b.refs += 1
        self.free_gpu -= b.refs == 1 and b.level == 0  # (a swap of two free blocks' pools keeps the count)

    def everything_held(self) -> bool:
        """The last refused start found too few free GPU blocks (a start is all or nothing)."""
        return getattr(self, "_refused", False)

    def held_count(self) -> int:
        """GPU blocks running requests hold."""
        return self.capacity - self.free_gpu

    def _store(self, ids: list, held: list, input_length: int, block_size: int, partial: bool) -> None:
        """storeBlocks: the keys of the first L - 1 tokens (with `partial`, the partial tail's
        too), the request's blocks from the first missing one."""
        tokens = max(0, input_length - 1)
        keys = list(ids[:tokens // block_size])
        if partial and tokens % block_size:
            self.partial_keys += 1
            keys.append(("partial", self.partial_keys))  # a partial tail no later request matches
        node = self.root
        for key, b in zip(keys, held):
            child = node.children.get(key)
            if child is not None:
                node = child
                continue
            if b.parent is None:  # (a matched block is in the tree already)
                b.key, b.parent = key, node
                node.children[key] = b
                self.where.setdefault(key, set()).add(b)
                self._count(b)
            node = b

    def _refresh(self, now: float) -> None:
        """refreshBlocks: blocks whose priority has run out fall back to 35 (the end of its queue)."""
        self.now = max(self.now, now)
        for b in sorted((b for b in self.expiring.values() if b.expires <= self.now), key=lambda b: (b.expires, b.id)):
            del self.expiring[b.id]
            was = b.queued
            self._unqueue(b)
            b.priority, b.duration, b.expires = DEFAULT_PRIORITY, None, None
            if was:
                self._queue(b)
            self.stats["expired"] += 1

    def access(self, b) -> None:
        raise NotImplementedError("trtllm is request-level: access_request")

    def size(self) -> int:
        """GPU blocks under a trace id in the tree (partial tails and host blocks are not counted)."""
        return sum(self.gpu_holders.values())

    def resident_blocks(self):
        return list(self.gpu_holders)

    def counters(self) -> dict:
        return dict(self.stats)


def _partial(key) -> bool:
    return isinstance(key, tuple)


# ---- the compiled engine's state (trtllm.c says what each field is) ----

META = meta_slots("trtllm")  # the meta array's slots, by the names trtllm.c gives them
CAPACITY, HOST, LEAF_ONLY, OFFLOAD_MIN, SCAN, PARTIAL_KEYS = (META.CAPACITY, META.HOST, META.LEAF_ONLY,
                                                            META.OFFLOAD_MIN, META.SCAN, META.PARTIAL_KEYS)
FREE_GPU, EXPIRING, GPU_BLOCKS, REFUSED = META.FREE_GPU, META.EXPIRING, META.GPU_BLOCKS, META.REFUSED
REUSED, MISSED, OFFLOADED, ONBOARDED, DROPPED, EXPIRED = (META.REUSED, META.MISSED, META.OFFLOADED, META.ONBOARDED,
                                                          META.DROPPED, META.EXPIRED)
STATE_FIELDS = ("level", "queued", "counted", "priority", "refs", "key", "parent", "first_child", "last_child",
                "next_sib", "prev_sib", "tab_parent", "tab_key", "tab_node", "qnext", "qprev", "qhead", "qtail",
                "nonempty", "duration", "expires", "where_count", "gpu_count", "chain", "ret_offsets", "ret_start",
                "ret_end", "ret_priority", "ret_duration", "times", "scratch", "handles", "clock", "meta",
                "pins", "hold")
TRTState = namedtuple("TRTState", STATE_FIELDS)
STATE_COUNTERS = (("reused_blocks", "REUSED"), ("missed_blocks", "MISSED"), ("offloaded", "OFFLOADED"),
                  ("onboarded", "ONBOARDED"), ("dropped", "DROPPED"), ("expired", "EXPIRED"))


def make_state(capacity: int, trace, host_blocks: int = 0, leaf_only: int = 0,
               offload_min_priority: int = 30) -> TRTState:
    """The compiled state: capacity GPU blocks then host_blocks host blocks, every one free in its
    pool's priority-35 queue in id order (as the reference starts)."""
    host_blocks = host_pool(host_blocks, trace)
    n_blocks = capacity + host_blocks
    root = n_blocks
    table = 1 << max(4, (2 * (n_blocks + 1)).bit_length())
    level = np.zeros(n_blocks, dtype=np.int8)
    level[capacity:] = 1
    qnext = np.full(n_blocks, -1, dtype=np.int32)
    qprev = np.full(n_blocks, -1, dtype=np.int32)
    qhead = np.full(LEVELS * 101, -1, dtype=np.int32)
    qtail = np.full(LEVELS * 101, -1, dtype=np.int32)
    nonempty = np.zeros(LEVELS * 2, dtype=np.int64)
    for lvl, first, count in ((0, 0, capacity), (1, capacity, host_blocks)):
        if count:
            ids = np.arange(first, first + count, dtype=np.int32)
            qnext[ids[:-1]], qprev[ids[1:]] = ids[1:], ids[:-1]
            qhead[lvl * 101 + DEFAULT_PRIORITY], qtail[lvl * 101 + DEFAULT_PRIORITY] = first, first + count - 1
            nonempty[lvl * 2] = 1 << DEFAULT_PRIORITY
    retention = getattr(trace, "retention", None)
    times = np.array(trace.timestamp, dtype=np.float64) if len(trace) else np.zeros(0)
    longest = int(np.diff(trace.offsets).max(initial=0))
    meta = np.zeros(len(META), dtype=np.int64)
    meta[META.CAPACITY], meta[META.HOST], meta[META.LEAF_ONLY] = capacity, host_blocks, leaf_only
    meta[META.OFFLOAD_MIN], meta[META.SCAN], meta[META.FREE_GPU] = offload_min_priority, root, capacity
    num_ids = max(1, trace.num_blocks)
    empty = np.zeros(0, dtype=np.int64)
    return TRTState(
        level=level, queued=np.ones(n_blocks, dtype=np.int8), counted=np.zeros(n_blocks, dtype=np.int8),
        priority=np.full(n_blocks, DEFAULT_PRIORITY, dtype=np.int32), refs=np.zeros(n_blocks, dtype=np.int32),
        key=np.full(n_blocks, -1, dtype=np.int64), parent=np.full(n_blocks, -1, dtype=np.int32),
        first_child=np.full(n_blocks + 1, -1, dtype=np.int32), last_child=np.full(n_blocks + 1, -1, dtype=np.int32),
        next_sib=np.full(n_blocks, -1, dtype=np.int32), prev_sib=np.full(n_blocks, -1, dtype=np.int32),
        tab_parent=np.full(table, -1, dtype=np.int32), tab_key=np.zeros(table, dtype=np.int64),
        tab_node=np.zeros(table, dtype=np.int32), qnext=qnext, qprev=qprev, qhead=qhead, qtail=qtail,
        nonempty=nonempty, duration=np.full(n_blocks, np.nan), expires=np.full(n_blocks, np.nan),
        where_count=np.zeros(trace.num_blocks, dtype=np.int64), gpu_count=np.zeros(trace.num_blocks, dtype=np.int64),
        chain=np.full(n_blocks, -1, dtype=np.int32),
        ret_offsets=empty if retention is None else np.array(retention.offsets, dtype=np.int64),
        ret_start=empty if retention is None else np.array(retention.start, dtype=np.int64),
        ret_end=empty if retention is None else np.array(retention.end, dtype=np.int64),
        ret_priority=empty if retention is None else np.array(retention.priority, dtype=np.int64),
        ret_duration=np.zeros(0) if retention is None else np.array(retention.duration_ms, dtype=np.float64),
        times=times, scratch=np.zeros(n_blocks + 1, dtype=np.int64), handles=np.zeros(longest + 2, dtype=np.int64),
        clock=np.array([float(times[0]) if times.size else 0.0]), meta=meta, **hold_arrays(num_ids),
    )


def read_state(state: TRTState) -> tuple[int, dict]:
    m = state.meta
    return int(m[META.GPU_BLOCKS]), {name: int(m[getattr(META, slot)]) for name, slot in STATE_COUNTERS}


def resident_mask(state: TRTState) -> np.ndarray:
    return state.gpu_count > 0


POLICY = PolicySpec(
    name="trtllm",
    native="trtllm",
    summary="TensorRT-LLM's block reuse: a radix tree of blocks, 101 priority FIFO queues (lowest first), leaf-only "
            "eviction, host offload (host_blocks), token-range retention priorities from the trace",
    reference=TensorRTLLM,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    caches_at_release=True,
    params=(Param("host_blocks", 0, int, "blocks of the host (secondary) pool evicted blocks are offloaded to "
                  "(more than the trace's distinct blocks: that many, said)", in_range(0, MAX_HOST_BLOCKS)),
            Param("leaf_only", 0, int, "1: only blocks without free children are evicted (before PR #7922, inferred); "
                  "0: any free block (after PR #7922)", in_range(0, 1)),
            Param("offload_min_priority", 30, int, "the lowest priority whose blocks are offloaded, not dropped",
                  in_range(0, 100))),
    request_level=True,
    style_only="trtllm",
    style_only_why=("TensorRT-LLM's block reuse (policy 'trtllm') is served by its scheduler, and its scheduler "
                    "serves that cache only: give engine_style='trtllm' (--engine-style trtllm) with policy "
                    "'trtllm'"),
)
