/* SGLang 0.5.23's UnifiedRadixCache (FULL with SWA and / or MAMBA), compiled (hybrid/unified_radix.c):
 * the tree and a request's state, for the sequential replay (kv_radix_hybrid_replay) and the
 * serving simulator (serving/kernel/sglang_hybrid.c, which serves overlapping requests with the
 * rh_ functions below). hybrid/unified_radix.py has the rules with their SGLang sources. */
#ifndef KV_RADIX_HYBRID_H
#define KV_RADIX_HYBRID_H

#include "../include/kv.h"
#include "engine.h"

enum { RH_COUNTERS = 8 }; /* radix_tree.py COUNTERS */
enum { RH_SETTINGS = 10 }; /* P, W, has_mamba, extra_buffer, full_pages, swa_pages, mamba_slots, chunk, grid, mamba_chunk */

/* a node of the tree; its links in the SWA and Mamba LRU lists */
typedef struct {
    i64 kstart, swa_uuid; /* its key in the arena; its SWA lock boundary mark (0: none) */
    i64 serial;           /* SGLang's node id (creation order): the eviction heap's tie-break */
    f64 time;             /* last_access_time */
    i32 klen, parent, nchild, full_lock, swa_lock, mamba_lock;
    i32 prev[2], next[2];
    i8 swa, mamba, alive, is_dirty, in[2];
} RhNode;

typedef struct {
    i32 first, last; /* MRU and LRU ends (-1: empty) */
    int which;       /* the SWA list or the Mamba list */
} RhLru;

/* an entry of the children table: (parent, first key) -> node; parent -1: empty */
typedef struct {
    i64 key;
    i32 parent, node;
} RhChild;

/* the order of the full eviction's heap: a node's time (its bits made to sort as unsigned
 * integers), then its serial (two words, where a compiler with 128-bit integers would use one) */
typedef struct {
    uint64_t time, serial;
} RhHeapKey;

/* an entry of the full eviction's heap: a node as it was when pushed */
typedef struct {
    RhHeapKey key;
    i32 node;
} RhHeapEntry;

typedef struct RhTree {
    /* settings */
    i64 P, W, full_pages, swa_pages, mamba_total, chunk, grid, mamba_chunk, track_grid;
    int has_swa, has_mamba, extra_buffer;
    /* nodes: a deleted node's slot is reused (free list through `parent`) */
    RhNode *n;
    i64 nodes, node_cap, serials;
    i32 free_nodes;
    RhLru swa_lru, mamba_lru;
    /* the key arena (compacted when full: key_live keys belong to live nodes) */
    i64 *keys;
    i64 key_top, key_cap, key_live;
    /* children: (parent, first key) -> child */
    RhChild *table;
    i64 tsize, tcount;
    /* the full eviction's heap of leaves by (time, id): persistent, with lazy deletion (an entry is
     * live while its node is an evictable leaf at that time); nodes whose time, locks or children
     * changed since the last eviction are pushed again first (dirty) */
    RhHeapEntry *heap;
    i64 heap_size, heap_cap;
    i32 *dirty;
    i64 ndirty;
    i32 *path; /* scratch: a node's path, bottom up */
    i64 path_cap;
    /* pools, clock, counters */
    i64 full_free, swa_free, mamba_free, tree_pages, uuids;
    /* what locks protect (SGLang's component_protected_size_): full pages in nodes locked in FULL,
     * live SWA pages in nodes locked in SWA, states in nodes locked in MAMBA; and the tree's live SWA
     * pages and states (the evictable sizes are the rest) */
    i64 locked_full, locked_swa, locked_mamba, swa_live, states;
    f64 clock;
    i64 stats[RH_COUNTERS];
    /* the eviction in progress (evict_for_alloc's target and freed, per component) */
    i64 ev_target[3], ev_freed[3];
    int ev_has_target[3];
    int failed; /* 1: a state slot could not be freed (SGLang asserts there); -1: out of memory */
} RhTree;

/* a request: its page keys (prompt, then outputs) and what it holds */
typedef struct RhReqS {
    const i64 *keys;
    i64 protected, swa_cursor, computed;
    i32 lock_node; /* -1: not locked */
    i64 lock_uuid; /* 0: none */
    i64 swa_branch, mamba_branch, track, prev_track; /* -1: none */
    i64 mamba_slots, decodes; /* decodes: decode steps since its (re)admission (decode_batch_idx) */
    int has_own_slot, has_ping_pong;
} RhReq;

/* 0; -1 out of memory; -4 bad settings */
int rh_init(RhTree *u, const i64 *settings);
void rh_free(RhTree *u);
/* match_prefix of the first `pages` keys (it stamps the path): the hit in pages; -1 out of memory */
i64 rh_touch(RhTree *u, const i64 *keys, i64 pages);
/* the hit match_prefix would give for the first `pages` keys, touching nothing (no split, no stamp) */
i64 rh_probe(const RhTree *u, const i64 *keys, i64 pages);
/* a request of `tokens` tokens (prompt, or prompt and outputs to recompute) starts: match (limit
 * tokens - 1), branching points, the Mamba copy-on-write, the lock. Its hit in pages; -1 out of
 * memory; -2 no state slot for the copy (nothing held; r->protected is the match's hit) */
i64 rh_begin(RhTree *u, RhReq *r, const i64 *keys, i64 tokens);
/* the KV (and state slots) of its tokens [computed, end): 1, or 0 when they do not fit (what it
 * took stays its own: rh_drop gives it back) */
int rh_extend(RhTree *u, RhReq *r, i64 end);
/* its state slots alone, as alloc_for_extend takes them for a whole batch before any KV: 1, or 0
 * when none could be freed */
int rh_extend_states(RhTree *u, RhReq *r);
/* its tokens up to `end` are computed and it goes on (cache_unfinished_req): 0 out of memory or no
 * state slot */
int rh_computed(RhTree *u, RhReq *r, i64 end);
/* a decode batch, in SGLang's order: the caller evicts for check_decode_mem (rh_make_room), then
 * rh_evict_window for each request (maybe_evict_swa), evicts a page per request, then
 * rh_decode_alloc for each (one token's KV: 1, or 0 when it does not fit). The sequential replay
 * is the batch of one (unified_radix.c decode_step) */
void rh_evict_window(RhTree *u, RhReq *r);
int rh_decode_alloc(RhTree *u, RhReq *r);
/* evict until `tokens` tokens are free in the full and the SWA pool, as far as the tree allows */
void rh_make_room(RhTree *u, i64 tokens);
/* it finished: checkpoint, free, unlock (release_kv_cache(checkpoint=True)); 0 out of memory */
int rh_finish(RhTree *u, RhReq *r);
/* retracted: free and unlock, nothing inserted (release_kv_cache(checkpoint=False)) */
void rh_drop(RhTree *u, RhReq *r);
/* the pools' free room and the tree's evictable sizes (tokens for KV, slots for states): engine.h's ROOM_COLUMNS */
void rh_room(const RhTree *u, i64 *out);
/* every page and slot free, in the tree or held by a request (`held` pages, `held_swa`,
 * `held_states`), and the lock counters agree with the nodes: 1; 0 otherwise (or out of memory) */
int rh_consistent(const RhTree *u, i64 held, i64 held_swa, i64 held_states);

#endif
