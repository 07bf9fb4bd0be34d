/* One request's start among overlapping requests (engine/driver.c): the only place that scans a
 * prefix and pins it; the overlapping-requests driver and the serving simulator's admission
 * (serving/kernel/requests.c) both start requests through it. */
#ifndef KV_ENGINE_DRIVER_H
#define KV_ENGINE_DRIVER_H

#include "../include/policy.h"
#include "tiers/pools.h"

typedef struct {
    i64 hits;    /* the longest resident prefix in the cache (blocks) */
    i64 reach;   /* with the tiers below it (blocks) */
    i64 held;    /* blocks it holds */
    int refused; /* the start was refused (what it holds, the caller releases) */
    f64 load_s;  /* seconds to load the blocks read from the tiers */
} KvStart;

/* Start request `request` over positions [start, end): the prefix scan, then (with tiers) how far
 * it reaches through them, then pin_request. `local`: the policy state's ids of those positions
 * (NULL: `blocks`, the trace's ids, which the tiers use); `to_global`: local ids back to the trace's.
 * counts (T + 1 entries) gets the blocks read per tier; row, when given, a copy. The scan stops
 * after max_hits blocks (a negative max_hits: no such bound). */
KvStart kv_request_start(const KvPolicy *p, void *st, KvTiers *tiers, i64 instance, const i32 *to_global, i64 request,
                         const i32 *blocks, const i32 *local, i64 start, i64 end, i64 input_length, i64 block_size,
                         i64 max_hits, i64 *handles, i64 base, i64 *counts, i64 *row);

#endif
