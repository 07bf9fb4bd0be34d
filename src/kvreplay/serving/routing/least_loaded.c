/* least-loaded: the fewest requests in flight (routed, not finished); ties: the lowest index.
 * Source: Mooncake FAST'25's load-balancing baseline ("the number of requests assigned to each
 * machine"), and SGLang router's fallback. */
#include "router.h"

static i64 pick(void *st, Sim *s, i64 i, const f64 *view, i64 routed) {
    i64 best = 0;
    for (i64 q = 1; q < routed; q++)
        if (view[q * NUM_VIEW + V_REQUESTS] < view[best * NUM_VIEW + V_REQUESTS]) best = q;
    return best;
}

const KvRouterKind kv_router_least_loaded = {"least-loaded", "", "", NULL, NULL, pick, NULL, NULL, NULL};
