/* An instance's own block ids (ids.h): a hash map from the trace's ids to 0..count-1. */
#include <stdlib.h>

#include "ids.h"

/* empty slots for `cap` ids (at most half full) */
static i32 *new_slots(i64 cap, i64 *mask) {
    i64 size = 2 * IDS_RUN;
    while (size < 2 * cap) size *= 2;
    i32 *slots = malloc((size_t)size * 2 * sizeof(i32));
    if (slots != NULL)
        for (i64 k = 0; k < size; k++) slots[2 * k] = -1;
    *mask = size - 1;
    return slots;
}

Ids *ids_new(i64 cap) {
    Ids *ids = calloc(1, sizeof *ids);
    ids->slots = new_slots(cap, &ids->mask);
    ids->to_global = malloc((size_t)(cap > 0 ? cap : 1) * sizeof(i32));
    ids->cap = cap;
    return ids;
}

int ids_grow(Ids *ids, i64 cap) {
    i64 mask;
    i32 *slots = new_slots(cap, &mask);
    i32 *to_global = realloc(ids->to_global, (size_t)cap * sizeof(i32));
    if (slots == NULL || to_global == NULL) {
        free(slots);
        if (to_global != NULL) ids->to_global = to_global;
        return 0;
    }
    free(ids->slots);
    ids->slots = slots;
    ids->mask = mask;
    ids->to_global = to_global;
    ids->cap = cap;
    for (i64 local = 0; local < ids->count; local++) { /* (every id again, in the bigger table) */
        i64 k = ids_slot_of(ids, to_global[local]);
        while (slots[2 * k] >= 0) k = (k + 1) & mask;
        slots[2 * k] = to_global[local];
        slots[2 * k + 1] = (i32)local;
    }
    return 1;
}

void ids_free(Ids *ids) {
    if (ids == NULL) return;
    free(ids->slots);
    free(ids->to_global);
    free(ids);
}

i64 ids_add(Ids *ids, i64 g) {
    i64 k = ids_slot_of(ids, g);
    for (;; k = (k + 1) & ids->mask) {
        if (ids->slots[2 * k] == g) return ids->slots[2 * k + 1];
        if (ids->slots[2 * k] < 0) break;
    }
    if (ids->count >= ids->cap) return -1;
    i64 local = ids->count++;
    ids->slots[2 * k] = (i32)g;
    ids->slots[2 * k + 1] = (i32)local;
    ids->to_global[local] = (i32)g;
    return local;
}
