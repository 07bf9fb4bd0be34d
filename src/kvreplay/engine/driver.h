/* One request's start among overlapping requests (engine/driver.c): the only place outside a
 * policy that scans a prefix and pins it; the serving simulator's admission calls it. */
#ifndef KV_ENGINE_DRIVER_H
#define KV_ENGINE_DRIVER_H

#include "../include/policy.h"

/* Returns the hit blocks; *held: the blocks held; *refused: the start was refused. */
i64 kv_request_start(const KvPolicy *p, void *st, i64 request, const i32 *blocks, i64 start, i64 end,
                     i64 input_length, i64 block_size, i64 *handles, i64 base, i64 *held, int *refused);

#endif
