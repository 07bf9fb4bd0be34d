/* The kernel's block layout of a trace (serving/run.py kernel_layout; its plain-numpy reference is
 * hashed_prompts then decode_trace): request i of the run (trace request order[i]) takes positions
 * out_offsets[i]..out_offsets[i+1] - 1: its first known[i] block ids from the trace, fresh[i] new
 * ids (vLLM's pool: the prompt's partial last block, never shared), then decode[i] new ids (its
 * outputs' blocks). Fresh ids are numbered from fresh_base and decode ids from decode_base, each
 * in run order. One pass over the positions, where the numpy reference made several. */
#include <string.h>

#include "../../include/kv.h"

KV_EXPORT void kv_sim_layout(i64 n, const i64 *order, const i64 *offsets, const i32 *blocks, const i64 *known,
                             const i64 *fresh, const i64 *decode, const i64 *out_offsets, i32 *out_blocks,
                             i64 fresh_base, i64 decode_base) {
    for (i64 i = 0; i < n; i++) {
        i32 *out = out_blocks + out_offsets[i];
        memcpy(out, blocks + offsets[order[i]], (size_t)known[i] * sizeof(i32));
        out += known[i];
        for (i64 k = 0; k < fresh[i]; k++) *out++ = (i32)fresh_base++;
        for (i64 k = 0; k < decode[i]; k++) *out++ = (i32)decode_base++;
    }
}
