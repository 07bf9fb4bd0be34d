/* The compiled half of base.py's contract that is not inlined: appending to the eviction log. */
#include "../include/holds.h"

void kv_log_append(i64 *hold, i64 hold_n, i64 b) {
    i64 n = hold[LOG_COUNT];
    if (n < hold_n - LOG_HEAD) {
        hold[LOG_HEAD + n] = b;
        hold[LOG_COUNT] = n + 1;
    } else {
        hold[LOG_LOST] += 1;
    }
}
