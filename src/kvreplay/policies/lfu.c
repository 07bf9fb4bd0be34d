/* LFU's compiled operations (the rules, holds included, and the reference engine: lfu.py; this
 * is its numba code, line by line). Bucket f is a list (per-block prev/next, ends in
 * bucket_head[f] / bucket_tail[f]) of the resident blocks with frequency f, least recent at the
 * head; the victim is the head of bucket MIN_FREQ. freq[b] = 0: not resident. */
#include "../include/list.h"
#include "../include/policy.h"

#define FIELDS(F) F(i32, freq) F(i32, prev) F(i32, next) F(i32, bucket_head) F(i32, bucket_tail) F(i64, meta)
#define SLOTS(S) S(SIZE) S(CAPACITY) S(MIN_FREQ) S(ADMISSIONS) S(EVICTIONS)
KV_STATE(LFU, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

static inline int lfu_resident(LFU *st, i64 b) { return st->freq[b] != 0; }

static inline void lfu_unlink(LFU *st, i64 b, i64 f) {
    kv_list32_unlink(st->prev, st->next, &st->bucket_head[f], &st->bucket_tail[f], b);
}

static inline void lfu_append(LFU *st, i64 b, i64 f) {
    kv_list32_append(st->prev, st->next, &st->bucket_head[f], &st->bucket_tail[f], b);
    st->freq[b] = (i32)f;
}

/* The resident block without a hold that is least recent among the least frequent: bucket `low`
 * from its head (least recent) on, then the next frequencies; -1 if every block is held. */
static i64 lfu_unheld_victim(LFU *st, i64 low) {
    for (i64 f = low; f < st->bucket_head_n; f++) {
        i64 victim = st->bucket_head[f];
        while (victim >= 0) {
            if (st->h.pins[victim] == 0) return victim;
            victim = st->next[victim];
        }
    }
    return -1;
}

static inline __attribute__((always_inline)) void lfu_access(LFU *st, i64 b, int holds) {
    i64 *m = st->meta;
    i64 f = st->freq[b];
    if (f != 0) {
        lfu_unlink(st, b, f);
        if (st->bucket_head[f] < 0 && m[MIN_FREQ] == f) m[MIN_FREQ] = f + 1;  /* b itself is there now */
        lfu_append(st, b, f + 1);
        return;
    }
    if (m[SIZE] >= m[CAPACITY]) {
        if (holds && kv_refused_when_all_held(&st->h, m[SIZE])) return;
        /* The cache is full (capacity >= 1), so bucket MIN_FREQ is not empty. Held blocks are
         * skipped in place (MIN_FREQ stays right: they keep their frequencies). */
        i64 low = m[MIN_FREQ];
        i64 victim = st->bucket_head[low];
        if (holds && st->h.pins[victim] != 0) {
            victim = lfu_unheld_victim(st, low);
            low = st->freq[victim];
        }
        lfu_unlink(st, victim, low);
        st->freq[victim] = 0;
        kv_log_eviction(&st->h, victim);
        m[SIZE] -= 1;
        m[EVICTIONS] += 1;
    }
    lfu_append(st, b, 1);
    m[MIN_FREQ] = 1;
    m[SIZE] += 1;
    m[ADMISSIONS] += 1;
}

KV_BLOCK_POLICY(lfu, LFU, KV_LAYOUT(FIELDS, SLOTS), lfu_resident, lfu_access)
