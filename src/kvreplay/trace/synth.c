/* The two loops of the synthetic workload generator that are not vectorised (trace/synth.py has
 * the plain-Python references, _parents_reference and _copy_prefixes_reference, line for line). */
#include "../include/kv.h"

/* Per request: hit_blocks = the infinite cache's hit blocks k, parent = the latest earlier request
 * that accessed its k-th block (-1 when k = 0). Scratch: last (num_blocks entries of -1). */
KV_EXPORT void kv_synth_parents(const i64 *offsets, i64 n, const i32 *blocks, i64 *hit_blocks, i64 *parent,
                                i64 *last) {
    for (i64 i = 0; i < n; i++) {
        i64 start = offsets[i], end = offsets[i + 1], k = 0;
        while (start + k < end && last[blocks[start + k]] >= 0) k++;
        hit_blocks[i] = k;
        parent[i] = k > 0 ? last[blocks[start + k - 1]] : -1;
        for (i64 j = start; j < end; j++) last[blocks[j]] = i;
    }
}

/* Fill `blocks`: request j copies the first min(shared[j], len(parent)) blocks of its parent (the
 * request distance[j] before it, or the nearest one before that holding shared[j] blocks, within
 * `search` requests; else the longest of those), then takes fresh ids. Returns the ids used. */
KV_EXPORT i64 kv_synth_copy_prefixes(const i64 *num_blocks_of, const i64 *shared, const i64 *distance,
                                     const i64 *offsets, i64 n, i64 *blocks, i64 search) {
    i64 next_id = 0;
    for (i64 j = 0; j < n; j++) {
        i64 start = offsets[j], take = 0;
        if (shared[j] > 0 && j - distance[j] >= 0) {
            i64 best = -1, best_len = -1, q = j - distance[j], stop = kv_max(q - search, -1);
            for (; q > stop; q--) {
                if (num_blocks_of[q] >= shared[j]) {
                    best = q;
                    best_len = num_blocks_of[q];
                    break;
                }
                if (num_blocks_of[q] > best_len) {
                    best = q;
                    best_len = num_blocks_of[q];
                }
            }
            if (best >= 0) {
                take = kv_min(kv_min(shared[j], best_len), offsets[j + 1] - start); /* (shared[j] <= its length) */
                for (i64 t = 0; t < take; t++) blocks[start + t] = blocks[offsets[best] + t];
            }
        }
        for (i64 t = start + take; t < offsets[j + 1]; t++) blocks[t] = next_id++;
    }
    return next_id;
}
