/* vllm-dp: the rank vLLM 0.33.0's API server picks for a request under data parallelism (its
 * internal load balancer, DPLBAsyncMPClient.get_core_engine_for_request, v1/engine/
 * core_client.py:1751-1812, one API server): each rank's score is the larger of the requests in
 * flight there (routed, not finished: exact) and its waiting + running requests as the DP
 * coordinator last published them (every 100 ms, coordinator.py:152 and 262-289: the view's
 * reported columns, lagged), plus, when some wait, 6 x waiting x (KV usage - 0.5) above half
 * usage; the lowest score wins, the ranks scanned from a start that moves on by one each request
 * (ties: round robin). Between snapshots the chosen rank's waiting count rises by one
 * (core_client.py:1800), until the next snapshot replaces it. */
#include <math.h>
#include <stdlib.h>

#include "router.h"

typedef struct {
    i64 start;    /* the scan's first rank (eng_start_index) */
    i64 snapshot; /* the snapshot the local counts were raised since */
    f64 *added;   /* per rank: the requests routed there since that snapshot */
} DpState;

static void *init(Sim *s) {
    DpState *st = calloc(1, sizeof(DpState));
    st->added = calloc((size_t)(s->N > 0 ? s->N : 1), sizeof(f64));
    return st;
}

static void release(void *p) {
    DpState *st = p;
    free(st->added);
    free(st);
}

/* depth: the rank's place in this request's scan; fetch: the waiting requests added since the
 * snapshot (reset when a new one came) */
static void look(void *p, Sim *s, i64 i, i64 q, i64 *overlap, i64 *depth, f64 *fetch) {
    (void)i;
    (void)overlap;
    DpState *st = p;
    if (st->snapshot != s->snapshots) {
        for (i64 k = 0; k < s->N; k++) st->added[k] = 0.0;
        st->snapshot = s->snapshots;
    }
    *depth = (q - st->start + s->n_prefill) % s->n_prefill;
    *fetch = st->added[q];
}

static i64 rule(const f64 *params, const RouteInput *in) {
    (void)params;
    i64 n = in->instances, start = (n - in->depth[0]) % n, best = start;
    f64 least = INFINITY;
    for (i64 k = 0; k < n; k++) {
        i64 q = (start + k) % n;
        const f64 *v = in->view + q * NUM_VIEW;
        f64 waiting = v[V_WAITING] + in->fetch[q], running = v[V_RUNNING];
        f64 score = v[V_REQUESTS] > waiting + running ? v[V_REQUESTS] : waiting + running;
        f64 usage = in->capacity > 0 ? v[V_HELD] / in->capacity : 0.0;
        if (waiting > 0 && usage > 0.5) score += waiting * 6.0 * (usage - 0.5);
        if (score < least) {
            least = score;
            best = q;
        }
    }
    return best;
}

static void routed(void *p, Sim *s, i64 i, i64 j) {
    (void)i;
    DpState *st = p;
    st->added[j] += 1.0;
    st->start = (st->start + 1) % s->n_prefill;
}

const KvRouterKind kv_router_vllm_dp = {"vllm-dp", "", "", init, release, look, rule, routed, NULL, NULL};
