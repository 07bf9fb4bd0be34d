/* SGLang 0.5.23's UnifiedRadixCache (FULL with SWA and / or MAMBA), compiled. The rules, their
 * sources in SGLang's tree and the readable reference are in unified_radix.py; this file follows
 * the reference function by function, under the same names, and the differential test
 * (tests/policies/test_radix_hybrid_compiled.py) holds the two equal request by request.
 *
 * Layout: nodes live in one array whose deleted slots are reused (each node keeps SGLang's serial,
 * its creation order, for the eviction's tie-break); a node's key is a (start, length) range of a
 * key arena, compacted when full; children are an open-addressing table from (parent, first key)
 * to the child; the SWA and Mamba LRU lists are doubly linked through per-node links (MRU first);
 * the evictable leaves are a 4-ary heap. Times are doubles, as SGLang's (a match stamps t,
 * t - 1e-5, ... up the path), so a parent is always older than its children. Keys are i64: a
 * trace's block ids, and past them one id per page a prompt has no id for (a page nobody shares). */
#include <stdlib.h>
#include <string.h>

#include "unified_radix.h"

enum { C_ADMISSIONS, C_EVICTIONS, C_SWA_EVICTIONS, C_MAMBA_EVICTIONS, C_EVICTED_NODES, C_NODE_SPLITS,
       C_REJECTED, C_OVERSIZE, NUM_COUNTERS = RH_COUNTERS };
enum { FULL, SWA, MAMBA };
enum { MAMBA_CHUNK_SIZE = 64, PING_PONG_SLOTS = 2, SWA_EVICTION_INTERVAL = 128, MAMBA_TRACK_INTERVAL = 256 };
#define NONE (-1)
#define ROOT 0
enum { SWA_LIST, MAMBA_LIST };

typedef RhNode Node;
typedef RhLru Lru;
typedef RhTree U;
typedef RhReq Req;

/* ---- memory ---------------------------------------------------------------------------------- */

static int grow(void **p, i64 n, size_t size) {
    void *q = realloc(*p, (size_t)n * size);
    if (q == NULL) return 0;
    *p = q;
    return 1;
}

static int grow_nodes(U *u) {
    i64 cap = u->node_cap ? 2 * u->node_cap : 1024;
    int ok = grow((void **)&u->n, cap, sizeof(Node)) && grow((void **)&u->dirty, cap, sizeof(i32));
    if (ok) u->node_cap = cap;
    return ok;
}

static void free_all(U *u) {
    void *ps[] = {u->n, u->heap, u->dirty, u->keys, u->table, u->path};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
}

/* ---- LRU lists (UnifiedLRUList: MRU first) ---------------------------------------------------- */

static void lru_remove(U *u, Lru *l, i32 x) {
    int w = l->which;
    i32 a = u->n[x].prev[w], b = u->n[x].next[w];
    if (a != NONE) u->n[a].next[w] = b; else l->first = b;
    if (b != NONE) u->n[b].prev[w] = a; else l->last = a;
    u->n[x].in[w] = 0;
}

/* link x just colder than a (a NONE: at the MRU end) */
static void lru_link_after(U *u, Lru *l, i32 a, i32 x) {
    int w = l->which;
    i32 b = a == NONE ? l->first : u->n[a].next[w];
    if (a == NONE) l->first = x; else u->n[a].next[w] = x;
    u->n[x].prev[w] = a;
    u->n[x].next[w] = b;
    if (b != NONE) u->n[b].prev[w] = x; else l->last = x;
    u->n[x].in[w] = 1;
}

static void lru_move_after(U *u, Lru *l, i32 a, i32 x) {
    lru_remove(u, l, x);
    lru_link_after(u, l, a, x);
}

static inline int locked_in(const U *u, int ct, i32 x) {
    return ct == SWA ? u->n[x].swa_lock > 0 : u->n[x].mamba_lock > 0;
}

/* get_prev_no_lock: from x (NONE: the LRU end itself) towards MRU, the first node not locked */
static i32 lru_warmer_unlocked(const U *u, const Lru *l, int ct, i32 x) {
    int w = l->which;
    i32 y = x == NONE ? l->last : u->n[x].prev[w];
    while (y != NONE && locked_in(u, ct, y)) y = u->n[y].prev[w];
    return y;
}

/* ---- children ---------------------------------------------------------------------- */

static inline i64 slot_of(const U *u, i64 parent, i64 key) {
    uint64_t h = (uint64_t)parent * 0x9E3779B97F4A7C15ull ^ (uint64_t)key * 0xC2B2AE3D27D4EB4Full;
    return (i64)((h ^ (h >> 29)) & (uint64_t)(u->tsize - 1));
}

static i32 child_of(const U *u, i64 parent, i64 key) {
    i64 mask = u->tsize - 1, i = slot_of(u, parent, key);
    const RhChild *t = u->table;
    while (t[i].parent != NONE) {
        if (t[i].parent == parent && t[i].key == key) return t[i].node;
        i = (i + 1) & mask;
    }
    return NONE;
}

static void table_put(U *u, i64 parent, i64 key, i32 node) {
    i64 mask = u->tsize - 1, i = slot_of(u, parent, key);
    RhChild *t = u->table;
    while (t[i].parent != NONE) {
        if (t[i].parent == parent && t[i].key == key) {
            t[i].node = node;
            return;
        }
        i = (i + 1) & mask;
    }
    t[i] = (RhChild){key, (i32)parent, node};
    u->tcount++;
}

static int table_resize(U *u, i64 size) {
    RhChild *old = u->table;
    i64 osize = u->tsize;
    u->table = malloc((size_t)size * sizeof(RhChild));
    if (!u->table) return 0;
    for (i64 i = 0; i < size; i++) u->table[i].parent = NONE;
    u->tsize = size;
    u->tcount = 0;
    for (i64 i = 0; i < osize; i++)
        if (old[i].parent != NONE) table_put(u, old[i].parent, old[i].key, old[i].node);
    free(old);
    return 1;
}

/* (parent, key) -> node, replacing an entry there; 0: out of memory */
static int set_child(U *u, i64 parent, i64 key, i32 node) {
    if (2 * (u->tcount + 1) > u->tsize && !table_resize(u, 2 * u->tsize)) return 0;
    table_put(u, parent, key, node);
    return 1;
}

static void remove_child(U *u, i64 parent, i64 key) {
    i64 mask = u->tsize - 1, i = slot_of(u, parent, key);
    RhChild *t = u->table;
    while (!(t[i].parent == parent && t[i].key == key)) i = (i + 1) & mask;
    i64 hole = i, j = (i + 1) & mask;
    while (t[j].parent != NONE) { /* backward shift: j moves into the hole unless its home is in (hole, j] */
        i64 home = slot_of(u, t[j].parent, t[j].key);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t[hole] = t[j];
            hole = j;
        }
        j = (j + 1) & mask;
    }
    t[hole].parent = NONE;
    u->tcount--;
}

