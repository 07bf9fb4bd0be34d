/* LRU-tail's compiled operations (the rules and the reference engine: lru_tail.py): lru's state,
 * probe and per-block access (lru.h), with a request's blocks accessed (and held) last to first. */
#include "lru.h"

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

/* Access and hold the blocks last to first; stop at the first refused one (lru admits every block
 * it does not refuse). Handles: the held blocks, tail first. */
static i64 lru_tail_pin_request(LRU *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 L,
                                i64 bs, i64 *handles, i64 base) {
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
static void lru_tail_unpin_request(LRU *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 L, i64 bs,
                                   const i64 *handles, i64 base, i64 n) {
    (void)request; (void)blocks; (void)start; (void)end; (void)L; (void)bs;
    kv_unpin_handles(&st->h, handles, base, n);
}

KV_REQUEST_POLICY(lru_tail, LRU, KV_LAYOUT(FIELDS, SLOTS), lru_resident, lru_tail_hit_limit, lru_tail_access_request,
                  lru_tail_pin_request, lru_tail_unpin_request, lru_resident, 1, NULL, NULL, NULL)
