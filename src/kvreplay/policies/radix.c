/* SGLang's RadixCache, compiled (the rules, the reference engine and the numba engine: radix.py).
 *
 * Nodes and pages are bump-allocated and never reused: a node is a (start, length) range of the
 * arena of block ids; children are an open-addressing table from (parent, first block id) to the
 * child (linear probing, backward-shift deletion); evictable leaves are a min-heap of
 * (last_access, node) with lazy deletion (`pushed`: each node's newest entry). The prefix scan
 * walks the tree with a cursor in meta that hit_limit resets and pin_request continues from. */
#include "../include/policy.h"

#define FIELDS(F)                                                                                        \
    F(i64, node_start) F(i32, node_len) F(i32, node_parent) F(i32, node_children) F(i32, node_lock)     \
    F(i64, node_time) F(i8, node_alive) F(i64, pushed) F(i32, arena) F(i32, table_parent)               \
    F(i32, table_block) F(i32, table_node) F(i64, heap_time) F(i32, heap_node) F(i32, page_count)       \
    F(i64, meta) F(i64, handles)
#define SLOTS(S)                                                                                         \
    S(CAPACITY) S(CLOCK) S(NUM_NODES) S(ARENA_TOP) S(TREE_PAGES) S(HEAP_SIZE) S(CURSOR_NODE)            \
    S(CURSOR_OFFSET) S(ADMISSIONS) S(EVICTIONS) S(EVICTED_NODES) S(NODE_SPLITS) S(REJECTED) S(OUTSIDE)
KV_STATE(Radix, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };
enum { ROOT = 0 };

/* -- children table -- */

static inline i64 radix_slot(const Radix *st, i64 parent, i64 block) {
    i64 mask = st->table_parent_n - 1;
    return ((parent * 73856093) ^ (block * 19349663)) & mask;
}

/* The child of `parent` whose first page is `block`, or -1. */
static inline i64 radix_child(const Radix *st, i64 parent, i64 block) {
    const i32 *restrict tp = st->table_parent, *restrict tb = st->table_block;
    i64 mask = st->table_parent_n - 1;
    i64 i = radix_slot(st, parent, block);
    while (tp[i] >= 0) {
        if (tp[i] == parent && tb[i] == block) return st->table_node[i];
        i = (i + 1) & mask;
    }
    return -1;
}

/* Map (parent, block) to node, replacing an existing entry. */
static void radix_set_child(Radix *st, i64 parent, i64 block, i64 node) {
    i64 mask = st->table_parent_n - 1;
    i64 i = radix_slot(st, parent, block);
    while (st->table_parent[i] >= 0) {
        if (st->table_parent[i] == parent && st->table_block[i] == block) {
            st->table_node[i] = (i32)node;
            return;
        }
        i = (i + 1) & mask;
    }
    st->table_parent[i] = (i32)parent;
    st->table_block[i] = (i32)block;
    st->table_node[i] = (i32)node;
}

/* Delete (parent, block); shift later entries of the probe run back into the hole. */
static void radix_remove_child(Radix *st, i64 parent, i64 block) {
    i32 *restrict tp = st->table_parent, *restrict tb = st->table_block, *restrict tn = st->table_node;
    i64 mask = st->table_parent_n - 1;
    i64 i = radix_slot(st, parent, block);
    while (!(tp[i] == parent && tb[i] == block)) i = (i + 1) & mask;
    i64 hole = i;
    i64 j = (i + 1) & mask;
    while (tp[j] >= 0) {
        i64 home = radix_slot(st, tp[j], tb[j]);
        /* Move j into the hole unless its home lies cyclically in (hole, j]. */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            tp[hole] = tp[j];
            tb[hole] = tb[j];
            tn[hole] = tn[j];
            hole = j;
        }
        j = (j + 1) & mask;
    }
    tp[hole] = -1;
}

/* -- heap of evictable leaves -- */

static inline int radix_before(const Radix *st, i64 a, i64 b) {
    i64 ta = st->heap_time[a], tb = st->heap_time[b];
    return ta < tb || (ta == tb && st->heap_node[a] < st->heap_node[b]);
}

