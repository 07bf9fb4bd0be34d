/* The fast path of reading JSONL traces (jsonl.py): ';'-separated JSON lists of plain integers
 * ("[1, 2];[];[3]") into ids and per-list counts. Returns the number of ids, or -1 for anything
 * else (the caller then takes the validating path): a string, a float, a nested list, a number of
 * more than 18 digits. */
#include "../include/kv.h"

static inline int space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

KV_EXPORT i64 kv_parse_int_lists(const uint8_t *buf, i64 n, i64 *ids, i64 *counts, i64 lists) {
    i64 i = 0, found = 0;
    for (i64 k = 0; k < lists; k++) {
        if (k > 0) {
            if (i >= n || buf[i] != ';') return -1;
            i++;
        }
        if (i >= n || buf[i] != '[') return -1;
        i++;
        i64 count = 0;
        for (;;) {
            while (i < n && space(buf[i])) i++;
            if (i < n && buf[i] == ']' && count == 0) {  /* an empty list */
                i++;
                break;
            }
            i64 sign = 1;
            if (i < n && buf[i] == '-') {
                sign = -1;
                i++;
            }
            i64 digits = 0, value = 0;
            while (i < n && buf[i] >= '0' && buf[i] <= '9') {
                value = value * 10 + (buf[i] - '0');
                digits++;
                i++;
            }
            if (digits == 0 || digits > 18) return -1;
            ids[found++] = sign * value;
            count++;
            while (i < n && space(buf[i])) i++;
            if (i < n && buf[i] == ',') {
                i++;
                continue;
            }
            if (i < n && buf[i] == ']') {
                i++;
                break;
            }
            return -1;
        }
        counts[k] = count;
    }
    return i == n ? found : -1;
}
