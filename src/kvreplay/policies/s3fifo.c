/* S3FIFO's compiled operations (the rules, holds included, and the reference engine: s3fifo.py;
 * this is its numba code, line by line).
 *
 * S and M are ring buffers (they only pop the head and push the tail). G also loses entries from
 * the middle (a ghost hit), so it is a ring with lazy deletion: the entry at ring index i is live
 * iff its block is still IN_GHOST and ghost_slot[block] == i; a ghost hit just changes `where`,
 * and the dead entry is skipped when it reaches the head. A full ring is compacted (live entries
 * are at most half of it, so that is amortised O(1)).
 *
 * The access op is built twice from one body (KV_BLOCK_POLICY's `holds` constant): without holds
 * for the sequential replay (every hold check folds away, S never exceeds small_cap, M_LIMIT is
 * main_cap) and with them for running requests, whose rare paths are the plain static functions
 * below. */
#include "../include/policy.h"
#include "../include/ring.h"

#define FIELDS(F) F(i8, where) F(i8, freq) F(i32, small) F(i32, main) F(i32, ghost) F(i32, ghost_slot) F(i64, meta)
#define SLOTS(S)                                                                                    \
    S(S_HEAD) S(S_SIZE) S(M_HEAD) S(M_SIZE) S(G_HEAD) S(G_COUNT) S(G_SIZE)                          \
    S(SMALL_CAP) S(MAIN_CAP) S(GHOST_CAP) S(MAX_FREQ) S(GHOST_FREQ)                                 \
    S(ADMISSIONS) S(PROMOTIONS) S(GHOST_HITS) S(REQUEUES) S(EVICTIONS) S(M_LIMIT) S(S_ALL_HELD)
KV_STATE(S3FIFO, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };
/* where a block is */
enum { NOWHERE, IN_SMALL, IN_MAIN, IN_GHOST };

static inline int s3fifo_resident(S3FIFO *st, i64 b) {
    i64 w = st->where[b];
    return w == IN_SMALL || w == IN_MAIN;
}

/* Keep only the live entries, in order, from the head on. */
static void ghost_compact(S3FIFO *st) {
    i64 *m = st->meta;
    i32 *ring = st->ghost;
    const i8 *where = st->where;
    i32 *slot = st->ghost_slot;
    i64 n = st->ghost_n;
    i64 head = m[G_HEAD];
    i64 w = head;
    for (i64 k = 0, count = m[G_COUNT]; k < count; k++) {
        i64 i = kv_wrap(head + k, n);
        i32 v = ring[i];
        if (where[v] == IN_GHOST && slot[v] == i) {
            ring[w] = v;
            slot[v] = (i32)w;
            w = kv_wrap(w + 1, n);
        }
    }
    m[G_COUNT] = m[G_SIZE];
}

/* Block b leaves S or M for G: an eviction (logged). The ring's slots are kept in locals (for the
 * compiler, the i8 stores to `where` could change them) and written back once, before a
 * compaction and at the end; the loop that drops the oldest entry is numba's _ghost_drop_oldest
 * (pop ring entries from the head until one live entry is gone, dead ones skipped) on those
 * locals: as a function of its own it made the replay up to 20% slower. */
static inline void ghost_insert(S3FIFO *st, i64 b) {
    i64 *m = st->meta;
    i8 *where = st->where;
    i32 *ring = st->ghost, *slot = st->ghost_slot;
    i64 n = st->ghost_n;
    m[EVICTIONS] += 1;
    kv_log_eviction(&st->h, b);  /* b leaves S or M: resident no more */
    i64 head = m[G_HEAD], count = m[G_COUNT], size = m[G_SIZE];
    if (where[b] == IN_GHOST) {  /* re-enters at the tail (not reached from S or M, kept for the spec) */
        where[b] = NOWHERE;
        size -= 1;
    } else if (size >= m[GHOST_CAP]) {
        while (count > 0) {  /* _ghost_drop_oldest */
            i64 i = head;
            i32 v = ring[i];
            head = kv_wrap(i + 1, n);
            count -= 1;
            if (where[v] == IN_GHOST && slot[v] == i) {
                where[v] = NOWHERE;
                size -= 1;
                break;
            }
        }
    }
    if (count == n) {
        m[G_HEAD] = head;
        m[G_COUNT] = count;
        m[G_SIZE] = size;
        ghost_compact(st);
        count = m[G_COUNT];
    }
    i64 i = kv_wrap(head + count, n);
    ring[i] = (i32)b;
    slot[b] = (i32)i;
    m[G_HEAD] = head;
    m[G_COUNT] = count + 1;
    m[G_SIZE] = size + 1;
    where[b] = IN_GHOST;
}