static inline void radix_swap(Radix *st, i64 a, i64 b) {
    i64 t = st->heap_time[a];
    i32 n = st->heap_node[a];
    st->heap_time[a] = st->heap_time[b];
    st->heap_node[a] = st->heap_node[b];
    st->heap_time[b] = t;
    st->heap_node[b] = n;
}

static void radix_sift_down(Radix *st, i64 i, i64 size) {
    for (;;) {
        i64 left = 2 * i + 1;
        if (left >= size) return;
        i64 best = left;
        if (left + 1 < size && radix_before(st, left + 1, left)) best = left + 1;
        if (!radix_before(st, best, i)) return;
        radix_swap(st, i, best);
        i = best;
    }
}

static inline int radix_evictable(const Radix *st, i64 node) {
    return st->node_alive[node] != 0 && st->node_lock[node] == 0 && st->node_children[node] == 0;
}

static inline int radix_live_entry(const Radix *st, i64 i) {
    i64 node = st->heap_node[i];
    return radix_evictable(st, node) && st->node_time[node] == st->heap_time[i];
}

/* Drop dead entries in place and re-heapify. */
static void radix_compact_heap(Radix *st) {
    i64 *m = st->meta;
    i64 size = m[HEAP_SIZE];
    i64 kept = 0;
    for (i64 i = 0; i < size; i++) {
        if (radix_live_entry(st, i)) {
            st->heap_time[kept] = st->heap_time[i];
            st->heap_node[kept] = st->heap_node[i];
            kept++;
        } else if (st->pushed[st->heap_node[i]] == st->heap_time[i]) {
            st->pushed[st->heap_node[i]] = -1;
        }
    }
    m[HEAP_SIZE] = kept;
    for (i64 i = kept / 2 - 1; i >= 0; i--) radix_sift_down(st, i, kept);
}

static void radix_push_if_evictable(Radix *st, i64 node) {
    if (!radix_evictable(st, node) || st->pushed[node] == st->node_time[node]) return;
    i64 *m = st->meta;
    if (m[HEAP_SIZE] == st->heap_time_n) radix_compact_heap(st);
    i64 i = m[HEAP_SIZE];
    m[HEAP_SIZE] = i + 1;
    st->heap_time[i] = st->node_time[node];
    st->heap_node[i] = (i32)node;
    st->pushed[node] = st->node_time[node];
    while (i > 0) {
        i64 parent = (i - 1) / 2;
        if (!radix_before(st, i, parent)) break;
        radix_swap(st, i, parent);
        i = parent;
    }
}

/* The evictable leaf with the oldest last_access (ties: lowest id), or -1. */
static i64 radix_pop_least_recent(Radix *st) {
    i64 *m = st->meta;
    while (m[HEAP_SIZE] > 0) {
        int live = radix_live_entry(st, 0);
        i64 node = st->heap_node[0], time = st->heap_time[0];
        i64 size = m[HEAP_SIZE] - 1;
        m[HEAP_SIZE] = size;
        st->heap_time[0] = st->heap_time[size];
        st->heap_node[0] = st->heap_node[size];
        radix_sift_down(st, 0, size);
        if (st->pushed[node] == time) st->pushed[node] = -1;
        if (live) return node;
    }
    return -1;
}

/* -- tree operations -- */

static i64 radix_new_node(Radix *st, i64 start, i64 length, i64 parent) {
    i64 *m = st->meta;
    i64 node = m[NUM_NODES];
    m[NUM_NODES] = node + 1;
    st->node_start[node] = start;
    st->node_len[node] = (i32)length;
    st->node_parent[node] = (i32)parent;
    st->node_children[node] = 0;
    st->node_lock[node] = 0;
    st->node_time[node] = m[CLOCK];
    st->node_alive[node] = 1;
    return node;
}

