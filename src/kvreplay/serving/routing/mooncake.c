/* mooncake: Mooncake's Conductor (FAST'25 Algorithm 1): the least estimated TTFT = the predicted
 * prefill times of the requests routed there and not yet prefilled (V_QUEUE_S) + the time to load
 * the prefix the request reaches through that instance's tiers and the global store + its prefill
 * after that prefix (the time model's prefill time). Hot-spot replication is not modelled. */
#include <math.h>
#include <stdlib.h>

#include "router.h"

typedef struct {
    f64 *estimate; /* per request, once routed: its predicted prefill time */
    i64 *counts;
} Mooncake;

static void *init(Sim *s) {
    Mooncake *r = calloc(1, sizeof *r);
    r->estimate = calloc((size_t)s->n + 1, sizeof(f64));
    r->counts = calloc((size_t)(s->T + 1), sizeof(i64));
    return r;
}

static void release(void *st) {
    Mooncake *r = st;
    free(r->estimate);
    free(r->counts);
    free(r);
}

/* Conductor's view: the prefix in the instance's own tiers and in the global store too, at the
 * time it takes to load */
static void look(void *st, Sim *s, i64 i, i64 q, i64 *overlap, i64 *depth, f64 *fetch) {
    Mooncake *r = st;
    i64 k = route_gpu_prefix(s, q, i);
    if (s->T > 0) {
        k = route_tier_prefix(s, q, i, k, r->counts);
        *fetch = kv_tier_fetch_seconds(s->tiers, r->counts);
    }
    *overlap = k;
}

static i64 rule(const f64 *params, const RouteInput *in) {
    i64 best = 0;
    f64 best_t = INFINITY;
    for (i64 q = 0; q < in->instances; q++) {
        f64 t = in->view[q * NUM_VIEW + V_QUEUE_S] + in->fetch[q]
                + kv_prefill_estimate(in->tm, in->prompt_tokens, in->overlap[q] * in->block_size);
        if (t < best_t) {
            best_t = t;
            best = q;
        }
    }
    return best;
}

/* its predicted prefill time joins the instance's queue until its first token */
static void routed(void *st, Sim *s, i64 i, i64 j) {
    Mooncake *r = st;
    r->estimate[i] = kv_prefill_estimate(s->io->tm, s->io->L[i], s->routed_overlap[i]) + s->router->fetch[j];
    s->inst[j].view[V_QUEUE_S] += r->estimate[i];
}

static void first_token(void *st, Sim *s, i64 i, i64 j) {
    Mooncake *r = st;
    s->inst[j].view[V_QUEUE_S] -= r->estimate[i];
}

const KvRouterKind kv_router_mooncake = {"mooncake", "", "", init, release, look, rule, routed, first_token, NULL};