/* ---- holds: the rare paths, compiled once each and only into the op of running requests ---- */

/* ghost_insert for the rare paths: compiled once, not pasted into each of them. */
static void to_ghost(S3FIFO *st, i64 b) { ghost_insert(st, b); }

/* M's held heads go back to its tail (in use: freq kept) until its head is unheld: 1; 0 when M
 * holds only held blocks (one pass, order unchanged) or none. */
static int main_requeue_held(S3FIFO *st) {
    return kv_ring_requeue_held(st->main, st->main_n, &st->meta[M_HEAD], st->meta[M_SIZE], st->h.pins);
}

/* The start of a miss with holds: where b is (< 0: refused), and *fb its freq if it enters S.
 * Refused when every resident block is held and the cache is full: nothing can make room (held
 * blocks are resident and never more than the capacity, so one comparison says both). A ghost
 * hit when M is at its limit with only held blocks (or none) leaves G and waits in S with freq
 * ghost_freq: M gives up nothing (a ghost hit, not an admission: the admission to S counts one,
 * so it is taken back here). */
static i64 miss_held(S3FIFO *st, i64 b, i64 w, i64 *fb) {
    i64 *m = st->meta;
    *fb = 0;
    if (kv_refused_when_all_held(&st->h, m[SMALL_CAP] + m[MAIN_CAP])) return -1;
    if (w == IN_GHOST && m[M_SIZE] >= m[M_LIMIT] && (m[M_SIZE] == 0 || st->h.pins[st->main[m[M_HEAD]]] != 0) &&
        !main_requeue_held(st)) {
        st->where[b] = NOWHERE;
        m[G_SIZE] -= 1;
        m[GHOST_HITS] += 1;
        m[ADMISSIONS] -= 1;
        *fb = m[GHOST_FREQ];
        return NOWHERE;
    }
    return w;
}

/* M is at its limit: requeue its held heads. 0 when its head can go; 1 when M holds only held
 * blocks: then b, which S promoted, goes to G instead (a ghost hit was sent to S by miss_held; S
 * going over small_cap while M gives nothing would have been refused). */
static int main_blocked(S3FIFO *st, i64 b) {
    if (st->h.pins[st->main[st->meta[M_HEAD]]] == 0 || main_requeue_held(st)) return 0;
    st->meta[PROMOTIONS] -= 1;  /* counted by access before M turned out to give up nothing */
    to_ghost(st, b);
    return 1;
}

/* The admission of b (freq f) to a full S, with holds: pop heads as the rule says ("while |S| >=
 * small_cap"), held ones going back to the tail (one pass at most). While S is over, a popped
 * block with freq >= 1 moves to M, which has room (its limit grows as S shrinks), one with 0 to
 * G. 1 when S is at small_cap with an unheld head: the caller pops it and admits b. 0 when S
 * holds only held blocks: b joined them here (S one more over small_cap) and M's limit dropped
 * by one, M giving up a block if it was at it (second chance; M has an unheld block, or the miss
 * would have been refused). */
static int small_drain(S3FIFO *st, i64 b, i64 f) {
    i64 *m = st->meta;
    i32 *ring = st->small;
    const i32 *pins = st->h.pins;
    i64 n = st->small_n;
    if (m[S_SIZE] == m[SMALL_CAP] && pins[ring[m[S_HEAD]]] == 0) return 1;  /* the common case */
    i64 held = 0;  /* held heads requeued since the last pop */
    if (m[S_ALL_HELD] == st->h.hold[RELEASES] + 1)
        held = m[S_SIZE];  /* nothing released since S was found all held: a pass would only rotate it */
    while (held < m[S_SIZE]) {
        i64 head = m[S_HEAD];
        i32 victim = ring[head];
        if (pins[victim] != 0) {
            ring[kv_wrap(head + m[S_SIZE], n)] = victim;
            m[S_HEAD] = kv_wrap(head + 1, n);
            held += 1;
            continue;
        }
        if (m[S_SIZE] == m[SMALL_CAP]) return 1;
        held = 0;
        m[S_HEAD] = kv_wrap(head + 1, n);
        m[S_SIZE] -= 1;
        m[M_LIMIT] += 1;
        if (st->freq[victim] >= 1) {
            m[PROMOTIONS] += 1;
            st->main[kv_wrap(m[M_HEAD] + m[M_SIZE], st->main_n)] = victim;
            m[M_SIZE] += 1;
            st->where[victim] = IN_MAIN;
        } else {
            to_ghost(st, victim);
        }
    }
    m[S_ALL_HELD] = st->h.hold[RELEASES] + 1;
    ring[kv_wrap(m[S_HEAD] + m[S_SIZE], n)] = (i32)b;
    m[S_SIZE] += 1;
    st->where[b] = IN_SMALL;
    st->freq[b] = (i8)f;
    ring = st->main;
    n = st->main_n;
    while (m[M_SIZE] >= m[M_LIMIT]) {
        main_requeue_held(st);
        i64 head = m[M_HEAD];
        i32 victim = ring[head];
        m[M_HEAD] = kv_wrap(head + 1, n);
        m[M_SIZE] -= 1;
        if (st->freq[victim] >= 1) {
            st->freq[victim] -= 1;
            ring[kv_wrap(m[M_HEAD] + m[M_SIZE], n)] = victim;
            m[M_SIZE] += 1;
            m[REQUEUES] += 1;
        } else {
            to_ghost(st, victim);
            break;
        }
    }
    m[M_LIMIT] -= 1;
    return 0;
}

