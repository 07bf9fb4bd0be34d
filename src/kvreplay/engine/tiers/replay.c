/* The sequential replay with tiers (kvreplay run --tiers): the driver's loop, the prefix scan
 * run through the tiers (engine/tiers/replay.py has the readable engine). */
#include "pools.h"

KV_EXPORT void kv_replay_tiers(const KvPolicy *p, void *st, KvTiers *t, const i64 *offsets, const i32 *blocks,
                               const i64 *input_length, i64 n, i64 block_size, i64 *hit_blocks, i64 *hit_tokens,
                               i64 *tier_hits) {
    i64 width = kv_tiers_count(t) + 1;
    for (i64 i = 0; i < n; i++) {
        i64 start = offsets[i], end = offsets[i + 1], L = input_length[i];
        i64 *counts = tier_hits + i * width;
        /* the hit limit first: a radix state's scan leaves its cursor where access_request continues */
        i64 limit = p->hit_limit(st, end - start, L, block_size);
        i64 k = 0;
        while (k < limit && p->resident(st, blocks[start + k])) k++;
        i64 k2 = kv_tier_prefix(p, st, t, 0, blocks, NULL, start, k, limit, counts, 1);
        hit_blocks[i] = k2;
        hit_tokens[i] = kv_min(k2 * block_size, L);
        p->access_request(st, i, blocks, start, end, k, L, block_size);
        kv_tier_admitted(t, 0, blocks, start, k, kv_cached_blocks(p, st, end - start, L, block_size), counts, NULL);
        kv_tier_drain(p, st, t, 0, NULL);
    }
}
