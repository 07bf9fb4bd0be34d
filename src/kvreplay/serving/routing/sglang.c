/* sglang: SGLang's cache-aware router (sgl-model-gateway policies/cache_aware.rs, launcher
 * defaults RouterArgs): when the load (requests in flight) is imbalanced, max - min above
 * balance_abs_threshold and max above balance_rel_threshold x min, the least loaded; else the
 * instance whose tree of routed prompts matches the longest prefix, if that match covers more than
 * cache_threshold of the prompt; else the least loaded. The tree is the router's own: the prompts
 * it routed to each instance (never evicted: max_tree_size is not modelled), blocks not characters. */
#include <stdlib.h>

#include "router.h"

typedef struct {
    f64 balance_abs, balance_rel, cache_threshold;
    i32 **routed; /* per instance, per local id: 1 once a prompt routed there had the block */
} SGLang;

static void *init(Sim *s, const f64 *params) {
    SGLang *r = calloc(1, sizeof *r);
    r->balance_abs = params[0];
    r->balance_rel = params[1];
    r->cache_threshold = params[2];
    r->routed = route_tables(s);
    return r;
}

static void release(void *st) { free(st); }

static i64 pick(void *st, Sim *s, i64 i, const f64 *view, i64 routed) {
    SGLang *r = st;
    i64 P = s->io->P[i], start = s->io->offsets[i];
    for (i64 q = 0; q < routed; q++) {
        i64 k = 0;
        while (k < P) {
            i64 b = route_local_id(s, q, s->io->blocks[start + k]);
            if (b < 0 || r->routed[q][b] == 0) break;
            k++;
        }
        s->overlap[q] = k;
    }
    i64 lo = 0, hi = 0;
    for (i64 q = 1; q < routed; q++) {
        if (view[q * NUM_VIEW + V_REQUESTS] < view[lo * NUM_VIEW + V_REQUESTS]) lo = q;
        if (view[q * NUM_VIEW + V_REQUESTS] > view[hi * NUM_VIEW + V_REQUESTS]) hi = q;
    }
    f64 mx = view[hi * NUM_VIEW + V_REQUESTS], mn = view[lo * NUM_VIEW + V_REQUESTS];
    if (mx - mn > r->balance_abs && mx > r->balance_rel * mn) return lo;
    i64 best = 0;
    for (i64 q = 1; q < routed; q++)
        if (s->overlap[q] > s->overlap[best]) best = q;
    if (P > 0 && (f64)s->overlap[best] / (f64)P > r->cache_threshold) return best;
    return lo;
}

static void on_routed(void *st, Sim *s, i64 i, i64 j) {
    SGLang *r = st;
    i64 start = s->io->offsets[i];
    for (i64 k = 0; k < s->io->P[i]; k++) r->routed[j][s->lblocks[start + k]] = 1;
}

const KvRouterKind kv_router_sglang = {
    "sglang", "", " balance_abs_threshold=64 balance_rel_threshold=1.5 cache_threshold=0.3", init, release, pick,
    on_routed, NULL, NULL};
