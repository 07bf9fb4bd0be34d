/* A policy's compiled operations: the C half of policies/base.py's contract (the rules, and
 * which policy may replace which operation, are written there).
 *
 * Each policy file (policies/NAME.c, beside policies/NAME.py) defines its state struct, its
 * operations, and one exported table ``kv_policy_NAME`` (Python finds it by name). Drivers (the
 * sequential replay, overlapping requests, tiers, the serving simulator) call a policy through
 * its table, one call per request or per block range; the sequential replay's loop itself is
 * instantiated in each policy file (KV_REPLAY), so its per-block probe and access are inlined.
 */
#ifndef KV_POLICY_H
#define KV_POLICY_H

#include "account.h"
#include "holds.h"

/* A block pool driven as vLLM's scheduler drives it, chunk by chunk (serving/kernel/requests.c
 * says when each is called; policies/vllm.c is the one pool that has these). */
typedef struct KvPaged {
    /* blocks no running request holds */
    i64 (*free_blocks)(void *st);
    /* how many of the k hit blocks ids[start:start+k] sit in the free queue (distinct blocks) */
    i64 (*evictable)(void *st, const i32 *ids, i64 start, i64 k);
    /* hold the k hit blocks: their handles go to handles[base:base + k] */
    void (*touch)(void *st, const i32 *ids, i64 start, i64 k, i64 *handles, i64 base);
    /* hold m more blocks, without a hash, from the head of the free queue (evicting cached ones
     * when no block without a hash is free) */
    void (*allocate)(void *st, i64 m);
    /* a held block without a hash gets hash id: its handle */
    i64 (*cache)(void *st, i64 id);
    /* free a request's blocks, its last first: `hashed` blocks with handles[base:base + hashed],
     * then `unhashed` blocks after them */
    void (*release)(void *st, const i64 *handles, i64 base, i64 hashed, i64 unhashed);
} KvPaged;

typedef struct KvPolicy {
    const char *name;
    const char *layout;  /* " field:dtype ...", then " | meta= slot slot ..." for its meta array */
    /* a probe: is block b resident? changes nothing */
    int (*resident)(void *st, i64 b);
    /* the most blocks this request's prefix scan may count */
    i64 (*hit_limit)(void *st, i64 num_blocks, i64 input_length, i64 block_size);
    /* the access phase of one request in a sequential replay, told its hits */
    void (*access_request)(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                           i64 input_length, i64 block_size);
    /* a request that will run a while: its access phase, holding its blocks; their handles go to
     * handles[base:base + n]; returns n (refused iff hold[REFUSALS] grew) */
    i64 (*pin_request)(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 input_length,
                       i64 block_size, i64 *handles, i64 base);
    /* release the n holds handles[base:base + n] of a pin_request, in the policy's order */
    void (*unpin_request)(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 input_length,
                          i64 block_size, const i64 *handles, i64 base, i64 n);
    /* is block b anywhere in the cache? (a radix tree's resident() follows one path) */
    int (*in_hbm)(void *st, i64 b);
    /* may a hit prefix continue through a cached block after a stretch loaded from a tier? (not
     * for a radix tree, whose path ends where its match ends) */
    int hbm_gaps;
    /* the sequential replay of n requests (engine/driver.py's loop, with this policy inlined) */
    void (*replay)(void *st, const i64 *offsets, const i32 *blocks, const i64 *input_length, i64 n,
                   i64 block_size, i64 *hit_blocks, i64 *hit_tokens);
    /* pin_request over consecutive ranges of a request is pin_request over their union (block-level
     * policies): the simulator may then hold a request's blocks chunk by chunk */
    int piecewise;
    /* vLLM's pool, driven chunk by chunk (NULL: no such pool) */
    const KvPaged *paged;
    /* of a request's num_blocks leading blocks, how many its access phase caches (NULL: all;
     * vllm and radix cache full blocks only, never the prompt's partial tail) */
    i64 (*cached_blocks)(void *st, i64 num_blocks, i64 input_length, i64 block_size);
    /* SGLang's radix tree, as its scheduler drives it (NULL: no such tree) */
    const struct KvTree *tree;
    /* requests [first, last) of the sequential replay with the miss account (KV_REPLAY_ACCOUNT,
     * `record` a KvAccount): the request it stopped before (last, or earlier when the record's gone
     * might overflow), or -1 when the eviction log overflowed */
    i64 (*replay_account)(void *st, i64 *record, const i64 *offsets, const i32 *blocks, const i64 *input_length,
                          i64 first, i64 last, i64 block_size, i64 *hit_blocks, i64 *hit_tokens);
    /* a running request whose prompt is computed stores it for reuse while it still holds its n
     * handles (TensorRT-LLM's storeContextBlocks); NULL: no such step (the policy caches a
     * request's blocks at its start or its release) */
    void (*store_request)(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 input_length,
                          i64 block_size, const i64 *handles, i64 base, i64 n);
    /* of the n handles a running request holds (its prompt: end - start ids), the GPU blocks no
     * other request holds: what releasing it frees (TensorRT-LLM's schedulingRemoveSequence);
     * NULL: every held position is its own */
    i64 (*own_blocks)(void *st, i64 start, i64 end, const i64 *handles, i64 base, i64 n);
} KvPolicy;

