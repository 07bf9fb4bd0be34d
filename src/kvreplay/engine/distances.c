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

/* The marks' slots (all `size` in use) renumbered 1..live in their order (owner[s]: the block whose latest use slot s
 * marks, -1 for a slot unmarked since), the tree rebuilt over them; returns live. */
static i64 renumber(i32 *tree, i32 *owner, i64 size, i32 *last) {
    i64 live = 0;
    for (i64 s = 1; s <= size; s++) {
        if (owner[s] < 0) continue;
        owner[++live] = owner[s];
        last[owner[live]] = (i32)live;
    }
    for (i64 s = 1; s <= size; s++) { /* a Fenwick tree over ones at 1..live: node s sums (s - lowbit, s] */
        if (s > live) owner[s] = -1;
        tree[s] = (i32)kv_max(0, kv_min(s, live) - (s - (s & -s)));
    }
    return live;
}

/* out[q]: kv_scan_distances's distance of the access at flat position at[q] (ascending), without a
 * slot per access: the tree has `size` slots (more than the blocks the trace uses), and when they
 * run out the live marks (one per block used so far) are renumbered in order, which leaves every
 * count of marks after a block's latest use unchanged. tree: size + 1 zeros; owner: size + 1
 * times -1; last: num_blocks zeros. */
KV_EXPORT void kv_distances_at(const i64 *offsets, i64 n, const i32 *blocks, const i64 *at, i64 count, i32 *out,
                               i32 *tree, i32 *owner, i64 size, i32 *last) {
    i64 marked = 0, t = 0, q = 0;
    for (i64 i = 0; i < n; i++) {
        i64 start = offsets[i], end = offsets[i + 1];
        for (; q < count && at[q] < end; q++) {
            i64 p = last[blocks[at[q]]];
            out[q] = p == 0 ? -1 : (i32)(marked - fenwick_sum(tree, p) + 1);
        }
        for (i64 j = start; j < end; j++) {
            if (t == size) t = renumber(tree, owner, size, last);
            i64 p = last[blocks[j]];
            if (p == 0) {
                marked++;
            } else {
                fenwick_add(tree, size, p, -1);
                owner[p] = -1;
            }
            t++;
            fenwick_add(tree, size, t, 1);
            owner[t] = blocks[j];
            last[blocks[j]] = (i32)t;
        }
    }
}
