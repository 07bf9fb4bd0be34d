"""vLLM v1's hybrid KV cache manager: prefix caching for models whose layers keep different
kinds of KV (full attention, a sliding window, chunked-local attention, Mamba state), request
by request, as vLLM 0.33.0's coordinator and its one shared block pool do it.

Source: vLLM 0.33.0, ``vllm/v1/core/kv_cache_coordinator.py`` (HybridKVCacheCoordinator),
``single_type_kv_cache_manager.py`` (FullAttentionManager, SlidingWindowManager,
ChunkedLocalAttentionManager, MambaManager), ``block_pool.py``, ``kv_cache_manager.py``;
checked request by request against those modules by tests/real_engines/test_vllm_hybrid.py.
docs/policies.md ("Hybrid models") has the rules in prose; the line references below are to
that wheel.

Groups. The model's layers are split into KV cache groups (ModelSpec ``kv_groups``, read from config.json): each has
a kind (full, sliding window W, chunked-local C, mamba) and its own blocks, all taken from one
pool of ``capacity`` block ids. A block id holds one group's KV for ``block_size`` tokens of one
request (vLLM pads every group to one page size, so any block id fits any group). Groups of the
same kind and size form one *spec group*: a hit needs every one of them. The trace's hash ids
stand for vLLM's block hashes, one chain shared by every group; a cached block is keyed by
(group, hash id), so each group caches its own copy of a prefix.

A request with hash ids ``ids`` and ``P`` prompt tokens (block size ``bs``), one at a time:

1. Hit (``find_longest_cache_hit``, coord:806-941). The cap is ``(P - 1) // bs`` blocks (the
   last prompt token is recomputed). Full attention first: the longest run of cached blocks from
   block 0 (every full group). Then each other spec group, in group order, searches up to the
   current bound:
   - sliding window W: the largest e <= bound whose ``need = ceil((W - 1) / bs)`` blocks before
     it are all cached (a scan from the right); or, if no run of ``need`` exists, the run of
     cached blocks from block 0 (stm:968-1064);
   - chunked local C: every whole chunk before the bound counts without a lookup, then the run
     of cached blocks from the bound's chunk start (stm:1276-1425);
   - mamba: the rightmost cached state at or below the bound, alone (stm:1469-1546).
   With one full spec group and one other, one pass decides; otherwise the passes repeat until
   the bound stops shrinking. The hit is the bound. The *junction* (``shared_prefix_boundary``)
   is the longest group result, when it is longer than the hit.
2. Prefill, in chunks of ``chunk_tokens`` (vLLM's ``max_num_batched_tokens``); a Mamba model's
   chunks also end at ``floor((P - 1) / bs) * bs`` and at the junction (sched:546-662). Each chunk
   is one ``allocate_slots`` (kvm:380-627):
   - ``remove_skipped_blocks``: a sliding-window group frees its blocks wholly before
     ``computed - W + 1`` tokens, chunked local those before the current chunk start, mamba
     every state but the last (stm:655-735, 1148-1183, 1381-1425, 1608-1657); freed highest
     index first;
   - on the first chunk, the hit blocks are touched (taken out of the free queue): all of full
     attention's, a window's last ``need``, mamba's one state; the rest of the hit stays where it
     is in the queue (stm:268-325);
   - new blocks for the chunk, group by group in group order, from the free queue's head; a
     block popped with a hash loses it (an eviction);
   - caching (cache_blocks, coord:358-381): full attention hashes every full block computed so
     far; a sliding-window group, with vLLM's default ``prefix_cache_retention_interval`` 0,
     hashes only the ``need`` blocks ending at ``floor((P - 1) / bs)`` and at the junction
     (stm:1066-1146); mamba likewise only the state blocks ending there (stm:1548-1606), and a
     state exists only at a chunk's end. ``retention=None`` hashes every block a group computes
     (vLLM's dense mode).
3. Finish (``KVCacheManager.free``): each group in group order frees its blocks tail first.
   Freed blocks with a hash go to the free queue's tail (evicted last, least recently freed
   first); without one, to its head (reused first), a group's batch in order (pool:816-849).

The free queue is therefore, as in policies/vllm.py: [freed blocks without a hash] + [never used
blocks] + [freed blocks with a hash, least recently freed first].

Compiled: ``replay_hybrid_compiled`` runs the same replay in C (coordinator.c: dense ids for hash ids,
index-linked lists as in vllm.c), equal request by request (hits, counters, resident count:
tests/policies/test_hybrid_compiled.py); ``kvreplay.replay`` runs it unless engine="reference".

Not modelled: output tokens (requests finish after their prefill: no decode blocks, nothing
cached past the prompt); EAGLE's dropped block; partial (sub-block) Mamba hits, which need
``--prefix-match-unit``; KV connectors. A request whose blocks do not fit the pool is truncated
to the chunks that fit (``oversize_requests``).
"""

