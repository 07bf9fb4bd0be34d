/* The miss account (engine/account.py says what it records and why): the sequential replay's
 * loop, through the policy's table, that also says why each block of a request that did not hit
 * missed.
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
 *     (belady's bypass; the partial tail vllm and radix never cache). gone[] gets the request it
 *     left at: its last eviction if after its last access, else its last access.
 * The block's tokens (min(block_size, L - j * block_size), at least 0) go to the request's row of
 * `tokens` under its cause, and the tokens past the last hash id (L - n * block_size, a trace of
 * full blocks only) to PARTIAL_BLOCK: hit tokens + every cause = L exactly.
 *
 * Then the access phase, then the eviction log (the policy state's, turned on by the caller) is
 * drained into evicted_at, and every block of the request gets last_seen = i. */
#include "../include/policy.h"

#define ACCOUNT_FIELDS(F)                                                                                  \
    F(i64, last_seen) F(i64, evicted_at) F(i8, cause) F(i64, gone) F(i64, tokens) F(i32, content)        \
    F(i64, content_offsets) F(i32, content_members)
#define CAUSE_SLOTS(S) S(HIT) S(FIRST_USE) S(EVICTED) S(BEHIND_HOLE) S(PARTIAL_BLOCK) S(NAMESPACE)
typedef struct { ACCOUNT_FIELDS(KV_FIELD) } Account;
enum { CAUSE_SLOTS(KV_SLOT_ENUM) NUM_CAUSES };

KV_EXPORT const char kv_layout_account[] = ACCOUNT_FIELDS(KV_FIELD_SPEC) " | cause=" CAUSE_SLOTS(KV_SLOT_SPEC);

/* Is a block of b's content under another namespace in the cache? */
static int account_other_namespace(const KvPolicy *p, void *st, const Account *a, i32 b) {
    if (a->content_n == 0) return 0;
    i64 c = a->content[b];
    for (i64 q = a->content_offsets[c]; q < a->content_offsets[c + 1]; q++) {
        i32 other = a->content_members[q];
        if (other != b && p->in_hbm(st, other)) return 1;
    }
    return 0;
}

static int account_cause(const KvPolicy *p, void *st, const Account *a, i32 b, i64 j, i64 k, i64 limit, i64 last_block,
                         i64 *gone) {
    int known_missing = j == k && j < limit; /* the scan stopped here */
    if (j >= limit && j == last_block) return PARTIAL_BLOCK;
    if (!known_missing && p->in_hbm(st, b)) return BEHIND_HOLE;
    if (account_other_namespace(p, st, a, b)) return NAMESPACE;
    i64 seen = a->last_seen[b];
    if (seen < 0) return FIRST_USE;
    *gone = kv_max(seen, a->evicted_at[b]);
    return EVICTED;
}

/* Requests [first, last) of the replay; returns 0, or -1 when the eviction log overflowed (the
 * caller sizes it: capacity + the longest request suffices, policies/base.py). */
KV_EXPORT i64 kv_replay_account(const KvPolicy *p, void *st, i64 *record, const i64 *offsets, const i32 *blocks,
                                const i64 *input_length, i64 first, i64 last, i64 block_size, i64 *hit_blocks,
                                i64 *hit_tokens) {
    Account *a = (Account *)record;
    KvHolds *h = (KvHolds *)st;
    for (i64 i = first; i < last; i++) {
        i64 start = offsets[i], end = offsets[i + 1], n = end - start, L = input_length[i];
        i64 limit = p->hit_limit(st, n, L, block_size);
        i64 k = 0;
        while (k < limit && p->resident(st, blocks[start + k])) k++;
        hit_blocks[i] = k;
        hit_tokens[i] = kv_min(k * block_size, L);
        i64 *row = a->tokens + i * NUM_CAUSES;
        for (i64 c = 0; c < NUM_CAUSES; c++) row[c] = 0;
        row[HIT] = hit_tokens[i];
        i64 last_block = L > 0 ? (L - 1) / block_size : -1;
        for (i64 j = 0; j < k; j++) a->cause[start + j] = HIT;
        for (i64 j = k; j < n; j++) {
            i64 gone = -1;
            int cause = account_cause(p, st, a, blocks[start + j], j, k, limit, last_block, &gone);
            a->cause[start + j] = (i8)cause;
            a->gone[start + j] = gone;
            row[cause] += kv_max(0, kv_min(block_size, L - j * block_size));
        }
        row[PARTIAL_BLOCK] += kv_max(0, L - n * block_size);
        p->access_request(st, i, blocks, start, end, k, L, block_size);
        if (h->hold_n > LOG_HEAD) {
            if (h->hold[LOG_LOST] > 0) return -1;
            for (i64 q = 0; q < h->hold[LOG_COUNT]; q++) a->evicted_at[h->hold[LOG_HEAD + q]] = i;
            h->hold[LOG_COUNT] = 0;
        }
        for (i64 j = start; j < end; j++) a->last_seen[blocks[j]] = i;
    }
    return 0;
}

/* Resident blocks that no request can reach: an earlier block of their chain is not resident.
 * `order` lists the blocks so that each comes after its predecessor (their first accesses in
 * order); reach[] is scratch. */
KV_EXPORT i64 kv_stranded(const i8 *resident, const i32 *pred, const i64 *order, i64 n, i8 *reach) {
    i64 stranded = 0;
    for (i64 q = 0; q < n; q++) {
        i64 b = order[q];
        i32 before = pred[b];
        reach[b] = resident[b] && (before < 0 || reach[before]);
        stranded += resident[b] && !reach[b];
    }
    return stranded;
}
