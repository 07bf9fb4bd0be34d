/* An instance's own block ids (ids.h): a hash map from the trace's ids to 0..count-1. */
#include <stdlib.h>

#include "ids.h"

Ids *ids_new(i64 cap) {
    Ids *ids = calloc(1, sizeof *ids);
    i64 size = 16;
    while (size < 2 * cap) size *= 2;
    ids->keys = malloc((size_t)size * sizeof(i32));
    ids->vals = malloc((size_t)size * sizeof(i32));
    ids->to_global = malloc((size_t)(cap > 0 ? cap : 1) * sizeof(i32));
    for (i64 k = 0; k < size; k++) ids->keys[k] = -1;
    ids->mask = size - 1;
    ids->cap = cap;
    return ids;
}

void ids_free(Ids *ids) {
    if (ids == NULL) return;
    free(ids->keys);
    free(ids->vals);
    free(ids->to_global);
    free(ids);
}

static inline i64 slot_of(const Ids *ids, i64 g) {
    return (i64)(((uint64_t)g * 0x9E3779B97F4A7C15ull) >> 20) & ids->mask;
}

i64 ids_get(const Ids *ids, i64 g) {
    for (i64 k = slot_of(ids, g);; k = (k + 1) & ids->mask) {
        if (ids->keys[k] == g) return ids->vals[k];
        if (ids->keys[k] < 0) return -1;
    }
}

i64 ids_add(Ids *ids, i64 g) {
    i64 k = slot_of(ids, g);
    for (;; k = (k + 1) & ids->mask) {
        if (ids->keys[k] == g) return ids->vals[k];
        if (ids->keys[k] < 0) break;
    }
    if (ids->count >= ids->cap) return -1;
    i64 local = ids->count++;
    ids->keys[k] = (i32)g;
    ids->vals[k] = (i32)local;
    ids->to_global[local] = (i32)g;
    return local;
}
