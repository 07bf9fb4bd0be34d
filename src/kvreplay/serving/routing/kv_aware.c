/* kv-aware (= dynamo): NVIDIA Dynamo 1.6.1's KV router, its cost per worker
 * (lib/kv-router selector/default.rs worker_logit; defaults of the wheel's KvRouterConfig):
 *
 *   prefill_load_scale x max(0, (prefill tokens in flight + prompt tokens) / block size - overlap
 *   - tier credits) + (unique prompt blocks in flight + this prompt's full blocks not yet in flight)
 *
 * the lowest cost, ties at random (seeded here, unseeded in Dynamo). Its bookkeeping is
 * ActiveSequences' (sequences/single.rs, prompt_registry.rs): each prompt's full blocks (as Dynamo
 * hashes them) are held by the requests in flight on a worker, counted once per worker (V_BLOCKS;
 * a bit per trace id and worker says which are, for the depth scan);
 * prompt tokens are charged at routing (minus the overlap) and released at the first token (the
 * kernel keeps V_PREFILL_TOKENS). With tiers, blocks past the GPU prefix found in the worker's
 * tiers earn Dynamo's per-tier credit (engine/tiers: 0.75 first tier, 0.25 below, 0.5 a global
 * store). */
#include <math.h>
#include <stdlib.h>

#include "router.h"

typedef struct {
    i32 **holds;     /* per instance, per local id: requests in flight holding the block */
    uint64_t *held;  /* per trace id, a bit per instance: holds > 0 there (the depth scan's) */
    i64 *depth, pick; /* every instance's depth for one pick */
    i64 *counts;
} KvAware;

static void *init(Sim *s) {
    KvAware *r = calloc(1, sizeof *r);
    r->holds = route_tables(s);
    r->held = calloc((size_t)(kv_max(1, s->io->cfg[TRACE_IDS]) * s->bit_words), sizeof(uint64_t));
    r->depth = calloc((size_t)s->N, sizeof(i64));
    r->pick = -1;
    r->counts = calloc((size_t)(s->T + 1), sizeof(i64));
    return r;
}

static void release(void *st) {
    KvAware *r = st;
    free(r->counts);
    free(r->held);
    free(r->depth);
    free(r);  /* (the tables go with the Sim) */
}

static void look(void *st, Sim *s, i64 i, i64 q, i64 *overlap, i64 *depth, f64 *fetch) {
    KvAware *r = st;
    *overlap = route_gpu_prefix(s, q, i);
    if (s->T > 0) {
        route_tier_prefix(s, q, i, *overlap, r->counts);
        *fetch = kv_tier_credit(s->tiers, r->counts);
    }
    i64 full = sim_full_blocks(s->io->L[i], s->io->P[i], s->bs);
    if (s->io->cfg[ROUTE_BITS] < 0) { /* the reference: this instance's own scan */
        *depth = route_bits_scan(s, r->held, i, q, full);
        return;
    }
    if (r->pick != s->pick) { /* every instance's depth in one pass over the prompt's full blocks */
        route_bits_prefix(s, r->held, i, full, r->depth);
        r->pick = s->pick;
    }
    *depth = r->depth[q];
}

static i64 rule(const f64 *params, const RouteInput *in) {
    f64 prefill_load_scale = params[0];
    i64 bs = in->block_size, full = in->prompt_tokens / bs;
    full = full < in->prompt_blocks ? full : in->prompt_blocks;
    Lowest low = {INFINITY, 0, 0};
    for (i64 q = 0; q < in->instances; q++) {
        const f64 *v = in->view + q * NUM_VIEW;
        i64 ov = in->overlap[q] < full ? in->overlap[q] : full;
        f64 prefill = (v[V_PREFILL_TOKENS] + (f64)in->prompt_tokens) / (f64)bs - (f64)ov - in->fetch[q];
        f64 cost = prefill_load_scale * (prefill > 0 ? prefill : 0.0) + v[V_BLOCKS] + (f64)full - (f64)in->depth[q];
        route_lowest(in->rng, &low, cost, q);
    }
    return low.best;
}

/* the request's full prompt blocks, held on j while it is in flight there */
static void routed(void *st, Sim *s, i64 i, i64 j) {
    KvAware *r = st;
    i64 full = sim_full_blocks(s->io->L[i], s->io->P[i], s->bs), start = s->io->offsets[i];
    for (i64 k = 0; k < full; k++) {
        i32 b = s->lblocks[start + k];
        if (r->holds[j][b] == 0) {
            s->inst[j].view[V_BLOCKS] += 1;
            sim_bit(r->held, s->bit_words, s->io->blocks[start + k], j, 1);
        }
        r->holds[j][b] += 1;
    }
}

static void left(void *st, Sim *s, i64 i, i64 j) {
    KvAware *r = st;
    if (j >= s->n_prefill) return;  /* (decode instances were never routed to) */
    i64 full = sim_full_blocks(s->io->L[i], s->io->P[i], s->bs), start = s->io->offsets[i];
    for (i64 k = 0; k < full; k++) {
        i32 b = s->lblocks[start + k];  /* (still its ids on j: they change when it joins a decode instance) */
        r->holds[j][b] -= 1;
        if (r->holds[j][b] == 0) {
            s->inst[j].view[V_BLOCKS] -= 1;
            sim_bit(r->held, s->bit_words, s->io->blocks[start + k], j, 0);
        }
    }
}

const KvRouterKind kv_router_kv_aware = {"kv-aware", "dynamo", " prefill_load_scale=1.0", init, release, look, rule,
                                         routed, NULL, left};
