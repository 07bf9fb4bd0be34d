/* LRU-tail's compiled operations (the rules and the reference engine: lru_tail.py): lru's state,
 * probe and per-block access, with a request's blocks accessed (and held) last to first.
 *
 * lru.c is included for its state and operations, not copied: its table is left out by making
 * KV_BLOCK_POLICY expand to nothing while it is read (lru.c defines nothing else with linkage). */
#include "../include/list.h"
#include "../include/policy.h"

#undef KV_BLOCK_POLICY
#define KV_BLOCK_POLICY(...)
#include "lru.c"
#undef KV_BLOCK_POLICY

/* The access phase: every block, last to first (the default hit limit: all blocks may hit). */
static inline i64 lru_tail_hit_limit(LRU *st, i64 num_blocks, i64 L, i64 bs) {
    (void)st; (void)L; (void)bs;
    return num_blocks;
}

static inline void lru_tail_access_request(LRU *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                                           i64 L, i64 bs) {
    (void)request; (void)hits; (void)L; (void)bs;
    for (i64 j = end - 1; j >= start; j--) lru_access(st, blocks[j], 0);
}

KV_REPLAY(lru_tail, LRU, lru_resident, lru_tail_hit_limit, lru_tail_access_request)

static int lru_tail_resident_op(void *st, i64 b) { return lru_resident((LRU *)st, b); }

static i64 lru_tail_hit_limit_op(void *st, i64 num_blocks, i64 L, i64 bs) {
    return lru_tail_hit_limit((LRU *)st, num_blocks, L, bs);
}

static void lru_tail_access_request_op(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                                       i64 L, i64 bs) {
    lru_tail_access_request((LRU *)st, request, blocks, start, end, hits, L, bs);
}

/* Access and hold the blocks last to first; stop at the first refused one (lru admits every block
 * it does not refuse). Handles: the held blocks, tail first. */
static i64 lru_tail_pin_request_op(void *vst, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 L,
                                   i64 bs, i64 *handles, i64 base) {
    LRU *st = (LRU *)vst;
    (void)request; (void)hits; (void)L; (void)bs;
    i64 n = 0;
    for (i64 j = end - 1; j >= start; j--) {
        i32 b = blocks[j];
        i64 refusals = st->h.hold[REFUSALS];
        lru_access(st, b, 1);
        if (st->h.hold[REFUSALS] != refusals) break;
        kv_pin(&st->h, b);
        handles[base + n] = b;
        n++;
    }
    return n;
}

/* The default release: first to last. */
static void lru_tail_unpin_request_op(void *vst, i64 request, const i32 *blocks, i64 start, i64 end, i64 L, i64 bs,
                                      const i64 *handles, i64 base, i64 n) {
    LRU *st = (LRU *)vst;
    (void)request; (void)blocks; (void)start; (void)end; (void)L; (void)bs;
    for (i64 k = 0; k < n; k++) kv_unpin(&st->h, (i32)handles[base + k]);
}

KV_EXPORT const KvPolicy kv_policy_lru_tail = {"lru_tail", KV_LAYOUT(FIELDS, SLOTS), lru_tail_resident_op,
                                               lru_tail_hit_limit_op, lru_tail_access_request_op,
                                               lru_tail_pin_request_op, lru_tail_unpin_request_op,
                                               lru_tail_resident_op, 1, lru_tail_replay, 0, NULL, NULL,
};
