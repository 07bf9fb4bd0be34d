/* Reuse distances at each request's prefix scan (engine/distances.py says what they mean): a
 * Fenwick tree over access times marks each block's latest use, so the distinct blocks used since
 * time p are the marks after p. A request's distances are read before its own accesses mark. */
#include "../include/kv.h"

static inline i64 fenwick_sum(const i32 *tree, i64 i) {
    i64 total = 0;
    for (; i > 0; i -= i & -i) total += tree[i];
    return total;
}

static inline void fenwick_add(i32 *tree, i64 n, i64 i, i32 delta) {
    for (; i <= n; i += i & -i) tree[i] += delta;
}

/* out[j]: 1 + the distinct blocks used between the previous use of blocks[j] and the scan of its
 * request (-1: no earlier request used it). tree: accesses + 1 zeros; last: num_blocks zeros. */
KV_EXPORT void kv_scan_distances(const i64 *offsets, i64 n, const i32 *blocks, i32 *out, i32 *tree, i64 *last) {
    i64 accesses = offsets[n], marked = 0, t = 0;
    for (i64 i = 0; i < n; i++) {
        i64 start = offsets[i], end = offsets[i + 1];
        for (i64 j = start; j < end; j++) {
            i64 p = last[blocks[j]];
            out[j] = p == 0 ? -1 : (i32)(marked - fenwick_sum(tree, p) + 1);  /* <= the blocks: i32 */
        }
        for (i64 j = start; j < end; j++) {
            i64 p = last[blocks[j]];
            if (p == 0)
                marked++;
            else
                fenwick_add(tree, accesses, p, -1);
            t++;
            fenwick_add(tree, accesses, t, 1);
            last[blocks[j]] = t;
        }
    }
}
