/* Belady's MIN, compiled (the rules and the reference engine: belady.py). A binary max-heap of
 * (next use, block) in arrays with lazy deletion: an entry is live iff its key is the block's
 * current one (key[b], BELADY_ABSENT: not resident). Every access pushes one entry. Next uses are
 * u32: below 2 * num_accesses, and belady.py refuses 2**31 accesses or more, so none reaches
 * BELADY_ABSENT. */
#include "../include/policy.h"

#define BELADY_ABSENT UINT32_MAX

#define FIELDS(F) F(u32, key) F(u32, next_use) F(u32, heap_key) F(i32, heap_block) F(i64, meta)
#define SLOTS(S) S(SIZE) S(CAPACITY) S(HEAP_SIZE) S(BYPASS) S(ADMISSIONS) S(EVICTIONS) S(BYPASSES)
KV_STATE(Belady, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

static inline int belady_resident(Belady *st, i64 b) { return st->key[b] != BELADY_ABSENT; }

static inline i64 belady_hit_limit(Belady *st, i64 num_blocks, i64 L, i64 bs) {
    (void)st; (void)L; (void)bs;
    return num_blocks;
}

static inline void belady_heap_push(Belady *st, u32 key, i64 b) {
    u32 *restrict hk = st->heap_key;
    i32 *restrict hb = st->heap_block;
    i64 *m = st->meta;
    i64 i = m[HEAP_SIZE];
    m[HEAP_SIZE] = i + 1;
    while (i > 0) {
        i64 parent = (i - 1) / 2;
        if (hk[parent] >= key) break;
        hk[i] = hk[parent];
        hb[i] = hb[parent];
        i = parent;
    }
    hk[i] = key;
    hb[i] = (i32)b;
}

static inline void belady_heap_pop(Belady *st) {
    u32 *restrict hk = st->heap_key;
    i32 *restrict hb = st->heap_block;
    i64 *m = st->meta;
    i64 n = m[HEAP_SIZE] - 1;
    m[HEAP_SIZE] = n;
    u32 key = hk[n];
    i32 b = hb[n];
    i64 i = 0;
    for (;;) {
        i64 child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && hk[child + 1] > hk[child]) child++;
        if (hk[child] <= key) break;
        hk[i] = hk[child];
        hb[i] = hb[child];
        i = child;
    }
    hk[i] = key;
    hb[i] = b;
}

/* A push into a full heap first drops its stale entries and keeps one live entry per resident block
 * (a served request pinned again, after a preemption, pushes its positions' keys again), so at most
 * `capacity` are left; then it rebuilds the heap. belady.py sizes it about twice the capacity, so
 * this costs O(1) a push amortised. The victim is the resident block with the largest key, wherever
 * entries sit. Called with no entry set aside. */
static void belady_make_room(Belady *st) {
    i64 *m = st->meta;
    if (KV_LIKELY(m[HEAP_SIZE] < st->heap_key_n)) return;
    u32 *hk = st->heap_key;
    i32 *hb = st->heap_block;
    i64 kept = 0;
    for (i64 i = 0; i < m[HEAP_SIZE]; i++) {
        if (st->key[hb[i]] == hk[i]) {
            hk[kept] = hk[i];
            hb[kept] = hb[i];
            st->key[hb[i]] = BELADY_ABSENT; /* until the loop ends: a copy of this entry is not kept */
            kept++;
        }
    }
    for (i64 i = 0; i < kept; i++) st->key[hb[i]] = hk[i];
    m[HEAP_SIZE] = kept;
    for (i64 i = kept / 2 - 1; i >= 0; i--) { /* heapify, bottom-up */
        u32 key = hk[i];
        i32 b = hb[i];
        i64 at = i;
        for (;;) {
            i64 child = 2 * at + 1;
            if (child >= kept) break;
            if (child + 1 < kept && hk[child + 1] > hk[child]) child++;
            if (hk[child] <= key) break;
            hk[at] = hk[child];
            hb[at] = hb[child];
            at = child;
        }
        hk[at] = key;
        hb[at] = b;
    }
}

static inline void belady_drop_stale(Belady *st) {
    while (st->key[st->heap_block[0]] != st->heap_key[0]) belady_heap_pop(st);
}

