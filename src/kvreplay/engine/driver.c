/* The replay drivers (engine/driver.py and engine/lifecycle.py say what they do):
 *
 * - kv_replay: the sequential replay, the spec's loop, instantiated per policy (KV_REPLAY);
 * - kv_request_start: one request's start among overlapping ones: the prefix scan, then
 *   pin_request; the serving simulator's admission goes through it too;
 * - kv_run_events: starts and finishes in any order (engine/lifecycle.py's events). */
#include "../include/policy.h"
#include "driver.h"

KV_EXPORT void kv_replay(const KvPolicy *p, void *st, const i64 *offsets, const i32 *blocks,
                         const i64 *input_length, i64 n, i64 block_size, i64 *hit_blocks, i64 *hit_tokens) {
    p->replay(st, offsets, blocks, input_length, n, block_size, hit_blocks, hit_tokens);
}

/* Request i alone, as the loop body of a replay (its scan, then its access phase): for tests
 * that look at a policy between requests. */
KV_EXPORT void kv_one_request(const KvPolicy *p, void *st, const i64 *offsets, const i32 *blocks,
                              const i64 *input_length, i64 block_size, i64 i, i64 *hit_blocks) {
    i64 start = offsets[i], end = offsets[i + 1];
    i64 k = kv_prefix(p, st, blocks, start, end, input_length[i], block_size);
    p->access_request(st, i, blocks, start, end, k, input_length[i], block_size);
    hit_blocks[0] = k;
}

i64 kv_request_start(const KvPolicy *p, void *st, i64 request, const i32 *blocks, i64 start, i64 end,
                     i64 input_length, i64 block_size, i64 *handles, i64 base, i64 *held, int *refused) {
    KvHolds *h = (KvHolds *)st;
    i64 k = kv_prefix(p, st, blocks, start, end, input_length, block_size);
    i64 refusals = h->hold[REFUSALS];
    *held = p->pin_request(st, request, blocks, start, end, k, input_length, block_size, handles, base);
    *refused = h->hold[REFUSALS] != refusals;
    return k;
}

/* events: e >= 0 starts request e, e < 0 finishes request -e - 1; request i's handles live at
 * handles[offsets[i] + i:] */
KV_EXPORT void kv_run_events(const KvPolicy *p, void *st, const i64 *offsets, const i32 *blocks,
                             const i64 *input_length, i64 block_size, const i64 *events, i64 num_events,
                             i64 *hit_blocks, i64 *held, i8 *refused, i64 *handles) {
    for (i64 q = 0; q < num_events; q++) {
        i64 e = events[q];
        if (e >= 0) {
            int r;
            hit_blocks[e] = kv_request_start(p, st, e, blocks, offsets[e], offsets[e + 1], input_length[e], block_size,
                                             handles, offsets[e] + e, &held[e], &r);
            refused[e] = (i8)r;
        } else {
            i64 i = -e - 1;
            p->unpin_request(st, i, blocks, offsets[i], offsets[i + 1], input_length[i], block_size, handles,
                             offsets[i] + i, held[i]);
        }
    }
}
