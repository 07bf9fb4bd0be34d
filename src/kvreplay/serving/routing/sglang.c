/* sglang: SGLang's cache-aware router (sgl-model-gateway policies/cache_aware.rs, launcher
 * defaults RouterArgs): when the load (requests in flight) is imbalanced, max - min above
 * balance_abs_threshold and max above balance_rel_threshold x min, the least loaded; else the
 * instance whose tree of routed prompts matches the longest prefix, if that match covers more than
 * cache_threshold of the prompt; else the least loaded. The tree is the router's own: the prompts
 * it routed to each instance (never evicted: max_tree_size is not modelled), blocks not characters. */
#include <stdlib.h>

#include "router.h"

typedef struct {
    uint64_t *routed; /* per trace id, a bit per instance: set once a prompt routed there had the block */
    i64 *overlap, pick; /* every instance's match for one pick */
} SGLang;

static void *init(Sim *s) {
    SGLang *r = calloc(1, sizeof *r);
    r->routed = calloc((size_t)(kv_max(1, s->io->cfg[TRACE_IDS]) * s->bit_words), sizeof(uint64_t));
    r->overlap = calloc((size_t)s->N, sizeof(i64));
    r->pick = -1;
    return r;
}

static void release(void *st) {
    SGLang *r = st;
    free(r->routed);
    free(r->overlap);
    free(r);
}

static void look(void *st, Sim *s, i64 i, i64 q, i64 *overlap, i64 *depth, f64 *fetch) {
    SGLang *r = st;
    if (s->io->cfg[ROUTE_BITS] < 0) { /* the reference: this instance's own scan */
        *overlap = route_bits_scan(s, r->routed, i, q, s->io->P[i]);
        return;
    }
    if (r->pick != s->pick) { /* every instance's match in one pass over the prompt */
        route_bits_prefix(s, r->routed, i, s->io->P[i], r->overlap);
        r->pick = s->pick;
    }
    *overlap = r->overlap[q];
}

static i64 rule(const f64 *params, const RouteInput *in) {
    f64 balance_abs = params[0], balance_rel = params[1], cache_threshold = params[2];
    const f64 *view = in->view;
    i64 lo = 0, hi = 0;
    for (i64 q = 1; q < in->instances; q++) {
        if (view[q * NUM_VIEW + V_REQUESTS] < view[lo * NUM_VIEW + V_REQUESTS]) lo = q;
        if (view[q * NUM_VIEW + V_REQUESTS] > view[hi * NUM_VIEW + V_REQUESTS]) hi = q;
    }
    f64 mx = view[hi * NUM_VIEW + V_REQUESTS], mn = view[lo * NUM_VIEW + V_REQUESTS];
    if (mx - mn > balance_abs && mx > balance_rel * mn) return lo;
    i64 best = 0;
    for (i64 q = 1; q < in->instances; q++)
        if (in->overlap[q] > in->overlap[best]) best = q;
    if (in->prompt_blocks > 0 && (f64)in->overlap[best] / (f64)in->prompt_blocks > cache_threshold) return best;
    return lo;
}

static void routed(void *st, Sim *s, i64 i, i64 j) {
    SGLang *r = st;
    i64 start = s->io->offsets[i];
    for (i64 k = 0; k < s->io->P[i]; k++) sim_bit(r->routed, s->bit_words, s->io->blocks[start + k], j, 1);
}

const KvRouterKind kv_router_sglang = {
    "sglang", "", " balance_abs_threshold=64 balance_rel_threshold=1.5 cache_threshold=0.3", init, release, look, rule,
    routed, NULL, NULL};