/* The sequential access phase: it never meets a held block. */
static inline void belady_access_request(Belady *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                                         i64 L, i64 bs) {
    (void)request; (void)hits; (void)L; (void)bs;
    i64 *m = st->meta;
    u32 *key_of = st->key;
    const u32 *next_use = st->next_use;
    for (i64 j = start; j < end; j++) {
        i64 b = blocks[j];
        u32 key = next_use[j];
        if (key_of[b] == BELADY_ABSENT) {
            if (m[SIZE] >= m[CAPACITY]) {
                belady_drop_stale(st);
                if (m[BYPASS] != 0 && key > st->heap_key[0]) {
                    m[BYPASSES] += 1;
                    continue;
                }
                i64 victim = st->heap_block[0];
                key_of[victim] = BELADY_ABSENT;
                kv_log_eviction(&st->h, victim);
                belady_heap_pop(st);
                m[SIZE] -= 1;
                m[EVICTIONS] += 1;
            }
            m[SIZE] += 1;
            m[ADMISSIONS] += 1;
        }
        key_of[b] = key;
        belady_make_room(st);
        belady_heap_push(st, key, b);
    }
}

/* Holds (running requests only). Held entries taken off the heap wait at the far end of the heap
 * arrays, beyond the heap: each one taken off shrinks the heap by the slot it fills. */

/* Drop stale entries and set aside held ones until the top is the farthest unheld resident block
 * (one exists: the caller checked that not everything is held). How many were set aside. */
static i64 belady_farthest_unheld(Belady *st) {
    i64 slots = st->heap_key_n;
    i64 aside = 0;
    for (;;) {
        i64 b = st->heap_block[0];
        if (st->key[b] != st->heap_key[0]) {
            belady_heap_pop(st); /* stale */
        } else if (st->h.pins[b] != 0) {
            u32 key = st->heap_key[0];
            belady_heap_pop(st);
            aside++;
            st->heap_key[slots - aside] = key;
            st->heap_block[slots - aside] = (i32)b;
        } else {
            return aside;
        }
    }
}

/* Push the `aside` entries set aside by belady_farthest_unheld back on the heap. */
static void belady_put_back(Belady *st, i64 aside) {
    i64 slots = st->heap_key_n;
    while (aside > 0) {
        u32 key = st->heap_key[slots - aside];
        i64 b = st->heap_block[slots - aside]; /* both before the push overwrites them */
        aside--;
        belady_heap_push(st, key, b);
    }
}

static i64 belady_pin_request(Belady *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                              i64 L, i64 bs, i64 *handles, i64 base) {
    (void)request; (void)hits; (void)L; (void)bs;
    i64 *m = st->meta;
    i64 n = 0;
    for (i64 j = start; j < end; j++) {
        i64 b = blocks[j];
        u32 key = st->next_use[j];
        if (st->key[b] == BELADY_ABSENT) {
            if (m[SIZE] >= m[CAPACITY]) {
                if (kv_refused_when_all_held(&st->h, m[SIZE])) break;
                i64 aside = belady_farthest_unheld(st);
                int bypass = m[BYPASS] != 0 && key > st->heap_key[0];
                if (!bypass) {
                    i64 victim = st->heap_block[0];
                    st->key[victim] = BELADY_ABSENT;
                    kv_log_eviction(&st->h, victim);
                    belady_heap_pop(st);
                    m[SIZE] -= 1;
                    m[EVICTIONS] += 1;
                }
                belady_put_back(st, aside);
                if (bypass) {
                    m[BYPASSES] += 1;
                    continue;
                }
            }
            m[SIZE] += 1;
            m[ADMISSIONS] += 1;
        }
        st->key[b] = key;
        belady_make_room(st);
        belady_heap_push(st, key, b);
        kv_pin(&st->h, (i32)b);
        handles[base + n] = b;
        n++;
    }
    return n;
}

/* The default release: first to last (releasing changes no next use). */
static void belady_unpin_request(Belady *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 L, i64 bs,
                                 const i64 *handles, i64 base, i64 n) {
    (void)request; (void)blocks; (void)start; (void)end; (void)L; (void)bs;
    kv_unpin_handles(&st->h, handles, base, n);
}

/* next_use (belady.py) in one pass from the end: next[p] is the position of blocks[p]'s next access,
 * or n + p when there is none. last: one slot per id (0 .. max id), every one BELADY_ABSENT. */
KV_EXPORT void kv_belady_next_use(const i32 *blocks, i64 n, u32 *last, u32 *next) {
    for (i64 p = n - 1; p >= 0; p--) {
        i32 b = blocks[p];
        u32 q = last[b];
        next[p] = q == BELADY_ABSENT ? (u32)(n + p) : q;
        last[b] = (u32)p;
    }
}

KV_REQUEST_POLICY(belady, Belady, KV_LAYOUT(FIELDS, SLOTS), belady_resident, belady_hit_limit,
                  belady_access_request, belady_pin_request, belady_unpin_request, belady_resident, 1, NULL, NULL, NULL)
