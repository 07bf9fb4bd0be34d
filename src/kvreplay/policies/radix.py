"""SGLang's radix tree prefix cache (``RadixCache``, LRU eviction), request by request.

Source: SGLang 0.5.23, ``python/sglang/srt/mem_cache/radix_cache.py`` (the tree), with the
request flow of ``managers/schedule_batch.py`` (match), ``mem_cache/allocation.py`` and
``allocator/base.py`` (evict before allocating) and ``mem_cache/common.py`` (release).
Validated against the real ``RadixCache`` by ``tests/real_engines/test_radix_engine.py``.
One block is one SGLang page (``page_size = block_size``); one trace block id is one
page's content. A sequential replay finishes each request before the next starts;
overlapping requests (engine/lifecycle.py) keep their pages in between: see Holds below.

State: a radix tree. Each node holds a run of pages (block ids), its parent, its children
keyed by their first block id, ``last_access`` (a logical clock) and ``lock_ref``. The
same block id may sit in several places (under different parents): those are different
pages, as in SGLang, where the tree is keyed by token sequences.

Resident: a block is a hit only along the tree path from the root: the prefix scan walks
the tree (``resident(b)`` advances a probe cursor that ``hit_limit`` resets; it touches
nothing). ``resident_blocks()`` are the ids present anywhere in the tree;
``size()`` is the number of pages in the tree.

A request with prompt length ``L`` (``P = block_size``, ``pages = ceil(L / P)``):

1. Hit limit: SGLang matches at most ``L - 1`` tokens, page-aligned, so at most
   ``floor((L - 1) / P)`` blocks hit (and never more than the request has).
2. Match (``match_prefix``): walk the hit blocks from the root; the root and every node
   on the path get ``last_access = now``. A match ending inside a node splits it there:
   a new node takes the matched part, the old node keeps the rest (and keeps its
   ``last_access = now``, from the match).
3. Lock the matched path (``inc_lock_ref``): locked nodes are never evicted.
4. Allocate ``pages - hits`` pages (the partial tail page included). SGLang asks the
   allocator for ``L - hits*P`` tokens plus one page of slack when ``P > 1``
   (``alloc_paged_token_slots_extend``: "assume each request needs a new page"), and
   evicts the shortfall: ``need = pages - hits + (1 if P > 1 else 0) - free`` pages,
   where ``free = capacity`` minus the pages in the tree and those running requests hold
   outside it. Eviction (``evict``) pops unlocked leaves, least recently accessed first,
   and frees each whole (all its pages: possibly more than needed) until at least ``need``
   pages are freed or nothing is evictable; a parent left childless and unlocked becomes
   a leaf and joins the candidates.
5. Insert (``cache_finished_req`` / ``checkpoint``: ``insert`` then a re-match of the
   inserted key): the prompt's full pages, the first ``min(len(hash_ids), floor(L / P))``
   blocks, go into the tree; pages already there are shared (SGLang frees the request's
   duplicates), a divergence inside a node splits it (the tail part keeps the insert's
   time), the rest becomes a new leaf. The partial tail page is never inserted. Every
   node on the inserted path ends with ``last_access = now`` (the re-match).
   The inserted path is locked in place of the matched one (``checkpoint`` re-locks).
6. Release (``release_kv_cache(checkpoint=True)``): the checkpoint's insert and re-match
   touch the inserted path again (one stamp), it is unlocked, and the request's pages that
   are not in the tree are freed.

A request's start (``pin_request``) is steps 2 to 5, as SGLang runs them for a request that
goes on decoding (``checkpoint_kv_cache`` after its prefill); it holds its path and its
outside pages until its finish (``unpin_request``), step 6; a sequential replay does both at
once (the release's stamp then only renews stamps nothing has looked at since).

Time: SGLang stamps nodes with ``time.monotonic()``, read once per match or insert
(every node touched by that call gets the same stamp) and once per new node. kvreplay
uses a logical clock that ticks at the match, the insert and the re-match of each
request, and once at its release; stamps are then strictly ordered between requests, and
nodes sharing a stamp always lie on one root-to-leaf path, so at most one of them is a
leaf: LRU never meets a tie (node ids break one anyway).

A request with ``pages > capacity`` can never fit; SGLang refuses such prompts
(``validate_input_length``) before they reach the cache. kvreplay does the same: the
request hits nothing, touches nothing, and counts in ``rejected``.

Holds (pin): a running request holds its tree path by ``lock_ref`` and its pages outside the
tree (the partial tail) until its release. A locked node is never an eviction candidate
(SGLang keeps only unlocked childless nodes in ``evictable_leaves``): eviction skips it in
place and the least recent unlocked leaf goes. Admission is all or nothing: after locking
its match, a start's pages beyond the hits must fit in the pages no running request holds
(free, or evictable: ``capacity`` minus pages on locked paths minus pages held outside the
tree), else it is refused before anything is evicted or inserted (SGLang's ``PrefillAdder``
leaves it waiting; its match, stamps and split, stays, as SGLang matches waiting requests);
SGLang's admission also reserves decode tokens, which a trace does not have. ``held_count``:
pages on locked paths plus pages held outside the tree; a block id is held iff a locked page
holds it; ``everything_held``: the start last refused does not fit (with none waiting: every
page is held). Checked against the real RadixCache, page counts after every start and
finish, final tree and LRU order, by
tests/real_engines/test_radix_engine.py::test_overlapping_requests.

Eviction log (base.py): an evicted leaf's pages first to last, each block id when the last page
holding it anywhere in the tree goes (resident_blocks: the ids present in the tree).

Parameters: none (SGLang's default ``--radix-eviction-policy lru``).
Counters: ``admissions`` (pages inserted into the tree), ``evictions`` (pages freed by
eviction), ``evicted_nodes`` (leaves freed), ``node_splits``, ``rejected`` (requests
larger than the whole cache).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, namedtuple

import numpy as np

from ..hybrid.unified_radix import replay_groups
from .base import PolicySpec, ReferencePolicy, hold_arrays, meta_slots


def request_pages(input_length: int, block_size: int) -> int:
    """Pages a running request holds: ceil(L / P), its partial tail page included."""
    return -(-input_length // block_size)


def matchable_blocks(num_blocks: int, input_length: int, block_size: int) -> int:
    """SGLang matches at most L - 1 tokens, page-aligned: floor((L - 1) / P) blocks."""
    return min(num_blocks, max(input_length - 1, 0) // block_size)


def eviction_slack(block_size: int) -> int:
    """The extra page SGLang's paged allocator asks for per request (none when P == 1)."""
    return 1 if block_size > 1 else 0


