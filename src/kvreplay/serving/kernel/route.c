/* The kernel's side of routing (route.h): asking the router for an instance, and the tables over
 * instances' ids that routers keep (freed with the Sim). */
#include <stdlib.h>

#include "route.h"

i64 route_pick(Sim *s, i64 i, const f64 *view, i64 routed) {
    Router *r = s->router;
    s->pick += 1;  /* (what looks computed for the last pick is stale) */
    for (i64 q = 0; q < routed; q++) {
        r->overlap[q] = r->depth[q] = 0;
        r->fetch[q] = 0.0;
        if (r->kind->look != NULL) r->kind->look(r->state, s, i, q, &r->overlap[q], &r->depth[q], &r->fetch[q]);
    }
    RouteInput in = {view, r->overlap, r->depth, r->fetch, routed, s->io->P[i], s->io->L[i], s->bs, s->io->tm,
                     (f64)s->capacity, &s->rng};
    return r->kind->rule(r->params, &in);
}

i32 **route_tables(Sim *s) {
    i32 **tables = calloc((size_t)s->N, sizeof(i32 *));
    for (i64 q = 0; q < s->N; q++) tables[q] = calloc((size_t)kv_max(1, s->ids_cap[q]), sizeof(i32));
    s->router_tables = tables;
    return tables;
}

void route_free_tables(Sim *s, i32 **tables) {
    if (tables == NULL) return;
    for (i64 q = 0; q < s->N; q++) free(tables[q]);
    free(tables);
}
