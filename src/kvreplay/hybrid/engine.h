/* A hybrid KV engine's table: what the serving kernel calls it through (serving/kernel/hybrid.c,
 * sglang_hybrid.c), as a driver calls a policy through its KvPolicy (include/policy.h). The kernel
 * holds each instance's engine state and each request's state as opaque memory of the sizes the
 * table gives (zeroed: a request that holds nothing), and never sees their layout.
 *
 * Two engines fill it, each in its own file with its table at the end:
 *   hybrid_coordinator    vLLM 0.33.0's hybrid KV cache manager (its HybridKVCacheCoordinator over
 *                         one block pool; coordinator.c), as vLLM's scheduler drives it
 *   hybrid_unified_radix  SGLang 0.5.23's UnifiedRadixCache (its radix tree over the full, SWA and
 *                         Mamba pools; unified_radix.c), as SGLang's scheduler drives it
 * What both do is in HybridEngine; what only one scheduler asks of its engine is in that engine's
 * part (coordinator or radix; NULL in the other). */
#ifndef KV_HYBRID_ENGINE_H
#define KV_HYBRID_ENGINE_H

#include <stddef.h>

#include "../include/kv.h"

/* An instance's engine, as the kernel's configuration sets it up. */
typedef struct HybridSetup {
    i64 capacity, block_size, num_blocks; /* coordinator: its pool's blocks, their size, the dense ids */
    i64 num_specs;                        /* coordinator: its spec groups ... */
    const i64 *groups;                    /* ... their kinds, then copies, windows, chunks (num_specs each) */
    i64 retention, max_batched;           /* coordinator: retention (-1: dense); a step's token budget */
    i64 max_model_len;                    /* coordinator: the admission cap's max_model_len (0: none) */
    const i64 *radix;                     /* unified radix: its settings (unified_radix.h RH_SETTINGS) */
} HybridSetup;

/* room's columns: the pools' free room and the tree's evictable sizes (tokens for KV, slots for states) */
enum { ROOM_FULL_FREE, ROOM_SWA_FREE, ROOM_MAMBA_FREE, ROOM_FULL_EVICTABLE, ROOM_SWA_EVICTABLE, ROOM_MAMBA_EVICTABLE,
       ROOM_COLUMNS };

/* vLLM's coordinator, as its scheduler drives it chunk by chunk (coordinator.h has each rule) */
typedef struct HybridCoordinator {
    /* new_step_starts */
    void (*step_starts)(void *st);
    /* the layout has a Mamba group */
    int (*has_mamba)(const void *st);
    /* a request's start for `tokens` tokens (a prompt of `prompt`): its hit in blocks, touching
     * nothing yet (its groups emptied; its shared-prefix boundary kept for mamba_split); or a
     * negative error code (out of memory) */
    i64 (*start)(void *st, void *rq, const i32 *ids, i64 nids, i64 tokens, i64 prompt);
    /* the hit of a request of `tokens` tokens, touching nothing */
    i64 (*find_hit)(const void *st, const i32 *ids, i64 nids, i64 tokens);
    /* _mamba_block_aligned_split: the tokens of a chunk of n from `start` (0: none fits) */
    i64 (*mamba_split)(const void *st, const void *rq, i64 prompt, i64 num_tokens, i64 max_prefill, i64 start, i64 n);
    /* the request's Mamba hit state was cached in this step (it waits a step) */
    int (*hit_cached_this_step)(const void *st, const i32 *ids, i64 hit);
    /* allocate_slots for a starting request with `hit` hit blocks: its whole sequence of `whole`
     * tokens must fit under the admission cap, and its slots up to `end`; then the hit blocks are
     * touched and the new ones taken, cached up to `cached`. 1, 0 when they do not fit (nothing
     * taken), or a negative error code */
    int (*allocate_first)(void *st, void *rq, const i32 *ids, i64 hit, i64 end, i64 cached, i64 whole);
    /* allocate_slots for a running request: remove_skipped_blocks at `computed` tokens, then its
     * slots up to `end`, cached up to `cached`. 1, 0 when they do not fit, or a negative error code */
    int (*allocate)(void *st, void *rq, const i32 *ids, i64 end, i64 cached, i64 computed);
    /* the blocks a request of `tokens` tokens holds at its peak on its own */
    i64 (*peak)(const void *st, i64 tokens);
} HybridCoordinator;

