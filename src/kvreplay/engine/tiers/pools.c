/* The tier pools' compiled operations (pools.h). */
#include "../../include/list.h"
#include "pools.h"

KV_EXPORT const char kv_layout_tiers[] = TIERS_FIELDS(KV_FIELD_SPEC) " | meta=" POOL_SLOTS(KV_SLOT_SPEC)
                                         " | cfg=" TIER_CFG_SLOTS(KV_SLOT_SPEC);

static inline i64 *row(const KvTiers *t, i64 p) { return t->meta + p * NUM_POOL_SLOTS; }
static inline i64 at(const KvTiers *t, i64 p, i64 b) { return p * t->cfg[TIER_IDS] + b; }

static void pool_unlink(KvTiers *t, i64 p, i64 b) {
    i64 *m = row(t, p), base = p * t->cfg[TIER_IDS];
    kv_list_unlink(t->prev + base, t->next + base, &m[POOL_HEAD], &m[POOL_TAIL], b);
}

static void pool_append(KvTiers *t, i64 p, i64 b) {
    i64 *m = row(t, p), base = p * t->cfg[TIER_IDS];
    kv_list_append(t->prev + base, t->next + base, &m[POOL_HEAD], &m[POOL_TAIL], b);
}

/* Take block b out of pool p (it was promoted). */
static void pool_remove(KvTiers *t, i64 p, i64 b) {
    pool_unlink(t, p, b);
    t->inside[at(t, p, b)] = 0;
    row(t, p)[POOL_SIZE] -= 1;
    row(t, p)[POOL_PROMOTED] += 1;
}

/* A hit on b in pool p with copies kept: an LRU pool makes it most recent. */
static void pool_touch(KvTiers *t, i64 p, i64 b) {
    i64 *m = row(t, p);
    if (m[POOL_POLICY] == POOL_LRU_ORDER && m[POOL_TAIL] != b) {
        pool_unlink(t, p, b);
        pool_append(t, p, b);
    }
}

/* Block b leaves the tier above `tier` (HBM for 0) for tier `tier` of instance j; what a full
 * tier evicts goes down the chain, and out of the last tier. */
static void demote(KvTiers *t, i64 tier, i64 j, i64 b) {
    i64 T = kv_tiers_count(t);
    while (tier < T && b >= 0) {
        i64 p = kv_tier_pool(t, tier, j);
        i64 *m = row(t, p);
        if (t->inside[at(t, p, b)] != 0) {
            pool_touch(t, p, b);  /* already there (copies kept, or a block recomputed in HBM) */
            return;
        }
        i64 victim = -1;
        if (m[POOL_SIZE] >= m[POOL_CAP]) {
            victim = m[POOL_HEAD];
            pool_unlink(t, p, victim);
            t->inside[at(t, p, victim)] = 0;
            m[POOL_SIZE] -= 1;
            m[POOL_EVICTIONS] += 1;
        }
        pool_append(t, p, b);
        t->inside[at(t, p, b)] = 1;
        m[POOL_SIZE] += 1;
        m[POOL_DEMOTED] += 1;
        b = victim;
        tier += 1;
    }
}

i64 kv_tier_of(const KvTiers *t, i64 j, i64 b) {
    i64 T = kv_tiers_count(t);
    for (i64 tier = 0; tier < T; tier++)
        if (t->inside[at(t, kv_tier_pool(t, tier, j), b)] != 0) return tier;
    return -1;
}

i64 kv_tier_prefix(const KvPolicy *p, void *st, KvTiers *t, i64 j, const i32 *blocks, const i32 *local, i64 start,
                   i64 k, i64 limit, i64 *counts, int touch) {
    i64 T = kv_tiers_count(t);
    for (i64 c = 0; c <= T; c++) counts[c] = 0;
    if (T == 0) return k;
    int keep = t->cfg[TIER_MOVE] == 0 && touch;
    while (k < limit) {
        i64 b = blocks[start + k];
        i64 lb = local == NULL ? b : local[start + k];
        if (p->hbm_gaps && lb >= 0 && p->in_hbm(st, lb)) {
            counts[T] = 0;
        } else {
            i64 tier = kv_tier_of(t, j, b);
            if (tier < 0) break;
            counts[tier] += 1;
            counts[T] = tier + 1;
            if (keep) pool_touch(t, kv_tier_pool(t, tier, j), b);
        }
        k++;
    }
    return k;
}

static f64 weighted(const i64 *counts, const f64 *weights, i64 n) {
    f64 total = 0.0;
    for (i64 c = 0; c < n; c++) total += (f64)counts[c] * weights[c];
    return total;
}

f64 kv_tier_fetch_seconds(const KvTiers *t, const i64 *counts) { return weighted(counts, t->seconds, kv_tiers_count(t)); }
f64 kv_tier_credit(const KvTiers *t, const i64 *counts) { return weighted(counts, t->credit, kv_tiers_count(t)); }

f64 kv_tier_admitted(KvTiers *t, i64 j, const i32 *blocks, i64 start, i64 k, i64 end, const i64 *counts, i64 *out) {
    i64 T = kv_tiers_count(t);
    if (T == 0) return 0.0;
    f64 load = kv_tier_fetch_seconds(t, counts);
    if (out != NULL)
        for (i64 c = 0; c <= T; c++) out[c] = counts[c];
    if (t->cfg[TIER_MOVE] != 0) {
        for (i64 q = k; q < end; q++) {
            i64 b = blocks[start + q];
            for (i64 tier = 0; tier < T; tier++) {  /* (a block sits in one tier while copies move) */
                i64 p = kv_tier_pool(t, tier, j);
                if (t->inside[at(t, p, b)] != 0) pool_remove(t, p, b);
            }
        }
    }
    return load;
}

void kv_tier_entered(KvTiers *t, i64 j, i64 b) {
    if (t->cfg[TIER_MOVE] == 0) return;
    for (i64 tier = 0; tier < kv_tiers_count(t); tier++) {
        i64 p = kv_tier_pool(t, tier, j);
        if (t->inside[at(t, p, b)] != 0) pool_remove(t, p, b);
    }
}

void kv_tier_drain(const KvPolicy *p, void *st, KvTiers *t, i64 j, const i32 *to_global) {
    KvHolds *h = (KvHolds *)st;
    if (h->hold_n <= LOG_HEAD) return;
    i64 n = h->hold[LOG_COUNT], T = kv_tiers_count(t);
    if (T > 0) {
        for (i64 q = 0; q < n; q++) {
            i64 b = h->hold[LOG_HEAD + q];
            if (!p->in_hbm(st, b)) demote(t, 0, j, to_global == NULL ? b : to_global[b]);
        }
    }
    h->hold[LOG_COUNT] = 0;
}
