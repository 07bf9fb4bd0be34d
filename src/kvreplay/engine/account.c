/* The miss account (engine/account.py says what it records and why): the sequential replay's
 * loop that also says why each block of a request that did not hit missed (KV_REPLAY_ACCOUNT in
 * include/policy.h, instantiated in each policy's file beside its plain loop).
 *
 * Per request i, in trace order: the prefix scan exactly as kv_replay's (hit limit, then the
 * longest resident run), then, before anything is touched, every block from the first miss on
 * gets a cause:
 *   - PARTIAL_BLOCK: past the policy's hit limit, and the block that holds the prompt's last token
 *     (vllm and radix never serve it: the partial tail, or the last token recomputed);
 *   - BEHIND_HOLE: in the cache (in_hbm: anywhere, a radix tree's too) but after the first miss,
 *     so the prefix could not reach it;
 *   - NAMESPACE: not in the cache, but a block of the same content under another namespace is;
 *   - FIRST_USE: no earlier request accessed it;
 *   - EVICTED: an earlier request accessed it and it is not in the cache: evicted, or never kept
 *     (belady's bypass; the partial tail vllm and radix never cache). The next slot of gone[] (the
 *     evicted accesses only, in trace order) gets the request it left at: its last eviction if
 *     after its last access, else its last access.
 * The block's tokens (min(block_size, L - j * block_size), at least 0) go to the request's row of
 * `tokens` under its cause, and the tokens past the last hash id (L - n * block_size, a trace of
 * full blocks only) to PARTIAL_BLOCK: hit tokens + every cause = L exactly.
 *
 * Then the access phase, then the eviction log (the policy state's, turned on by the caller) is
 * drained, its blocks' left = i, and every block of the request gets left = i too (left: the last
 * request that accessed or evicted the block; gone = left, the stamps coming in order). */
#include "../include/policy.h"

KV_EXPORT const char kv_layout_account[] = KV_ACCOUNT_FIELDS(KV_FIELD_SPEC) " | cause=" KV_CAUSE_SLOTS(KV_SLOT_SPEC);

/* Requests [first, last) of the replay (the policy's KV_REPLAY_ACCOUNT); returns the request it
 * stopped before: `last`, or an earlier one whose blocks might not fit in what is left of gone[]
 * (the caller grows it and goes on from there); -1 when the eviction log overflowed (the caller
 * sizes it: capacity + the longest request suffices, policies/base.py). */
KV_EXPORT i64 kv_replay_account(const KvPolicy *p, void *st, i64 *record, const i64 *offsets, const i32 *blocks,
                                const i64 *input_length, i64 first, i64 last, i64 block_size, i64 *hit_blocks,
                                i64 *hit_tokens) {
    return p->replay_account(st, record, offsets, blocks, input_length, first, last, block_size, hit_blocks,
                             hit_tokens);
}

/* Resident blocks that no request can reach: an earlier block of their chain is not resident.
 * `order` lists the blocks so that each comes after its predecessor (their first accesses in
 * order); reach[] is scratch. */
KV_EXPORT i64 kv_stranded(const i8 *resident, const i32 *pred, const i32 *order, i64 n, i8 *reach) {
    i64 stranded = 0;
    for (i64 q = 0; q < n; q++) {
        i32 b = order[q];
        i32 before = pred[b];
        reach[b] = resident[b] && (before < 0 || reach[before]);
        stranded += resident[b] && !reach[b];
    }
    return stranded;
}