/* Cut `child` after n pages; the new node takes them, `child` keeps the rest (and its id). */
static i64 radix_split(Radix *st, i64 child, i64 n) {
    st->meta[NODE_SPLITS] += 1;
    i64 parent = st->node_parent[child];
    i64 start = st->node_start[child];
    i64 new = radix_new_node(st, start, n, parent);
    st->node_lock[new] = st->node_lock[child];
    st->node_children[new] = 1;
    st->node_start[child] = start + n;
    st->node_len[child] -= (i32)n;
    st->node_parent[child] = (i32)new;
    radix_set_child(st, parent, st->arena[start], new);
    radix_set_child(st, new, st->arena[start + n], child);
    return new;
}

static void radix_evict(Radix *st, i64 need) {
    i64 *m = st->meta;
    i64 freed = 0;
    while (freed < need) {
        i64 leaf = radix_pop_least_recent(st);
        if (leaf < 0) return;
        i64 length = st->node_len[leaf];
        i64 start = st->node_start[leaf];
        i64 parent = st->node_parent[leaf];
        freed += length;
        radix_remove_child(st, parent, st->arena[start]);
        st->node_children[parent] -= 1;
        st->node_alive[leaf] = 0;
        const i32 *arena = st->arena;
        i32 *page_count = st->page_count;
        for (i64 j = start; j < start + length; j++) { /* first to last; a block id goes with its last page */
            i64 b = arena[j];
            if (b < 0) continue; /* a page of one request's own (radix_checkpoint) */
            page_count[b] -= 1;
            if (page_count[b] == 0) kv_log_eviction(&st->h, b);
        }
        m[TREE_PAGES] -= length;
        m[EVICTIONS] += length;
        m[EVICTED_NODES] += 1;
        radix_push_if_evictable(st, parent); /* a childless unlocked parent is a leaf now (never the root) */
    }
}

/* Follow blocks[start:end] from the root (_match_prefix_helper): every node entered takes the
 * clock, and a node the match ends inside is split there. Returns the node where the match ends;
 * *reached: the position after it. */
static i64 radix_walk(Radix *st, const i32 *blocks, i64 start, i64 end, i64 *reached) {
    i64 clock = st->meta[CLOCK];
    i64 node = ROOT;
    st->node_time[ROOT] = clock;
    i64 i = start;
    while (i < end) {
        i64 child = radix_child(st, node, blocks[i]);
        if (child < 0) break;
        st->node_time[child] = clock;
        i64 cstart = st->node_start[child], clen = st->node_len[child];
        const i32 *arena = st->arena;
        i64 n = 1; /* the first page matched through the table */
        while (n < clen && i + n < end && arena[cstart + n] == blocks[i + n]) n++;
        i += n;
        if (n < clen) {
            node = radix_split(st, child, n);
            radix_push_if_evictable(st, child); /* the cut-off tail keeps the insert's time */
        } else {
            node = child;
        }
    }
    *reached = i;
    return node;
}

/* Insert blocks[start:end] from the root; return the node where the path ends. */
static i64 radix_insert(Radix *st, const i32 *blocks, i64 start, i64 end) {
    i64 *m = st->meta;
    i64 i;
    i64 node = radix_walk(st, blocks, start, end, &i);
    if (i < end) {
        i64 top = m[ARENA_TOP];
        i32 *restrict arena = st->arena;
        i32 *restrict page_count = st->page_count;
        for (i64 j = i; j < end; j++) {
            arena[top + j - i] = blocks[j];
            if (blocks[j] >= 0) page_count[blocks[j]] += 1; /* (a negative id: radix_checkpoint) */
        }
        m[ARENA_TOP] = top + end - i;
        i64 leaf = radix_new_node(st, top, end - i, node);
        st->node_children[node] += 1;
        radix_set_child(st, node, blocks[i], leaf);
        m[TREE_PAGES] += end - i;
        m[ADMISSIONS] += end - i;
        node = leaf;
    }
    return node;
}

