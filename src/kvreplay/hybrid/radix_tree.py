"""SGLang 0.5.23's radix tree of pages, the tree half of its UnifiedRadixCache (unified_radix.py
has the rules, with the SGLang sources the references below are to; its pools are pools.py's):
nodes with their per-component data and locks, the SWA and Mamba LRU lists, the clock, and the
tree's own operations, as SGLang's tree core (unified_cache/unified_tree_core.py) has them: match
with its component validators, split, lock and unlock. Inserting and evicting, which move pages
between the tree and the pools, are the cache's (unified_radix.py)."""

from __future__ import annotations

COUNTERS = ("admissions", "evictions", "swa_evictions", "mamba_evictions", "evicted_nodes", "node_splits",
            "rejected", "oversize_requests")
INF = float("inf")


class Node:
    """A radix tree node: a run of pages and, per component, its data and lock count."""

    __slots__ = ("key", "parent", "children", "time", "full_lock", "swa", "swa_lock", "swa_uuid", "mamba",
                 "mamba_lock", "serial")

    def __init__(self, key, parent, time, serial):
        self.key = key  # list of page keys (block ids)
        self.parent = parent
        self.children = {}  # first page -> child
        self.time = time  # last_access_time
        self.full_lock = 0
        self.swa = False  # live SWA KV (False: a tombstone, or no SWA component)
        self.swa_lock = 0
        self.swa_uuid = None  # the SWA lock boundary mark (components/swa.py:849-902)
        self.mamba = False  # holds a Mamba state
        self.mamba_lock = 0
        self.serial = serial


class LRU:
    """UnifiedLRUList (unified_tree_core.py:213-389): a doubly linked list, MRU first."""

    def __init__(self):
        self.head, self.tail = object(), object()
        self.next = {self.head: self.tail}
        self.prev = {self.tail: self.head}

    def __contains__(self, node):
        return node in self.next

    def __len__(self):
        return len(self.next) - 1

    def _link_after(self, a, node):
        b = self.next[a]
        self.next[a], self.prev[node], self.next[node], self.prev[b] = node, a, b, node

    def remove(self, node):
        a, b = self.prev.pop(node), self.next.pop(node)
        self.next[a], self.prev[b] = b, a

    def insert_mru(self, node):
        self._link_after(self.head, node)

    def insert_after(self, a, node):
        """`node` just colder than `a` (a split's new parent beside its child)."""
        self._link_after(a, node)

    def move_after(self, a, node):
        self.remove(node)
        self._link_after(a, node)

    def coldest_unlocked(self, locked):
        """get_lru_no_lock."""
        return self.warmer_unlocked(self.tail, locked)

    def warmer_unlocked(self, node, locked):
        """get_prev_no_lock: the next node towards MRU that `locked` says is free."""
        x = self.prev[node]
        while x is not self.head and locked(x):
            x = self.prev[x]
        return None if x is self.head else x

    def order(self):
        """MRU first."""
        out, x = [], self.next[self.head]
        while x is not self.tail:
            out.append(x)
            x = self.next[x]
        return out