/* ---- nodes --------------------------------------------------------------------------------------- */

static inline f64 tick(U *u) {
    f64 t = u->clock;
    u->clock += 1.0;
    return t;
}

/* x's time, locks or children changed: the next full eviction looks at it again */
static inline void mark(U *u, i32 x) {
    if (u->n[x].is_dirty) return;
    u->n[x].is_dirty = 1;
    u->dirty[u->ndirty++] = x;
}

static inline void set_time(U *u, i32 x, f64 t) {
    u->n[x].time = t;
    mark(u, x);
}

static inline i64 first_key(const U *u, i32 x) { return u->keys[u->n[x].kstart]; }

/* _node: last_access_time and creation_time, two reads of the clock; NONE when out of memory */
static i32 new_node(U *u, i64 kstart, i64 klen, i32 parent) {
    i32 x = u->free_nodes;
    if (x != NONE) {
        u->free_nodes = u->n[x].parent; /* (its is_dirty flag stays: it may be in the dirty list) */
    } else {
        if (u->nodes == u->node_cap && !grow_nodes(u)) return NONE;
        x = (i32)u->nodes++;
        u->n[x].is_dirty = 0;
    }
    u->n[x].serial = u->serials++;
    u->n[x].kstart = kstart;
    u->n[x].klen = (i32)klen;
    u->n[x].parent = parent;
    u->n[x].nchild = 0;
    u->n[x].full_lock = u->n[x].swa_lock = u->n[x].mamba_lock = 0;
    u->n[x].swa_uuid = 0;
    set_time(u, x, tick(u));
    tick(u);
    u->n[x].swa = u->n[x].mamba = 0;
    u->n[x].alive = 1;
    u->n[x].in[SWA_LIST] = u->n[x].in[MAMBA_LIST] = 0;
    return x;
}

/* _split_node: a new node takes child's first k pages (NONE: out of memory) */
static i32 split(U *u, i32 child, i64 k) {
    u->stats[C_NODE_SPLITS]++;
    i32 nw = new_node(u, u->n[child].kstart, k, u->n[child].parent);
    if (nw == NONE) return NONE;
    u->n[nw].full_lock = u->n[child].full_lock;
    u->n[nw].swa_lock = u->n[child].swa_lock;
    u->n[nw].swa = u->n[child].swa;
    u->n[nw].swa_uuid = u->n[child].swa_uuid;
    u->n[child].swa_uuid = 0; /* the window boundary is the older edge: it moves up */
    u->n[child].kstart += k;
    u->n[child].klen -= (i32)k;
    u->n[child].parent = nw;
    u->n[nw].nchild = 1;
    if (!set_child(u, nw, first_key(u, child), child)) return NONE;
    if (!set_child(u, u->n[nw].parent, first_key(u, nw), nw)) return NONE; /* replaces child there */
    if (u->n[nw].swa) lru_link_after(u, &u->swa_lru, child, nw);              /* beside its child, just colder */
    set_time(u, child, tick(u));
    return nw;
}

static inline int evictable_leaf(const U *u, i32 x) {
    return x != ROOT && u->n[x].nchild == 0 && u->n[x].full_lock == 0 && u->n[x].swa_lock == 0 && u->n[x].mamba_lock == 0;
}

/* how many of node x's pages equal key[start:stop] from its first */
static i64 common(const U *u, i32 x, const i64 *key, i64 start, i64 stop) {
    i64 n = 0, limit = kv_min(u->n[x].klen, stop - start);
    const i64 *k = u->keys + u->n[x].kstart;
    while (n < limit && k[n] == key[start + n]) n++;
    return n;
}

static void refresh_swa(U *u, i32 x) {
    i32 prev = NONE;
    i64 covered = 0;
    while (x != ROOT && covered < u->W + u->P) {
        if (u->n[x].swa) {
            lru_move_after(u, &u->swa_lru, prev, x);
            prev = x;
        }
        covered += u->n[x].klen * u->P;
        x = u->n[x].parent;
    }
}

/* ---- match and insert -------------------------------------------------------------------------------- */

typedef struct { i32 best; i64 hit, full_hit; } Match;

/* the SWA and Mamba validators' verdict on x (the SWA one keeps its run) */
static int acceptable(const U *u, i32 x, f64 *run) {
    int ok = 1;
    if (u->has_swa) {
        if (!u->n[x].swa) {
            *run = 0;
            ok = 0;
        } else {
            *run += (f64)u->n[x].klen * (f64)u->P;
            ok = *run >= (f64)u->W;
        }
    }
    if (u->has_mamba && !u->n[x].mamba) ok = 0;
    return ok;
}

static int match(U *u, const i64 *key, i64 len, Match *out) {
    out->best = ROOT;
    out->hit = out->full_hit = 0;
    if (len == 0) return 1;
    f64 run = 1e300; /* +inf */
    i32 node = ROOT;
    i64 pos = 0;
    while (pos < len) {
        i32 child = child_of(u, node, key[pos]);
        if (child == NONE) break;
        i64 m = common(u, child, key, pos, len);
        out->full_hit += m;
        if (m < u->n[child].klen) {
            child = split(u, child, m);
            if (child == NONE) return 0;
            if (acceptable(u, child, &run)) out->best = child, out->hit = pos + m;
            break;
        }
        node = child;
        if (acceptable(u, child, &run)) out->best = child, out->hit = pos + m;
        pos += m;
    }
    i32 best = out->best;
    if (u->has_swa) refresh_swa(u, best);
    if (u->has_mamba && u->n[best].mamba) lru_move_after(u, &u->mamba_lru, NONE, best);
    f64 t = tick(u);
    for (i32 x = best; x != NONE; x = u->n[x].parent) {
        set_time(u, x, t);
        t -= 0.00001;
    }
    return 1;
}

/* node's path below the root stamped top down, one tick each (0: out of memory) */
static int stamp_path(U *u, i32 node) {
    i64 depth = 0;
    for (i32 x = node; x != ROOT; x = u->n[x].parent) {
        if (depth == u->path_cap) {
            i64 cap = u->path_cap ? 2 * u->path_cap : 256;
            if (!grow((void **)&u->path, cap, sizeof(i32))) return 0;
            u->path_cap = cap;
        }
        u->path[depth++] = x;
    }
    while (depth > 0) set_time(u, u->path[--depth], tick(u));
    return 1;
}

/* room for `need` more keys at the arena's top: the live nodes' keys copied to a new arena, twice
 * their size and the need at least (0: out of memory) */
