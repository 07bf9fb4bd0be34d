/* CLOCK's compiled operations (the rules, holds included, and the reference engine: clock.py;
 * this is its numba code, line by line). A ring of min(capacity, num_blocks) frames; the counter
 * lives per block. */
#include "../include/policy.h"

#define FIELDS(F) F(i8, cached) F(i8, count) F(i32, frames) F(i64, meta)
#define SLOTS(S) S(HAND) S(SIZE) S(CAPACITY) S(MAX_COUNT) S(ADMISSIONS) S(EVICTIONS) S(SECOND_CHANCES)
KV_STATE(Clock, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

static inline int clock_resident(Clock *st, i64 b) { return st->cached[b] != 0; }

static inline __attribute__((always_inline)) void clock_access(Clock *st, i64 b, int holds) {
    i64 *m = st->meta;
    i8 *count = st->count;
    if (st->cached[b] != 0) {
        if (count[b] < m[MAX_COUNT]) count[b] += 1;
        return;
    }
    i32 *frames = st->frames;
    if (m[SIZE] < m[CAPACITY]) {  /* a free frame: fill it, the hand stays */
        m[ADMISSIONS] += 1;
        st->cached[b] = 1;
        count[b] = 0;
        frames[m[SIZE]] = (i32)b;
        m[SIZE] += 1;
        return;
    }
    if (holds && kv_refused_when_all_held(&st->h, m[SIZE])) return;
    m[ADMISSIONS] += 1;
    st->cached[b] = 1;
    count[b] = 0;
    i64 n = st->frames_n;
    i64 hand = m[HAND];
    if (holds) {
        const i32 *pins = st->h.pins;
        while (count[frames[hand]] >= 1 || pins[frames[hand]] != 0) {
            if (pins[frames[hand]] == 0) {  /* held: in use, skipped with its counter kept */
                count[frames[hand]] -= 1;
                m[SECOND_CHANCES] += 1;
            }
            hand = hand + 1 < n ? hand + 1 : 0;
        }
    } else {
        while (count[frames[hand]] >= 1) {
            count[frames[hand]] -= 1;
            m[SECOND_CHANCES] += 1;
            hand = hand + 1 < n ? hand + 1 : 0;
        }
    }
    st->cached[frames[hand]] = 0;
    kv_log_eviction(&st->h, frames[hand]);
    m[EVICTIONS] += 1;
    frames[hand] = (i32)b;
    m[HAND] = hand + 1 < n ? hand + 1 : 0;
}

KV_BLOCK_POLICY(clock, Clock, KV_LAYOUT(FIELDS, SLOTS), clock_resident, clock_access)