static inline i64 radix_hit_limit(Radix *st, i64 num_blocks, i64 input_length, i64 block_size) {
    i64 *m = st->meta;
    m[CURSOR_NODE] = ROOT;
    m[CURSOR_OFFSET] = 0;
    if ((input_length + block_size - 1) / block_size > m[CAPACITY]) return 0;
    i64 limit = kv_max(input_length - 1, 0) / block_size;
    return kv_min(num_blocks, limit);
}

/* Is `b` the next page on the tree path the scan is following? Moves only the cursor. */
static inline int radix_resident(Radix *st, i64 b) {
    i64 *m = st->meta;
    i64 node = m[CURSOR_NODE], offset = m[CURSOR_OFFSET];
    if (offset < st->node_len[node]) {
        if (st->arena[st->node_start[node] + offset] != b) return 0;
        m[CURSOR_OFFSET] = offset + 1;
        return 1;
    }
    i64 child = radix_child(st, node, b);
    if (child < 0) return 0;
    m[CURSOR_NODE] = child;
    m[CURSOR_OFFSET] = 1;
    return 1;
}

/* inc_lock_ref (delta 1) / dec_lock_ref (-1) from node up to the root; a node's pages are held
 * while it is locked. */
static void radix_lock_path(Radix *st, i64 node, i32 delta) {
    i64 *hold = st->h.hold;
    i32 *restrict lock = st->node_lock;
    const i32 *restrict len = st->node_len, *restrict parent = st->node_parent;
    while (node != ROOT) {
        if (lock[node] == 0) hold[HELD] += len[node];
        lock[node] += delta;
        if (lock[node] == 0) hold[HELD] -= len[node];
        node = parent[node];
    }
}

/* A match of the key ending at node: node and its ancestors get last_access = now. */
static void radix_stamp_path(Radix *st, i64 node) {
    i64 clock = st->meta[CLOCK];
    i64 *restrict time = st->node_time;
    const i32 *restrict parent = st->node_parent;
    while (node >= 0) {
        time[node] = clock;
        node = parent[node];
    }
}

/* The node the scan before this call matched, split where the match ends (the cut-off tail keeps
 * the match's time, m[CLOCK]); without hits, the root (a decode page is pinned without a scan: the
 * cursor is then a later scan's, of another request). */
static i64 radix_split_at_cursor(Radix *st, i64 hits) {
    i64 *m = st->meta;
    i64 matched = hits > 0 ? m[CURSOR_NODE] : ROOT;
    if (hits > 0 && m[CURSOR_OFFSET] < st->node_len[matched]) {
        st->node_time[matched] = m[CLOCK];
        i64 tail = matched;
        matched = radix_split(st, tail, m[CURSOR_OFFSET]);
        radix_push_if_evictable(st, tail);
    }
    return matched;
}

/* Admit one request and keep its path locked; handles[base] = the locked node. The driver's scan
 * has just left the cursor after the `hits` matched pages. */
static i64 radix_pin_request(Radix *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                             i64 input_length, i64 block_size, i64 *handles, i64 base) {
    (void)request;
    i64 *m = st->meta;
    i64 pages = (input_length + block_size - 1) / block_size;
    if (pages > m[CAPACITY]) {
        m[REJECTED] += 1;
        return 0;
    }
    if (pages == 0) return 0;
    /* Match: split where the match ends; the cut-off tail keeps the match's time. SGLang also
     * stamps the matched path here, but an admitted request keeps that path locked until the
     * re-match below stamps it again, so no eviction can see those stamps: they are skipped (and
     * applied only when the start is refused). */
    m[CLOCK] += 1;
    i64 matched = radix_split_at_cursor(st, hits);
    /* Lock the matched path; admit if the rest fits beside what running requests hold. */
    radix_lock_path(st, matched, 1);
    if (pages - hits > m[CAPACITY] - st->h.hold[HELD]) {
        if (hits > 0) radix_stamp_path(st, matched);
        radix_lock_path(st, matched, -1);
        radix_push_if_evictable(st, matched);
        kv_refuse(&st->h);
        return 0;
    }
    /* Evict the allocator's shortfall. */
    i64 slack = block_size > 1 ? 1 : 0;
    i64 need = pages - hits + slack - (m[CAPACITY] - m[TREE_PAGES] - m[OUTSIDE]);
    if (need > 0) radix_evict(st, need);
    /* Insert the full pages, re-touch the inserted path, lock it instead of the matched one. */
    m[CLOCK] += 1;
    i64 full = kv_min(end - start, input_length / block_size);
    i64 last = radix_insert(st, blocks, start, start + full);
    m[CLOCK] += 1;
    radix_stamp_path(st, last);
    radix_lock_path(st, last, 1);
    radix_lock_path(st, matched, -1);
    m[OUTSIDE] += pages - full;
    st->h.hold[HELD] += pages - full;
    handles[base] = last;
    return pages;
}

