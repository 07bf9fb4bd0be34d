/* TTL's compiled operations (the rules and the reference engine: ttl.py): lru's recency list
 * (head = least recently accessed) plus a last-access time per block, and a clock that moves to
 * the next request's time at the end of each access phase. List order is expiry order, so the
 * expired blocks are a prefix of the list. */
#include "../include/list.h"
#include "../include/policy.h"

#define FIELDS(F) F(i8, cached) F(f64, last) F(i32, prev) F(i32, next) F(f64, times) F(f64, clock) F(i64, meta)
#define SLOTS(S) S(HEAD) S(TAIL) S(SIZE) S(CAPACITY) S(ADMISSIONS) S(EVICTIONS) S(EXPIRATIONS)
KV_STATE(TTL, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };
enum { TTL_MS, NOW };  /* slots of `clock` (times are real numbers, in ms) */

/* Resident: accessed, and not past its time at the clock's time, or held (in use). */
static inline int ttl_resident(TTL *st, i64 b) {
    return st->cached[b] != 0 && (st->clock[NOW] - st->last[b] <= st->clock[TTL_MS] || st->h.pins[b] != 0);
}

static inline void ttl_drop(TTL *st, i64 victim) {
    kv_list_unlink(st->prev, st->next, &st->meta[HEAD], &st->meta[TAIL], victim);
    st->cached[victim] = 0;
    st->meta[SIZE] -= 1;
}

/* Drop the expired blocks (a prefix of the list), passing over held ones. */
static void ttl_expire(TTL *st) {
    i64 x = st->meta[HEAD];
    while (x >= 0 && st->clock[NOW] - st->last[x] > st->clock[TTL_MS]) {
        i64 after = st->next[x];
        if (st->h.pins[x] == 0) {  /* held: in use, kept in place */
            ttl_drop(st, x);
            st->meta[EXPIRATIONS] += 1;
        }
        x = after;
    }
}

/* One block's access at time `now`. The state's arrays come as restrict pointers (each is its own
 * numpy buffer; without them every i8 store to `cached` may alias the others, which gcc then
 * reloads); `pins` is only read. */
static inline __attribute__((always_inline)) void ttl_access_in(KvHolds *h, i64 *restrict m, i8 *restrict cached,
                                                                f64 *restrict last, i32 *restrict prev,
                                                                i32 *restrict next, f64 now, i64 b) {
    if (cached[b] != 0) {
        if (m[TAIL] != b) {
            kv_list_unlink(prev, next, &m[HEAD], &m[TAIL], b);
            kv_list_append(prev, next, &m[HEAD], &m[TAIL], b);
        }
    } else {
        if (m[SIZE] >= m[CAPACITY]) {
            if (kv_refused_when_all_held(h, m[SIZE])) return;  /* every listed block is resident here */
            i64 victim = m[HEAD];
            while (h->pins[victim] != 0) victim = next[victim];  /* held: skipped in place */
            kv_list_unlink(prev, next, &m[HEAD], &m[TAIL], victim);  /* dropped */
            cached[victim] = 0;
            m[SIZE] -= 1;
            kv_log_eviction(h, victim);
            m[EVICTIONS] += 1;
        }
        kv_list_append(prev, next, &m[HEAD], &m[TAIL], b);
        cached[b] = 1;
        m[SIZE] += 1;
        m[ADMISSIONS] += 1;
    }
    last[b] = now;
}

static inline __attribute__((always_inline)) void ttl_access(TTL *st, i64 b) {
    ttl_access_in(&st->h, st->meta, st->cached, st->last, st->prev, st->next, st->clock[NOW], b);
}

/* The clock has moved: log the unheld blocks past their time (they stop being resident now; the
 * next request's expiry drops them without logging them again). */
static void ttl_log_expired(TTL *st) {
    i64 x = st->meta[HEAD];
    while (x >= 0 && st->clock[NOW] - st->last[x] > st->clock[TTL_MS]) {
        if (st->h.pins[x] == 0) kv_log_eviction(&st->h, x);
        x = st->next[x];
    }
}

/* The clock moves to the next request's time (a running maximum, as Python's max(now, t)). */
static inline void ttl_tick(TTL *st, i64 request) {
    if (request + 1 < st->times_n) {
        f64 now = st->clock[NOW], t = st->times[request + 1];
        st->clock[NOW] = t > now ? t : now;
        if (KV_UNLIKELY(st->h.hold_n > LOG_HEAD)) ttl_log_expired(st);  /* the eviction log is on */
    }
}

static inline i64 ttl_hit_limit(TTL *st, i64 num_blocks, i64 L, i64 bs) {
    (void)st; (void)L; (void)bs;
    return num_blocks;
}

static inline void ttl_access_request(TTL *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 L,
                                      i64 bs) {
    (void)hits; (void)L; (void)bs;
    ttl_expire(st);
    {
        i64 *restrict m = st->meta;
        i8 *restrict cached = st->cached;
        f64 *restrict last = st->last;
        i32 *restrict prev = st->prev, *restrict next = st->next;
        f64 now = st->clock[NOW];
        for (i64 j = start; j < end; j++) ttl_access_in(&st->h, m, cached, last, prev, next, now, blocks[j]);
    }
    ttl_tick(st, request);
}

/* What access_request does, each block held once accessed; stop at the first refused one. */
static i64 ttl_pin_request(TTL *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 L, i64 bs,
                           i64 *handles, i64 base) {
    (void)hits; (void)L; (void)bs;
    ttl_expire(st);
    i64 n = 0;
    for (i64 j = start; j < end; j++) {
        i32 b = blocks[j];
        i64 refusals = st->h.hold[REFUSALS];
        ttl_access(st, b);
        if (st->h.hold[REFUSALS] != refusals) break;
        kv_pin(&st->h, b);
        handles[base + n] = b;
        n++;
    }
    ttl_tick(st, request);
    return n;
}

/* Release first to last; a block whose time is up stops being resident at its last release. */
static void ttl_unpin_request(TTL *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 L, i64 bs,
                              const i64 *handles, i64 base, i64 n) {
    (void)request; (void)blocks; (void)start; (void)end; (void)L; (void)bs;
    for (i64 k = 0; k < n; k++) {
        i32 b = (i32)handles[base + k];
        kv_unpin(&st->h, b);
        if (st->h.pins[b] == 0 && st->clock[NOW] - st->last[b] > st->clock[TTL_MS]) kv_log_eviction(&st->h, b);
    }
}

KV_REQUEST_POLICY(ttl, TTL, KV_LAYOUT(FIELDS, SLOTS), ttl_resident, ttl_hit_limit, ttl_access_request,
                  ttl_pin_request, ttl_unpin_request, ttl_resident, 1, NULL, NULL, NULL)
