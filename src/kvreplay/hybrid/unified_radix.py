"""SGLang's hybrid prefix caches (sliding-window and Mamba models), request by request, as
SGLang 0.5.23's ``UnifiedRadixCache`` does it.

Source: SGLang 0.5.23, ``python/sglang/srt/``; the references ``file:line`` below are to that
tree (``mem_cache/`` unless they say otherwise). In 0.5.23 both hybrids are one class,
``UnifiedRadixCache`` (unified_radix_cache.py:199), built with the tree components (FULL, SWA),
(FULL, MAMBA) or (FULL, SWA, MAMBA) (registry.py:149-220); its tree is ``UnifiedTreeCore``
(unified_cache/unified_tree_core.py, Python) or the bundled Rust core (the default), which behave
alike. Checked request by request (hit, and every pool and the tree after it) against SGLang's
own cache code run on CPU, both tree cores, by tests/real_engines/test_sglang_hybrid.py;
tests/policies/test_radix_hybrid.py holds hand-worked cases and the per-request hits SGLang's code
gave on 24 scenarios with decoding.

Modelling choices
-----------------
* One trace block is one SGLang page (``page_size = block_size``, P below); its hash id stands
  for the page's P tokens, so the tree is keyed by block ids. Block ids missing past the end of a
  trace's list (a prompt longer than its ids) are pages nobody shares: each gets a key of its own.
* A request is (hash ids, prompt tokens L), served alone from start to finish, as kvreplay's
  other policies: match, prefill (in chunks of ``chunk_tokens``, SGLang's
  ``--chunked-prefill-size``; ``None``: one chunk), an insert after every chunk but the last
  (``checkpoint_kv_cache``), the final insert and release (``release_kv_cache``), and nothing
  else: no decode, so outputs are not cached (a request finishes after its first token, as with
  ``max_new_tokens = 1``). ``UnifiedRadix.serve(..., out_len=O)`` also plays O - 1 decode steps
  and caches their tokens; the regression against SGLang's code uses it, the replay does not.
* The model's layers come as kvreplay ``Group`` s (hybrid/coordinator.py): a ``sliding_window``
  group makes the tree's SWA component with its window W (all of them must share one window, as
  SGLang's model has one ``sliding_window_size``); a ``chunked_local`` group counts as a sliding
  window of its chunk size, as SGLang runs Llama 4 (``attention_chunk_size`` becomes the sliding
  window: model_executor/model_runner_components/load_model_utils.py:144-158, its architecture is
  in configs/model_config.py:2651's hybrid-SWA list); a ``mamba`` group makes the MAMBA
  component; ``full`` is always there (a model with no full-attention group is SGLang's
  ``PureSWARadixCache``, a plain radix tree: not this module). Which models SGLang really runs as
  hybrids (is_hybrid_swa_model, uses_ssm_state) is the caller's business.
* Pools, in pages (P tokens) or slots: ``full_pages`` (the full-attention KV pool; every cached
  page holds its full KV), ``swa_pages`` (the sliding-window pool; default SGLang's
  ``--swa-full-tokens-ratio`` 0.8 of the full pool, page-aligned: pool_configurator.py
  _solve_pool_sizes), ``mamba_slots`` (state slots; SGLang sizes them from memory,
  ``--max-mamba-cache-size`` or ``--mamba-full-memory-ratio``, so there is no default in pages:
  ``None`` gives more slots than the tree can ever hold, full_pages + 4). A request whose prompt
  does not fit the full pool at all is refused (``rejected``; SGLang refuses prompts longer than
  its pool, managers/utils.py:260-290); one that cannot get its pages even after evicting all it
  may is aborted, keeping what its earlier chunks inserted (``oversize_requests``; SGLang's
  PrefillAdder budget, not modelled, would have held it back or capped its chunk).
* Mamba: ``mamba_strategy`` ``"extra_buffer"`` (default: SGLang's ``auto`` with the overlap
  scheduler on, arg_groups/overrides.py:477-486; required for P > 1) or ``"no_buffer"`` (P = 1
  only, components/mamba.py:77-80). The model's ``mamba_chunk_size`` is taken as 64 (FLA's
  CHUNK_SIZE, the default of arg_groups/overrides.py:1897-1925), so the checkpoint grid is
  ``max(64, P)``.

The cache
---------
A radix tree of pages. A node holds a run of pages (its key), children keyed by their first
page, ``time`` (``last_access_time``, a counter read once per stamp: components/base.py:161-165),
and per component: FULL KV (always present: a device-only tree), SWA KV (live, or a
*tombstone*: full KV kept, window KV gone), a Mamba state (or none), and a lock count each.
SWA and Mamba each have an LRU list of the nodes holding their data (unified_tree_core.py:213-389);
full-KV eviction goes by leaf and ``time``.

A request with prompt L (hit limit L - 1, schedule_batch.py:1766):

1. Match (unified_tree_core.py:905-984): walk the first floor((L - 1) / P) pages from the root;
   a mismatch inside a node splits it (the upper part is the match's). A node is an acceptable
   end iff every component agrees (all are asked, in order: their checks keep state):
   - SWA (components/swa.py:357-377): ``run`` starts at +inf; a tombstone sets it to 0 and fails;
     a live node adds its tokens and passes iff ``run >= W``. So before the first tombstone every
     node passes; after one, a hit needs W live tokens since it.
   - Mamba (components/mamba.py:151-162): the node holds a state (the deepest state wins; a
     split's upper part never has one, mamba.py:322-332).
   The hit is the depth of the deepest acceptable node ("best"). Then (unified_tree_core.py:
   1012-1068): SWA refreshes its LRU from best upward over W + P tokens, live nodes only, best
   hottest (swa.py:332-355, unified_tree_core.py:332-355); Mamba moves best's state to MRU
   (mamba.py:127-149); best and its ancestors get ``time = t, t - 1e-5, ...`` from one new t.
   Branching points: SWA ``floorP(full-KV match)`` if beyond the hit (swa.py:379-421); Mamba the
   same floored to the checkpoint grid (mamba.py:164-194).
   Mamba copies best's state into a fresh request slot (evicting one state if none is free,
   mamba.py:196-225).
2. Lock best (unified_tree_core.py:730-743): FULL on best..root (full.py:282-329); SWA on best and
   its ancestors until W tokens are covered, tombstones too, the last one the boundary
   (swa.py:849-902); Mamba on best only (mamba.py:465-491). Locked data is never evicted.
3. Prefill, chunk by chunk (the first chunk ``floorP(chunk_tokens)`` when the rest of the prompt,
   page-rounded, exceeds it, later ones ``chunk_tokens``: managers/schedule_policy.py:1646-1672,
   1140-1220). Per chunk [s, e) (mem_cache/allocation.py:374-488): Mamba slots first (1 for the
   request unless it copied one, + 2 ping-pong slots with extra_buffer; allocation.py:298-324);
   then the KV: ask for e - s tokens (+ one page when P > 1: allocation.py:174-200), evict the
   shortfall of each pool (allocator/swa.py:210-220; base.py:155-169), take
   ceil(e/P) - ceil(s/P) new pages in the full pool and as many in the SWA pool.
   extra_buffer: the forward keeps a state at ``s + floor((e - s) / grid) * grid`` when
   ``e - s >= grid``, moved to the Mamba branching point when that lies in the chunk on the
   grid from s (managers/schedule_batch.py:3137-3235).
   With both SWA and Mamba, a match needs all three components, the SWA branching point is not
   used (Mamba decides where an insert stops, swa.py:1012-1015).
4. After a chunk that is not the last: checkpoint (unified_radix_cache.py:1164-1335):
   - the key length is the chunk end, cut at a pending SWA branching point beyond what the
     request already has in the tree (swa.py:999-1028; not with Mamba), or at the tracked state
     (extra_buffer: that state's slot goes to the tree and a new one, evicting a state if none is
     free, replaces it; no state tracked in the chunk: nothing at all is inserted; no_buffer: the
     chunk end, with a copy of the running state in a new slot) (mamba.py:527-682);
   - the request frees its own SWA KV left of the window (common.py:75-138): with
     ``pre = key - 1`` and cursor ``c`` (its SWA freed below c), if ``pre - W >= c + 1``:
     ``c = max(c, in-tree length)``, freed up to ``floorP(pre - ceilP(max(W, P)))`` (not past the
     last Mamba state - W with both components, unified_radix_cache.py:3771-3777);
   - insert ``floorP(key)`` pages (unified_tree_core.py:1129-1465): along existing nodes, a
     tombstone at positions >= c is split at c and *recovered* from the request's KV
     (swa.py:434-513); the request's other pages there are duplicates and freed (full only below
     c); the rest becomes a new leaf, tombstone below c; its live part, if longer than
     ceilP(W), is split once so that its last ceilP(W) tokens are a node of their own, the older
     part entering the SWA LRU first (swa.py:515-624); Mamba puts the state on the node where
     the key ends (mamba.py:227-253; one already there: refreshed, the new one freed); the SWA
     LRU is refreshed from there as at a match;
   - the lock moves to that node; the in-tree length becomes the key; an SWA branch inserted
     frees out of window again up to the chunk end (swa.py:1051-1069).
5. After the last chunk the request finishes (release_kv_cache, common.py:400-444): the same
   insert without the out-of-window free (so the whole prompt past c is inserted live), Mamba
   donating the request's state (extra_buffer: the tracked one, if any: mamba.py:582-602), then
   its pages outside the tree are freed and it is unlocked.

Eviction (``evict_for_alloc``, unified_radix_cache.py:697-1058): per component, FULL then SWA
then MAMBA, until that pool has its shortfall free: FULL pops unlocked leaves oldest ``time``
first and deletes them with all their data, a parent left a leaf joining in (full.py:209-244,
unified_tree_core.py:1903-1929); SWA / MAMBA walk their LRU from the cold end skipping nodes
locked in that component: an unlocked leaf is deleted whole, any other node loses just that
component's data (an SWA tombstone also drops the node's Mamba state:
unified_tree_core.py:2125-2210), until the shortfall is met (swa.py:742-841, mamba.py:373-457).

Counters: ``admissions`` (pages inserted into the tree), ``evictions`` (full-KV pages freed by
eviction), ``swa_evictions`` (SWA pages freed by eviction: tombstoned or with their node),
``mamba_evictions`` (states), ``evicted_nodes``, ``node_splits``, ``rejected``,
``oversize_requests``.

Not modelled here: decode in the replay (see above; ``outputs`` adds it), the admission budget
(PrefillAdder / SWAPrefillBudget: requests are served one at a time and their chunks never capped;
SGLang would shorten a continuing chunk when free + evictable SWA is below it,
prefill_budget.py:274-278), overlapping requests and batches of several: the serving simulator
has those (serving/kernel/sglang_hybrid.c drives the compiled tree request by request). Nowhere:
HiCache /
host tiers, PD disaggregation, speculative decoding, DCP, the unified memory pool, session and
streaming caches, ``--mamba-max-states-per-path`` (off by default),
``SGLANG_OPT_RELEASE_PREFILL_SWA`` (off by default).
"""