from __future__ import annotations

from collections import OrderedDict, deque

import numpy as np

from ..catalog.kv_groups import Group  # noqa: F401 - (unified_radix and the tests take it from here too)
from ..errors import ConfigError

KINDS = ("full", "sliding_window", "chunked_local", "mamba")
COUNTERS = ("admissions", "evictions", "duplicate_blocks", "oversize_requests")


def mamba_split(bs: int, prompt: int, num_tokens: int, max_prefill: int, junction: int, start: int, n: int) -> int:
    """vLLM 0.33.0's Scheduler._mamba_block_aligned_split (scheduler.py:546-662) at its defaults
    (no EAGLE, no prefill-checkpoint blocks, hashes at the block size, no shared-prefix
    checkpoint): the tokens of a chunk of `n` from `start` for a request of `prompt` prompt and
    `num_tokens` tokens, `junction` its shared-prefix boundary (tokens), `max_prefill` the step's
    token budget. A chunk that does not end the prefill ends block aligned (unless a block is
    wider than the budget), and stops at the last cacheable boundary and at the junction; 0: no
    aligned chunk fits this step. serving/kernel's hyb_split and coordinator.c's hy_mamba_split are
    the same."""
    prefill_end = max(prompt, num_tokens - 1)
    if start >= prefill_end:
        return n
    last_cache = max((num_tokens - 1) // bs * bs, 0)
    end = start + n
    if end < prefill_end:
        aligned = end // bs * bs
        if aligned > start or bs <= max_prefill:
            end = aligned
    stops = (((start // bs) + 1) * bs if start % bs else 0, last_cache,
             start + (junction - start) // bs * bs if start < junction < end else 0)
    end = min((x for x in stops if start < x < end), default=end)
    return max(end - start, 0)


class HybridPool:
    """The shared block pool and the per-(group, hash) cache of vLLM's hybrid manager."""

    def __init__(self, capacity: int, groups: list[Group], block_size: int, *, retention: int | None = 0,
                 chunk_tokens: int = 8192):
        self.capacity, self.bs, self.retention, self.chunk_tokens = capacity, block_size, retention, chunk_tokens
        self.spec_groups = groups
        # group ids in vLLM's order: each spec group's copies consecutively, in the given order
        self.group_kind = [(s, g) for s, g in enumerate(groups) for _ in range(g.copies)]
        self.lookup_order = sorted(range(len(groups)), key=lambda s: groups[s].kind != "full")
        self.hashed: dict = {}  # (group id, hash id) -> {block: None}, first cached first
        self.block_key: dict = {}  # block -> (group id, hash id) it is cached under
        self.free_hashless: deque = deque()
        self.next_unused = 1
        self.free_cached: OrderedDict = OrderedDict()
        self.stats = dict.fromkeys(COUNTERS, 0)

    # -- the pool ------------------------------------------------------------------------------

    def free_count(self) -> int:
        return len(self.free_hashless) + (self.capacity - self.next_unused + 1) + len(self.free_cached)

    def _pop(self) -> int:
        if self.free_hashless:
            return self.free_hashless.popleft()
        if self.next_unused <= self.capacity:
            self.next_unused += 1
            return self.next_unused - 1
        b, _ = self.free_cached.popitem(last=False)
        key = self.block_key.pop(b)
        holders = self.hashed[key]
        del holders[b]
        if not holders:
            del self.hashed[key]
        self.stats["evictions"] += 1
        return b

    def _touch(self, b: int) -> None:
        del self.free_cached[b]  # a hit block is cached, and free between requests

    def _free(self, blocks: list[int]) -> None:
        """pool.free_blocks: hashed blocks appended in order, the others prepended as a batch."""
        hashless = [b for b in blocks if b not in self.block_key]
        self.free_hashless.extendleft(reversed(hashless))
        for b in blocks:
            if b in self.block_key:
                self.free_cached[b] = None

    def _cache(self, gid: int, h, b: int) -> None:
        key = (gid, h)
        holders = self.hashed.setdefault(key, {})
        if holders:
            self.stats["duplicate_blocks"] += 1
        holders[b] = None
        self.block_key[b] = key
        self.stats["admissions"] += 1

    def cached(self, s: int, h) -> int | None:
        """The block of spec group s cached under h (its first group's), if every copy has one."""
        gids = self._gids(s)
        if not all((g, h) in self.hashed for g in gids):
            return None
        return next(iter(self.hashed[(gids[0], h)]))

    def _gids(self, s: int) -> list[int]:
        return [gid for gid, (ss, _) in enumerate(self.group_kind) if ss == s]

    # -- step 1: the hit -----------------------------------------------------------------------

    def find_hit(self, ids: list, prompt_tokens: int) -> tuple[int, int]:
        """(hit blocks, junction blocks): the coordinator's agreement over every spec group."""
        bound = max(0, min(len(ids), (prompt_tokens - 1) // self.bs))
        simple = len(self.spec_groups) == 2 and self.spec_groups[self.lookup_order[0]].kind == "full"
        longest = 0
        while True:
            start = bound
            for s in self.lookup_order:
                bound = self._find(s, ids, bound)
                longest = max(longest, bound)
            if bound >= start or simple:
                break
        return bound, (longest if longest > bound else 0)

    def _find(self, s: int, ids: list, bound: int) -> int:
        g = self.spec_groups[s]
        if g.kind == "full":
            k = 0
            while k < bound and self.cached(s, ids[k]) is not None:
                k += 1
            return k
        if g.kind == "sliding_window":
            need = -(-(g.window - 1) // self.bs)
            run = 0
            for i in range(bound - 1, -1, -1):
                if self.cached(s, ids[i]) is not None:
                    run += 1
                    if run >= need:
                        return i + need
                else:
                    run = 0
            return run
        if g.kind == "chunked_local":
            start = (bound * self.bs) // g.chunk * g.chunk // self.bs
            k = start
            while k < bound and self.cached(s, ids[k]) is not None:
                k += 1
            return k
        for i in range(bound - 1, -1, -1):  # mamba
            if self.cached(s, ids[i]) is not None:
                return i + 1
        return 0

    # -- steps 2 and 3 -------------------------------------------------------------------------

    def serve(self, ids: list, prompt_tokens: int) -> int:
        """One request, start to finish: its hit in blocks."""
        hit, junction = self.find_hit(ids, prompt_tokens)
        tables = [[] for _ in self.group_kind]  # per group id: block or None (vLLM's null block)
        cached_upto = [0] * len(self.group_kind)
        last_state = [None] * len(self.group_kind)  # mamba: MambaManager.last_state_block_idx
        done = hit * self.bs
        for end in self._chunk_ends(hit, junction, prompt_tokens):
            if not self._allocate(ids, tables, cached_upto, last_state, hit, junction, done, end, prompt_tokens):
                self.stats["oversize_requests"] += 1
                break
            done = end
        for table in tables:  # finish: group order, each tail first
            self._free([b for b in reversed(table) if b is not None])
        return hit

    def _chunk_ends(self, hit: int, junction: int, prompt_tokens: int) -> list[int]:
        bs, ends, t = self.bs, [], hit * self.bs
        mamba = any(g.kind == "mamba" for g in self.spec_groups)
        while t < prompt_tokens:
            n = min(self.chunk_tokens, prompt_tokens - t)
            if mamba:  # where the scheduler ends a Mamba model's chunk (never 0 with the whole budget)
                n = mamba_split(bs, prompt_tokens, prompt_tokens, self.chunk_tokens, junction * bs, t, n)
            ends.append(t + n)
            t += n
        return ends

    def _allocate(self, ids, tables, cached_upto, last_state, hit, junction, done, end, prompt_tokens) -> bool:
        bs = self.bs
        self._remove_skipped(tables, last_state, done)
        first = not any(tables)
        touched = self._hit_blocks(ids, hit) if first else {}
        new = [self._new_count(gid, tables[gid], hit if first else None, end) for gid in range(len(tables))]
        if sum(new) + sum(len(v) for v in touched.values()) > self.free_count():
            return False
        for gid, blocks in touched.items():  # touch every group's hit blocks first
            for b in blocks:
                if b is not None:
                    self._touch(b)
            tables[gid] = list(blocks)
            cached_upto[gid] = len(blocks)
        for gid in range(len(tables)):
            if new[gid] and tables[gid] and self.group_kind[gid][1].kind == "mamba":
                last_state[gid] = len(tables[gid]) - 1
            self._extend(gid, tables[gid], new[gid], end)
        full = min(end, len(ids) * bs) // bs
        for gid, (s, g) in enumerate(self.group_kind):
            keep = self._mask(g, prompt_tokens, junction)
            for j in range(cached_upto[gid], full):
                b = tables[gid][j] if j < len(tables[gid]) else None
                if b is not None and (keep is None or j in keep):
                    self._cache(gid, ids[j], b)
            cached_upto[gid] = max(cached_upto[gid], full)
        return True

    def _hit_blocks(self, ids, hit: int) -> dict:
        """Per group id: its table after the hit (add_local_computed_blocks): the blocks it
        touches, None where the hit is skipped (outside a window, before a chunk, not the last
        mamba state)."""
        out = {}
        for gid, (s, g) in enumerate(self.group_kind):
            blocks = [next(iter(self.hashed[(gid, ids[j])])) if (gid, ids[j]) in self.hashed else None
                      for j in range(hit)]
            skip = self._skipped_blocks(g, hit * self.bs)
            out[gid] = [None] * min(skip, hit) + blocks[skip:]
        return out

    def _skipped_blocks(self, g: Group, computed: int) -> int:
        if g.kind == "sliding_window":
            return max(0, computed - g.window + 1) // self.bs
        if g.kind == "chunked_local":
            return computed // g.chunk * g.chunk // self.bs
        if g.kind == "mamba":
            return max(0, computed - 1) // self.bs
        return 0

    def _remove_skipped(self, tables, last_state, computed: int) -> None:
        for gid, (s, g) in enumerate(self.group_kind):
            table = tables[gid]
            k = min(self._skipped_blocks(g, computed), len(table))
            freed = []
            for i in range(k - 1, -1, -1):
                if table[i] is None:
                    if g.kind == "mamba":
                        continue  # mamba's table has gaps between states: the walk goes on
                    break
                freed.append(table[i])
                table[i] = None
            self._free(freed)
            last = last_state[gid]  # mamba: the state the previous chunk started from, once copied on
            if last is not None and last < -(-computed // self.bs) - 1 and table[last] is not None:
                self._free([table[last]])
                table[last] = None

    def _new_count(self, gid: int, table: list, hit: int | None, end: int) -> int:
        g = self.group_kind[gid][1]
        slots = -(-end // self.bs)
        have = hit if hit is not None else len(table)
        if g.kind == "mamba":
            return 1 if slots > have else 0
        return max(0, slots - have)

    def _extend(self, gid: int, table: list, count: int, end: int) -> None:
        g = self.group_kind[gid][1]
        slots = -(-end // self.bs)
        if g.kind == "mamba":
            if count:
                table.extend([None] * (slots - 1 - len(table)))
                table.append(self._pop())
            return
        table.extend(self._pop() for _ in range(count))

    def _mask(self, g: Group, prompt_tokens: int, junction: int) -> set | None:
        """The block indexes a group may hash (None: all): reachable_block_mask."""
        if g.kind in ("full", "chunked_local") or self.retention is None:
            return None
        ends = {(prompt_tokens - 1) // self.bs}
        if junction:
            ends.add(junction)
        if g.kind == "mamba":
            return {e - 1 for e in ends if e > 0}
        need = -(-(g.window - 1) // self.bs)
        return {j for e in ends for j in range(max(0, e - need), e)}

    def resident_count(self) -> int:
        return len(self.block_key)


def replay_hybrid(trace, capacity: int, groups, block_size: int, *, retention: int | None = 0,
                  chunk_tokens: int = 8192, in_full=None):
    """Every request of `trace` in order through one HybridPool: (hit blocks, the pool). The
    readable reference; replay_hybrid_compiled (below) is the same replay in C. in_full: an int8
    array per access, filled with whether full attention (every full spec group) had the block
    when its request arrived (the miss account's layer-groups cause; 0 without a full group)."""
    pool = HybridPool(capacity, list(groups), block_size, retention=retention, chunk_tokens=chunk_tokens)
    offsets, blocks, lengths = trace.offsets.tolist(), trace.blocks.tolist(), trace.input_length.tolist()
    hits = np.zeros(len(lengths), dtype=np.int64)
    full = [s for s, g in enumerate(pool.spec_groups) if g.kind == "full"]
    for i in range(len(lengths)):
        ids = blocks[offsets[i]:offsets[i + 1]]
        if in_full is not None:
            for j, b in enumerate(ids):
                in_full[offsets[i] + j] = bool(full) and all(pool.cached(s, b) is not None for s in full)
        hits[i] = pool.serve(ids, lengths[i])
    return hits, pool


KIND_CODES = {kind: code for code, kind in enumerate(KINDS)}  # coordinator.h's K_FULL .. K_MAMBA


def _positive(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"hybrid semantics: {what} must be a positive whole number, got {value!r}")
    return int(value)


def check_groups(groups, retention) -> list:
    """`groups` as a list, each a known kind with positive copies, window and chunk where its kind
    has them, and `retention` None (dense) or 0, vLLM's default (ConfigError otherwise: an
    interval > 0 also keeps one state per segment, which is not modelled)."""
    groups = list(groups or ())
    if not groups:
        raise ConfigError("hybrid semantics need at least one KV cache group")
    for g in groups:
        if g.kind not in KIND_CODES:
            raise ConfigError(f"hybrid semantics: unknown group kind {g.kind!r} (known: {', '.join(KINDS)})")
        _positive(g.copies, f"{g.kind} copies")
        if g.kind == "sliding_window":
            _positive(g.window, "a sliding window")
        if g.kind == "chunked_local":
            _positive(g.chunk, "a local-attention chunk")
    if retention is not None and (isinstance(retention, bool) or not isinstance(retention, (int, np.integer))
                                  or retention < 0):
        raise ConfigError(f"hybrid semantics: retention must be None or a whole number >= 0, got {retention!r}")
    if retention is not None and retention > 0:
        raise ConfigError(f"hybrid semantics: prefix_cache_retention_interval {retention} is not modelled (it also "
                          "keeps a block per interval-sized segment): use 0, vLLM's default, or None (dense)")
    return groups


def replay_hybrid_compiled(trace, capacity: int, groups, block_size: int, *, retention: int | None = 0,
                           chunk_tokens: int = 8192, in_full=None):
    """replay_hybrid compiled (coordinator.c), the same replay request by request: (hit blocks, the
    counters as HybridPool.stats, the resident count as HybridPool.resident_count()).

    retention: None (dense) or 0 (vLLM's default sparse mode), as in the reference. A hash id repeated within a request's hit (never in chained hashes) is refused,
    where the reference fails."""
    import ctypes

    from .. import native

    groups = check_groups(groups, retention)
    capacity = _positive(capacity, "capacity")
    if capacity >= 2**31 - 1:
        raise ConfigError(f"hybrid semantics: capacity {capacity:,} block ids is beyond the compiled engine "
                          "(2**31 - 2)")
    block_size, chunk_tokens = _positive(block_size, "block size"), _positive(chunk_tokens, "chunk tokens")
    offsets = np.ascontiguousarray(trace.offsets, dtype=np.int64)
    blocks = np.ascontiguousarray(trace.blocks, dtype=np.int32)
    lengths = np.ascontiguousarray(trace.input_length, dtype=np.int64)
    n = lengths.shape[0]
    spec = np.array([[KIND_CODES[g.kind], g.copies, g.window or 0, g.chunk or 0] for g in groups], dtype=np.int64)
    kind, copies, window, chunk = (np.ascontiguousarray(spec[:, k]) for k in range(4))
    hits = np.zeros(n, dtype=np.int64)
    out = np.zeros(5, dtype=np.int64)
    p, i = ctypes.c_void_p, ctypes.c_int64
    fn = native.function("kv_hybrid_replay", ctypes.c_int64, p, i, p, i, i, p, i, i, i, p, p, p, p, i, i, p, p, p)
    if in_full is not None and (in_full.dtype != np.int8 or in_full.shape != (blocks.shape[0],)
                                or not in_full.flags.c_contiguous):
        raise ConfigError("in_full must be a contiguous int8 array with one entry per block access")
    rc = fn(offsets.ctypes.data, n, blocks.ctypes.data, blocks.shape[0], int(trace.num_blocks), lengths.ctypes.data,
            capacity, block_size, len(groups), kind.ctypes.data, copies.ctypes.data, window.ctypes.data,
            chunk.ctypes.data, -1 if retention is None else min(int(retention), 2**62), min(chunk_tokens, 2**62),
            hits.ctypes.data, out.ctypes.data, None if in_full is None else in_full.ctypes.data)
    if rc == -1:
        raise MemoryError("hybrid semantics: the compiled replay could not allocate its state")
    if rc > 0:
        raise ConfigError(f"hybrid semantics: request {rc - 1} repeats a hash id within its cache hit (vLLM's "
                          "chained block hashes never repeat within a prompt)")
    if rc == -3:
        raise RuntimeError("hybrid semantics: the compiled replay's free queue ran dry after its fit check (a bug)")
    if rc != 0:
        raise ConfigError(f"hybrid semantics: the compiled replay refused its input (code {rc}: a block id outside "
                          "the trace's range, malformed offsets, or a length, window or block size beyond 2**52 "
                          "tokens, 2**24 for the block size)")
    return hits, dict(zip(COUNTERS, (int(x) for x in out[:4]))), int(out[4])


def replay_groups(trace, capacity: int, groups, block_size: int, engine: str, retention, chunk: int, in_full=None):
    """The replay over layer groups of policy vllm (PolicySpec.replay_groups): vLLM's hybrid manager,
    compiled or reference: (hit blocks, counters, resident count, what the report says of it)."""
    if engine == "compiled":
        hits, counters, final = replay_hybrid_compiled(trace, capacity, groups, block_size, retention=retention,
                                                       chunk_tokens=chunk, in_full=in_full)
    else:
        hits, pool = replay_hybrid(trace, capacity, groups, block_size, retention=retention, chunk_tokens=chunk,
                                   in_full=in_full)
        final, counters = pool.resident_count(), dict(pool.stats)
    about = {"engine": "vllm", "retention": retention,
             "source": "vLLM 0.33.0 HybridKVCacheCoordinator (hybrid/coordinator.py)"}
    return hits, counters, final, about
