/* An instance's own block ids (ids.c): each instance's policy state, and a router's tables for
 * it, are over the ids routed to it (0..count-1), not over every id of the trace, so memory grows
 * with what each instance sees rather than with instances x the trace's ids. */
#ifndef KV_IDS_H
#define KV_IDS_H

#include "../../include/kv.h"

/* Open addressing, linear probing, a trace id and its local id side by side in one slot. Trace
 * ids are numbered in order of first appearance, so a prompt's blocks are mostly runs of
 * consecutive ids: the hash keeps IDS_RUN consecutive ids in consecutive slots (it scrambles only
 * which run goes where), and a router's scan of a prompt on an instance reads one cache line per
 * eight blocks instead of two lines per block. */
#define IDS_RUN 16

struct Ids {
    i32 *slots;     /* 2 per slot: the trace's id (-1: empty), its local id */
    i32 *to_global; /* local id -> the trace's id */
    i64 mask, count, cap;
};
typedef struct Ids Ids;

Ids *ids_new(i64 cap);
void ids_free(Ids *ids);
/* the local id of g, made if new; -1 when the instance's `cap` ids are taken */
i64 ids_add(Ids *ids, i64 g);
/* room for `cap` ids (more than now), every id keeping its local id: 0 when memory ran out */
int ids_grow(Ids *ids, i64 cap);

static inline i64 ids_slot_of(const Ids *ids, i64 g) {
    uint64_t run = (uint64_t)g / IDS_RUN;
    return (i64)((((run * 0x9E3779B97F4A7C15ull) >> 20) * IDS_RUN + (uint64_t)g % IDS_RUN) & (uint64_t)ids->mask);
}

/* the local id of trace id g, or -1 */
static inline i64 ids_get(const Ids *ids, i64 g) {
    for (i64 k = ids_slot_of(ids, g);; k = (k + 1) & ids->mask) {
        i32 key = ids->slots[2 * k];
        if (key == g) return ids->slots[2 * k + 1];
        if (key < 0) return -1;
    }
}

#endif