from __future__ import annotations

import heapq
import math

from .coordinator import Group
from .pools import PING_PONG_SLOTS, Pools
from .radix_tree import COUNTERS, RadixTree

SWA_EVICTION_INTERVAL = 128  # SGLANG_SWA_EVICTION_INTERVAL (environ.py:730): decode-time SWA frees
MAMBA_CHUNK_SIZE = 64  # FLA CHUNK_SIZE, the default model mamba_chunk_size (arg_groups/overrides.py:1897-1925)
MAMBA_TRACK_INTERVAL = 256  # --mamba-track-interval (arg_groups/fields/exec_.py:530): decode-time states


class _Request:
    """What SGLang's Req / ReqKvInfo carry for the cache (managers/schedule_batch.py:951+)."""

    def __init__(self, keys, prompt_tokens):
        self.keys = keys
        self.prompt_tokens = prompt_tokens
        self.protected = 0  # cache_protected_len: [0, protected) is the tree's (tokens)
        self.swa_cursor = 0  # get_evicted_seqlen(SWA): the request freed its SWA KV below this
        self.computed = 0  # kv_committed_len: tokens whose KV the request has (tree's or its own)
        self.lock = None  # (node, SWA boundary uuid)
        self.swa_branch = None  # swa_branching_seqlen (tokens)
        self.mamba_branch = None  # mamba_branching_seqlen (tokens)
        self.mamba_slots = 0  # state slots it holds (its own one, plus the ping-pong pair)
        self.has_own_slot = False
        self.has_ping_pong = False
        self.track = None  # mamba_last_track_seqlen
        self.prev_track = None  # mamba_prev_track_seqlen