static int make_key_room(U *u, i64 need) {
    i64 cap = kv_max(kv_max(1024, u->key_cap), 2 * (u->key_live + need));
    i64 *keys = malloc((size_t)cap * sizeof(i64));
    if (keys == NULL) return 0;
    i64 top = 0;
    for (i64 x = 0; x < u->nodes; x++) {
        Node *v = &u->n[x];
        if (!v->alive) continue;
        memcpy(keys + top, u->keys + v->kstart, (size_t)v->klen * sizeof(i64));
        v->kstart = top;
        top += v->klen;
    }
    free(u->keys);
    u->keys = keys;
    u->key_top = top;
    u->key_cap = cap;
    return 1;
}

/* insert the request's first n pages: the target node (NONE: out of memory), *exist: a Mamba state
 * was there already */
static i32 insert(U *u, const Req *r, i64 n, int *exist) {
    const i64 *key = r->keys;
    i64 P = u->P, protected = r->protected / P, cursor = r->swa_cursor / P;
    set_time(u, ROOT, tick(u));
    *exist = 1;
    if (n == 0) return ROOT;
    i32 node = ROOT;
    i64 t = 0;
    if (r->lock_node != NONE && r->lock_node != ROOT && protected <= n) {
        /* the request's locked path is its first `protected` pages, whole nodes: the walk there only
         * stamps each node, top down; it goes up by parents instead of looking each child up */
        if (!stamp_path(u, r->lock_node)) return NONE;
        node = r->lock_node;
        t = protected;
    }
    while (t < n) {
        i32 child = child_of(u, node, key[t]);
        if (child == NONE) break;
        set_time(u, child, tick(u));
        i64 m = common(u, child, key, t, n);
        if (m < u->n[child].klen && (child = split(u, child, m)) == NONE) return NONE;
        i64 consumed = m;
        if (u->has_swa && protected < t + m && !u->n[child].swa) {
            i64 live = kv_max(t, cursor); /* a tombstone at positions >= the cursor is recovered */
            if (live < t + m) {
                if (live > t && split(u, child, live - t) == NONE) return NONE;
                u->full_free += t + m - live;
                u->n[child].swa = 1;
                u->swa_live += u->n[child].klen;
                if (u->n[child].swa_lock > 0) u->locked_swa += u->n[child].klen;
                lru_link_after(u, &u->swa_lru, NONE, child);
                consumed = live - t;
            }
        }
        i64 dup = kv_max(0, protected - t); /* the request's own pages there are duplicates */
        if (dup < consumed) {
            i64 lo = t + dup, hi = t + consumed;
            u->full_free += hi - lo;
            if (u->has_swa) u->swa_free += kv_max(0, hi - kv_max(lo, cursor));
        }
        node = child;
        t += m;
    }
    i32 leaf = NONE;
    if (t < n) { /* the rest is a new leaf */
        if (u->key_top + (n - t) > u->key_cap && !make_key_room(u, n - t)) return NONE;
        memcpy(u->keys + u->key_top, key + t, (size_t)(n - t) * sizeof(i64));
        leaf = new_node(u, u->key_top, n - t, node);
        if (leaf == NONE) return NONE;
        u->key_top += n - t;
        u->key_live += n - t;
        if (!set_child(u, node, key[t], leaf)) return NONE;
        u->n[node].nchild++;
        u->tree_pages += n - t;
        u->stats[C_ADMISSIONS] += n - t;
    }
    i32 target = leaf != NONE ? leaf : node;
    if (u->has_swa && leaf != NONE) {
        i64 live = kv_max(t, cursor);
        if (live < n) {
            if (live > t && split(u, leaf, live - t) == NONE) return NONE; /* below the cursor: a tombstone */
            i64 tail = kv_ceil_div(u->W, P);                               /* the window's last pages apart */
            if (u->n[leaf].klen > tail) {
                i32 older = split(u, leaf, u->n[leaf].klen - tail);
                if (older == NONE) return NONE;
                u->n[older].swa = 1;
                u->swa_live += u->n[older].klen;
                lru_link_after(u, &u->swa_lru, NONE, older);
            }
            u->n[leaf].swa = 1;
            u->swa_live += u->n[leaf].klen;
            lru_link_after(u, &u->swa_lru, NONE, leaf);
        }
    }
    *exist = 0;
    if (u->has_mamba) {
        if (leaf != NONE || !u->n[target].mamba) {
            u->n[target].mamba = 1;
            u->states++;
            if (u->n[target].mamba_lock > 0) u->locked_mamba++;
            lru_link_after(u, &u->mamba_lru, NONE, target);
            if (leaf == NONE) set_time(u, target, tick(u));
        } else {
            lru_move_after(u, &u->mamba_lru, NONE, target);
            set_time(u, target, tick(u));
            *exist = 1;
        }
    }
    if (u->has_swa) refresh_swa(u, target);
    return target;
}

/* ---- locks ------------------------------------------------------------------------------------------- */

/* the full lock of node's path up to `stop` (excluded) or the root: where it stopped */
static i32 lock_full(U *u, i32 node, i32 stop) {
    i32 x = node;
    for (; x != ROOT && x != stop; x = u->n[x].parent)
        if (u->n[x].full_lock++ == 0) u->locked_full += u->n[x].klen;
    return x;
}

static void unlock_full(U *u, i32 node) {
    for (i32 x = node; x != ROOT; x = u->n[x].parent) {
        if (--u->n[x].full_lock == 0) u->locked_full -= u->n[x].klen;
        mark(u, x);
    }
}

/* the SWA lock over the window and the Mamba lock of the node itself */
static void lock_aux(U *u, Req *r, i32 node) {
    i64 uuid = 0;
    if (u->has_swa) {
        i64 covered = 0;
        for (i32 x = node; x != ROOT && covered < u->W; x = u->n[x].parent) {
            if (u->n[x].swa_lock++ == 0 && u->n[x].swa) u->locked_swa += u->n[x].klen;
            covered += u->n[x].klen * u->P;
            if (covered >= u->W) {
                if (u->n[x].swa_uuid == 0) u->n[x].swa_uuid = ++u->uuids;
                uuid = u->n[x].swa_uuid;
            }
        }
    }
    if (u->has_mamba && node != ROOT && u->n[node].mamba_lock++ == 0 && u->n[node].mamba) u->locked_mamba++;
    r->lock_node = node;
    r->lock_uuid = uuid;
}

static void unlock_aux(U *u, i32 node, i64 uuid) {
    if (u->has_swa)
        for (i32 x = node; x != ROOT; x = u->n[x].parent) {
            if (--u->n[x].swa_lock == 0 && u->n[x].swa) u->locked_swa -= u->n[x].klen;
            mark(u, x);
            if (uuid != 0 && u->n[x].swa_uuid == uuid) break;
        }
    if (u->has_mamba && node != ROOT && --u->n[node].mamba_lock == 0 && u->n[node].mamba) u->locked_mamba--;
}