/* What SGLang's scheduler does to its tree beyond a request's start and release. */
typedef struct KvTree {
    /* of the k leading blocks of blocks[start:] that the last prefix scan matched, how many no
     * running request locks (so locking them takes that much evictable room) */
    i64 (*unheld_prefix)(void *st, const i32 *blocks, i64 start, i64 k);
    /* match_prefix of a waiting request's first n blocks, which stamps the path it follows
     * (splitting where it ends inside a node): the blocks matched, *new_nodes the nodes made */
    i64 (*touch_prefix)(void *st, const i32 *blocks, i64 start, i64 n, i64 *new_nodes);
    /* evict until `blocks` blocks are free, or nothing evictable is left (blocks requests took
     * of their own count as taken) */
    void (*evict_to_free)(void *st, i64 blocks);
    /* ---- a request as SGLang's scheduler holds it: its matched path locked, its other pages
     * its own (outside the tree) until a checkpoint puts the computed ones in ---- */
    /* admit a request whose scan just matched `hits` blocks: the path locked (handles[base]),
     * `pages` - hits blocks of its own (the caller evicts the shortfall: evict_to_free); 0 when
     * they can never fit */
    i64 (*hold_request)(void *st, i64 hits, i64 pages, i64 *handles, i64 base);
    /* n more blocks of its own (the caller evicts the shortfall): 0 when they do not fit */
    int (*hold_pages)(void *st, i64 n);
    /* n blocks of its own are free again */
    void (*free_pages)(void *st, i64 n);
    /* its key ids[0:n] (a negative id matches no other request's) enters the tree and its lock
     * moves from handles[base] to the key's end */
    void (*checkpoint)(void *st, const i32 *ids, i64 n, i64 *handles, i64 base);
    /* its lock (handles[base]) is dropped */
    void (*release)(void *st, const i64 *handles, i64 base);
} KvTree;

/* The blocks a request's access phase caches (the ones that enter the cache, so leave the tiers
 * below when copies move). */
static inline i64 kv_cached_blocks(const KvPolicy *p, void *st, i64 num_blocks, i64 input_length, i64 block_size) {
    return p->cached_blocks == NULL ? num_blocks : p->cached_blocks(st, num_blocks, input_length, block_size);
}

/* The matched prefix's blocks no running request holds (KvTree.unheld_prefix; else the blocks
 * without a pin, or vLLM's hit blocks in its free queue). */
static inline i64 kv_unheld_prefix(const KvPolicy *p, void *st, const i32 *blocks, i64 start, i64 k) {
    if (p->tree != NULL) return p->tree->unheld_prefix(st, blocks, start, k);
    if (p->paged != NULL) return p->paged->evictable(st, blocks, start, k);
    const KvHolds *h = (const KvHolds *)st;
    i64 n = 0;
    for (i64 q = 0; q < k; q++) n += h->pins[blocks[start + q]] == 0;
    return n;
}

