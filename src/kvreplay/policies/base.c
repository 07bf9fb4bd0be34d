/* The compiled half of base.py's contract kept out of the headers: the layout of the holds, and a
 * test's entry to the eviction log (include/holds.h). */
#include "../include/holds.h"

KV_EXPORT const char kv_layout_holds[] = KV_HOLDS_SPEC " | hold=" HOLD_SLOTS(KV_SLOT_SPEC);

/* For tests: log_eviction on a bare hold array (tests/policies/test_eviction_log.py). */
KV_EXPORT void kv_log_eviction_into(i64 *hold, i64 hold_n, i64 b) {
    KvHolds h = {NULL, 0, hold, hold_n};
    kv_log_eviction(&h, b);
}