static void lock(U *u, Req *r, i32 node) {
    lock_full(u, node, NONE);
    lock_aux(u, r, node);
}

static void unlock(U *u, i32 node, i64 uuid) {
    unlock_aux(u, node, uuid);
    unlock_full(u, node);
}

/* unlock(r's node) then lock(node), walking only what changes: when the old node is on the new
 * one's path (a checkpoint that goes deeper), its full locks and those above stay as they are */
static void relock(U *u, Req *r, i32 node) {
    i32 old = r->lock_node;
    unlock_aux(u, old, r->lock_uuid);
    if (lock_full(u, node, old) != old) unlock_full(u, old);
    lock_aux(u, r, node);
}

/* ---- eviction -------------------------------------------------------------------------------------- */

static inline i64 available(const U *u, int ct) {
    return ct == FULL ? u->full_free * u->P : ct == SWA ? u->swa_free * u->P : u->mamba_free;
}

static inline int reached(const U *u, int ct) {
    return u->ev_has_target[ct] && available(u, ct) >= u->ev_target[ct];
}

static void drop_mamba(U *u, i32 x) {
    if (u->n[x].mamba_lock > 0) u->locked_mamba--;
    u->n[x].mamba = 0;
    u->states--;
    lru_remove(u, &u->mamba_lru, x);
    u->mamba_free++;
    u->ev_freed[MAMBA]++;
    u->stats[C_MAMBA_EVICTIONS]++;
}

/* x's SWA KV goes back to its pool (a deleted leaf's, or a tombstone's) */
static void free_swa(U *u, i32 x) {
    i64 pages = u->n[x].klen;
    u->n[x].swa = 0;
    lru_remove(u, &u->swa_lru, x);
    u->swa_live -= pages;
    u->swa_free += pages;
    u->ev_freed[SWA] += pages * u->P;
    u->stats[C_SWA_EVICTIONS] += pages;
}

static void delete_leaf(U *u, i32 x) {
    i64 pages = u->n[x].klen;
    u->full_free += pages;
    u->tree_pages -= pages;
    u->ev_freed[FULL] += pages * u->P;
    u->stats[C_EVICTIONS] += pages;
    u->stats[C_EVICTED_NODES]++;
    if (u->n[x].swa) free_swa(u, x);
    if (u->n[x].mamba) drop_mamba(u, x);
    i32 p = u->n[x].parent;
    remove_child(u, p, first_key(u, x));
    u->n[p].nchild--;
    u->n[x].alive = 0;
    u->key_live -= pages;
    u->n[x].parent = u->free_nodes; /* its slot is free */
    u->free_nodes = x;
    mark(u, p);
}

/* an internal (or locked-leaf) victim loses one component's data; an SWA tombstone also drops its state */
static void tombstone(U *u, int ct, i32 x) {
    if (ct == SWA) {
        free_swa(u, x);
        if (u->n[x].mamba) drop_mamba(u, x);
    } else {
        drop_mamba(u, x);
    }
}

static inline int heap_before(const RhHeapEntry *a, const RhHeapEntry *b) {
    return a->key.time < b->key.time || (a->key.time == b->key.time && a->key.serial < b->key.serial);
}

/* (time, serial) as unsigned keys in the same order: a double's bits sort as an unsigned integer
 * once the sign bit is set (non-negative) or every bit flipped (negative; times are never NaN or
 * -0) */
static inline RhHeapKey heap_key(const Node *v) {
    uint64_t bits;
    memcpy(&bits, &v->time, sizeof bits);
    bits = bits >> 63 ? ~bits : bits | (1ull << 63);
    return (RhHeapKey){bits, (uint64_t)v->serial};
}

/* a 4-ary heap: slot i's children are 4i+1 .. 4i+4 */
enum { HEAP_ARITY = 4 };

static inline i64 heap_parent(i64 i) { return (i - 1) / HEAP_ARITY; }

/* the smallest of the children of slot i, or -1 when it has none */
static inline i64 heap_min_child(const U *u, i64 i) {
    i64 first = HEAP_ARITY * i + 1, stop = kv_min(first + HEAP_ARITY, u->heap_size);
    if (first >= stop) return -1;
    i64 best = first;
    for (i64 c = first + 1; c < stop; c++)
        if (heap_before(&u->heap[c], &u->heap[best])) best = c;
    return best;
}

/* the entry e sifted down from slot i */
static void heap_down(U *u, i64 i, RhHeapEntry e) {
    for (i64 c; (c = heap_min_child(u, i)) >= 0 && heap_before(&u->heap[c], &e); i = c) u->heap[i] = u->heap[c];
    u->heap[i] = e;
}

/* the entry still stands for its node: the same node (not a reused slot), an evictable leaf, the
 * same time */
static inline int live_entry(const U *u, const RhHeapEntry *e) {
    const Node *v = &u->n[e->node];
    if (!v->alive || !evictable_leaf(u, e->node)) return 0;
    RhHeapKey now = heap_key(v);
    return now.time == e->key.time && now.serial == e->key.serial;
}

/* 0: out of memory */
static int heap_push(U *u, i32 x) {
    if (u->heap_size == u->heap_cap) {
        i64 kept = 0; /* drop the dead entries first; grow if most are live */
        for (i64 i = 0; i < u->heap_size; i++)
            if (live_entry(u, &u->heap[i])) u->heap[kept++] = u->heap[i];
        u->heap_size = kept;
        for (i64 i = kept > 1 ? heap_parent(kept - 1) : -1; i >= 0; i--) heap_down(u, i, u->heap[i]);
        if (2 * kept >= u->heap_cap) {
            i64 cap = u->heap_cap ? 2 * u->heap_cap : 1024;
            if (!grow((void **)&u->heap, cap, sizeof(RhHeapEntry))) return 0;
            u->heap_cap = cap;
        }
    }
    RhHeapEntry e = {heap_key(&u->n[x]), x};
    i64 i = u->heap_size++;
    while (i > 0 && heap_before(&e, &u->heap[heap_parent(i)])) {
        u->heap[i] = u->heap[heap_parent(i)];
        i = heap_parent(i);
    }
    u->heap[i] = e;
    return 1;
}

/* the root removed: its hole goes down to a leaf by the smallest child, and the last entry rises
 * from there (Floyd's: the last entry is seldom far from the bottom) */
