/* FIFO's compiled operations (the rules and the reference engine: fifo.py). A ring buffer of
 * resident blocks in admission order, never longer than the number of distinct blocks. */
#include "../include/policy.h"

#define FIELDS(F) F(i8, cached) F(i32, ring) F(i64, meta)
#define SLOTS(S) S(HEAD) S(SIZE) S(CAPACITY) S(ADMISSIONS) S(EVICTIONS)
KV_STATE(FIFO, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

static inline int fifo_resident(FIFO *st, i64 b) { return st->cached[b] != 0; }

static inline __attribute__((always_inline)) void fifo_access(FIFO *st, i64 b, int holds) {
    if (st->cached[b] != 0) return;
    i64 *m = st->meta;
    i32 *ring = st->ring;
    i64 n = st->ring_n;
    if (m[SIZE] >= m[CAPACITY]) {
        if (holds) {
            if (kv_refused_when_all_held(&st->h, m[SIZE])) return;
            while (st->h.pins[ring[m[HEAD]]] != 0) {  /* held: back to the tail (the ring is full) */
                ring[kv_wrap(m[HEAD] + m[SIZE], n)] = ring[m[HEAD]];
                m[HEAD] = kv_wrap(m[HEAD] + 1, n);
            }
        }
        i64 victim = ring[m[HEAD]];
        st->cached[victim] = 0;
        kv_log_eviction(&st->h, victim);
        m[HEAD] = kv_wrap(m[HEAD] + 1, n);
        m[SIZE] -= 1;
        m[EVICTIONS] += 1;
    }
    ring[kv_wrap(m[HEAD] + m[SIZE], n)] = (i32)b;
    m[SIZE] += 1;
    st->cached[b] = 1;
    m[ADMISSIONS] += 1;
}

KV_BLOCK_POLICY(fifo, FIFO, KV_LAYOUT(FIELDS, SLOTS), fifo_resident, fifo_access)
