/* A Fenwick (binary indexed) tree over access times 1..n, for the one-pass analysis kernels
 * (analysis/mrc.c, analysis/stats.c): a 1 at time t marks a block's latest use, so the prefix sum
 * up to t counts the blocks last used at or before t. tree has n + 1 entries; tree[0] is unused. */
#ifndef KV_FENWICK_H
#define KV_FENWICK_H

#include "kv.h"

/* tree[1] + ... + tree[i] (i >= 0) */
static inline i64 kv_fenwick_sum(const i32 *tree, i64 i) {
    i64 total = 0;
    for (; i > 0; i -= i & -i) total += tree[i];
    return total;
}

/* add delta at position i (1 <= i <= n) */
static inline void kv_fenwick_add(i32 *tree, i64 n, i64 i, i32 delta) {
    for (; i <= n; i += i & -i) tree[i] += delta;
}

#endif