static void heap_pop(U *u) {
    RhHeapEntry *h = u->heap;
    i64 i = 0, c;
    if (--u->heap_size == 0) return;
    RhHeapEntry e = h[u->heap_size];
    for (; (c = heap_min_child(u, i)) >= 0; i = c) h[i] = h[c];
    while (i > 0 && heap_before(&e, &h[heap_parent(i)])) {
        h[i] = h[heap_parent(i)];
        i = heap_parent(i);
    }
    h[i] = e;
}

/* full.py: the unlocked leaves oldest first (SGLang builds that heap anew at each call: the
 * persistent one pops the same nodes in the same order); a parent left a leaf joins it. 0: out of
 * memory */
static int evict_full_leaves(U *u) {
    for (i64 k = 0; k < u->ndirty; k++) {
        i32 x = u->dirty[k];
        u->n[x].is_dirty = 0;
        if (u->n[x].alive && evictable_leaf(u, x) && !heap_push(u, x)) return 0;
    }
    u->ndirty = 0;
    while (u->heap_size > 0) {
        i32 x = u->heap[0].node;
        if (!live_entry(u, &u->heap[0])) {
            heap_pop(u);
            continue;
        }
        i32 p = u->n[x].parent;
        delete_leaf(u, x);
        if (reached(u, FULL)) {
            heap_pop(u);
            return 1;
        }
        if (evictable_leaf(u, p)) /* it takes x's place: older than x, it seldom goes down */
            heap_down(u, 0, (RhHeapEntry){heap_key(&u->n[p]), p});
        else
            heap_pop(u);
    }
    return 1;
}

/* swa.py / mamba.py: the component's LRU from its cold end, skipping what is locked in it */
static void evict_aux(U *u, int ct, i64 quota) {
    Lru *l = ct == SWA ? &u->swa_lru : &u->mamba_lru;
    i32 cursor = lru_warmer_unlocked(u, l, ct, NONE);
    for (;;) {
        if (cursor != NONE && !u->n[cursor].in[l->which]) cursor = lru_warmer_unlocked(u, l, ct, NONE);
        if (u->ev_freed[ct] >= quota || cursor == NONE) return;
        i32 x = cursor;
        cursor = lru_warmer_unlocked(u, l, ct, x);
        if (evictable_leaf(u, x)) delete_leaf(u, x);
        else tombstone(u, ct, x);
        if (reached(u, ct)) return;
    }
}

/* evict_for_alloc with each component's shortfall (tokens for FULL and SWA, slots for MAMBA) */
static void evict(U *u, i64 full_tokens, i64 swa_tokens, i64 mamba) {
    i64 request[3] = {full_tokens, swa_tokens, mamba};
    for (int ct = 0; ct < 3; ct++) {
        u->ev_has_target[ct] = request[ct] > 0;
        u->ev_target[ct] = available(u, ct) + request[ct];
        u->ev_freed[ct] = 0;
    }
    int order[3] = {FULL, SWA, MAMBA};
    for (int k = 0; k < 3; k++) {
        int ct = order[k];
        if ((ct == SWA && !u->has_swa) || (ct == MAMBA && !u->has_mamba)) continue;
        int to_target = ct == FULL && request[ct] > 0;
        if (reached(u, ct) || (!to_target && u->ev_freed[ct] >= request[ct])) continue;
        if (ct == FULL) {
            if (!evict_full_leaves(u)) u->failed = -1;
        } else {
            evict_aux(u, ct, request[ct]);
        }
    }
}

/* ---- one request ---------------------------------------------------------------------------------- */

static inline i64 ceil_page(const U *u, i64 tokens) { return kv_ceil_div(tokens, u->P) * u->P; }

static void make_room(U *u, i64 demand) {
    i64 full_short = kv_max(0, demand - u->full_free * u->P);
    i64 swa_short = u->has_swa ? kv_max(0, demand - u->swa_free * u->P) : 0;
    if (full_short || swa_short) evict(u, full_short, swa_short, 0);
}

static i64 chunk_end(const U *u, i64 pos, i64 L, int first) {
    i64 c = u->chunk;
    if (c < 0) return L;
    if (first) return ceil_page(u, L - pos) <= c ? L : pos + c / u->P * u->P;
    return pos + kv_min(L - pos, c);
}

/* alloc_req_slots' Mamba part: the request's state slot (and extra_buffer's ping-pong pair) once
 * (0: none could be freed) */
static int allocate_states(U *u, Req *r) {
    if (!u->has_mamba) return 1;
    i64 needed = r->has_own_slot ? 0 : 1;
    if (u->extra_buffer && !r->has_ping_pong) needed += PING_PONG_SLOTS;
    if (u->mamba_free < needed) evict(u, 0, 0, needed - u->mamba_free);
    if (u->mamba_free < needed) return 0;
    u->mamba_free -= needed;
    r->mamba_slots += needed;
    r->has_own_slot = 1;
    r->has_ping_pong = r->has_ping_pong || u->extra_buffer;
    return 1;
}

static int allocate(U *u, Req *r, i64 start, i64 end) {
    if (!allocate_states(u, r)) return 0;
    make_room(u, (end - start) + (u->P > 1 ? u->P : 0));
    i64 nw = kv_ceil_div(end, u->P) - kv_ceil_div(start, u->P);
    if (nw > u->full_free || (u->has_swa && nw > u->swa_free)) return 0;
    u->full_free -= nw;
    if (u->has_swa) u->swa_free -= nw;
    return 1;
}

static void track_prefill(const U *u, Req *r, i64 start, i64 end) {
    i64 extend = end - start;
    if (extend < u->grid) return;
    i64 aligned = start + extend / u->grid * u->grid;
    i64 limit = start + extend / MAMBA_CHUNK_SIZE * MAMBA_CHUNK_SIZE == aligned ? end : aligned + 1;
    i64 b = r->mamba_branch;
    if (b != NONE && start < b && b < limit && (b - start) % u->mamba_chunk == 0) aligned = b;
    r->track = aligned;
}

static void free_out_of_window(U *u, Req *r, i64 pre_len) {
    if (!u->has_swa || pre_len - u->W < r->swa_cursor + 1) return;
    i64 cursor = kv_max(r->swa_cursor, r->protected);
    r->swa_cursor = cursor;
    i64 threshold = pre_len - ceil_page(u, kv_max(u->W, u->P));
    if (u->has_mamba && r->track != NONE) threshold = kv_min(threshold, r->track - u->W);
    i64 nw = kv_max(cursor, threshold) / u->P * u->P;
    if (nw > cursor) {
        u->swa_free += (nw - cursor) / u->P;
        r->swa_cursor = nw;
    }
}

static int take_slot(U *u) {
    if (u->mamba_free == 0) evict(u, 0, 0, 1);
    if (u->mamba_free == 0) {
        u->failed = 1;
        return 0;
    }
    u->mamba_free--;
    return 1;
}