/* The prefix scan every driver uses: the longest resident prefix of blocks[start:end], at most
 * the policy's hit limit, touching nothing. */
static inline i64 kv_prefix(const KvPolicy *p, void *st, const i32 *blocks, i64 start, i64 end, i64 input_length,
                            i64 block_size) {
    i64 limit = p->hit_limit(st, end - start, input_length, block_size);
    i64 k = 0;
    while (k < limit && p->resident(st, blocks[start + k])) k++;
    return k;
}

/* The sequential replay's loop for one policy, its probe, limit and access phase inlined:
 * scan the longest resident prefix before touching anything, record min(k * bs, L), then the
 * access phase. */
#define KV_REPLAY(name, State, RESIDENT, HIT_LIMIT, ACCESS_REQUEST)                                   \
    static void name##_replay(void *vst, const i64 *offsets, const i32 *blocks, const i64 *input_length, \
                              i64 n, i64 block_size, i64 *hit_blocks, i64 *hit_tokens) {            \
        State local = *(State *)vst; /* the arrays' addresses in a local the loop never lets escape */ \
        State *st = &local;                                                                          \
        for (i64 i = 0; i < n; i++) {                                                                \
            i64 start = offsets[i], end = offsets[i + 1], L = input_length[i];                       \
            i64 limit = HIT_LIMIT(st, end - start, L, block_size);                                   \
            i64 k = 0;                                                                               \
            while (k < limit && RESIDENT(st, blocks[start + k])) k++;                                \
            hit_blocks[i] = k;                                                                       \
            hit_tokens[i] = kv_min(k * block_size, L);                                               \
            ACCESS_REQUEST(st, i, blocks, start, end, k, L, block_size);                             \
        }                                                                                            \
    }

/* The sequential replay's loop with the miss account (include/account.h, engine/account.py): the
 * same scan, then, before anything is touched, each block from the first miss on gets its cause
 * (IN_HBM: is the block anywhere in the cache; RESIDENT but for a radix tree) and its tokens go to
 * the request's row; then the access phase and the stamps. */
#define KV_REPLAY_ACCOUNT(name, State, RESIDENT, IN_HBM, HIT_LIMIT, ACCESS_REQUEST)                          \
    static i64 name##_replay_account(void *vst, i64 *record, const i64 *offsets, const i32 *blocks,           \
                                     const i64 *input_length, i64 first, i64 last, i64 block_size,            \
                                     i64 *hit_blocks, i64 *hit_tokens) {                                      \
        State local = *(State *)vst;                                                                           \
        State *st = &local;                                                                                    \
        KvAccount *a = (KvAccount *)record;                                                                    \
        i64 used = a->gone_used[0], i = first;                                                                 \
        for (; i < last; i++) {                                                                                \
            i64 start = offsets[i], end = offsets[i + 1], n = end - start, L = input_length[i];                \
            if (used + n > a->gone_n) break; /* gone might overflow: the caller grows it, goes on from i */    \
            i64 limit = HIT_LIMIT(st, n, L, block_size);                                                        \
            i64 k = 0;                                                                                         \
            while (k < limit && RESIDENT(st, blocks[start + k])) k++;                                          \
            hit_blocks[i] = k;                                                                                 \
            hit_tokens[i] = kv_min(k * block_size, L);                                                         \
            i64 *row = kv_account_row(a, i, hit_tokens[i]);                                                    \
            i64 last_block = L > 0 ? (L - 1) / block_size : -1;                                                \
            for (i64 j = 0; j < k; j++) a->cause[start + j] = HIT;                                             \
            for (i64 j = k; j < n; j++) {                                                                      \
                i32 b = blocks[start + j];                                                                     \
                i64 gone = -1;                                                                                 \
                int cause = -1;                                                                                \
                if (j >= limit && j == last_block) cause = PARTIAL_BLOCK;                                      \
                else if (!(j == k && j < limit) && IN_HBM(st, b)) cause = BEHIND_HOLE;                         \
                else if (a->content_n) {                                                                       \
                    i64 c = a->content[b];                                                                     \
                    for (i64 q = a->content_offsets[c]; q < a->content_offsets[c + 1] && cause < 0; q++)       \
                        if (a->content_members[q] != b && IN_HBM(st, a->content_members[q])) cause = NAMESPACE; \
                }                                                                                              \
                if (cause < 0) cause = kv_account_gone(a, b, &gone);                                           \
                a->cause[start + j] = (i8)cause;                                                               \
                if (cause == EVICTED) a->gone[used++] = (i32)gone;                                             \
                row[cause] += kv_max(0, kv_min(block_size, L - j * block_size));                               \
            }                                                                                                  \
            row[PARTIAL_BLOCK] += kv_max(0, L - n * block_size);                                               \
            ACCESS_REQUEST(st, i, blocks, start, end, k, L, block_size);                                       \
            if (kv_account_stamp(a, &st->h, i, blocks, start, end) < 0) return -1;                             \
        }                                                                                                      \
        a->gone_used[0] = used;                                                                                \
        return i;                                                                                              \
    }

