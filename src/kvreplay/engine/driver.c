/* The replay drivers (engine/driver.py and engine/lifecycle.py say what they do):
 *
 * - kv_replay: the sequential replay, the spec's loop, instantiated per policy (KV_REPLAY);
 * - kv_request_start: one request's start among overlapping ones: the prefix scan, then
 *   pin_request; the serving simulator's admission goes through it too;
 * - kv_run_events: starts, stores and finishes in any order (engine/lifecycle.py's events). */
#include "../include/policy.h"
#include "driver.h"

KV_EXPORT void kv_replay(const KvPolicy *p, void *st, const i64 *offsets, const i32 *blocks,
                         const i64 *input_length, i64 n, i64 block_size, i64 *hit_blocks, i64 *hit_tokens) {
    p->replay(st, offsets, blocks, input_length, n, block_size, hit_blocks, hit_tokens);
}

/* A policy's probe (for tests: it changes nothing). */
KV_EXPORT i64 kv_resident(const KvPolicy *p, void *st, i64 b) { return p->resident(st, b); }

/* Request i alone, as the loop body of a replay (its scan, then its access phase): for tests
 * that look at a policy between requests. */
KV_EXPORT void kv_one_request(const KvPolicy *p, void *st, const i64 *offsets, const i32 *blocks,
                              const i64 *input_length, i64 block_size, i64 i, i64 *hit_blocks) {
    i64 start = offsets[i], end = offsets[i + 1];
    i64 k = kv_prefix(p, st, blocks, start, end, input_length[i], block_size);
    p->access_request(st, i, blocks, start, end, k, input_length[i], block_size);
    hit_blocks[0] = k;
}

KvStart kv_request_start(const KvPolicy *p, void *st, KvTiers *tiers, i64 instance, const i32 *to_global, i64 request,
                         const i32 *blocks, const i32 *local, i64 start, i64 end, i64 input_length, i64 block_size,
                         i64 max_hits, i64 *handles, i64 base, i64 *counts, i64 *row) {
    KvHolds *h = (KvHolds *)st;
    const i32 *ids = local == NULL ? blocks : local;
    KvStart out = {0, 0, 0, 0, 0.0};
    /* the hit limit first: a radix state's scan leaves its cursor where pin_request continues */
    i64 limit = p->hit_limit(st, end - start, input_length, block_size);
    if (max_hits >= 0 && max_hits < limit) limit = max_hits;
    i64 k = 0;
    while (k < limit && p->resident(st, ids[start + k])) k++;
    out.hits = out.reach = k;
    if (tiers != NULL) out.reach = kv_tier_prefix(p, st, tiers, instance, blocks, local, start, k, limit, counts, 1);
    i64 refusals = h->hold[REFUSALS];
    out.held = p->pin_request(st, request, ids, start, end, k, input_length, block_size, handles, base);
    out.refused = h->hold[REFUSALS] != refusals;
    if (tiers != NULL) {
        if (!out.refused)
            out.load_s = kv_tier_admitted(tiers, instance, blocks, start, k,
                                          kv_cached_blocks(p, st, end - start, input_length, block_size), counts, row);
        kv_tier_drain(p, st, tiers, instance, to_global);
    }
    return out;
}

/* events: 0 <= e < n starts request e, e >= n stores request e - n (store_request, when the
 * policy has it), e < 0 finishes request -e - 1; request i's handles live at handles[offsets[i] + i:] */
KV_EXPORT void kv_run_events(const KvPolicy *p, void *st, const i64 *offsets, const i32 *blocks,
                             const i64 *input_length, i64 n, i64 block_size, const i64 *events, i64 num_events,
                             i64 *hit_blocks, i64 *held, i8 *refused, i64 *handles) {
    for (i64 q = 0; q < num_events; q++) {
        i64 e = events[q];
        if (e >= n) {
            i64 i = e - n;
            if (p->store_request != NULL)
                p->store_request(st, i, blocks, offsets[i], offsets[i + 1], input_length[i], block_size, handles,
                                 offsets[i] + i, held[i]);
        } else if (e >= 0) {
            KvStart r = kv_request_start(p, st, NULL, 0, NULL, e, blocks, NULL, offsets[e], offsets[e + 1],
                                         input_length[e], block_size, -1, handles, offsets[e] + e, NULL, NULL);
            hit_blocks[e] = r.hits;
            held[e] = r.held;
            refused[e] = (i8)r.refused;
        } else {
            i64 i = -e - 1;
            p->unpin_request(st, i, blocks, offsets[i], offsets[i + 1], input_length[i], block_size, handles,
                             offsets[i] + i, held[i]);
        }
    }
}

/* a policy's own_blocks (tests/policies/test_trtllm.py): -1 when it has none */
KV_EXPORT i64 kv_own_blocks(const KvPolicy *p, void *st, i64 start, i64 end, const i64 *handles, i64 base, i64 n) {
    return p->own_blocks == NULL ? -1 : p->own_blocks(st, start, end, handles, base, n);
}
