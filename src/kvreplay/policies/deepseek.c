/* DeepSeek's API context cache, compiled (the rules and the reference engine: deepseek.py): per
 * block id the time its unit is ready and was last persisted or hit, the last time a live unit
 * contained it (its residency) and the last time a prompt contained it (common-prefix detection);
 * times in ms, -inf for never. The state keeps the trace's offsets and ids: the hit limit is the
 * next request's longest ready unit (requests come in trace order). */
#include "../include/policy.h"

#define FIELDS(F) F(i64, offsets) F(i32, ids) F(f64, times) F(f64, ready) F(f64, last) F(f64, cover) \
    F(f64, seen) F(f64, clock) F(i64, meta)
#define SLOTS(S) S(CURSOR) S(INTERVAL) S(UNITS) S(INPUT_UNITS) S(COMMON_PREFIX_UNITS) S(INTERVAL_UNITS) \
    S(UNIT_HITS) S(CONSTRUCTION_MISSES)
KV_STATE(DeepSeek, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };
enum { TTL_MS, DELAY_MS, NOW }; /* slots of `clock` */
#define DS_UNIT 64

static inline int ds_live(const DeepSeek *st, const f64 *table, i64 b) {
    return st->clock[NOW] - table[b] <= st->clock[TTL_MS];
}

static inline int ds_resident(DeepSeek *st, i64 b) { return ds_live(st, st->cover, b); }

static inline i64 ds_unit_blocks(i64 tokens, i64 bs) { return tokens / DS_UNIT * DS_UNIT / bs; }

static inline i64 ds_step(i64 bs) { return bs < DS_UNIT ? DS_UNIT / bs : 1; }

/* The longest ready unit of ids[0:n] (blocks); *building: a longer live unit was not ready. */
static i64 ds_hit(const DeepSeek *st, const i32 *ids, i64 n, i64 L, i64 bs, int *building) {
    i64 step = ds_step(bs), top = kv_min(n, ds_unit_blocks(L, bs)), run = 0;
    while (run < top && ds_live(st, st->cover, ids[run])) run++; /* no unit ends past the resident run */
    *building = 0;
    for (i64 e = run / step * step; e > 0; e -= step) {
        i32 key = ids[e - 1];
        if (ds_live(st, st->last, key)) {
            if (st->ready[key] <= st->clock[NOW]) return e;
            *building = 1;
        }
    }
    return 0;
}

static inline i64 ds_hit_limit(DeepSeek *st, i64 num_blocks, i64 L, i64 bs) {
    i64 i = st->meta[CURSOR];
    if (i + 1 >= st->offsets_n) return 0;
    i64 start = st->offsets[i];
    int building;
    return ds_hit(st, st->ids + start, kv_min(num_blocks, st->offsets[i + 1] - start), L, bs, &building);
}

/* Unit ids[0:e] persisted now (counter: a new one's), or refreshed while it lives (its blocks'
 * residency is set once per request, over the longest unit: ds_access_request). */
static void ds_persist(DeepSeek *st, const i32 *ids, i64 e, i64 counter) {
    if (e <= 0) return;
    f64 now = st->clock[NOW];
    i32 key = ids[e - 1];
    if (!ds_live(st, st->last, key)) {
        st->ready[key] = now + st->clock[DELAY_MS];
        st->meta[UNITS] += 1;
        st->meta[counter] += 1;
    }
    st->last[key] = now;
}

static inline void ds_access_request(DeepSeek *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                                     i64 L, i64 bs) {
    const i32 *ids = blocks + start;
    i64 n = end - start, step = ds_step(bs), top = kv_min(n, ds_unit_blocks(L, bs));
    int building;
    i64 hit = ds_hit(st, ids, n, L, bs, &building); /* (= hits: the scan stops at the unit) */
    (void)hits;
    st->meta[UNIT_HITS] += hit > 0;
    st->meta[CONSTRUCTION_MISSES] += building;
    ds_persist(st, ids, hit, UNITS); /* (live: no counter moves) */
    i64 common = 0;
    while (common < top && ds_live(st, st->seen, ids[common])) common++;
    common = common / step * step;
    if (common > hit && !ds_live(st, st->last, ids[common - 1])) ds_persist(st, ids, common, COMMON_PREFIX_UNITS);
    i64 per = ds_unit_blocks(st->meta[INTERVAL], bs);
    if (per > 0)
        for (i64 e = per; e < top; e += per) ds_persist(st, ids, e, INTERVAL_UNITS);
    ds_persist(st, ids, top, INPUT_UNITS);
    f64 now = st->clock[NOW];
    for (i64 j = 0; j < top; j++) st->seen[ids[j]] = st->cover[ids[j]] = now; /* every unit of now is within top */
    st->meta[CURSOR] = request + 1;
    if (request + 1 < st->times_n) {
        f64 t = st->times[request + 1];
        if (t > now) st->clock[NOW] = t;
    }
}

/* A running request: its access phase; it holds nothing (a disk cache is not full). */
static i64 ds_pin_request(DeepSeek *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 L, i64 bs,
                          i64 *handles, i64 base) {
    (void)handles; (void)base;
    ds_access_request(st, request, blocks, start, end, hits, L, bs);
    return 0;
}

static void ds_unpin_request(DeepSeek *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 L, i64 bs,
                             const i64 *handles, i64 base, i64 n) {
    (void)st; (void)request; (void)blocks; (void)start; (void)end; (void)L; (void)bs; (void)handles; (void)base;
    (void)n;
}

KV_REQUEST_POLICY(deepseek, DeepSeek, KV_LAYOUT(FIELDS, SLOTS), ds_resident, ds_hit_limit, ds_access_request,
                  ds_pin_request, ds_unpin_request, ds_resident, 1, NULL, NULL, NULL)
