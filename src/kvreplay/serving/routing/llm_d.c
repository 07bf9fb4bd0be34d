/* llm-d: llm-d's inference scheduler (GIE scorers; weights of GIE's default-plugins.yaml): the
 * highest prefix_weight x prefix + queue_weight x queue + kv_cache_weight x kv, where prefix = the
 * request's leading blocks in the instance's GPU cache (the precise prefix-cache scorer,
 * utils.go), min-max normalised over the instances holding any (none: 0); queue = waiting
 * requests, min-max normalised and inverted (all equal: 1; scorer/queue.go); kv = 1 - blocks held
 * by running requests / pool (scorer/kvcache_utilization.go); ties at random (max_score_picker.go). */
#include <math.h>
#include <stdlib.h>

#include "router.h"

typedef struct {
    f64 prefix_weight, kv_cache_weight, queue_weight;
} LlmD;

static void *init(Sim *s, const f64 *params) {
    LlmD *r = calloc(1, sizeof *r);
    r->prefix_weight = params[0];
    r->kv_cache_weight = params[1];
    r->queue_weight = params[2];
    return r;
}

static void release(void *st) { free(st); }

static i64 pick(void *st, Sim *s, i64 i, const f64 *view, i64 routed) {
    LlmD *r = st;
    f64 qmin = view[V_WAITING], qmax = view[V_WAITING];
    i64 omin = -1, omax = -1;
    for (i64 q = 0; q < routed; q++) {
        i64 o = s->overlap[q] = route_gpu_prefix(s, q, i);
        f64 w = view[q * NUM_VIEW + V_WAITING];
        qmin = w < qmin ? w : qmin;
        qmax = w > qmax ? w : qmax;
        if (o > 0) {
            omin = (omin < 0 || o < omin) ? o : omin;
            omax = o > omax ? o : omax;
        }
    }
    Lowest low = {INFINITY, 0, 0};
    for (i64 q = 0; q < routed; q++) {
        const f64 *v = view + q * NUM_VIEW;
        f64 prefix = 0.0;
        if (s->overlap[q] > 0) prefix = omax == omin ? 1.0 : (f64)(s->overlap[q] - omin) / (f64)(omax - omin);
        f64 kv = 1.0 - v[V_HELD] / (f64)s->capacity;
        f64 queue = qmax == qmin ? 1.0 : (qmax - v[V_WAITING]) / (qmax - qmin);
        f64 score = r->prefix_weight * prefix + r->kv_cache_weight * kv + r->queue_weight * queue;
        route_lowest(s, &low, -score, q);  /* the highest score */
    }
    return low.best;
}

const KvRouterKind kv_router_llm_d = {"llm-d", "", " prefix_weight=3 kv_cache_weight=2 queue_weight=2", init, release,
                                      pick, NULL, NULL, NULL};
