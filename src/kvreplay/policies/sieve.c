/* SIEVE's compiled operations (the rules, holds included, and the reference engine: sieve.py;
 * this is its numba code, line by line). The queue is threaded through per-block newer/older
 * arrays (-1 = none): head = newest, tail = oldest; the hand walks from tail to head. */
#include "../include/policy.h"

#define FIELDS(F) F(i8, cached) F(i8, visited) F(i32, newer) F(i32, older) F(i64, meta)
#define SLOTS(S) S(HEAD) S(TAIL) S(HAND) S(SIZE) S(CAPACITY) S(ADMISSIONS) S(EVICTIONS)
KV_STATE(SIEVE, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

static inline int sieve_resident(SIEVE *st, i64 b) { return st->cached[b] != 0; }

/* Evict one block: from the hand (the tail when it points at nothing), clear visited bits toward
 * the head, wrapping to the tail, until an unvisited block (unheld, with holds); the hand stays on
 * the block just newer than it. */
static inline __attribute__((always_inline)) void sieve_evict(SIEVE *st, i64 *m, int holds) {
    i8 *visited = st->visited;
    i32 *newer = st->newer, *older = st->older;
    const i32 *pins = st->h.pins;
    i64 o = m[HAND] >= 0 ? m[HAND] : m[TAIL];
    if (holds) {
        while (visited[o] != 0 || pins[o] != 0) {
            if (pins[o] == 0) visited[o] = 0;  /* held: in use, passed over in place with its bit kept */
            o = newer[o] >= 0 ? newer[o] : m[TAIL];
        }
    } else {
        while (visited[o] != 0) {
            visited[o] = 0;
            o = newer[o] >= 0 ? newer[o] : m[TAIL];
        }
    }
    i64 nw = newer[o], ol = older[o];
    m[HAND] = nw;
    if (nw >= 0) older[nw] = (i32)ol; else m[HEAD] = ol;
    if (ol >= 0) newer[ol] = (i32)nw; else m[TAIL] = nw;
    newer[o] = -1;
    older[o] = -1;
    st->cached[o] = 0;
    kv_log_eviction(&st->h, o);
    m[SIZE] -= 1;
    m[EVICTIONS] += 1;
}

static inline __attribute__((always_inline)) void sieve_access(SIEVE *st, i64 b, int holds) {
    if (st->cached[b] != 0) {
        st->visited[b] = 1;
        return;
    }
    i64 *m = st->meta;
    if (m[SIZE] >= m[CAPACITY]) {
        if (holds && kv_refused_when_all_held(&st->h, m[SIZE])) return;
        sieve_evict(st, m, holds);
    }
    i64 head = m[HEAD];
    st->newer[b] = -1;
    st->older[b] = (i32)head;
    if (head >= 0) st->newer[head] = (i32)b; else m[TAIL] = b;
    m[HEAD] = b;
    st->visited[b] = 0;
    st->cached[b] = 1;
    m[SIZE] += 1;
    m[ADMISSIONS] += 1;
}

KV_BLOCK_POLICY(sieve, SIEVE, KV_LAYOUT(FIELDS, SLOTS), sieve_resident, sieve_access)
