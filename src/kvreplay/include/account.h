/* The miss account's record and the steps of its replay loop (engine/account.py has the rules;
 * KV_REPLAY_ACCOUNT in policy.h is the loop, instantiated per policy beside KV_REPLAY so its probes
 * are inlined). The record is an (address, length) pair per field, bound by name from Python. */
#ifndef KV_ACCOUNT_H
#define KV_ACCOUNT_H

#include "holds.h"

/* Request indices (left, gone) are i32: engine/account.py refuses 2^31 requests. left[b]: the last
 * request that accessed or evicted block b, -1 before its first access (a block is evicted only
 * after an access): max(last access, last eviction), one array, the stamps coming in order.
 * gone holds the evicted accesses only, in trace order (gone_used[0] of them so far): the caller
 * grows it when a request might not fit (kv_replay_account returns where it stopped). */
#define KV_ACCOUNT_FIELDS(F)                                                                               \
    F(i32, left) F(i8, cause) F(i32, gone) F(i64, gone_used) F(i64, tokens)      \
    F(i32, content) F(i64, content_offsets) F(i32, content_members)
#define KV_CAUSE_SLOTS(S) S(HIT) S(FIRST_USE) S(EVICTED) S(BEHIND_HOLE) S(PARTIAL_BLOCK) S(NAMESPACE)
typedef struct { KV_ACCOUNT_FIELDS(KV_FIELD) } KvAccount;
enum { KV_CAUSE_SLOTS(KV_SLOT_ENUM) KV_NUM_CAUSES };

/* Request i's row of tokens per cause, cleared, its hit tokens first. */
static inline i64 *kv_account_row(KvAccount *a, i64 i, i64 hit_tokens) {
    i64 *row = a->tokens + i * KV_NUM_CAUSES;
    for (i64 c = 0; c < KV_NUM_CAUSES; c++) row[c] = 0;
    row[HIT] = hit_tokens;
    return row;
}

/* A missed block that is not in the cache: first use, or evicted (gone since *gone). */
static inline int kv_account_gone(const KvAccount *a, i32 b, i64 *gone) {
    i32 left = a->left[b];
    if (left < 0) return FIRST_USE;
    *gone = left;
    return EVICTED;
}

/* After request i's access phase: its evictions stamped (the log emptied), its blocks stamped
 * with their last access. -1 when the log overflowed (its size is the caller's: a bug). */
static inline int kv_account_stamp(KvAccount *a, KvHolds *h, i64 i, const i32 *blocks, i64 start, i64 end) {
    if (h->hold_n > LOG_HEAD) {
        if (h->hold[LOG_LOST] > 0) return -1;
        for (i64 q = 0; q < h->hold[LOG_COUNT]; q++) a->left[h->hold[LOG_HEAD + q]] = (i32)i;
        h->hold[LOG_COUNT] = 0;
    }
    for (i64 j = start; j < end; j++) a->left[blocks[j]] = (i32)i;
    return 0;
}

#endif
