/* An instance's own block ids (ids.c): each instance's policy state, and a router's tables for
 * it, are over the ids routed to it (0..count-1), not over every id of the trace, so memory grows
 * with what each instance sees rather than with instances x the trace's ids. */
#ifndef KV_IDS_H
#define KV_IDS_H

#include "../../include/kv.h"

struct Ids {
    i32 *keys;      /* open addressing: the trace's ids (-1: empty slot) */
    i32 *vals;      /* their local ids */
    i32 *to_global; /* local id -> the trace's id */
    i64 mask, count, cap;
};
typedef struct Ids Ids;

Ids *ids_new(i64 cap);
void ids_free(Ids *ids);
/* the local id of trace id g, or -1 */
i64 ids_get(const Ids *ids, i64 g);
/* the local id of g, made if new; -1 when the instance's `cap` ids are taken */
i64 ids_add(Ids *ids, i64 g);

#endif
