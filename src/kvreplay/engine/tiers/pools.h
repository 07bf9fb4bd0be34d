/* Tier pools below the GPU pool (engine/tiers/__init__.py states the rules: write-back
 * demotion, promotion over the union prefix, copies moved or kept, a shared global store, load
 * time): the compiled pool operations, used by the tiered sequential replay (replay.c) and the
 * serving simulator.
 *
 * One pool per (tier, instance), one for a shared tier; each pool is an LRU or FIFO list over
 * block ids (rows of ``next``/``prev``/``inside``, ``ids`` wide), its ends and counts in its row
 * of ``meta``. pool_of[t * instances + j] is the pool of tier t for instance j. */
#ifndef KV_TIERS_POOLS_H
#define KV_TIERS_POOLS_H

#include "../../include/policy.h"

#define TIERS_FIELDS(F) F(i32, next) F(i32, prev) F(i8, inside) F(i64, meta) F(i64, pool_of) \
    F(f64, seconds) F(f64, credit) F(i64, cfg)
/* per pool (meta row) */
#define POOL_SLOTS(S) S(POOL_HEAD) S(POOL_TAIL) S(POOL_SIZE) S(POOL_CAP) S(POOL_POLICY) S(POOL_EVICTIONS) \
    S(POOL_DEMOTED) S(POOL_PROMOTED)
/* the tiers' settings (cfg) */
#define TIER_CFG_SLOTS(S) S(TIER_COUNT) S(TIER_MOVE) S(TIER_IDS) S(TIER_INSTANCES)

typedef struct { TIERS_FIELDS(KV_FIELD) } KvTiers;
enum { POOL_SLOTS(KV_SLOT_ENUM) NUM_POOL_SLOTS };
enum { TIER_CFG_SLOTS(KV_SLOT_ENUM) NUM_TIER_CFG };
enum { POOL_LRU_ORDER, POOL_FIFO_ORDER };

static inline i64 kv_tiers_count(const KvTiers *t) { return t->cfg[TIER_COUNT]; }
static inline i64 kv_tier_pool(const KvTiers *t, i64 tier, i64 instance) {
    return t->pool_of[tier * t->cfg[TIER_INSTANCES] + instance];
}

/* The first tier of instance j holding block b, or -1. */
i64 kv_tier_of(const KvTiers *t, i64 j, i64 b);
/* How far the hit prefix reaches with the tiers: from position k (HBM's own prefix), the blocks
 * each in HBM or in some tier of instance j, up to `limit` positions. counts[tier] gets the blocks
 * read from each tier, counts[T] 1 + the tier of the last hit block (0: HBM). With copies kept,
 * an LRU tier refreshes what is read from it when `touch` (a router's look changes nothing).
 * Pools are over the trace's ids (`blocks`); the policy state may use the instance's own ids
 * (`local`, the same positions; NULL: the same ids; -1: an id the instance never had). */
i64 kv_tier_prefix(const KvPolicy *p, void *st, KvTiers *t, i64 j, const i32 *blocks, const i32 *local, i64 start,
                   i64 k, i64 limit, i64 *counts, int touch);
/* The load seconds of counts[tier] blocks from each tier, and the kv-aware router's credit. */
f64 kv_tier_fetch_seconds(const KvTiers *t, const i64 *counts);
f64 kv_tier_credit(const KvTiers *t, const i64 *counts);
/* The request's blocks start+k..start+end entered HBM, `counts` of them read from the tiers:
 * their load seconds; with copies moved each block that entered HBM leaves the tiers. `row`
 * (when not NULL) gets a copy of counts. */
f64 kv_tier_admitted(KvTiers *t, i64 j, const i32 *blocks, i64 start, i64 k, i64 end, const i64 *counts, i64 *row);
/* Block b (the pools' id) entered instance j's HBM: with copies moved it leaves the tiers. */
void kv_tier_entered(KvTiers *t, i64 j, i64 b);
/* Demote what the HBM policy evicted since the last drain (its eviction log), in order; the log
 * holds the state's ids, `to_global` turns them into the pools' (NULL: the same ids). */
void kv_tier_drain(const KvPolicy *p, void *st, KvTiers *t, i64 j, const i32 *to_global);

#endif