/* _select_finished_checkpoint: the tracked length, or NONE */
static i64 finished_checkpoint(const Req *r, i64 owned) {
    i64 cache_len = r->track == NONE ? 0 : r->track;
    if (cache_len <= owned) return cache_len;
    if (r->prev_track == NONE || r->prev_track > owned) return NONE;
    return r->prev_track;
}

static void mamba_cleanup(U *u, Req *r, int finished, int mamba_value, int inserted) {
    if (!u->has_mamba) return;
    if (finished) {
        if (u->extra_buffer) u->mamba_free += r->mamba_slots - (inserted ? 1 : 0);
        else if (!inserted) u->mamba_free += r->mamba_slots;
        r->mamba_slots = 0;
        r->has_own_slot = r->has_ping_pong = 0;
    } else {
        if (mamba_value && !inserted) u->mamba_free++;
        r->track = r->prev_track = NONE;
    }
}

/* checkpoint_into_tree; 0: out of memory or a state slot could not be freed */
static int checkpoint(U *u, Req *r, i64 up_to, int finished) {
    i64 P = u->P, key_len = up_to, branch = NONE, cache_len = 0;
    if (u->has_swa && !u->has_mamba) {
        i64 b = r->swa_branch;
        if (b != NONE && b > r->protected && b <= up_to) {
            branch = b;
            key_len = kv_min(key_len, b);
        }
    }
    int mamba_value = 0;
    if (u->has_mamba) {
        if (u->extra_buffer) {
            if (finished) {
                i64 c = finished_checkpoint(r, up_to);
                mamba_value = c != NONE;
                cache_len = c == NONE ? 0 : c;
            } else {
                cache_len = r->track == NONE ? 0 : r->track;
                if (r->track != NONE) {
                    if (!take_slot(u)) return 0; /* the tracked slot is donated, a new one replaces it */
                    mamba_value = 1;
                }
            }
        } else {
            cache_len = up_to;
            if (!finished && !take_slot(u)) return 0; /* a copy of the running state */
            mamba_value = 1;
        }
        key_len = kv_min(key_len, cache_len);
    }
    if (!finished) free_out_of_window(u, r, key_len - 1);
    if (key_len <= 0) {
        mamba_cleanup(u, r, finished, mamba_value, 0);
        return 1;
    }
    i64 n = key_len / P;
    int exist;
    i32 target = insert(u, r, n, &exist);
    if (target == NONE) return 0;
    if (finished) { /* release_kv_cache unlocks it at once: lock(target) and its unlock cancel out */
        unlock(u, r->lock_node, r->lock_uuid);
        r->lock_node = NONE;
    } else {
        relock(u, r, target);
    }
    r->protected = n * P;
    if (branch != NONE && n * P >= branch) {
        r->swa_branch = NONE;
        if (!finished) free_out_of_window(u, r, r->computed - 1);
    }
    mamba_cleanup(u, r, finished, mamba_value, mamba_value && !exist && n > 0);
    return 1;
}

static i64 swa_held(const U *u, const Req *r, i64 owned) {
    return kv_max(0, kv_ceil_div(owned, u->P) - kv_max(r->protected, r->swa_cursor) / u->P);
}

static int release(U *u, Req *r) {
    i64 owned = r->computed;
    if (!checkpoint(u, r, owned, 1)) return 0;
    u->full_free += kv_ceil_div(owned, u->P) - r->protected / u->P;
    if (u->has_swa) u->swa_free += swa_held(u, r, owned);
    if (r->lock_node != NONE) unlock(u, r->lock_node, r->lock_uuid);
    r->lock_node = NONE;
    return 1;
}

/* give back all a request holds outside the tree and unlock it, inserting nothing */
static void drop(U *u, Req *r) {
    i64 owned = r->computed;
    u->full_free += kv_max(0, kv_ceil_div(owned, u->P) - r->protected / u->P);
    if (u->has_swa) u->swa_free += swa_held(u, r, owned);
    u->mamba_free += r->mamba_slots;
    r->mamba_slots = 0;
    r->has_own_slot = r->has_ping_pong = 0;
    if (r->lock_node != NONE) {
        unlock(u, r->lock_node, r->lock_uuid);
        r->lock_node = NONE;
    }
}

/* maybe_evict_swa for decode step decode_batch_idx = r->decodes (schedule_batch.py:4068-4123) */
static void evict_window(U *u, Req *r) {
    if (u->has_swa && r->decodes >= 1 && r->computed - u->W >= r->swa_cursor + SWA_EVICTION_INTERVAL)
        free_out_of_window(u, r, r->computed);
}

/* one token's KV after the evictions (alloc_for_decode_default, allocation.py:625-665; 0: it does
 * not fit); an extra_buffer state is tracked every track_grid tokens
 * (batch_result_processor.py:1650-1668) */
static int decode_alloc(U *u, Req *r) {
    i64 P = u->P, committed = r->computed;
    make_room(u, P);
    if (committed % P == 0) {
        if (u->full_free < 1 || (u->has_swa && u->swa_free < 1)) return 0;
        u->full_free--;
        if (u->has_swa) u->swa_free--;
    }
    r->computed = committed + 1;
    r->decodes++;
    if (u->extra_buffer && r->computed % u->track_grid == 0) {
        r->prev_track = r->track;
        r->track = r->computed;
    }
    return 1;
}

/* a decode batch of this one request: check_decode_mem's eviction (a page when it starts one:
 * new_tokens_required_next_decode, schedule_batch.py:3403-3417), maybe_evict_swa, then
 * alloc_paged_token_slots_decode's (a page, allocation.py:571-583) and the token */
static int decode_step(U *u, Req *r) {
    if (r->computed % u->P == 0) make_room(u, u->P);
    evict_window(u, r);
    return decode_alloc(u, r);
}

/* ---- a request, step by step (unified_radix.h) -------------------------------------------------- */

static i64 gcd(i64 a, i64 b) { return b == 0 ? a : gcd(b, a % b); }

int rh_init(U *u, const i64 *settings) {
    memset(u, 0, sizeof *u);
    u->P = settings[0], u->W = settings[1], u->has_mamba = settings[2] != 0, u->extra_buffer = settings[3] != 0;
    u->full_pages = settings[4], u->swa_pages = settings[5], u->mamba_total = settings[6], u->chunk = settings[7];
    u->grid = settings[8], u->mamba_chunk = settings[9];
    u->has_swa = u->W > 0;
    if (u->P < 1 || u->full_pages < 1 || u->swa_pages < 0 || u->mamba_total < 0 || u->grid < 1) return -4;
    u->track_grid = u->grid / gcd(u->grid, MAMBA_TRACK_INTERVAL) * MAMBA_TRACK_INTERVAL;
    u->full_free = u->full_pages;
    u->swa_free = u->swa_pages;
    u->mamba_free = u->mamba_total;
    u->free_nodes = NONE;
    u->swa_lru = (Lru){NONE, NONE, SWA_LIST};
    u->mamba_lru = (Lru){NONE, NONE, MAMBA_LIST};
    if (!grow_nodes(u) || !table_resize(u, 1024)) return -1;
    i32 root = new_node(u, 0, 0, NONE); /* (empty key) */
    u->n[root].full_lock = u->n[root].swa_lock = u->n[root].mamba_lock = 1;
    return 0;
}

