/* The compiled half of base.py's contract that is not inlined: appending to the eviction log. */
#include "../include/holds.h"

KV_EXPORT const char kv_layout_holds[] = KV_HOLDS_SPEC " | hold=" HOLD_SLOTS(KV_SLOT_SPEC);

void kv_log_append(i64 *hold, i64 hold_n, i64 b) {
    i64 n = hold[LOG_COUNT];
    if (n < hold_n - LOG_HEAD) {
        hold[LOG_HEAD + n] = b;
        hold[LOG_COUNT] = n + 1;
    } else {
        hold[LOG_LOST] += 1;
    }
}

/* For tests: log_eviction on a bare hold array (tests/policies/test_eviction_log.py). */
KV_EXPORT void kv_log_eviction_into(i64 *hold, i64 hold_n, i64 b) {
    KvHolds h = {NULL, 0, hold, hold_n};
    kv_log_eviction(&h, b);
}