class UnifiedRadix(RadixTree):
    """SGLang 0.5.23's UnifiedRadixCache with FULL and SWA and / or MAMBA components: its tree
    (radix_tree.py) over its pools (pools.py, self.pools), and what moves pages between them:
    insert, eviction, and a request's life."""

    def __init__(self, groups, block_size: int, *, full_pages: int, swa_pages: int | None = None,
                 mamba_slots: int | None = None, chunk_tokens: int | None = 8192, mamba_strategy: str = "extra_buffer"):
        groups = [g if isinstance(g, Group) else Group(**g) for g in groups]
        kinds = {g.kind for g in groups}
        if "full" not in kinds:
            raise ValueError("SGLang's hybrid caches need a full-attention group "
                             "(all-SWA models use a plain radix tree)")
        unknown = kinds - {"full", "sliding_window", "chunked_local", "mamba"}
        if unknown:
            raise ValueError(f"unknown group kinds: {sorted(unknown)}")
        windows = {g.window if g.kind == "sliding_window" else g.chunk for g in groups
                   if g.kind in ("sliding_window", "chunked_local")}
        if len(windows) > 1:
            raise ValueError(f"SGLang's SWA tree has one window; the groups give {sorted(windows)}")
        if any(w is None or w <= 0 for w in windows):
            raise ValueError("a sliding-window (or chunked-local) group needs a positive window (chunk)")
        if block_size < 1 or full_pages < 1:
            raise ValueError("block_size and full_pages must be positive")
        P = block_size
        has_swa, has_mamba = bool(windows), "mamba" in kinds
        W = windows.pop() if windows else None
        if mamba_strategy not in ("extra_buffer", "no_buffer"):
            raise ValueError(f"mamba_strategy must be extra_buffer or no_buffer, got {mamba_strategy!r}")
        if has_mamba and mamba_strategy == "no_buffer" and P != 1:
            raise ValueError("SGLang's no_buffer Mamba cache needs page size 1 (components/mamba.py:77-80)")
        self.extra_buffer = has_mamba and mamba_strategy == "extra_buffer"
        if chunk_tokens is not None and chunk_tokens < P:
            raise ValueError(f"chunk_tokens ({chunk_tokens}) must hold at least one page ({P})")
        self.chunk_tokens = chunk_tokens
        self.pools = Pools(P, full_pages, swa_pages, mamba_slots, has_swa, has_mamba, mamba_strategy)
        # checkpoint grid (runtime_context.py:1958-1979)
        self.mamba_chunk = max(MAMBA_CHUNK_SIZE, P)
        self.grid = math.lcm(self.mamba_chunk, P)
        self.track_grid = math.lcm(self.grid, MAMBA_TRACK_INTERVAL)
        super().__init__(P, W, has_swa, has_mamba)
        self.requests = 0

    def _insert(self, req, n: int):
        """Insert the request's first n pages (unified_tree_core.py:1129-1465).
        Returns (target node, mamba state already there)."""
        P, key = self.P, req.keys
        protected, cursor = req.protected // P, req.swa_cursor // P  # prev_prefix_len, SWA cursor (pages)
        self.root.time = self._tick()  # _touch_node(root)
        if n == 0:
            return self.root, True  # an empty key: nothing inserted (begin_insert)
        node, t = self.root, 0
        while t < n and key[t] in node.children:  # WALK / OVERLAP (1282-1366)
            child = node.children[key[t]]
            child.time = self._tick()  # _touch_node
            m = self._common(child.key, key, t, n)
            if m < len(child.key):
                child = self._split(child, m)
            consumed = m
            if self.has_swa and protected < t + m and not child.swa:
                live = max(t, cursor)  # a tombstone at positions >= the cursor is recovered (swa.py:471-513)
                if live < t + m:
                    if live > t:
                        self._split(child, live - t)  # _clip_to_window: the upper part stays a tombstone
                    # _recover_from_incoming (swa.py:454-469): the node keeps one full copy (its own, or
                    # the request's), the request's SWA KV becomes the node's
                    self.pools.full_free += t + m - live
                    child.swa = True
                    self.swa_lru.insert_mru(child)  # SWARebuild / RecoverSWAWithLockedFull
                    consumed = live - t
            dup = max(0, protected - t)  # the request's own pages there are duplicates (1348-1365)
            if dup < consumed:
                lo, hi = t + dup, t + consumed
                self.pools.full_free += hi - lo
                if self.has_swa:
                    self.pools.swa_free += max(0, hi - max(lo, cursor))  # below the cursor: full only
            node, t = child, t + m
        leaf = None
        if t < n:  # COMMIT (1383-1421): the rest is a new leaf
            leaf = self._node(list(key[t:n]), node)
            node.children[leaf.key[0]] = leaf
            self.leaves.discard(node)
            self.leaves.add(leaf)
            self.tree_pages += n - t
            self.stats["admissions"] += n - t
        target = leaf if leaf is not None else node
        if self.has_swa and leaf is not None:  # swa.py:515-591
            live = max(t, cursor)
            if live < n:
                if live > t:
                    self._split(leaf, live - t)  # below the cursor: a tombstone
                tail = -(-self.W // P)  # _maybe_split_leaf_for_swa_lock: cap at ceilP(W) (593-624)
                older = self._split(leaf, len(leaf.key) - tail) if len(leaf.key) > tail else None
                if older is not None:
                    older.swa = True
                    self.swa_lru.insert_mru(older)
                leaf.swa = True
                self.swa_lru.insert_mru(leaf)
        exist = False
        if self.has_mamba:  # mamba.py:227-253
            if leaf is not None or not target.mamba:
                target.mamba = True
                self.mamba_lru.insert_mru(target)
                if leaf is None:
                    target.time = self._tick()
            else:
                self.mamba_lru.move_after(self.mamba_lru.head, target)
                target.time = self._tick()
                exist = True
        if self.has_swa:  # TAIL: INSERT_END refresh (1449-1465)
            self._refresh_swa(target)
        return target, exist

    # ---- eviction ----------------------------------------------------------------------------------

    def _delete_leaf(self, node, freed) -> None:
        """_delete_unbacked_device_leaf (unified_tree_core.py:1903-1929): all of its data goes."""
        pages = len(node.key)
        self.pools.full_free += pages
        self.tree_pages -= pages
        freed["full"] += pages * self.P
        self.stats["evictions"] += pages
        self.stats["evicted_nodes"] += 1
        if node.swa:
            self.swa_lru.remove(node)
            self.pools.swa_free += pages
            freed["swa"] += pages * self.P
            self.stats["swa_evictions"] += pages
        if node.mamba:
            self.mamba_lru.remove(node)
            self.pools.mamba_free += 1
            freed["mamba"] += 1
            self.stats["mamba_evictions"] += 1
        del node.parent.children[node.key[0]]
        self.leaves.discard(node)
        if not node.parent.children and node.parent is not self.root:
            self.leaves.add(node.parent)

    def _drop_mamba(self, node, freed) -> None:
        node.mamba = False
        self.mamba_lru.remove(node)
        self.pools.mamba_free += 1
        freed["mamba"] += 1
        self.stats["mamba_evictions"] += 1

    def _tombstone(self, ct: str, node, freed) -> None:
        """An internal (or locked-leaf) victim loses one component's data; an SWA tombstone also
        drops the node's state (_cascade_evict: priorities FULL 2 > SWA 1 > MAMBA 0 on internal
        nodes, unified_tree_core.py:2125-2210)."""
        if ct == "swa":
            pages = len(node.key)
            node.swa = False
            self.swa_lru.remove(node)
            self.pools.swa_free += pages
            freed["swa"] += pages * self.P
            self.stats["swa_evictions"] += pages
            if node.mamba:
                self._drop_mamba(node, freed)
        else:
            self._drop_mamba(node, freed)

    def _evict(self, full_tokens: int = 0, swa_tokens: int = 0, mamba: int = 0) -> None:
        """evict_for_alloc with component shortfalls (unified_radix_cache.py:697-1058)."""
        request = {"full": full_tokens, "swa": swa_tokens, "mamba": mamba}
        target = {ct: self.pools.available(ct) + r for ct, r in request.items() if r > 0}
        freed = {"full": 0, "swa": 0, "mamba": 0}

        def reached(ct):
            return ct in target and self.pools.available(ct) >= target[ct]

        for ct in ["full"] + (["swa"] if self.has_swa else []) + (["mamba"] if self.has_mamba else []):
            to_target = ct == "full" and request[ct] > 0
            if reached(ct) or (not to_target and freed[ct] >= request[ct]):
                continue
            if ct == "full":
                self._evict_full_leaves(freed, reached)
            else:
                self._evict_aux(ct, request[ct], freed, reached)

    def _evict_full_leaves(self, freed, reached) -> None:
        """full.py:209-244: a heap of unlocked leaves by last access; a parent left a leaf joins it."""
        heap = self._evictable_leaves()
        heapq.heapify(heap)
        while heap:
            _, _, x = heapq.heappop(heap)
            if not self._evictable_leaf(x) or x.parent is None or x.parent.children.get(x.key[0]) is not x:
                continue
            self._delete_leaf(x, freed)
            if reached("full"):
                return
            if self._evictable_leaf(x.parent):
                heapq.heappush(heap, (x.parent.time, x.parent.serial, x.parent))

    def _evictable_leaves(self) -> list:
        """(time, serial, node) of every evictable leaf (_evictable_leaf), from the tree's leaf set
        (SGLang walks the tree for them; the heap's order is by (time, serial), unique, so the
        set's order does not matter)."""
        return [(n.time, n.serial, n) for n in self.leaves if self._evictable_leaf(n)]

    def _evict_aux(self, ct: str, quota: int, freed, reached) -> None:
        """swa.py:742-841 / mamba.py:373-457: the component's LRU from its cold end."""
        lru = self.swa_lru if ct == "swa" else self.mamba_lru
        locked = (lambda n: n.swa_lock > 0) if ct == "swa" else (lambda n: n.mamba_lock > 0)
        cursor = lru.coldest_unlocked(locked)
        while True:
            if cursor is not None and cursor not in lru:
                cursor = lru.coldest_unlocked(locked)
            if freed[ct] >= quota or cursor is None:
                return
            x = cursor
            cursor = lru.warmer_unlocked(x, locked)
            if self._evictable_leaf(x):
                self._delete_leaf(x, freed)
            else:
                self._tombstone(ct, x, freed)
            if reached(ct):
                return

    # ---- one request -------------------------------------------------------------------------------

    def serve(self, pages, prompt_tokens: int, out_len: int = 1) -> int:
        """One request from match to release: its hit in pages. `pages`: the page keys of its prompt
        (and, with out_len > 1, of its prompt followed by its output tokens); out_len - 1 decode
        steps follow the prefill (out_len = 1: none, as in a kvreplay trace)."""
        P, L = self.P, prompt_tokens
        self.requests += 1
        if L <= 0:
            return 0
        if -(-L // P) > self.pools.full_pages:  # can never fit: refused (managers/utils.py:260-290)
            self.stats["rejected"] += 1
            return 0
        if out_len > 1 and not (self.has_swa or self.has_mamba):
            # a FULL-only tree also splits the leaf at the prompt's end after caching outputs
            # (unified_radix_cache.py:1257-1283): not modelled
            raise NotImplementedError("decode steps on a FULL-only tree are not modelled")
        total = L + out_len - 1
        keys = list(pages[: total // P])
        keys += [("unshared", self.requests, j) for j in range(len(keys), total // P)]
        req = _Request(keys, L)
        best, hit, full_hit = self._match(keys[: (L - 1) // P])
        if self.has_swa and full_hit > hit:
            req.swa_branch = full_hit * P
        if self.has_mamba:
            aligned = full_hit * P // self.grid * self.grid
            if aligned > hit * P:
                req.mamba_branch = aligned
            if best.mamba:  # copy-on-write into a fresh slot (mamba.py:196-225)
                if self.pools.mamba_free == 0:
                    receipt = self._lock(best)
                    self._evict(mamba=1)
                    self._unlock(receipt)
                if self.pools.mamba_free == 0:
                    self.stats["oversize_requests"] += 1
                    return hit
                self.pools.mamba_free -= 1
                req.mamba_slots += 1
                req.has_own_slot = True
        req.protected = req.computed = hit * P
        req.lock = self._lock(best)
        pos, first = hit * P, True
        while pos < L:
            end = self._chunk_end(pos, L, first)
            if not self._allocate(req, pos, end):
                self._abort(req)
                return hit
            if self.extra_buffer:
                self._track_prefill(req, pos, end)
            req.computed = end
            if end < L or out_len > 1:
                self._checkpoint(req, end, finished=False)
            pos, first = end, False
        for k in range(1, out_len):
            if not self._decode_step(req, k):
                self._abort(req)
                return hit
        self._release(req)
        return hit

    def _chunk_end(self, pos: int, L: int, first: bool) -> int:
        """PrefillAdder (managers/schedule_policy.py) with no binding budget: the first chunk is cut
        at floorP(chunk) when the rest of the prompt, page-rounded, exceeds it (1646-1672), later
        ones at the chunk (1140-1220)."""
        c = self.chunk_tokens
        if c is None:
            return L
        if first:
            if self._ceil_page(L - pos) <= c:
                return L
            return pos + c // self.P * self.P
        return pos + min(L - pos, c)

    def _allocate(self, req, start: int, end: int) -> bool:
        """alloc_for_extend (allocation.py:374-488): state slots, then the KV of [start, end)."""
        P = self.P
        if self.has_mamba:  # ensure_mamba_capacity + HybridReqToTokenPool.alloc (allocation.py:298-324)
            needed = (0 if req.has_own_slot else 1)
            if self.extra_buffer and not req.has_ping_pong:
                needed += PING_PONG_SLOTS
            if self.pools.mamba_free < needed:
                self._evict(mamba=needed - self.pools.mamba_free)
            if self.pools.mamba_free < needed:
                return False
            self.pools.mamba_free -= needed
            req.mamba_slots += needed
            req.has_own_slot = True
            req.has_ping_pong = req.has_ping_pong or self.extra_buffer
        self._make_room((end - start) + (P if P > 1 else 0))
        new = -(-end // P) - -(-start // P)
        if new > self.pools.full_free or (self.has_swa and new > self.pools.swa_free):
            return False
        self.pools.full_free -= new
        if self.has_swa:
            self.pools.swa_free -= new
        return True

    def _make_room(self, demand: int) -> None:
        """evict_to_free_tokens: each pool's shortfall of `demand` tokens (allocator/swa.py:210-220,
        allocator/base.py:155-169)."""
        full_short = max(0, demand - self.pools.full_free * self.P)
        swa_short = max(0, demand - self.pools.swa_free * self.P) if self.has_swa else 0
        if full_short or swa_short:
            self._evict(full_tokens=full_short, swa_tokens=swa_short)

    def _track_prefill(self, req, start: int, end: int) -> None:
        """Where the forward keeps a state (extra_buffer, non-DCP; schedule_batch.py:3137-3235)."""
        extend = end - start
        if extend < self.grid:
            return
        aligned = start + extend // self.grid * self.grid
        limit = end if start + extend // MAMBA_CHUNK_SIZE * MAMBA_CHUNK_SIZE == aligned else aligned + 1
        b = req.mamba_branch
        if b is not None and start < b < limit and (b - start) % self.mamba_chunk == 0:
            aligned = b
        req.track = aligned

    def _decode_step(self, req, k: int) -> bool:
        """Decode step k (1-based: k output tokens so far) before its forward, a decode batch of this
        request alone: check_decode_mem's eviction, a page when the token starts one
        (new_tokens_required_next_decode, schedule_batch.py:3403-3417); maybe_evict_swa
        (schedule_batch.py:4068-4123); then alloc_paged_token_slots_decode's eviction, a page
        (allocation.py:571-583), and one token (alloc_for_decode_default, allocation.py:625-665)."""
        P = self.P
        if req.computed % P == 0:
            self._make_room(P)
        if self.has_swa and k - 1 >= 1:
            seqlen = req.prompt_tokens + k
            if seqlen - 1 - self.W >= req.swa_cursor + SWA_EVICTION_INTERVAL:
                self._free_out_of_window(req, seqlen - 1)
        committed = req.computed
        self._make_room(P)
        if committed % P == 0:
            if self.pools.full_free < 1 or (self.has_swa and self.pools.swa_free < 1):
                return False
            self.pools.full_free -= 1
            if self.has_swa:
                self.pools.swa_free -= 1
        req.computed = committed + 1
        if self.extra_buffer and req.computed % self.track_grid == 0:  # batch_result_processor.py:1650-1668
            req.prev_track, req.track = req.track, req.computed
        return True

    def _free_out_of_window(self, req, pre_len: int) -> None:
        """free_swa_out_of_window_slots (common.py:75-138): the request's own SWA KV left of its
        window goes back; the cursor only moves forward, page by page."""
        if not self.has_swa:
            return
        P, W = self.P, self.W
        if pre_len - W < req.swa_cursor + 1:
            return
        cursor = max(req.swa_cursor, req.protected)  # swa_dead_lo (schedule_batch.py:994-1000)
        req.swa_cursor = cursor
        threshold = pre_len - self._ceil_page(max(W, P))
        if self.has_mamba and req.track is not None:  # swa_retain_floor (unified_radix_cache.py:3771-3777)
            threshold = min(threshold, req.track - W)
        new = max(cursor, threshold) // P * P
        if new > cursor:
            self.pools.swa_free += (new - cursor) // P
            req.swa_cursor = new

    def _checkpoint(self, req, up_to: int, *, finished: bool) -> None:
        """checkpoint_into_tree (unified_radix_cache.py:1164-1335)."""
        P = self.P
        key_len, branch = up_to, None
        if self.has_swa and not self.has_mamba:  # swa.py:999-1028
            b = req.swa_branch
            if b is not None and b > req.protected and b <= up_to:
                branch, key_len = b, min(key_len, b)
        mamba_value = False  # a state slot prepared for the insert (mamba.py:604-682)
        if self.has_mamba:
            if self.extra_buffer:
                if finished:
                    cache_len = self._finished_checkpoint(req, up_to)
                    mamba_value = cache_len is not None
                    cache_len = cache_len or 0
                else:
                    cache_len = req.track or 0
                    if req.track is not None:
                        self._take_slot()  # the request's tracked slot is donated, a new one replaces it
                        mamba_value = True
            else:
                cache_len = up_to
                if not finished:
                    self._take_slot()  # a copy of the running state
                mamba_value = True
            key_len = min(key_len, cache_len)
        if not finished:
            self._free_out_of_window(req, key_len - 1)
        if key_len <= 0:
            self._mamba_cleanup(req, finished, mamba_value, inserted=False)
            return
        n = key_len // P
        target, exist = self._insert(req, n)
        self._unlock(req.lock)
        req.lock = self._lock(target)
        req.protected = n * P
        if branch is not None and n * P >= branch:  # cleanup_after_caching_req (swa.py:1051-1069)
            req.swa_branch = None
            if not finished:
                self._free_out_of_window(req, req.computed - 1)
        self._mamba_cleanup(req, finished, mamba_value, inserted=mamba_value and not exist and n > 0)

    def _take_slot(self) -> None:
        """_alloc_mamba_slot (mamba.py:527-553): evict one state if none is free."""
        if self.pools.mamba_free == 0:
            self._evict(mamba=1)
        if self.pools.mamba_free == 0:
            raise RuntimeError("no Mamba state slot can be freed (SGLang asserts here too)")
        self.pools.mamba_free -= 1

    def _finished_checkpoint(self, req, owned: int):
        """_select_finished_checkpoint (mamba.py:582-602): the tracked length, or None."""
        cache_len = req.track or 0
        if cache_len <= owned:
            return cache_len
        if req.prev_track is None or req.prev_track > owned:
            return None
        return req.prev_track

    def _mamba_cleanup(self, req, finished: bool, mamba_value: bool, inserted: bool) -> None:
        """cleanup_after_caching_req (mamba.py:684-727): slot bookkeeping."""
        if not self.has_mamba:
            return
        if finished:
            if self.extra_buffer:  # free_mamba_cache(keep the donated one if it went in)
                kept = 1 if inserted else 0
                self.pools.mamba_free += req.mamba_slots - kept
            elif not inserted:
                self.pools.mamba_free += req.mamba_slots
            req.mamba_slots = 0
            req.has_own_slot = req.has_ping_pong = False
        else:
            if mamba_value and not inserted:
                self.pools.mamba_free += 1
            req.track = req.prev_track = None

    def _release(self, req) -> None:
        """release_kv_cache(checkpoint=True) (common.py:400-444)."""
        owned = req.computed
        self._checkpoint(req, owned, finished=True)
        held = -(-owned // self.P) - req.protected // self.P
        self.pools.full_free += held  # free_kv_row: [protected, owned)
        if self.has_swa:  # ... full only below the SWA cursor
            self.pools.swa_free += max(0, -(-owned // self.P) - max(req.protected, req.swa_cursor) // self.P)
        self._unlock(req.lock)
        req.lock = None

    def _abort(self, req) -> None:
        """Give back what the request holds, inserting nothing more (the pages it could not get)."""
        self.stats["oversize_requests"] += 1
        owned = req.computed
        self.pools.full_free += max(0, -(-owned // self.P) - req.protected // self.P)
        if self.has_swa:
            self.pools.swa_free += max(0, -(-owned // self.P) - max(req.protected, req.swa_cursor) // self.P)
        self.pools.mamba_free += req.mamba_slots
        req.mamba_slots = 0
        if req.lock is not None:
            self._unlock(req.lock)
            req.lock = None

    # ---- checks ------------------------------------------------------------------------------------

    def check(self) -> None:
        """Between requests every page and slot is free or in the tree; nothing is locked."""
        pages = live = states = 0
        for node, _ in self.nodes():
            assert node.full_lock == node.swa_lock == node.mamba_lock == 0, "a lock outlived its request"
            pages += len(node.key)
            live += len(node.key) if node.swa else 0
            states += node.mamba
        assert pages == self.tree_pages and self.pools.full_free + pages == self.pools.full_pages, "full pages leaked"
        assert self.pools.swa_free + live == self.pools.swa_pages, "SWA pages leaked"
        assert self.pools.mamba_free + states == self.pools.mamba_slots_total, "Mamba slots leaked"
        assert live == sum(len(n.key) for n in self.swa_lru.order()) and states == len(self.mamba_lru)
        assert self.leaves == {n for n, _ in self.nodes() if not n.children}, "the leaf set is stale"


def replay_radix_hybrid(trace, groups, block_size: int, *, full_pages: int, swa_pages: int | None = None,
                        mamba_slots: int | None = None, chunk_tokens: int | None = 8192,
                        mamba_strategy: str = "extra_buffer", outputs=None):
    """Every request of `trace` in order through one UnifiedRadix: (hit blocks, the cache).
    `outputs`: each request's output tokens (its out_len; None: 1 each, no decode)."""
    import numpy as np

    cache = UnifiedRadix(list(groups), block_size, full_pages=full_pages, swa_pages=swa_pages,
                         mamba_slots=mamba_slots, chunk_tokens=chunk_tokens, mamba_strategy=mamba_strategy)
    offsets, blocks, lengths = trace.offsets.tolist(), trace.blocks.tolist(), trace.input_length.tolist()
    hits = np.zeros(len(lengths), dtype=np.int64)
    for i in range(len(lengths)):
        out_len = 1 if outputs is None else max(1, int(outputs[i]))
        hits[i] = cache.serve(blocks[offsets[i]:offsets[i + 1]], lengths[i], out_len)
    return hits, cache


#: kv_radix_hybrid_replay's return codes
_FAILURES = {-1: (MemoryError, "the compiled replay could not allocate its state"),
             -2: (RuntimeError, "no Mamba state slot can be freed (SGLang asserts here too)"),
             -3: (RuntimeError, "the compiled replay's pools disagree with its tree (a bug)"),
             -4: (ValueError, "the compiled replay refused its settings")}


def compiled_settings(spec: UnifiedRadix):
    """unified_radix.h's RH_SETTINGS for the compiled tree, from a UnifiedRadix's checked sizes."""
    import numpy as np

    pools = spec.pools
    return np.array([spec.P, spec.W if spec.has_swa else 0, spec.has_mamba, spec.extra_buffer, pools.full_pages,
                     pools.swa_pages, pools.mamba_slots_total, -1 if spec.chunk_tokens is None else spec.chunk_tokens,
                     spec.grid, spec.mamba_chunk], dtype=np.int64)


def replay_radix_hybrid_compiled(trace, groups, block_size: int, *, full_pages: int, swa_pages: int | None = None,
                                 mamba_slots: int | None = None, chunk_tokens: int | None = 8192,
                                 mamba_strategy: str = "extra_buffer", outputs=None):
    """replay_radix_hybrid compiled (unified_radix.c), the same replay request by request: (hit
    blocks, the counters as UnifiedRadix.stats, and the tree's pages, live SWA pages and Mamba
    states after it)."""
    import ctypes

    import numpy as np

    from .. import native

    spec = UnifiedRadix(list(groups), block_size, full_pages=full_pages, swa_pages=swa_pages, mamba_slots=mamba_slots,
                        chunk_tokens=chunk_tokens, mamba_strategy=mamba_strategy)  # (its checks and sizes)
    settings = compiled_settings(spec)
    offsets = np.ascontiguousarray(trace.offsets, dtype=np.int64)
    blocks = np.ascontiguousarray(trace.blocks, dtype=np.int32)
    lengths = np.ascontiguousarray(trace.input_length, dtype=np.int64)
    hits = np.zeros(lengths.shape[0], dtype=np.int64)
    out = np.zeros(len(COUNTERS) + 3, dtype=np.int64)
    if outputs is not None:
        outputs = np.ascontiguousarray(outputs, dtype=np.int64)
        if outputs.shape != lengths.shape:
            raise ValueError(f"outputs: {outputs.shape[0]} values for {lengths.shape[0]} requests")
        if (outputs > 1).any() and not (spec.has_swa or spec.has_mamba):
            raise NotImplementedError("decode steps on a FULL-only tree are not modelled")
    p, i = ctypes.c_void_p, ctypes.c_int64
    fn = native.function("kv_radix_hybrid_replay", ctypes.c_int64, p, i, p, i, p, p, p, p, p)
    rc = fn(offsets.ctypes.data, lengths.shape[0], blocks.ctypes.data, int(trace.num_blocks), lengths.ctypes.data,
            None if outputs is None else outputs.ctypes.data, settings.ctypes.data, hits.ctypes.data,
            out.ctypes.data)
    if rc != 0:
        kind, message = _FAILURES.get(rc, (RuntimeError, f"the compiled replay failed (code {rc})"))
        raise kind(f"SGLang hybrid cache: {message}")
    stats = dict(zip(COUNTERS, (int(x) for x in out[:len(COUNTERS)])))
    return hits, stats, int(out[-3]), int(out[-2]), int(out[-1])


def replay_groups(trace, capacity: int, groups, block_size: int, engine: str, retention, chunk: int, in_full=None):
    """The replay over layer groups of policy radix (PolicySpec.replay_groups): SGLang's
    UnifiedRadixCache, capacity its full-attention pool in pages, compiled or reference: (hit blocks,
    counters, resident count, what the report says of it). (retention and in_full: vLLM's only.)"""
    if engine == "compiled":
        hits, counters, final, _, _ = replay_radix_hybrid_compiled(trace, groups, block_size, full_pages=capacity,
                                                                   chunk_tokens=chunk)
    else:
        hits, cache = replay_radix_hybrid(trace, groups, block_size, full_pages=capacity, chunk_tokens=chunk)
        final, counters = cache.resident_count(), dict(cache.stats)
    about = {"engine": "sglang", "swa_full_tokens_ratio": 0.8,
             "source": "SGLang 0.5.23 UnifiedRadixCache (hybrid/unified_radix.py, compiled in unified_radix.c); "
                       "capacity: its full-attention pool in pages"}
    return hits, counters, final, about