class Node:
    """One radix tree node: a run of pages (block ids) under a parent."""

    __slots__ = ("id", "blocks", "parent", "children", "last_access", "lock_ref")

    def __init__(self, id, blocks, parent, last_access):
        self.id = id
        self.blocks = blocks  # list of block ids, one per page
        self.parent = parent
        self.children = {}  # first block id -> child Node
        self.last_access = last_access
        self.lock_ref = 0


class Radix(ReferencePolicy):
    """Reference radix tree: SGLang's RadixCache operations, one request at a time."""

    def __init__(self, capacity: int, trace=None):
        self.capacity = capacity
        self.clock = 0
        self.ids = itertools.count()
        self.root = Node(next(self.ids), [], None, 0)
        self.root.lock_ref = 1  # as in SGLang: the root is never evicted
        self.evictable_leaves = set()  # unlocked leaves (SGLang's evictable_leaves)
        self.tree_pages = 0
        self.page_count = Counter()  # block id -> pages holding it in the tree
        self.cursor = (self.root, 0)  # the prefix scan's position: node, pages of it matched
        self.protected = 0  # pages of locked nodes (SGLang's protected_size)
        self.outside = 0  # pages running requests hold outside the tree (their partial tails)
        self.waiting = None  # the last refused start: (its matched node, pages beyond its hits), until one is admitted
        self.stats = dict.fromkeys(("admissions", "evictions", "evicted_nodes", "node_splits", "rejected"), 0)

    # ---- the prefix scan: a walk down the tree that changes nothing ----

    def cached_blocks(self, num_blocks: int, input_length: int, block_size: int) -> int:
        """Its full pages: the partial tail page is never inserted (none when it is refused)."""
        if request_pages(input_length, block_size) > self.capacity:
            return 0
        return min(num_blocks, input_length // block_size)

    def hit_limit(self, num_blocks: int, input_length: int, block_size: int) -> int:
        self.cursor = (self.root, 0)
        if request_pages(input_length, block_size) > self.capacity:
            return 0  # refused (see access_request)
        return matchable_blocks(num_blocks, input_length, block_size)

    def resident(self, b) -> bool:
        """Is `b` the next page on the tree path the scan is following? Moves only the cursor."""
        node, offset = self.cursor
        if offset < len(node.blocks):
            if node.blocks[offset] != b:
                return False
            self.cursor = (node, offset + 1)
            return True
        child = node.children.get(b)
        if child is None:
            return False
        self.cursor = (child, 1)
        return True

    def access(self, b) -> None:
        raise NotImplementedError("radix works on whole requests: the driver calls access_request")

    # ---- one request ----

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        handles = self.pin_request(request, blocks, hits, input_length, block_size)
        self.unpin_request(request, blocks, input_length, block_size, handles)

    def pin_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> list:
        """Admit, prefill and checkpoint the request, keeping its path locked (steps 2 to 5).
        One handle per page it holds: the locked end node of its tree path for each full page,
        None for each page outside the tree. [] when rejected (too large) or refused."""
        pages = request_pages(input_length, block_size)
        if pages > self.capacity:
            self.stats["rejected"] += 1
            return []
        if pages == 0:
            return []
        self.clock += 1
        matched = self._match(blocks[:hits])
        self._lock(matched, +1)
        # Admission: the pages beyond the hits must fit in the pages no running request holds
        # (free, or evictable: unlocked tree pages).
        if pages - hits > self.capacity - self.protected - self.outside:
            self._lock(matched, -1)
            self.waiting = (matched, pages - hits)
            self.refuse()
            return []
        self.waiting = None
        free = self.capacity - self.tree_pages - self.outside
        need = pages - hits + eviction_slack(block_size) - free
        if need > 0:
            self._evict(need)
        self.clock += 1
        full = min(len(blocks), input_length // block_size)
        last = self._insert(blocks[:full])
        self.clock += 1
        self._stamp(last)  # the re-match of the inserted key touches its whole path
        self._lock(last, +1)
        self._lock(matched, -1)
        self.outside += pages - full
        return [last] * full + [None] * (pages - full)

    def unpin_request(self, request: int, blocks: list, input_length: int, block_size: int, handles: list) -> None:
        """Release (step 6): the final checkpoint touches the path again, then it is unlocked and
        the pages outside the tree are freed."""
        full = sum(h is not None for h in handles)
        self.outside -= len(handles) - full
        if full:
            self.clock += 1
            self._stamp(handles[0])
            self._lock(handles[0], -1)

    def _stamp(self, node):
        while node is not None:
            node.last_access = self.clock
            node = node.parent

    def _match(self, blocks):
        """SGLang's _match_prefix_helper over blocks that are all on the tree path."""
        node = self.root
        if not blocks:
            return node  # an empty key returns the root untouched
        node.last_access = self.clock
        i = 0
        while i < len(blocks) and blocks[i] in node.children:
            child = node.children[blocks[i]]
            child.last_access = self.clock
            n = common_prefix(child.blocks, blocks, i)
            if n < len(child.blocks):
                return self._split(child, n)
            node = child
            i += n
        return node

    def _split(self, child, n):
        """Cut `child` after n pages: a new node takes them, `child` keeps the rest and its identity."""
        self.stats["node_splits"] += 1
        new = Node(next(self.ids), child.blocks[:n], child.parent, self.clock)
        new.lock_ref = child.lock_ref
        child.blocks = child.blocks[n:]
        new.parent.children[new.blocks[0]] = new
        new.children[child.blocks[0]] = child
        child.parent = new
        return new

    def _insert(self, blocks):
        """SGLang's _insert_helper: walk, split at a divergence inside a node, add the rest as a leaf."""
        node = self.root
        node.last_access = self.clock
        i = 0
        while i < len(blocks) and blocks[i] in node.children:
            node = node.children[blocks[i]]
            node.last_access = self.clock
            n = common_prefix(node.blocks, blocks, i)
            i += n
            if n < len(node.blocks):
                node = self._split(node, n)
        if i < len(blocks):
            leaf = Node(next(self.ids), list(blocks[i:]), node, self.clock)
            node.children[leaf.blocks[0]] = leaf
            self.tree_pages += len(leaf.blocks)
            self.page_count.update(leaf.blocks)
            self.stats["admissions"] += len(leaf.blocks)
            self._update_leaf_status(node)
            self._update_leaf_status(leaf)
            node = leaf
        return node

    def _evict(self, need):
        """SGLang's evict: pop leaves by last access until `need` pages are freed; whole leaves only."""
        heap = [(leaf.last_access, leaf.id, leaf) for leaf in self.evictable_leaves]
        heapq.heapify(heap)
        freed = 0
        while freed < need and heap:
            _, _, leaf = heapq.heappop(heap)
            freed += len(leaf.blocks)
            parent = leaf.parent
            del parent.children[leaf.blocks[0]]
            self.evictable_leaves.discard(leaf)
            self.tree_pages -= len(leaf.blocks)
            for b in leaf.blocks:  # first to last; a block id goes with the last page holding it
                self.page_count[b] -= 1
                if self.page_count[b] == 0:
                    self.note_evicted(b)
            self.stats["evictions"] += len(leaf.blocks)
            self.stats["evicted_nodes"] += 1
            self._update_leaf_status(parent)
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.id, parent))

    def _lock(self, node, delta):
        """SGLang's inc_lock_ref / dec_lock_ref: the pages of a node that gets or loses its first
        lock become protected or evictable again."""
        while node is not self.root:
            if node.lock_ref == (0 if delta > 0 else 1):
                self.protected += delta * len(node.blocks)
            node.lock_ref += delta
            self._update_leaf_status(node)
            node = node.parent

    def _update_leaf_status(self, node):
        if node.lock_ref == 0 and not node.children:
            self.evictable_leaves.add(node)
        else:
            self.evictable_leaves.discard(node)

    # ---- reports ----

    def size(self) -> int:
        return self.tree_pages

    def resident_blocks(self):
        return [b for b, n in self.page_count.items() if n > 0]

    def counters(self) -> dict:
        return dict(self.stats)

    # ---- holds: the locks, read as the contract's pins (recounted from the tree) ----

    def _locked_nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.lock_ref > 0:
                yield node
                stack.extend(node.children.values())  # below an unlocked node nothing is locked

    @property
    def pins(self) -> dict:
        """Block id -> locked pages holding it."""
        out = Counter()
        for node in self._locked_nodes():
            out.update(node.blocks)
        return dict(out)

    def held(self, b) -> bool:
        return b in self.pins

    def held_count(self) -> int:
        """Pages running requests hold: on locked tree paths, and outside the tree."""
        return sum(len(node.blocks) for node in self._locked_nodes()) + self.outside

    def everything_held(self) -> bool:
        """Admission is all or nothing: True when the pages no running request holds are too
        few for the start last refused (its pages beyond the hits, plus the unlocked pages of its
        matched path, which it would lock); with no start waiting, when every page is held."""
        free = self.capacity - self.held_count()
        if self.waiting is None:
            return free <= 0
        node, demand = self.waiting
        while node is not self.root:
            if node.lock_ref == 0:
                demand += len(node.blocks)
            node = node.parent
        return demand > free


