/* llm-d: llm-d's inference scheduler (GIE scorers; weights of GIE's default-plugins.yaml): the
 * highest prefix_weight x prefix + kv_cache_weight x kv + queue_weight x queue, where prefix = the
 * request's leading blocks in the instance's GPU cache (the precise prefix-cache scorer,
 * utils.go), min-max normalised over the instances holding any (none: 0); queue = waiting
 * requests, min-max normalised and inverted (all equal: 1; scorer/queue.go); kv = 1 - blocks held
 * by running requests / pool (scorer/kvcache_utilization.go); ties at random (max_score_picker.go). */
#include <math.h>

#include "router.h"

static void look(void *st, Sim *s, i64 i, i64 q, i64 *overlap, i64 *depth, f64 *fetch) {
    *overlap = route_gpu_prefix(s, q, i);
}

static i64 rule(const f64 *params, const RouteInput *in) {
    f64 prefix_weight = params[0], kv_cache_weight = params[1], queue_weight = params[2];
    const f64 *view = in->view;
    f64 qmin = view[V_WAITING], qmax = view[V_WAITING];
    i64 omin = -1, omax = -1;
    for (i64 q = 0; q < in->instances; q++) {
        i64 o = in->overlap[q];
        f64 w = view[q * NUM_VIEW + V_WAITING];
        qmin = w < qmin ? w : qmin;
        qmax = w > qmax ? w : qmax;
        if (o > 0) {
            omin = (omin < 0 || o < omin) ? o : omin;
            omax = o > omax ? o : omax;
        }
    }
    Lowest low = {INFINITY, 0, 0};
    for (i64 q = 0; q < in->instances; q++) {
        const f64 *v = view + q * NUM_VIEW;
        f64 prefix = 0.0;
        if (in->overlap[q] > 0) prefix = omax == omin ? 1.0 : (f64)(in->overlap[q] - omin) / (f64)(omax - omin);
        f64 kv = 1.0 - v[V_HELD] / in->capacity;
        f64 queue = qmax == qmin ? 1.0 : (qmax - v[V_WAITING]) / (qmax - qmin);
        f64 score = prefix_weight * prefix + kv_cache_weight * kv + queue_weight * queue;
        route_lowest(in->rng, &low, -score, q);  /* the highest score */
    }
    return low.best;
}

const KvRouterKind kv_router_llm_d = {"llm-d", "", " prefix_weight=3 kv_cache_weight=2 queue_weight=2", NULL, NULL,
                                      look, rule, NULL, NULL, NULL};
