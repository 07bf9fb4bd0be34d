/* mooncake: Mooncake's Conductor (FAST'25 Algorithm 1): the least estimated TTFT = the predicted
 * prefill times of the requests routed there and not yet prefilled (V_QUEUE_S) + the time to load
 * the prefix the request reaches through that instance's tiers and the global store + its prefill
 * after that prefix (the time model's prefill time). Hot-spot replication is not modelled. */
#include <math.h>
#include <stdlib.h>

#include "router.h"

typedef struct {
    f64 *fetch, *estimate; /* per instance at this arrival; per request once routed */
    i64 *counts;
} Mooncake;

static void *init(Sim *s, const f64 *params) {
    Mooncake *r = calloc(1, sizeof *r);
    r->fetch = calloc((size_t)s->N, sizeof(f64));
    r->estimate = calloc((size_t)s->n + 1, sizeof(f64));
    r->counts = calloc((size_t)(s->T + 1), sizeof(i64));
    return r;
}

static void release(void *st) {
    Mooncake *r = st;
    free(r->fetch);
    free(r->estimate);
    free(r->counts);
    free(r);
}

static i64 pick(void *st, Sim *s, i64 i, const f64 *view, i64 routed) {
    Mooncake *r = st;
    i64 best = 0;
    f64 best_t = INFINITY;
    for (i64 q = 0; q < routed; q++) {
        i64 k = route_gpu_prefix(s, q, i);
        r->fetch[q] = 0.0;
        if (s->T > 0) {
            /* Conductor's view: the prefix in the instance's own tiers and in the global store too,
             * at the time it takes to load */
            k = route_tier_prefix(s, q, i, k, r->counts);
            r->fetch[q] = kv_tier_fetch_seconds(s->tiers, r->counts);
        }
        s->overlap[q] = k;
        f64 t = view[q * NUM_VIEW + V_QUEUE_S] + r->fetch[q]
                + kv_prefill_estimate(s->io->tm, s->io->L[i], k * s->bs);
        if (t < best_t) {
            best_t = t;
            best = q;
        }
    }
    return best;
}

/* its predicted prefill time joins the instance's queue until its first token (loop.c) */
static void on_routed(void *st, Sim *s, i64 i, i64 j) {
    Mooncake *r = st;
    r->estimate[i] = kv_prefill_estimate(s->io->tm, s->io->L[i], s->routed_overlap[i]) + r->fetch[j];
    s->inst[j].view[V_QUEUE_S] += r->estimate[i];
}

static void first_token(void *st, Sim *s, i64 i, i64 j) {
    Mooncake *r = st;
    s->inst[j].view[V_QUEUE_S] -= r->estimate[i];
}

const KvRouterKind kv_router_mooncake = {"mooncake", "", "", init, release, pick, on_routed, first_token, NULL};