/* SGLang's UnifiedRadixCache, as its scheduler drives it (unified_radix.h has each rule) */
typedef struct HybridRadix {
    /* match_prefix of the first `pages` keys, stamping the path: the hit in pages; -1 out of memory */
    i64 (*touch)(void *st, const i64 *keys, i64 pages);
    /* the hit match_prefix would give, touching nothing */
    i64 (*probe)(const void *st, const i64 *keys, i64 pages);
    /* a request of `tokens` tokens starts (match, branching points, copy-on-write, lock): its hit
     * in pages; -1 out of memory; -2 no state slot (then it holds nothing) */
    i64 (*begin)(void *st, void *rq, const i64 *keys, i64 tokens);
    /* the KV and state slots of its tokens up to `end`: 1, or 0 when they do not fit */
    int (*extend)(void *st, void *rq, i64 end);
    /* its state slots alone: 1, or 0 when none could be freed */
    int (*extend_states)(void *st, void *rq);
    /* its tokens up to `end` are computed and it goes on (cache_unfinished_req): 0 on failure */
    int (*computed)(void *st, void *rq, i64 end);
    /* its tokens up to `end` are computed and it stops prefilling (nothing inserted) */
    void (*note_computed)(void *rq, i64 end);
    /* the tokens whose KV it has */
    i64 (*request_computed)(const void *rq);
    /* maybe_evict_swa before a decode step */
    void (*evict_window)(void *st, void *rq);
    /* one decode token's KV: 0 when it does not fit, else 1, or 2 when the token starts a page */
    int (*decode_alloc)(void *st, void *rq);
    /* evict until `tokens` tokens are free in the full and the SWA pool, as far as the tree allows */
    void (*make_room)(void *st, i64 tokens);
    /* ROOM_COLUMNS into out */
    void (*room)(const void *st, i64 *out);
    /* its sliding window in tokens (0: no SWA component), and its SWA pool in pages */
    i64 (*window)(const void *st);
    i64 (*swa_pages)(const void *st);
    /* why the last call failed: 1 a state slot could not be freed, -1 out of memory, 0 neither */
    int (*failed)(const void *st);
    /* every page and slot is free or in the tree, and the locks agree (no request running) */
    int (*consistent)(const void *st);
} HybridRadix;

typedef struct HybridEngine {
    const char *name;
    size_t state_size, request_size; /* an instance's state, a request's (zeroed: it holds nothing) */
    int counters;                    /* report's columns */
    /* 0, or a negative error code (nothing to release then beyond release's) */
    int (*init)(void *st, const HybridSetup *setup);
    void (*release)(void *st);
    /* its counters into out */
    void (*report)(void *st, i64 *out);
    /* blocks (pages) the running requests hold */
    i64 (*held)(const void *st);
    /* the request state holds something */
    int (*holds)(const void *rq);
    /* it finished: what it computed stays cached, the rest is freed: 1, or 0 on failure */
    int (*finish)(void *st, void *rq);
    /* it was preempted or retracted: freed, nothing cached beyond what the engine keeps anyway */
    void (*drop)(void *st, void *rq);
    /* the request state's own memory (after finish or drop, or never started) */
    void (*request_release)(const void *st, void *rq);
    const HybridCoordinator *coordinator; /* vLLM's (NULL: not this engine) */
    const HybridRadix *radix;             /* SGLang's (NULL: not this engine) */
} HybridEngine;

extern const HybridEngine hybrid_coordinator, hybrid_unified_radix;

#endif
