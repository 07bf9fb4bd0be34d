/* ARC's compiled operations (the rules, Figure 4 case by case, and the reference engine: arc.py).
 * A block is in at most one of the four lists T1, T2, B1, B2, so all four are threaded through
 * the same per-block prev/next arrays; `where` says which list (NOWHERE = none). List L's head,
 * tail and size are meta[HEADS + L], meta[TAILS + L], meta[SIZES + L]. p is real: target[0].
 *
 * One state, with holds (arc.py's ARCState): the sequential replay runs the op built without
 * the hold checks (holds = 0), running requests the one with them; both log evictions. */
#include "../include/list.h"
#include "../include/policy.h"

#define FIELDS(F) F(i8, where) F(i32, prev) F(i32, next) F(f64, target) F(i64, meta)
#define SLOTS(S)                                                               \
    S(HEADS) S(T1_HEAD) S(T2_HEAD) S(B1_HEAD) S(B2_HEAD)                      \
    S(TAILS) S(T1_TAIL) S(T2_TAIL) S(B1_TAIL) S(B2_TAIL)                      \
    S(SIZES) S(T1_SIZE) S(T2_SIZE) S(B1_SIZE) S(B2_SIZE)                      \
    S(CAPACITY) S(ADMISSIONS) S(EVICTIONS) S(B1_HITS) S(B2_HITS)
KV_STATE(ARC, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };
enum { NOWHERE, T1, T2, B1, B2 };  /* `where` codes, which are also list ids */

/* The operations take the state's arrays as restrict pointers (each is its own numpy buffer):
 * otherwise every i8 store to `where` may alias meta, prev and next, and gcc reloads them. The
 * helpers get the same pointers passed on. */
#define ARC_ARRAYS i64 *restrict m, i8 *restrict where, i32 *restrict prev, i32 *restrict next
#define ARC_PASS m, where, prev, next

static inline int arc_resident(ARC *st, i64 b) {
    i8 w = st->where[b];
    return w == T1 || w == T2;
}

/* Take b out of its list, lst (where[b]: every caller knows it). */
static inline void arc_unlink(ARC_ARRAYS, i64 b, i64 lst) {
    kv_list_unlink(prev, next, &m[HEADS + lst], &m[TAILS + lst], b);
    m[SIZES + lst] -= 1;
    where[b] = NOWHERE;
}

/* Put b (in no list) at list lst's MRU end. */
static inline void arc_push_mru(ARC_ARRAYS, i64 b, i64 lst) {
    kv_list_append(prev, next, &m[HEADS + lst], &m[TAILS + lst], b);
    m[SIZES + lst] += 1;
    where[b] = (i8)lst;
}

/* The reference's _unheld_lru: list lst's least recent unheld block, each held block before it
 * moved to lst's MRU end; -1 when every block of lst is held (lst is then as it was). */
static i64 arc_unheld_lru(ARC_ARRAYS, const i32 *restrict pins, i64 lst) {
    for (i64 k = 0, size = m[SIZES + lst]; k < size; k++) {
        i64 victim = m[HEADS + lst];
        if (pins[victim] == 0) return victim;
        arc_unlink(ARC_PASS, victim, lst);
        arc_push_mru(ARC_PASS, victim, lst);
    }
    return -1;
}

/* REPLACE(x, p): T1's LRU block to B1 when |T1| > p (or x in B2 and |T1| == p), else T2's LRU
 * block to B2; with holds, held blocks are passed over, and a list all held gives way to the other. */