/* A block-level policy from RESIDENT(st, b) and ACCESS(st, b, holds): ``holds`` is a constant,
 * 0 in the sequential replay (the compiler drops every hold check) and 1 for running requests.
 * The defaults of base.py: every block may hit; the access phase accesses each block in order;
 * pin_request accesses and holds each block in order, stopping at the first refused one (a block
 * the policy declines without a refusal is not held); unpin_request releases first to last. */
#define KV_BLOCK_POLICY(name, State, LAYOUT, RESIDENT, ACCESS)                                         \
    static inline i64 name##_limit_all(State *st, i64 num_blocks, i64 L, i64 bs) {                    \
        (void)st; (void)L; (void)bs;                                                                  \
        return num_blocks;                                                                            \
    }                                                                                                 \
    static inline void name##_access_all(State *st, i64 request, const i32 *blocks, i64 start, i64 end, \
                                         i64 hits, i64 L, i64 bs) {                                   \
        (void)request; (void)hits; (void)L; (void)bs;                                                 \
        for (i64 j = start; j < end; j++) ACCESS(st, blocks[j], 0);                                   \
    }                                                                                                 \
    KV_REPLAY(name, State, RESIDENT, name##_limit_all, name##_access_all)                             \
    KV_REPLAY_ACCOUNT(name, State, RESIDENT, RESIDENT, name##_limit_all, name##_access_all)           \
    static int name##_resident_op(void *st, i64 b) { return RESIDENT((State *)st, b); }               \
    static i64 name##_hit_limit_op(void *st, i64 num_blocks, i64 L, i64 bs) {                         \
        return name##_limit_all((State *)st, num_blocks, L, bs);                                      \
    }                                                                                                 \
    static void name##_access_request_op(void *st, i64 request, const i32 *blocks, i64 start, i64 end,  \
                                         i64 hits, i64 L, i64 bs) {                                   \
        name##_access_all((State *)st, request, blocks, start, end, hits, L, bs);                     \
    }                                                                                                 \
    static i64 name##_pin_request_op(void *vst, i64 request, const i32 *blocks, i64 start, i64 end,    \
                                     i64 hits, i64 L, i64 bs, i64 *handles, i64 base) {               \
        State *st = (State *)vst;                                                                     \
        (void)request; (void)hits; (void)L; (void)bs;                                                 \
        i64 n = 0;                                                                                    \
        for (i64 j = start; j < end; j++) {                                                           \
            i32 b = blocks[j];                                                                        \
            i64 refusals = st->h.hold[REFUSALS];                                                      \
            ACCESS(st, b, 1);                                                                         \
            if (st->h.hold[REFUSALS] != refusals) break;                                              \
            if (RESIDENT(st, b)) {                                                                    \
                kv_pin(&st->h, b);                                                                    \
                handles[base + n] = b;                                                                \
                n++;                                                                                  \
            }                                                                                         \
        }                                                                                             \
        return n;                                                                                     \
    }                                                                                                 \
    static void name##_unpin_request_op(void *vst, i64 request, const i32 *blocks, i64 start, i64 end, \
                                        i64 L, i64 bs, const i64 *handles, i64 base, i64 n) {         \
        State *st = (State *)vst;                                                                     \
        (void)request; (void)blocks; (void)start; (void)end; (void)L; (void)bs;                       \
        kv_unpin_handles(&st->h, handles, base, n);                                                   \
    }                                                                                                 \
    KV_EXPORT const KvPolicy kv_policy_##name = {                                                     \
        #name, LAYOUT, name##_resident_op, name##_hit_limit_op, name##_access_request_op,             \
        name##_pin_request_op, name##_unpin_request_op, name##_resident_op, 1, name##_replay, 1, NULL, NULL, NULL, \
        name##_replay_account, NULL, NULL,                                                            \
    };