/* Release: touch the path again (the final checkpoint), unlock it, free the outside pages. */
static void radix_unpin_request(Radix *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 input_length,
                                i64 block_size, const i64 *handles, i64 base, i64 n) {
    (void)request; (void)blocks;
    if (n == 0) return;
    i64 *m = st->meta;
    i64 full = kv_min(end - start, input_length / block_size);
    m[OUTSIDE] -= n - full;
    st->h.hold[HELD] -= n - full;
    if (full > 0) {
        i64 last = handles[base];
        m[CLOCK] += 1;
        radix_stamp_path(st, last);
        radix_lock_path(st, last, -1);
        radix_push_if_evictable(st, last); /* the only node of the path that can be a leaf */
    }
}

static inline void radix_access_request(Radix *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                                        i64 input_length, i64 block_size) {
    i64 n = radix_pin_request(st, request, blocks, start, end, hits, input_length, block_size, st->handles, 0);
    radix_unpin_request(st, request, blocks, start, end, input_length, block_size, st->handles, 0, n);
}

/* in_hbm: is block b anywhere in the tree (resident() follows one path) */
static inline int radix_in_hbm(Radix *st, i64 b) { return st->page_count[b] > 0; }

/* a request caches its full blocks only: never the prompt's partial tail */
static i64 radix_cached_blocks(void *st, i64 num_blocks, i64 input_length, i64 block_size) {
    if (kv_ceil_div(input_length, block_size) > ((Radix *)st)->meta[CAPACITY]) return 0;  /* refused */
    return kv_min(num_blocks, input_length / block_size);
}

/* match_prefix of a request that waits (SGLang matches the waiting queue to sort it, and touches
 * it now and then: schedule_policy.py calc_priority): its path is stamped, split where the match
 * ends; returns the pages matched, *new_nodes the nodes the split made. */
static i64 radix_touch_prefix(void *vst, const i32 *blocks, i64 start, i64 n, i64 *new_nodes) {
    Radix *st = (Radix *)vst;
    i64 *m = st->meta, nodes = m[NUM_NODES], reached;
    m[CLOCK] += 1;
    i64 node = radix_walk(st, blocks, start, start + n, &reached);
    radix_push_if_evictable(st, node);  /* a leaf it ends on has a new time */
    *new_nodes = m[NUM_NODES] - nodes;
    return reached - start;
}

/* The pages of the path the last scan matched that no request locks (SGLang's evictable pages of
 * it): locks run from a node up to the root, so they are the path's unlocked end. */
static i64 radix_unheld_prefix(void *vst, const i32 *blocks, i64 start, i64 k) {
    (void)blocks; (void)start;
    const Radix *st = (const Radix *)vst;
    if (k == 0) return 0;
    i64 node = st->meta[CURSOR_NODE], n = 0;
    if (node != ROOT && st->node_lock[node] == 0) {
        n += st->meta[CURSOR_OFFSET];
        node = st->node_parent[node];
        while (node != ROOT && st->node_lock[node] == 0) {
            n += st->node_len[node];
            node = st->node_parent[node];
        }
    }
    return n;
}

/* evict_to_free_tokens: the allocator's shortfall of `blocks` free pages (pages a request took of
 * its own and not yet found room for count as taken: free may be negative until then) */
