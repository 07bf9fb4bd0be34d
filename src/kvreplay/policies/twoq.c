/* 2Q's compiled operations (the rules and the reference engine: twoq.py). A1in is a ring buffer
 * (it only pops its head and pushes its tail); Am (LRU) and A1out (ghost FIFO, removal from the
 * middle on a ghost hit) are lists threaded through one pair of per-block prev/next arrays, as a
 * block is in at most one of them. */
#include "../include/list.h"
#include "../include/policy.h"
#include "../include/ring.h"

#define FIELDS(F) F(i8, where) F(i32, a1in) F(i32, prev) F(i32, next) F(i64, meta)
#define SLOTS(S)                                                                                     \
    S(A1IN_HEAD) S(A1IN_SIZE) S(AM_HEAD) S(AM_TAIL) S(AM_SIZE) S(OUT_HEAD) S(OUT_TAIL) S(OUT_SIZE) \
    S(CAPACITY) S(KIN_CAP) S(KOUT_CAP) S(ADMISSIONS) S(GHOST_HITS) S(EVICTIONS) S(AM_EVICTIONS)
KV_STATE(TwoQ, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };
enum { NOWHERE, IN_A1IN, IN_AM, IN_A1OUT };  /* `where` codes */

static inline int twoq_resident(TwoQ *st, i64 b) {
    i8 w = st->where[b];
    return w == IN_A1IN || w == IN_AM;
}

/* The operations take the state's arrays as restrict pointers (every array is its own numpy
 * buffer): without them each i8 store to `where` may alias meta, prev and next, and gcc reloads
 * them. Helpers get the same pointers passed on. */

/* ---- holds: the rare paths, compiled apart and called only by the op of running requests ---- */

/* Held heads of A1in go back to its tail until the head is unheld: 1; 0 when every block of A1in
 * is held (one pass, order unchanged) or A1in is empty. */
static int twoq_a1in_requeue_held(i64 *restrict m, i32 *restrict ring, i64 n, const i32 *restrict pins) {
    return kv_ring_requeue_held(ring, n, &m[A1IN_HEAD], m[A1IN_SIZE], pins);
}

/* Am's held least recent blocks move to its most recent end until the least recent one is
 * unheld: 1; 0 when every block of Am is held (one pass, order unchanged) or Am is empty. */
static int twoq_am_requeue_held(i64 *restrict m, i32 *restrict prev, i32 *restrict next, const i32 *restrict pins) {
    for (i64 k = 0, size = m[AM_SIZE]; k < size; k++) {
        i64 victim = m[AM_HEAD];
        if (pins[victim] == 0) return 1;
        kv_list_unlink(prev, next, &m[AM_HEAD], &m[AM_TAIL], victim);
        kv_list_append(prev, next, &m[AM_HEAD], &m[AM_TAIL], victim);
    }
    return 0;
}

/* With holds, the queue a reclaim evicts from (1: A1in), its first block unheld: held blocks of
 * the chosen queue are requeued; if it holds only held blocks, the other queue gives up its first
 * unheld block instead (there is one: the miss was not refused). */
static int twoq_reclaim_from_a1in(i64 *restrict m, i32 *restrict prev, i32 *restrict next, i32 *restrict ring, i64 n,
                                  const i32 *restrict pins, int from_a1in) {
    if (from_a1in) {
        if (twoq_a1in_requeue_held(m, ring, n, pins)) return 1;
        twoq_am_requeue_held(m, prev, next, pins);
        return 0;
    }
    if (twoq_am_requeue_held(m, prev, next, pins)) return 0;
    twoq_a1in_requeue_held(m, ring, n, pins);
    return 1;
}

/* Make room for one block when the cache is full: A1in's head to A1out (beyond kin_cap), else
 * Am's least recent block, not remembered. */
static inline __attribute__((always_inline)) void twoq_reclaim(KvHolds *h, i64 *restrict m, i8 *restrict where,
                                                               i32 *restrict prev, i32 *restrict next,
                                                               i32 *restrict ring, i64 n, int holds) {
    if (m[A1IN_SIZE] + m[AM_SIZE] < m[CAPACITY]) return;
    m[EVICTIONS] += 1;
    int from_a1in = m[A1IN_SIZE] > m[KIN_CAP];
    if (holds) from_a1in = twoq_reclaim_from_a1in(m, prev, next, ring, n, h->pins, from_a1in);
    if (from_a1in) {
        i64 y = ring[m[A1IN_HEAD]];
        m[A1IN_HEAD] = kv_wrap(m[A1IN_HEAD] + 1, n);
        m[A1IN_SIZE] -= 1;
        kv_log_eviction(h, y);
        if (m[OUT_SIZE] >= m[KOUT_CAP]) {
            i64 oldest = m[OUT_HEAD];
            kv_list_unlink(prev, next, &m[OUT_HEAD], &m[OUT_TAIL], oldest);
            m[OUT_SIZE] -= 1;
            where[oldest] = NOWHERE;
        }
        kv_list_append(prev, next, &m[OUT_HEAD], &m[OUT_TAIL], y);
        m[OUT_SIZE] += 1;
        where[y] = IN_A1OUT;
    } else {
        i64 victim = m[AM_HEAD];
        kv_list_unlink(prev, next, &m[AM_HEAD], &m[AM_TAIL], victim);
        m[AM_SIZE] -= 1;
        where[victim] = NOWHERE;
        kv_log_eviction(h, victim);
        m[AM_EVICTIONS] += 1;
    }
}

static inline __attribute__((always_inline)) void twoq_access_in(KvHolds *h, i64 *restrict m, i8 *restrict where,
                                                                  i32 *restrict prev, i32 *restrict next,
                                                                  i32 *restrict ring, i64 n, i64 b, int holds) {
    i8 w = where[b];
    if (w == IN_AM) {
        if (m[AM_TAIL] != b) {
            kv_list_unlink(prev, next, &m[AM_HEAD], &m[AM_TAIL], b);
            kv_list_append(prev, next, &m[AM_HEAD], &m[AM_TAIL], b);
        }
        return;
    }
    if (w == IN_A1IN) return;
    /* a miss */
    if (holds && kv_refused_when_all_held(h, m[CAPACITY])) return;  /* full and all held */
    if (w == IN_A1OUT) {
        kv_list_unlink(prev, next, &m[OUT_HEAD], &m[OUT_TAIL], b);
        m[OUT_SIZE] -= 1;
        where[b] = NOWHERE;
        m[GHOST_HITS] += 1;
    } else {
        m[ADMISSIONS] += 1;
    }
    twoq_reclaim(h, m, where, prev, next, ring, n, holds);
    if (w == IN_A1OUT) {
        kv_list_append(prev, next, &m[AM_HEAD], &m[AM_TAIL], b);
        m[AM_SIZE] += 1;
        where[b] = IN_AM;
    } else {
        ring[kv_wrap(m[A1IN_HEAD] + m[A1IN_SIZE], n)] = (i32)b;
        m[A1IN_SIZE] += 1;
        where[b] = IN_A1IN;
    }
}

static inline __attribute__((always_inline)) void twoq_access(TwoQ *st, i64 b, int holds) {
    twoq_access_in(&st->h, st->meta, st->where, st->prev, st->next, st->a1in, st->a1in_n, b, holds);
}

KV_BLOCK_POLICY(twoq, TwoQ, KV_LAYOUT(FIELDS, SLOTS), twoq_resident, twoq_access)
