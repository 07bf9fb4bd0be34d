/* Holds of running requests and the eviction log: the compiled half of policies/base.py's
 * contract (the rules are written there, once).
 *
 * Every policy state starts with KvHolds: ``pins`` (per block id: holds on it) and ``hold``
 * (HELD: blocks with at least one hold; REFUSALS; RELEASES: last holds removed, so a policy that
 * scans for an unheld block can skip the scan while nothing was released since it found none).
 * A ``hold`` longer than LOG_HEAD carries the eviction log: LOG_COUNT blocks logged since the last
 * take, LOG_LOST blocks that found it full, the log itself from LOG_HEAD on.
 */
#ifndef KV_HOLDS_H
#define KV_HOLDS_H

#include "kv.h"

typedef struct {
    KV_FIELD(i32, pins)
    KV_FIELD(i64, hold)
} KvHolds;

#define KV_HOLDS_SPEC " pins:i4 hold:i8"

#define HOLD_SLOTS(S) S(HELD) S(REFUSALS) S(RELEASES) S(LOG_COUNT) S(LOG_LOST)
enum { HOLD_SLOTS(KV_SLOT_ENUM) LOG_HEAD };

/* One more hold on resident block b. */
static inline void kv_pin(KvHolds *h, i32 b) {
    if (h->pins[b] == 0) h->hold[HELD] += 1;
    h->pins[b] += 1;
}

/* One hold less on b. */
static inline void kv_unpin(KvHolds *h, i32 b) {
    h->pins[b] -= 1;
    if (h->pins[b] == 0) {
        h->hold[HELD] -= 1;
        h->hold[RELEASES] += 1;
    }
}

/* The default release of a request's holds: its n handles (block ids), first to last. */
static inline void kv_unpin_handles(KvHolds *h, const i64 *handles, i64 base, i64 n) {
    for (i64 k = 0; k < n; k++) kv_unpin(h, (i32)handles[base + k]);
}

static inline void kv_refuse(KvHolds *h) { h->hold[REFUSALS] += 1; }

/* The contract's refusal: when all `resident` blocks are held, count a refusal and say so. */
static inline int kv_refused_when_all_held(KvHolds *h, i64 resident) {
    if (h->hold[HELD] >= resident) {
        kv_refuse(h);
        return 1;
    }
    return 0;
}

/* Append b to the eviction log (hold[LOG_HEAD:]), or count it lost when the log is full. Kept out
 * of line: it runs only when the log is on. */
static __attribute__((noinline, unused)) void kv_log_append(i64 *hold, i64 hold_n, i64 b) {
    i64 n = hold[LOG_COUNT];
    if (n < hold_n - LOG_HEAD) {
        hold[LOG_HEAD + n] = b;
        hold[LOG_COUNT] = n + 1;
    } else {
        hold[LOG_LOST] += 1;
    }
}

/* Block b has just stopped being resident by an eviction: log it when the log is on (one
 * compare, marked unlikely, when it is off). */
static inline void kv_log_eviction(KvHolds *h, i64 b) {
    if (KV_UNLIKELY(h->hold_n > LOG_HEAD)) kv_log_append(h->hold, h->hold_n, b);
}

#endif
