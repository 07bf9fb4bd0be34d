/* Routers that read the instances' state: which instance serves an arriving request
 * (docs/clusters.md, "Routers", cites each rule's source). One file per router, each defining one
 * KvRouterKind; registry.c lists them (a new router is one file and one line there). Routers fixed
 * by the trace (round-robin, random, session) are computed before the run (routing/__init__.py).
 *
 * A router's decision is split in two: look(), what it sees of each instance for this request
 * (from the instance's cache, its tiers, and the router's own state), and rule(), the choice from
 * what it saw and the view: a pure function of its inputs, so its formula is tested by hand
 * (tests/serving/test_routers.py through kv_route_rule). What every router sees is the kernel's
 * view (sim.h V_*): its own bookkeeping, always current (requests in flight, prompt tokens routed
 * and not yet prefilled, Mooncake's predicted queue time, blocks in flight), and what instances
 * report (running, waiting, blocks held), lagged by --router-lag-ms when set. */
#ifndef KV_ROUTER_H
#define KV_ROUTER_H

#include "../kernel/route.h"

/* ---- what routers share (scan.c) ---- */
/* request i's longest prefix cached in instance q's GPU pool (the policy's scan, its hit limit) */
i64 route_gpu_prefix(Sim *s, i64 q, i64 i);
/* from GPU prefix k, how far the prefix reaches through q's tiers and the global store;
 * counts: blocks per tier (T + 1 entries, see engine/tiers/pools.h) */
i64 route_tier_prefix(Sim *s, i64 q, i64 i, i64 k, i64 *counts);
/* for every routable instance q (< n_prefill): how many leading ids of request i's blocks, at most
 * `limit`, have q's bit in `bits` (Sim.bit_words words an id), in one pass over the ids */
void route_bits_prefix(Sim *s, const uint64_t *bits, i64 i, i64 limit, i64 *out);
/* the same for instance q alone, through its own ids (the reference route_bits_prefix is held to) */
i64 route_bits_scan(Sim *s, const uint64_t *bits, i64 i, i64 q, i64 limit);
/* a uniform integer in [0, n) */
i64 route_random_below(uint64_t *rng, i64 n);
/* the lowest cost with ties broken uniformly at random (reservoir sampling over the tied
 * instances, as Dynamo's selector and llm-d's shuffled picker do) */
typedef struct { f64 cost; i64 best, ties; } Lowest;
void route_lowest(uint64_t *rng, Lowest *l, f64 cost, i64 q);
/* instance q's local id of trace id b (-1: never routed there) */
i64 route_local_id(Sim *s, i64 q, i64 b);

#endif