/* A request-level policy (its own hit limit, access phase, holds) from its typed operations (each
 * takes `State *st` first): RESIDENT, HIT_LIMIT and ACCESS_REQUEST, inlined into its sequential
 * loop, PIN_REQUEST, UNPIN_REQUEST, and IN_HBM (RESIDENT but for a radix tree); HBM_GAPS, PAGED
 * CACHED_BLOCKS and TREE as in KvPolicy (the last three may be NULL). */
#define KV_REQUEST_POLICY(name, State, LAYOUT, RESIDENT, HIT_LIMIT, ACCESS_REQUEST, PIN_REQUEST, UNPIN_REQUEST,     \
                          IN_HBM, HBM_GAPS, PAGED, CACHED_BLOCKS, TREE)                                            \
    KV_REPLAY(name, State, RESIDENT, HIT_LIMIT, ACCESS_REQUEST)                                                    \
    KV_REPLAY_ACCOUNT(name, State, RESIDENT, IN_HBM, HIT_LIMIT, ACCESS_REQUEST)                                    \
    static int name##_resident_op(void *st, i64 b) { return RESIDENT((State *)st, b); }                          \
    static int name##_in_hbm_op(void *st, i64 b) { return IN_HBM((State *)st, b); }                              \
    static i64 name##_hit_limit_op(void *st, i64 num_blocks, i64 L, i64 bs) {                                    \
        return HIT_LIMIT((State *)st, num_blocks, L, bs);                                                        \
    }                                                                                                            \
    static void name##_access_request_op(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, \
                                         i64 L, i64 bs) {                                                        \
        ACCESS_REQUEST((State *)st, request, blocks, start, end, hits, L, bs);                                   \
    }                                                                                                            \
    static i64 name##_pin_request_op(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,     \
                                     i64 L, i64 bs, i64 *handles, i64 base) {                                    \
        return PIN_REQUEST((State *)st, request, blocks, start, end, hits, L, bs, handles, base);                \
    }                                                                                                            \
    static void name##_unpin_request_op(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 L,     \
                                        i64 bs, const i64 *handles, i64 base, i64 n) {                           \
        UNPIN_REQUEST((State *)st, request, blocks, start, end, L, bs, handles, base, n);                        \
    }                                                                                                            \
    KV_EXPORT const KvPolicy kv_policy_##name = {                                                                \
        #name, LAYOUT, name##_resident_op, name##_hit_limit_op, name##_access_request_op, name##_pin_request_op, \
        name##_unpin_request_op, name##_in_hbm_op, HBM_GAPS, name##_replay, 0, PAGED, CACHED_BLOCKS,            \
        TREE, name##_replay_account, NULL, NULL,                                                                 \
    };

/* A state struct: the holds, then the policy's fields (FIELDS(F) lists F(type, name) each). */
#define KV_STATE(State, FIELDS) typedef struct { KvHolds h; FIELDS(KV_FIELD) } State;
/* Its layout string, with the slot names of its meta array (SLOTS(S) lists S(name) each). */
#define KV_LAYOUT(FIELDS, SLOTS) KV_HOLDS_SPEC FIELDS(KV_FIELD_SPEC) " | meta=" SLOTS(KV_SLOT_SPEC)

#endif