static inline __attribute__((always_inline)) void arc_replace(KvHolds *h, ARC_ARRAYS, const f64 *restrict target,
                                                              int x_in_b2, int holds) {
    m[EVICTIONS] += 1;
    i64 t1 = m[SIZES + T1];
    f64 p = target[0];
    i64 source, ghost;
    if (t1 > 0 && ((f64)t1 > p || (x_in_b2 && (f64)t1 == p))) {
        source = T1;
        ghost = B1;
    } else {
        source = T2;
        ghost = B2;
    }
    i64 victim = m[HEADS + source];
    if (holds && (victim < 0 || h->pins[victim] != 0)) {  /* held (rare): skip held blocks, else the other list */
        victim = arc_unheld_lru(ARC_PASS, h->pins, source);
        if (victim < 0) {
            source = T1 + T2 - source;
            ghost = B1 + B2 - ghost;
            victim = arc_unheld_lru(ARC_PASS, h->pins, source);
        }
    }
    arc_unlink(ARC_PASS, victim, source);
    arc_push_mru(ARC_PASS, victim, ghost);
    kv_log_eviction(h, victim);
}

/* The cases of the reference, arranged as arc.py's op: each list operation written once. */
static inline __attribute__((always_inline)) void arc_access_in(KvHolds *h, ARC_ARRAYS, f64 *restrict target, i64 b,
                                                                int holds) {
    i8 w = where[b];
    if (w == T2 && m[TAILS + T2] == b) return;  /* Case I, already the MRU block of T2 */
    i64 c = m[CAPACITY];
    if (holds && w != T1 && w != T2 && kv_refused_when_all_held(h, c)) return;  /* a miss, all c held */
    int replace = 0;
    i64 drop = -1, drop_from = NOWHERE;  /* Case IV: a ghost id dropped from the directory, or T1's LRU block deleted */
    if (w == B1) {  /* Case II */
        m[B1_HITS] += 1;
        i64 b1 = m[SIZES + B1], b2 = m[SIZES + B2];
        f64 delta = b1 >= b2 ? 1.0 : (f64)b2 / (f64)b1;
        f64 p = target[0] + delta, cf = (f64)c;
        target[0] = p < cf ? p : cf;  /* min(c, p + delta) */
        replace = 1;
    } else if (w == B2) {  /* Case III */
        m[B2_HITS] += 1;
        i64 b1 = m[SIZES + B1], b2 = m[SIZES + B2];
        f64 delta = b2 >= b1 ? 1.0 : (f64)b1 / (f64)b2;
        f64 p = target[0] - delta;
        target[0] = p > 0.0 ? p : 0.0;  /* max(0, p - delta) */
        replace = 1;
    } else if (w == NOWHERE) {  /* Case IV */
        m[ADMISSIONS] += 1;
        i64 t1 = m[SIZES + T1], b1 = m[SIZES + B1];
        if (t1 + b1 == c) {  /* Case A */
            if (t1 < c) {
                drop = m[HEADS + B1];
                drop_from = B1;
                replace = 1;
            } else {
                drop = m[HEADS + T1];
                drop_from = T1;
                if (holds && h->pins[drop] != 0) drop = arc_unheld_lru(ARC_PASS, h->pins, T1);
                kv_log_eviction(h, drop);  /* deleted outright below: resident no more */
                m[EVICTIONS] += 1;
            }
        } else {  /* Case B: |L1| < c */
            i64 total = t1 + b1 + m[SIZES + T2] + m[SIZES + B2];
            if (total >= c) {
                if (total == 2 * c) {
                    drop = m[HEADS + B2];
                    drop_from = B2;
                }
                replace = 1;
            }
        }
    }
    if (drop >= 0) arc_unlink(ARC_PASS, drop, drop_from);
    if (replace) arc_replace(h, ARC_PASS, target, w == B2, holds);
    if (w == NOWHERE) {
        arc_push_mru(ARC_PASS, b, T1);
    } else {  /* Cases I-III: the block leaves its list (after REPLACE, as in the paper) for T2's MRU end */
        arc_unlink(ARC_PASS, b, w);  /* (REPLACE moved another block: b is still in w) */
        arc_push_mru(ARC_PASS, b, T2);
    }
}

static inline __attribute__((always_inline)) void arc_access(ARC *st, i64 b, int holds) {
    arc_access_in(&st->h, st->meta, st->where, st->prev, st->next, st->target, b, holds);
}

KV_BLOCK_POLICY(arc, ARC, KV_LAYOUT(FIELDS, SLOTS), arc_resident, arc_access)