def common_prefix(node_blocks, blocks, start) -> int:
    """How many of node_blocks equal blocks[start:], from the first one."""
    n = 0
    limit = min(len(node_blocks), len(blocks) - start)
    while n < limit and node_blocks[n] == blocks[start + n]:
        n += 1
    return n


# ---- compiled engine ------------------------------------------------------------------------------
#
# Nodes and pages are bump-allocated and never reused, so nothing is freed or moved:
# - a request creates at most three nodes (a split in the match, a split in the insert,
#   a new leaf), so 3 * requests + 1 node slots suffice;
# - a new leaf copies its block ids to the end of an arena, and a node is a (start, length)
#   range of it; a split cuts the range in two in place. The arena never holds more than
#   the trace's block accesses.
# - children: an open-addressing hash table (linear probing, backward-shift deletion) from
#   (parent node, first block id) to the child, since one block id may start children of
#   many parents;
# - evictable leaves: a binary min-heap of (last_access, node) with lazy deletion: an entry
#   is live iff its node is alive, unlocked, childless and still has that last_access.
#   `pushed` records each node's newest entry so a live entry is never pushed twice; a
#   full heap is compacted in place (it holds at least twice the live-node bound).

ROOT = 0
# meta slots
META = meta_slots("radix")  # the meta array's slots, by the names radix.c gives them
CAPACITY, CLOCK, NUM_NODES, ARENA_TOP, TREE_PAGES, HEAP_SIZE, CURSOR_NODE, CURSOR_OFFSET = META.CAPACITY, META.CLOCK, META.NUM_NODES, META.ARENA_TOP, META.TREE_PAGES, META.HEAP_SIZE, META.CURSOR_NODE, META.CURSOR_OFFSET
ADMISSIONS, EVICTIONS, EVICTED_NODES, NODE_SPLITS, REJECTED = META.ADMISSIONS, META.EVICTIONS, META.EVICTED_NODES, META.NODE_SPLITS, META.REJECTED
OUTSIDE = META.OUTSIDE  # pages running requests hold outside the tree (their partial tails)
META_SLOTS = len(META)
COUNTERS = (("admissions", ADMISSIONS), ("evictions", EVICTIONS), ("evicted_nodes", EVICTED_NODES),
            ("node_splits", NODE_SPLITS), ("rejected", REJECTED))