/* ---- the access op, with or without holds ---- */

/* Append b to M with freq f after making room (second chance). */
static inline __attribute__((always_inline)) void admit_main(S3FIFO *st, i64 b, i64 f, int holds) {
    i64 *m = st->meta;
    i32 *ring = st->main;
    i8 *freq = st->freq;
    i64 n = st->main_n;
    while (m[M_SIZE] >= m[M_LIMIT]) {
        if (holds && main_blocked(st, b)) return;
        i64 head = m[M_HEAD];
        i32 victim = ring[head];
        m[M_HEAD] = kv_wrap(head + 1, n);
        m[M_SIZE] -= 1;
        if (freq[victim] >= 1) {
            freq[victim] -= 1;
            ring[kv_wrap(m[M_HEAD] + m[M_SIZE], n)] = victim;
            m[M_SIZE] += 1;
            m[REQUEUES] += 1;
        } else {
            ghost_insert(st, victim);
            break;
        }
    }
    ring[kv_wrap(m[M_HEAD] + m[M_SIZE], n)] = (i32)b;
    m[M_SIZE] += 1;
    st->where[b] = IN_MAIN;
    freq[b] = (i8)f;
}

static inline __attribute__((always_inline)) void s3fifo_access(S3FIFO *st, i64 b, int holds) {
    i8 *where = st->where;
    i8 *freq = st->freq;
    i64 *m = st->meta;
    i64 w = where[b];
    if (w == IN_SMALL || w == IN_MAIN) {
        if (freq[b] < m[MAX_FREQ]) freq[b] += 1;
        return;
    }
    i64 fb = 0;  /* b's freq if it enters S */
    if (holds) {
        w = miss_held(st, b, w, &fb);
        if (w < 0) return;
    }
    i64 to_main, f;
    if (w == IN_GHOST) {
        /* Leave G first: the ring entry is dead from now on (and admit_main may push to G). */
        where[b] = NOWHERE;
        m[G_SIZE] -= 1;
        m[GHOST_HITS] += 1;
        to_main = b;
        f = m[GHOST_FREQ];
    } else {
        /* Admit to S. S never holds more than small_cap blocks without holds, so "while S is full,
         * pop its head" pops at most once: an `if` (with holds, S over small_cap or a held head
         * take the rare path, small_drain). A popped block with freq >= 1 moves to M (below: the
         * order does not matter, M and G never hold b) keeping its freq; one with 0 goes to G. */
        m[ADMISSIONS] += 1;
        to_main = -1;
        f = 0;
        i32 *ring = st->small;
        i64 n = st->small_n;
        /* S's slots in locals, written back once (ghost_insert does not read them; small_drain
         * does, and gets them from meta) */
        i64 head = m[S_HEAD], size = m[S_SIZE];
        if (size >= m[SMALL_CAP]) {
            if (holds) {
                if (!small_drain(st, b, fb)) return;  /* S holds only held blocks: b joined them */
                head = m[S_HEAD];
                size = m[S_SIZE];
            }
            i32 victim = ring[head];
            head = kv_wrap(head + 1, n);
            size -= 1;
            if (freq[victim] >= 1) {
                m[PROMOTIONS] += 1;
                to_main = victim;
                f = freq[victim];
            } else {
                ghost_insert(st, victim);
            }
        }
        ring[kv_wrap(head + size, n)] = (i32)b;
        m[S_HEAD] = head;
        m[S_SIZE] = size + 1;
        where[b] = IN_SMALL;
        freq[b] = (i8)fb;
    }
    if (to_main >= 0) admit_main(st, to_main, f, holds);  /* one call site for the admission to M */
}

KV_BLOCK_POLICY(s3fifo, S3FIFO, KV_LAYOUT(FIELDS, SLOTS), s3fifo_resident, s3fifo_access)
