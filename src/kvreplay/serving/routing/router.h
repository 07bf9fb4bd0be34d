/* Routers that read the instances' state: which instance serves an arriving request
 * (docs/serving.md, "Routers", cites each rule's source). One file per router, each defining one
 * KvRouterKind; registry.c lists them (a new router is one file and one line there). Routers fixed
 * by the trace (round-robin, random, session) are computed before the run (routing/fixed.py).
 *
 * What a router sees of each instance is the kernel's view (sim.h V_*: requests in flight, prompt
 * tokens routed and not yet prefilled, Mooncake's predicted queue time, and what instances report:
 * running, waiting, blocks held; the reported columns lagged by --router-lag-ms), plus whatever it
 * keeps itself (its state, per instance over the instance's local block ids). */
#ifndef KV_ROUTER_H
#define KV_ROUTER_H

#include "../kernel/sim.h"

typedef struct KvRouterKind {
    const char *name;
    const char *aliases;  /* other names it answers to, space separated ("" for none) */
    const char *params;   /* " name=default ..." (Python checks --router-option against these) */
    /* its state, with its parameters (in `params` order) */
    void *(*init)(Sim *s, const f64 *params);
    void (*release)(void *st);
    /* the instance (0..routed-1) for request i; view: what it sees of each instance (NUM_VIEW each) */
    i64 (*pick)(void *st, Sim *s, i64 i, const f64 *view, i64 routed);
    /* request i joined instance j's queue (after pick) */
    void (*routed)(void *st, Sim *s, i64 i, i64 j);
    /* request i's first token came out on instance j */
    void (*first_token)(void *st, Sim *s, i64 i, i64 j);
    /* request i leaves instance j (finished, or handed to a decode instance) */
    void (*left)(void *st, Sim *s, i64 i, i64 j);
} KvRouterKind;

struct Router {
    const KvRouterKind *kind;
    void *state;
};

extern const KvRouterKind *const kv_routers[];

/* ---- what routers share (scan.c) ---- */
/* request i's longest prefix cached in instance q's GPU pool (the policy's scan, its hit limit) */
i64 route_gpu_prefix(Sim *s, i64 q, i64 i);
/* from GPU prefix k, how far the prefix reaches through q's tiers and the global store;
 * counts: blocks per tier (T + 1 entries, see engine/tiers/pools.h) */
i64 route_tier_prefix(Sim *s, i64 q, i64 i, i64 k, i64 *counts);
/* the router's random numbers: seeded, reproducible (splitmix64) */
i64 route_random_below(Sim *s, i64 n);
/* the lowest cost with ties broken uniformly at random (reservoir sampling over the tied
 * instances, as Dynamo's selector and llm-d's shuffled picker do) */
typedef struct { f64 cost; i64 best, ties; } Lowest;
void route_lowest(Sim *s, Lowest *l, f64 cost, i64 q);
/* per-instance arrays over local ids: one row per instance, as wide as its id space */
i32 **route_tables(Sim *s);
void route_free_tables(Sim *s, i32 **tables);
/* instance q's local id of global id b (-1: never routed there) */
i64 route_local_id(Sim *s, i64 q, i64 b);

#endif
