/* Per-block facts in one pass over the accesses (index.py). */
#include "../include/kv.h"

/* for each block: the flat position of its first access (-1 if never used) and the block before
 * it in that request (-1 when it starts the request) */
KV_EXPORT void kv_first_access(const i64 *offsets, i64 n, const i32 *blocks, i64 *first, i32 *pred) {
    for (i64 i = 0; i < n; i++) {
        i64 previous = -1;
        for (i64 p = offsets[i]; p < offsets[i + 1]; p++) {
            i32 b = blocks[p];
            if (first[b] < 0) {
                first[b] = p;
                pred[b] = (i32)previous;
            }
            previous = b;
        }
    }
}