# The compiled operations over this state are radix.c.
RadixState = namedtuple("RadixState", [
    "node_start", "node_len", "node_parent", "node_children", "node_lock", "node_time", "node_alive", "pushed",
    "arena", "table_parent", "table_block", "table_node", "heap_time", "heap_node", "page_count", "meta",
    "handles",  # the sequential replay's pin_request handle: the locked node
    "pins", "hold",  # holds of running requests (base.hold_arrays)
])


def make_state(capacity: int, trace) -> RadixState:
    max_nodes = 3 * len(trace) + 1
    live_nodes = min(capacity, max_nodes) + 1  # a live non-root node holds >= 1 of <= capacity pages
    table_size = 1 << max(4, int(2 * live_nodes).bit_length())  # load factor <= 1/2
    heap_size = 2 * live_nodes + 16
    meta = np.zeros(META_SLOTS, dtype=np.int64)
    meta[CAPACITY] = capacity
    meta[NUM_NODES] = 1  # the root
    node_lock = np.zeros(max_nodes, dtype=np.int32)
    node_lock[ROOT] = 1
    node_alive = np.zeros(max_nodes, dtype=np.int8)
    node_alive[ROOT] = 1
    return RadixState(
        node_start=np.zeros(max_nodes, dtype=np.int64),
        node_len=np.zeros(max_nodes, dtype=np.int32),
        node_parent=np.full(max_nodes, -1, dtype=np.int32),
        node_children=np.zeros(max_nodes, dtype=np.int32),
        node_lock=node_lock,
        node_time=np.zeros(max_nodes, dtype=np.int64),
        node_alive=node_alive,
        pushed=np.full(max_nodes, -1, dtype=np.int64),
        arena=np.zeros(max(1, trace.num_accesses), dtype=np.int32),
        table_parent=np.full(table_size, -1, dtype=np.int32),
        table_block=np.zeros(table_size, dtype=np.int32),
        table_node=np.zeros(table_size, dtype=np.int32),
        heap_time=np.zeros(heap_size, dtype=np.int64),
        heap_node=np.zeros(heap_size, dtype=np.int32),
        page_count=np.zeros(trace.num_blocks, dtype=np.int32),
        meta=meta,
        handles=np.zeros(1, dtype=np.int64),
        **hold_arrays(trace.num_blocks),
    )


def read_state(state: RadixState) -> tuple[int, dict]:
    m = state.meta
    return int(m[TREE_PAGES]), {name: int(m[slot]) for name, slot in COUNTERS}


def resident_mask(state: RadixState) -> np.ndarray:
    return state.page_count > 0


# -- children table --


# -- heap of evictable leaves --


# -- tree operations --


LOCK, UNLOCK = np.int64(1), np.int64(-1)  # _lock_path's delta


POLICY = PolicySpec(
    name="radix",
    native="radix",
    summary="SGLang RadixCache: radix tree of pages, whole-leaf LRU eviction, locked running prefix (SGLang 0.5.23)",
    reference=Radix,
    make_state=make_state,
    read_state=read_state,
    resident_mask=resident_mask,
    request_level=True,
    sized_per_call=True,
    layout="sglang",
    below_capacity="SGLang evicts whole leaves, often more pages than a request needs",
    replay_groups=replay_groups,
)
