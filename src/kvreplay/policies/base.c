/* The compiled half of base.py's contract that is not inlined: appending to the eviction log. */
#include "../include/holds.h"

void kv_log_append(KvHolds *h, i64 b) {
    i64 n = h->hold[LOG_COUNT];
    if (n < h->hold_n - LOG_HEAD) {
        h->hold[LOG_HEAD + n] = b;
        h->hold[LOG_COUNT] = n + 1;
    } else {
        h->hold[LOG_LOST] += 1;
    }
}