void rh_free(U *u) { free_all(u); }

i64 rh_touch(U *u, const i64 *keys, i64 pages) {
    Match m;
    return match(u, keys, pages, &m) ? m.hit : -1;
}

i64 rh_probe(const U *u, const i64 *key, i64 len) {
    f64 run = 1e300; /* the SWA validator's run, as in match (a split's upper part has no state) */
    i32 node = ROOT;
    i64 pos = 0, hit = 0;
    while (pos < len) {
        i32 child = child_of(u, node, key[pos]);
        if (child == NONE) break;
        i64 m = common(u, child, key, pos, len);
        int ok = 1;
        if (u->has_swa) {
            if (!u->n[child].swa) run = 0, ok = 0;
            else run += (f64)m * (f64)u->P, ok = run >= (f64)u->W;
        }
        if (u->has_mamba && !(m == u->n[child].klen && u->n[child].mamba)) ok = 0;
        if (ok) hit = pos + m;
        if (m < u->n[child].klen) break;
        node = child;
        pos += m;
    }
    return hit;
}

i64 rh_begin(U *u, Req *r, const i64 *keys, i64 tokens) {
    i64 P = u->P;
    *r = (Req){.keys = keys, .lock_node = NONE, .swa_branch = NONE, .mamba_branch = NONE, .track = NONE,
               .prev_track = NONE};
    Match m;
    if (!match(u, keys, (tokens - 1) / P, &m)) return -1;
    r->protected = r->computed = m.hit * P;
    if (u->has_swa && m.full_hit > m.hit) r->swa_branch = m.full_hit * P;
    if (u->has_mamba) {
        i64 aligned = m.full_hit * P / u->grid * u->grid;
        if (aligned > m.hit * P) r->mamba_branch = aligned;
        if (u->n[m.best].mamba) { /* copy-on-write into a fresh slot */
            if (u->mamba_free == 0) {
                Req hold;
                lock(u, &hold, m.best);
                evict(u, 0, 0, 1);
                unlock(u, hold.lock_node, hold.lock_uuid);
            }
            if (u->mamba_free == 0) return -2;
            u->mamba_free--;
            r->mamba_slots++;
            r->has_own_slot = 1;
        }
    }
    lock(u, r, m.best);
    return m.hit;
}

int rh_extend(U *u, Req *r, i64 end) {
    if (end <= r->computed) return 1;
    if (!allocate(u, r, r->computed, end)) return 0;
    if (u->extra_buffer) track_prefill(u, r, r->computed, end);
    return 1;
}

int rh_extend_states(U *u, Req *r) { return allocate_states(u, r); }

int rh_computed(U *u, Req *r, i64 end) {
    r->computed = end;
    return checkpoint(u, r, end, 0);
}

void rh_evict_window(U *u, Req *r) { evict_window(u, r); }

int rh_decode_alloc(U *u, Req *r) { return decode_alloc(u, r); }

void rh_make_room(U *u, i64 tokens) { make_room(u, tokens); }

int rh_finish(U *u, Req *r) { return release(u, r); }

void rh_drop(U *u, Req *r) { drop(u, r); }

void rh_room(const U *u, i64 *out) {
    out[ROOM_FULL_FREE] = u->full_free * u->P;
    out[ROOM_SWA_FREE] = u->swa_free * u->P;
    out[ROOM_MAMBA_FREE] = u->mamba_free;
    out[ROOM_FULL_EVICTABLE] = (u->tree_pages - u->locked_full) * u->P;
    out[ROOM_SWA_EVICTABLE] = (u->swa_live - u->locked_swa) * u->P;
    out[ROOM_MAMBA_EVICTABLE] = u->states - u->locked_mamba;
}

int rh_consistent(const U *u, i64 held, i64 held_swa, i64 held_states) {
    i64 pages = 0, live = 0, states = 0, alive = 0, ok = 1, lfull = 0, lswa = 0, lmamba = 0;
    i32 *children = calloc((size_t)u->nodes, sizeof(i32));
    if (children == NULL) return 0;
    for (i64 x = 1; x < u->nodes; x++) {
        const Node *v = &u->n[x];
        if (!v->alive) continue;
        alive++;
        pages += v->klen;
        live += v->swa ? v->klen : 0;
        states += v->mamba;
        lfull += v->full_lock > 0 ? v->klen : 0;
        lswa += v->swa && v->swa_lock > 0 ? v->klen : 0;
        lmamba += v->mamba && v->mamba_lock > 0;
        children[v->parent]++;
    }
    for (i64 x = 0; x < u->nodes; x++) ok &= !u->n[x].alive || children[x] == u->n[x].nchild;
    free(children);
    return ok && pages == u->tree_pages && live == u->swa_live && states == u->states && lfull == u->locked_full
           && lswa == u->locked_swa && lmamba == u->locked_mamba && u->full_free + pages + held == u->full_pages
           && u->swa_free + live + held_swa == u->swa_pages && u->mamba_free + states + held_states == u->mamba_total
           && u->tcount == alive;
}

/* ---- the sequential replay ------------------------------------------------------------------------ */

/* one request from match to release, with out_len - 1 decode steps: its hit in pages; -1: out of
 * memory or a slot not freed */
static i64 serve(U *u, const i64 *keys, i64 L, i64 out_len) {
    if (L <= 0) return 0;
    if (kv_ceil_div(L, u->P) > u->full_pages) { /* can never fit: refused */
        u->stats[C_REJECTED]++;
        return 0;
    }
    Req r;
    i64 hit = rh_begin(u, &r, keys, L);
    if (hit == -2) {
        u->stats[C_OVERSIZE]++;
        return r.protected / u->P; /* the match's hit; nothing held */
    }
    if (hit < 0) return -1;
    i64 pos = r.computed;
    int first = 1;
    while (pos < L) {
        i64 end = chunk_end(u, pos, L, first);
        if (!rh_extend(u, &r, end)) {
            u->stats[C_OVERSIZE]++;
            drop(u, &r);
            return hit;
        }
        if (end < L || out_len > 1) {
            if (!rh_computed(u, &r, end)) return -1;
        } else {
            r.computed = end;
        }
        pos = end;
        first = 0;
    }
    for (i64 k = 1; k < out_len; k++)
        if (!decode_step(u, &r)) {
            u->stats[C_OVERSIZE]++;
            drop(u, &r);
            return hit;
        }
    return release(u, &r) ? hit : -1;
}