class RadixTree:
    """UnifiedTreeCore's tree with FULL and SWA and / or MAMBA components: pages of P tokens, a
    sliding window of W tokens (has_swa)."""

    def __init__(self, P: int, W, has_swa: bool, has_mamba: bool):
        self.P, self.W, self.has_swa, self.has_mamba = P, W, has_swa, has_mamba
        self.clock = 0.0
        self.serials = 0
        self.uuids = 0
        self.root = self._node([], None)
        self.root.full_lock = self.root.swa_lock = self.root.mamba_lock = 1  # unified_tree_core.py:500-506
        self.swa_lru = LRU()
        self.mamba_lru = LRU()
        self.tree_pages = 0
        self.leaves = set()  # every node but the root without a child (kept at each insert and delete)
        self.stats = dict.fromkeys(COUNTERS, 0)

    # ---- small helpers ---------------------------------------------------------------------------

    def _tick(self) -> float:
        """get_and_increase_time_counter (components/base.py:161-165)."""
        t = self.clock
        self.clock += 1.0
        return t

    def _node(self, key, parent):
        node = Node(key, parent, self._tick(), self.serials)  # last_access_time ...
        self._tick()  # ... and creation_time, two reads (unified_tree_core.py:126-127)
        self.serials += 1
        return node

    def _ceil_page(self, tokens: int) -> int:
        return -(-tokens // self.P) * self.P

    def _evictable_leaf(self, node) -> bool:
        """_is_device_leaf (unified_tree_core.py:2348-2364): no lock in any component, no child."""
        return (node is not self.root and not node.children and node.full_lock == 0 and node.swa_lock == 0
                and node.mamba_lock == 0)

    def resident_count(self) -> int:
        """Pages in the tree (each holds its full-attention KV)."""
        return self.tree_pages

    def swa_resident_count(self) -> int:
        """Pages of the tree with live SWA KV."""
        return sum(len(n.key) for n in self.swa_lru.order())

    def mamba_state_count(self) -> int:
        return len(self.mamba_lru)

    def nodes(self):
        """Every node but the root, depth first, with its start position in pages."""
        stack = [(c, 0) for c in self.root.children.values()]
        while stack:
            node, start = stack.pop()
            yield node, start
            stack.extend((c, start + len(node.key)) for c in node.children.values())

    # ---- the tree: split, match, insert ----------------------------------------------------------

    def _split(self, child, k: int):
        """_split_node (unified_tree_core.py:1467-1530): a new node takes child's first k pages."""
        self.stats["node_splits"] += 1
        new = self._node(child.key[:k], child.parent)
        new.full_lock = child.full_lock  # full.py:150 ...
        new.swa_lock, new.swa, new.swa_uuid = child.swa_lock, child.swa, child.swa_uuid  # swa.py:626-692
        child.swa_uuid = None  # the window boundary is the older edge: it moves up
        # Mamba: the new upper part has no state and no lock (mamba.py:322-332)
        child.key = child.key[k:]
        child.parent = new
        new.children = {child.key[0]: child}
        new.parent.children[new.key[0]] = new
        if new.swa:
            self.swa_lru.insert_after(child, new)  # beside its child, just colder
        child.time = self._tick()
        return new

    def _common(self, node_key, key, start, stop=None) -> int:
        """How many of node_key's pages equal key[start:stop], from the first (floored to pages:
        keys are pages already)."""
        n, limit = 0, min(len(node_key), (len(key) if stop is None else stop) - start)
        while n < limit and node_key[n] == key[start + n]:
            n += 1
        return n

    def _refresh_swa(self, node) -> None:
        """reset_node_and_window_ancestors_mru over W + P tokens (swa.py:332-355)."""
        prev, covered = self.swa_lru.head, 0
        while node is not self.root and covered < self.W + self.P:
            if node.swa:
                self.swa_lru.move_after(prev, node)
                prev = node
            covered += len(node.key) * self.P
            node = node.parent

    def _match(self, key):
        """(best node, hit pages, full-KV match pages): _match_prefix_helper and its post-processing."""
        if not key:
            return self.root, 0, 0  # an empty (page-aligned) key: the empty match, nothing touched
        P, W = self.P, self.W
        run = INF  # the SWA validator's state (swa.py:357-377)

        def acceptable(n) -> bool:
            nonlocal run
            ok = True
            if self.has_swa:
                if not n.swa:
                    run, ok = 0, False
                else:
                    run += len(n.key) * P
                    ok = run >= W
            if self.has_mamba and not n.mamba:
                ok = False
            return ok

        node, best, best_len, full_hit, pos = self.root, self.root, 0, 0, 0
        while pos < len(key) and key[pos] in node.children:
            child = node.children[key[pos]]
            m = self._common(child.key, key, pos)
            full_hit += m
            if m < len(child.key):
                child = self._split(child, m)
                if acceptable(child):
                    best, best_len = child, pos + m
                break
            node = child
            if acceptable(child):
                best, best_len = child, pos + m
            pos += m
        if self.has_swa:
            self._refresh_swa(best)
        if self.has_mamba and best.mamba:
            self.mamba_lru.move_after(self.mamba_lru.head, best)
        t = self._tick()  # _match_post_processor (unified_tree_core.py:1030-1034)
        n = best
        while n is not None:
            n.time = t
            t -= 0.00001
            n = n.parent
        return best, best_len, full_hit

    # ---- locks -------------------------------------------------------------------------------------

    def _lock(self, node):
        """inc_lock_ref (unified_tree_core.py:730-743): a receipt (node, SWA boundary uuid)."""
        n = node
        while n is not self.root:  # FULL: the path to the root
            n.full_lock += 1
            n = n.parent
        uuid = None
        if self.has_swa:  # SWA: the nodes covering the last W tokens, tombstones too
            n, covered = node, 0
            while n is not self.root and covered < self.W:
                n.swa_lock += 1
                covered += len(n.key) * self.P
                if covered >= self.W:
                    if n.swa_uuid is None:
                        self.uuids += 1
                        n.swa_uuid = self.uuids
                    uuid = n.swa_uuid
                n = n.parent
        if self.has_mamba and node is not self.root:  # MAMBA: the node itself
            node.mamba_lock += 1
        return node, uuid

    def _unlock(self, receipt) -> None:
        """dec_lock_ref (unified_tree_core.py:783-796)."""
        node, uuid = receipt
        if self.has_swa:  # swa.py:904-950: down to the boundary mark
            n = node
            while n is not self.root:
                n.swa_lock -= 1
                if uuid is not None and n.swa_uuid == uuid:
                    break
                n = n.parent
        if self.has_mamba and node is not self.root:
            node.mamba_lock -= 1
        n = node
        while n is not self.root:
            n.full_lock -= 1
            n = n.parent
