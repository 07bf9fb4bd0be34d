/* LRU's state and operations (the rules and the reference engine: lru.py), shared by lru.c and
 * lru_tail.c (which accesses a request's blocks last to first over the same state). A doubly
 * linked list threaded through per-block prev/next arrays: head = least recently used. */
#ifndef KV_POLICIES_LRU_H
#define KV_POLICIES_LRU_H

#include "../include/list.h"
#include "../include/policy.h"

#define FIELDS(F) F(i8, cached) F(i32, prev) F(i32, next) F(i64, meta)
#define SLOTS(S) S(HEAD) S(TAIL) S(SIZE) S(CAPACITY) S(ADMISSIONS) S(EVICTIONS)
KV_STATE(LRU, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

static inline int lru_resident(LRU *st, i64 b) { return st->cached[b] != 0; }

static inline void lru_to_tail(LRU *st, i64 b) {
    kv_list_unlink(st->prev, st->next, &st->meta[HEAD], &st->meta[TAIL], b);
    kv_list_append(st->prev, st->next, &st->meta[HEAD], &st->meta[TAIL], b);
}

static inline __attribute__((always_inline)) void lru_access(LRU *st, i64 b, int holds) {
    i64 *m = st->meta;
    if (st->cached[b] != 0) {
        if (m[TAIL] != b) lru_to_tail(st, b);
        return;
    }
    if (m[SIZE] >= m[CAPACITY]) {
        if (holds && kv_refused_when_all_held(&st->h, m[SIZE])) return;
        i64 victim = m[HEAD];
        if (holds) {
            while (st->h.pins[victim] != 0) {  /* held: in use, so it becomes most recent */
                lru_to_tail(st, victim);
                victim = m[HEAD];
            }
        }
        kv_list_unlink(st->prev, st->next, &m[HEAD], &m[TAIL], victim);
        st->cached[victim] = 0;
        kv_log_eviction(&st->h, victim);
        m[SIZE] -= 1;
        m[EVICTIONS] += 1;
    }
    kv_list_append(st->prev, st->next, &m[HEAD], &m[TAIL], b);
    st->cached[b] = 1;
    m[SIZE] += 1;
    m[ADMISSIONS] += 1;
}

#endif
