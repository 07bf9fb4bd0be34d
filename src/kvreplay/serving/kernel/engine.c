/* The hybrid engine's states (MODE_HYBRID, MODE_RADIX_HYBRID): each instance's, set up from one
 * HybridSetup, and each request's, zeroed; all of it opaque to the kernel, which calls the engine
 * through its table (hybrid/engine.h). hybrid.c and sglang_hybrid.c drive it. */
#include <stdlib.h>

#include "sim.h"

int engine_setup(Sim *s, const HybridEngine *e, HybridSetup c) {
    s->engine = e;
    s->engines_ready = 0;
    s->engines = calloc((size_t)s->N, e->state_size);
    s->engine_reqs = calloc((size_t)(s->n > 0 ? s->n : 1), e->request_size);
    if (!s->engines || !s->engine_reqs) {
        s->inst[0].counters[hybrid_error] = -1; /* (out of memory, in both engines' codes) */
        s->failed = 1;
        return 0;
    }
    for (i64 q = 0; q < s->N; q++) {
        c.num_blocks = kv_max(1, s->ids_cap[q]); /* (the ids instance q's state knows) */
        int rc = e->init(engine_of(s, q), &c);
        if (rc) {
            s->inst[q].counters[hybrid_error] = rc;
            s->failed = 1;
            return 0;
        }
        s->engines_ready = q + 1;
    }
    return 1;
}

void engine_teardown(Sim *s, i64 *counters) {
    const HybridEngine *e = s->engine;
    if (e == NULL) return;
    if (s->engines != NULL && s->engine_reqs != NULL) {
        for (i64 i = 0; e->request_release != NULL && i < s->n; i++)
            if (e->holds(engine_req(s, i))) e->request_release(engine_of(s, 0), engine_req(s, i));
        for (i64 q = 0; q < s->N; q++) {
            if (q < s->engines_ready) e->report(engine_of(s, q), counters + q * e->counters);
            e->release(engine_of(s, q));
        }
    }
    free(s->engines);
    free(s->engine_reqs);
    s->engines = s->engine_reqs = NULL;
    s->engine = NULL;
    s->engines_ready = 0;
}