static void radix_evict_to_free(void *vst, i64 blocks) {
    Radix *st = (Radix *)vst;
    i64 *m = st->meta;
    i64 need = blocks - (m[CAPACITY] - m[TREE_PAGES] - m[OUTSIDE]);
    if (need > 0) radix_evict(st, need);
}

/* ---- the SGLang scheduler's own use of its tree (serving/kernel/requests.c): a request holds its
 * matched path locked and its other pages in its own row, outside the tree, until a checkpoint
 * puts the computed ones in (mem_cache/common.py checkpoint_kv_cache, release_kv_cache) ---- */

/* Admit a request whose scan has just matched `hits` pages (the cursor is after them): its match
 * is split where it ends, stamped and locked (handles[base]: the node); it takes `pages` - hits
 * pages of its own (the caller evicts the allocator's shortfall: evict_to_free). 0 (nothing held,
 * the path stamped) when they can never fit beside what is held. */
static i64 radix_hold_request(void *vst, i64 hits, i64 pages, i64 *handles, i64 base) {
    Radix *st = (Radix *)vst;
    i64 *m = st->meta;
    m[CLOCK] += 1;
    i64 matched = radix_split_at_cursor(st, hits);
    if (hits > 0) radix_stamp_path(st, matched);
    radix_lock_path(st, matched, 1);
    if (pages - hits > m[CAPACITY] - st->h.hold[HELD]) {
        radix_lock_path(st, matched, -1);
        radix_push_if_evictable(st, matched);
        kv_refuse(&st->h);
        return 0;
    }
    m[OUTSIDE] += pages - hits;
    st->h.hold[HELD] += pages - hits;
    handles[base] = matched;
    return pages;
}

/* n more pages of a running request's own (a chunk, a decode page; the caller evicts the
 * shortfall): 0 when they do not fit beside what is held */
static int radix_hold_pages(void *vst, i64 n) {
    Radix *st = (Radix *)vst;
    i64 *m = st->meta;
    if (n > m[CAPACITY] - st->h.hold[HELD]) {
        kv_refuse(&st->h);
        return 0;
    }
    m[OUTSIDE] += n;
    st->h.hold[HELD] += n;
    return 1;
}

/* n pages a request held outside the tree are free again */
static void radix_free_pages(void *vst, i64 n) {
    Radix *st = (Radix *)vst;
    st->meta[OUTSIDE] -= n;
    st->h.hold[HELD] -= n;
}

/* A checkpoint (radix_cache.py checkpoint, _insert_cache): the request's key ids[0:n] (its
 * computed whole pages; a negative id is a page no other request has: outside page_count) is
 * inserted, its path stamped, and the request's lock moves from handles[base] to the key's end
 * node. The caller frees the pages of its own that the tree now has (duplicates too). */
static void radix_checkpoint(void *vst, const i32 *ids, i64 n, i64 *handles, i64 base) {
    Radix *st = (Radix *)vst;
    i64 *m = st->meta;
    m[CLOCK] += 1;
    i64 last = radix_insert(st, ids, 0, n);
    m[CLOCK] += 1;
    radix_stamp_path(st, last);
    radix_lock_path(st, last, 1);
    i64 old = handles[base];
    radix_lock_path(st, old, -1);
    radix_push_if_evictable(st, old);
    handles[base] = last;
}

/* the request's lock on its path is dropped (release_kv_cache's unlock) */
static void radix_release(void *vst, const i64 *handles, i64 base) {
    Radix *st = (Radix *)vst;
    i64 node = handles[base];
    radix_lock_path(st, node, -1);
    radix_push_if_evictable(st, node);
}

static const KvTree radix_tree = {radix_unheld_prefix, radix_touch_prefix,  radix_evict_to_free, radix_hold_request,
                                  radix_hold_pages,    radix_free_pages,    radix_checkpoint,    radix_release};

KV_REQUEST_POLICY(radix, Radix, KV_LAYOUT(FIELDS, SLOTS), radix_resident, radix_hit_limit, radix_access_request,
                  radix_pin_request, radix_unpin_request, radix_in_hbm, 0, NULL, radix_cached_blocks, &radix_tree)
