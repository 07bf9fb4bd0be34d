/* A ring buffer of block ids that is full (its tail slot is its head's own): the operations more
 * than one policy's FIFO queue shares. */
#ifndef KV_RING_H
#define KV_RING_H

#include "kv.h"

/* Held heads go back to the tail until the head is unheld: 1; 0 when every one of the `size`
 * blocks is held (one pass, the order unchanged) or the ring is empty. */
static inline int kv_ring_requeue_held(i32 *restrict ring, i64 n, i64 *restrict head, i64 size,
                                       const i32 *restrict pins) {
    for (i64 k = 0; k < size; k++) {
        i64 h = *head;
        i32 v = ring[h];
        if (pins[v] == 0) return 1;
        ring[kv_wrap(h + size, n)] = v;  /* a full ring: the tail slot is the head's own */
        *head = kv_wrap(h + 1, n);
    }
    return 0;
}

#endif
