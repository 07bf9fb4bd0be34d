/* least-loaded: the fewest requests in flight (routed, not finished); ties: the lowest index.
 * Source: Mooncake FAST'25's load-balancing baseline ("the number of requests assigned to each
 * machine"), and SGLang router's fallback. */
#include "router.h"

static i64 rule(const f64 *params, const RouteInput *in) {
    i64 best = 0;
    for (i64 q = 1; q < in->instances; q++)
        if (in->view[q * NUM_VIEW + V_REQUESTS] < in->view[best * NUM_VIEW + V_REQUESTS]) best = q;
    return best;
}

const KvRouterKind kv_router_least_loaded = {"least-loaded", "", "", NULL, NULL, NULL, rule, NULL, NULL, NULL};
