/* The table a router fills and the kernel calls (like include/policy.h's KvPolicy for a cache
 * policy): the kernel knows routers only through it. The routers themselves, one file each, and
 * what they share, are in serving/routing/ (router.h), above the kernel: they read its state. */
#ifndef KV_ROUTE_H
#define KV_ROUTE_H

#include "sim.h"

typedef struct {
    const f64 *view;    /* NUM_VIEW per instance */
    const i64 *overlap; /* per instance: the request's leading blocks cached there, as this router sees them */
    const i64 *depth;   /* per instance: of its full blocks, the leading ones already in flight there */
    const f64 *fetch;   /* per instance: the load seconds (mooncake) or the credit (kv-aware) of its tier blocks */
    i64 instances, prompt_blocks, prompt_tokens, block_size;
    const f64 *tm;      /* the time model (a prefill's estimate) */
    f64 capacity;       /* blocks per instance */
    uint64_t *rng;      /* ties at random: seeded, reproducible */
} RouteInput;

typedef struct KvRouterKind {
    const char *name;
    const char *aliases;  /* other names it answers to, space separated ("" for none) */
    const char *params;   /* " name=default ...": its parameters, in the order rule() reads them */
    void *(*init)(Sim *s);
    void (*release)(void *st);
    /* what it sees of instance q for request i (NULL: nothing but the view) */
    void (*look)(void *st, Sim *s, i64 i, i64 q, i64 *overlap, i64 *depth, f64 *fetch);
    /* the instance (0..in->instances-1) for the request */
    i64 (*rule)(const f64 *params, const RouteInput *in);
    /* request i joined instance j's queue */
    void (*routed)(void *st, Sim *s, i64 i, i64 j);
    /* request i's first token came out on instance j */
    void (*first_token)(void *st, Sim *s, i64 i, i64 j);
    /* request i leaves instance j (finished, or handed to a decode instance) */
    void (*left)(void *st, Sim *s, i64 i, i64 j);
} KvRouterKind;

struct Router {
    const KvRouterKind *kind;
    void *state;
    const f64 *params;
    i64 *overlap, *depth;
    f64 *fetch;
};

extern const KvRouterKind *const kv_routers[];

/* the instance the router picks for request i: each instance looked at, then the rule (route.c) */
i64 route_pick(Sim *s, i64 i, const f64 *view, i64 routed);

/* per-instance tables over local ids: one row per instance, as wide as its id space (freed with
 * the Sim) */
i32 **route_tables(Sim *s);
void route_free_tables(Sim *s, i32 **tables);
#endif