/* The replay (unified_radix.py replay_radix_hybrid): every request in order, alone. settings:
 * RH_SETTINGS. outputs: each request's output tokens (NULL: 1 each, no decode). out: the counters,
 * then the tree's pages, its live SWA pages and its Mamba states. Returns 0; -1 out of memory; -2
 * a Mamba state slot could not be freed (SGLang asserts there); -3 the pools disagree with the
 * tree after the replay (a bug); -4 bad input. */
KV_EXPORT i64 kv_radix_hybrid_replay(const i64 *offsets, i64 n, const i32 *blocks, i64 num_blocks,
                                      const i64 *lengths, const i64 *outputs, const i64 *settings, i64 *hits, i64 *out) {
    U u;
    if (n < 0) return -4;
    i64 rc = rh_init(&u, settings);
    i64 *keys = NULL;
    if (rc != 0) goto done;
    i64 max_pages = 0;
    for (i64 i = 0; i < n; i++) {
        i64 o = outputs == NULL ? 1 : kv_max(1, outputs[i]);
        max_pages = kv_max(max_pages, (lengths[i] + o - 1) / u.P);
    }
    keys = malloc((size_t)(max_pages + 1) * sizeof(i64));
    if (keys == NULL) {
        rc = -1;
        goto done;
    }
    i64 unshared = num_blocks;
    for (i64 i = 0; i < n; i++) {
        i64 L = lengths[i], o = outputs == NULL ? 1 : kv_max(1, outputs[i]);
        i64 pages = L > 0 ? (L + o - 1) / u.P : 0, have = offsets[i + 1] - offsets[i];
        for (i64 q = 0; q < pages; q++) keys[q] = q < have ? (i64)blocks[offsets[i] + q] : unshared++;
        hits[i] = serve(&u, keys, L, o);
        if (hits[i] < 0 || u.failed < 0) {
            rc = u.failed > 0 ? -2 : -1;
            goto done;
        }
    }
    if (!rh_consistent(&u, 0, 0, 0)) {
        rc = -3;
        goto done;
    }
    for (int k = 0; k < NUM_COUNTERS; k++) out[k] = u.stats[k];
    out[NUM_COUNTERS] = u.tree_pages;
    out[NUM_COUNTERS + 1] = u.swa_live;
    out[NUM_COUNTERS + 2] = u.states;
done:
    free(keys);
    free_all(&u);
    return rc;
}

/* ---- the table the serving kernel drives the tree through (engine.h) ----------------------------- */

static int ur_init(void *st, const HybridSetup *c) { return rh_init(st, c->radix); }

static void ur_release(void *st) { rh_free(st); }

/* the tree's counters, then its pages, live SWA pages and states */
static void ur_report(void *st, i64 *out) {
    const U *u = st;
    for (int k = 0; k < RH_COUNTERS; k++) out[k] = u->stats[k];
    out[RH_COUNTERS] = u->tree_pages;
    out[RH_COUNTERS + 1] = u->swa_live;
    out[RH_COUNTERS + 2] = u->states;
}

/* the requests' own pages and the tree's pages they lock */
static i64 ur_held(const void *st) {
    const U *u = st;
    return u->full_pages - u->full_free - (u->tree_pages - u->locked_full);
}

static int ur_holds(const void *rq) { return ((const Req *)rq)->keys != NULL; }

static int ur_finish(void *st, void *rq) {
    int ok = rh_finish(st, rq);
    ((Req *)rq)->keys = NULL;
    return ok;
}

static void ur_drop(void *st, void *rq) {
    rh_drop(st, rq);
    ((Req *)rq)->keys = NULL;
}

static i64 ur_touch(void *st, const i64 *keys, i64 pages) { return rh_touch(st, keys, pages); }

static i64 ur_probe(const void *st, const i64 *keys, i64 pages) { return rh_probe(st, keys, pages); }

static i64 ur_begin(void *st, void *rq, const i64 *keys, i64 tokens) {
    i64 k = rh_begin(st, rq, keys, tokens);
    if (k < 0) ((Req *)rq)->keys = NULL;
    return k;
}

static int ur_extend(void *st, void *rq, i64 end) { return rh_extend(st, rq, end); }

static int ur_extend_states(void *st, void *rq) { return rh_extend_states(st, rq); }

static int ur_computed(void *st, void *rq, i64 end) { return rh_computed(st, rq, end); }

static void ur_note_computed(void *rq, i64 end) { ((Req *)rq)->computed = end; }

static i64 ur_request_computed(const void *rq) { return ((const Req *)rq)->computed; }

static void ur_evict_window(void *st, void *rq) { rh_evict_window(st, rq); }

static int ur_decode_alloc(void *st, void *rq) {
    Req *r = rq;
    i64 P = ((const U *)st)->P, before = r->computed;
    if (!rh_decode_alloc(st, r)) return 0;
    return (before + P - 1) / P < (r->computed + P - 1) / P ? 2 : 1;
}

static void ur_make_room(void *st, i64 tokens) { rh_make_room(st, tokens); }

static void ur_room(const void *st, i64 *out) { rh_room(st, out); }

static i64 ur_window(const void *st) { return ((const U *)st)->has_swa ? ((const U *)st)->W : 0; }

static i64 ur_swa_pages(const void *st) { return ((const U *)st)->swa_pages; }

static int ur_failed(const void *st) { return ((const U *)st)->failed; }

static int ur_consistent(const void *st) { return rh_consistent(st, 0, 0, 0); }

static const HybridRadix radix = {
    .touch = ur_touch, .probe = ur_probe, .begin = ur_begin, .extend = ur_extend, .extend_states = ur_extend_states,
    .computed = ur_computed, .note_computed = ur_note_computed, .request_computed = ur_request_computed,
    .evict_window = ur_evict_window, .decode_alloc = ur_decode_alloc, .make_room = ur_make_room, .room = ur_room,
    .window = ur_window, .swa_pages = ur_swa_pages, .failed = ur_failed, .consistent = ur_consistent,
};

const HybridEngine hybrid_unified_radix = {
    .name = "SGLang 0.5.23 UnifiedRadixCache", .state_size = sizeof(U), .request_size = sizeof(Req),
    .counters = RH_COUNTERS + 3, .init = ur_init, .release = ur_release, .report = ur_report, .held = ur_held,
    .holds = ur_holds, .finish = ur_finish, .drop = ur_drop, .request_release = NULL, .coordinator = NULL,
    .radix = &radix,
};
