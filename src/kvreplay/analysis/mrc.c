/* The one-pass exact LRU curve (analysis/mrc.py has the method and the plain-Python reference,
 * _histograms_reference, line for line).
 *
 * hit_tokens_at[d]: hit tokens that need a capacity of exactly d blocks (the running max of the
 * stack distances at a request's prefix scan); accesses_at[d]: accesses whose stack distance when
 * made is d. Index `never` (num_blocks + 1, the arrays' last) stands for a first access.
 * Scratch, zeroed or filled by Python: tree (num_accesses + 1 entries of 0), last (never entries
 * of -1: the access time of each block's latest use). told (NULL: none) hears how many
 * requests are done (include/progress.h). */
#include "../include/fenwick.h"
#include "../include/progress.h"

KV_EXPORT void kv_mrc_histograms(const i64 *offsets, i64 n, const i32 *blocks, const i64 *input_length,
                                 i64 block_size, i64 warmup, i64 *hit_tokens_at, i64 *accesses_at, i64 never,
                                 i32 *tree, i64 *last, kv_progress told) {
    i64 accesses = offsets[n], marked = 0, t = 0;
    for (i64 i = 0; i < n; i++) {
        i64 start = offsets[i], end = offsets[i + 1], length = input_length[i], running = 0;
        /* the prefix scan: before this request touches anything */
        for (i64 j = start; j < end; j++) {
            i64 p = last[blocks[j]];
            i64 d = p < 0 ? never : marked - kv_fenwick_sum(tree, p) + 1;
            if (d > running) running = d;
            if (i >= warmup) {
                i64 position = j - start;
                hit_tokens_at[running] += kv_min((position + 1) * block_size, length) -
                                          kv_min(position * block_size, length);
            }
        }
        /* the accesses, in order */
        for (i64 j = start; j < end; j++) {
            i32 b = blocks[j];
            i64 p = last[b];
            if (p < 0) {
                accesses_at[never] += 1;
                marked += 1;
            } else {
                accesses_at[marked - kv_fenwick_sum(tree, p) + 1] += 1;
                kv_fenwick_add(tree, accesses, p, -1);
            }
            t += 1;
            kv_fenwick_add(tree, accesses, t, 1);
            last[b] = t;
        }
        kv_tell(told, i + 1, n);
    }
}
