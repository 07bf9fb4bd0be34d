/* TensorRT-LLM's block reuse, compiled (the rules and the reference engine: trtllm.py, whose
 * methods each function below follows, name for name).
 *
 * Blocks are slots 0..N-1 (N = the GPU pool's capacity, then the host pool's blocks); the tree's
 * root is N. A block in the tree has a key (a trace id >= 0, or a partial tail's key <= -2 that no
 * lookup asks for) and a parent; children hang off their parent in insertion order (first_child,
 * next_sib, ...: the reference's dicts) and are found by an open-addressing table from (parent,
 * key) to child (linear probing, backward-shift deletion). Free blocks wait in 2 x 101 FIFO queues
 * (level, priority) with a bit per non-empty queue. A block's priority runs out at `expires` (NaN:
 * never). A trace id is resident (resident_mask, the eviction log) while a GPU block holds it in
 * the tree (gpu_count); in_hbm: anywhere in the tree (where_count).
 *
 * A request holds its need = ceil(L / B) blocks: handles[base + j] for its first min(need, ids)
 * blocks, and, when its prompt has fewer ids than blocks, the rest as a chain (chain[]) whose head
 * is handles[base + ids]. */
#include <math.h>

#include "../include/list.h"
#include "../include/policy.h"

#define FIELDS(F)                                                                                        \
    F(i8, level) F(i8, queued) F(i8, counted) F(i32, priority) F(i32, refs) F(i64, key) F(i32, parent)   \
    F(i32, first_child) F(i32, last_child) F(i32, next_sib) F(i32, prev_sib) F(i32, tab_parent)          \
    F(i64, tab_key) F(i32, tab_node) F(i32, qnext) F(i32, qprev) F(i32, qhead) F(i32, qtail)             \
    F(i64, nonempty) F(f64, duration) F(f64, expires) F(i64, where_count) F(i64, gpu_count) F(i32, chain) \
    F(i64, ret_offsets) F(i64, ret_start) F(i64, ret_end) F(i64, ret_priority) F(f64, ret_duration)      \
    F(f64, times) F(i64, scratch) F(i64, handles) F(f64, clock) F(i64, meta)
#define SLOTS(S)                                                                                         \
    S(CAPACITY) S(HOST) S(LEAF_ONLY) S(OFFLOAD_MIN) S(SCAN) S(PARTIAL_KEYS) S(FREE_GPU) S(EXPIRING)      \
    S(GPU_BLOCKS) S(REFUSED) S(REUSED) S(MISSED) S(OFFLOADED) S(ONBOARDED) S(DROPPED) S(EXPIRED)
KV_STATE(TRT, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

enum { DEFAULT_PRIORITY = 35, PRIORITIES = 101, NO_KEY = -1 };

static inline i64 trt_root(const TRT *st) { return st->level_n; }

/* ---- the children table: (parent, key) -> child ---- */

static inline i64 trt_slot(const TRT *st, i64 parent, i64 key) {
    uint64_t h = (uint64_t)parent * 0x9E3779B97F4A7C15ull ^ ((uint64_t)key * 0xC2B2AE3D27D4EB4Full);
    h ^= h >> 29;
    return (i64)(h & (uint64_t)(st->tab_parent_n - 1));
}

static inline i64 trt_child(const TRT *st, i64 parent, i64 key) {
    i64 mask = st->tab_parent_n - 1, i = trt_slot(st, parent, key);
    while (st->tab_parent[i] >= 0) {
        if (st->tab_parent[i] == parent && st->tab_key[i] == key) return st->tab_node[i];
        i = (i + 1) & mask;
    }
    return -1;
}

/* node.children[key] = b (key absent): the table, then the end of the parent's child list */
static void trt_add_child(TRT *st, i64 parent, i64 key, i64 b) {
    i64 mask = st->tab_parent_n - 1, i = trt_slot(st, parent, key);
    while (st->tab_parent[i] >= 0) i = (i + 1) & mask;
    st->tab_parent[i] = (i32)parent;
    st->tab_key[i] = key;
    st->tab_node[i] = (i32)b;
    kv_list32_append(st->prev_sib, st->next_sib, &st->first_child[parent], &st->last_child[parent], b);
}

/* del node.children[key]: out of the table (shifting later entries of its run back) and the list */
static void trt_remove_child(TRT *st, i64 parent, i64 key, i64 b) {
    i32 *tp = st->tab_parent, *tn = st->tab_node;
    i64 *tk = st->tab_key;
    i64 mask = st->tab_parent_n - 1, i = trt_slot(st, parent, key);
    while (!(tp[i] == parent && tk[i] == key)) i = (i + 1) & mask;
    i64 hole = i, j = (i + 1) & mask;
    while (tp[j] >= 0) {
        i64 home = trt_slot(st, tp[j], tk[j]);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            tp[hole] = tp[j];
            tk[hole] = tk[j];
            tn[hole] = tn[j];
            hole = j;
        }
        j = (j + 1) & mask;
    }
    tp[hole] = -1;
    kv_list32_unlink(st->prev_sib, st->next_sib, &st->first_child[parent], &st->last_child[parent], b);
}

/* ---- the queues (_queue, _unqueue, _front) ---- */

static inline i64 trt_queue_of(const TRT *st, i64 b) { return st->level[b] * PRIORITIES + st->priority[b]; }

static void trt_queue(TRT *st, i64 b) {
    if (st->queued[b]) return; /* (never happens: the reference's dict would keep its place) */
    i64 q = trt_queue_of(st, b), p = st->priority[b];
    kv_list32_append(st->qprev, st->qnext, &st->qhead[q], &st->qtail[q], b);
    st->nonempty[st->level[b] * 2 + p / 64] |= (i64)(1ull << (p % 64));
    st->queued[b] = 1;
}

static void trt_unqueue(TRT *st, i64 b) {
    if (!st->queued[b]) return;
    i64 q = trt_queue_of(st, b), p = st->priority[b];
    kv_list32_unlink(st->qprev, st->qnext, &st->qhead[q], &st->qtail[q], b);
    if (st->qhead[q] < 0) st->nonempty[st->level[b] * 2 + p / 64] &= ~(i64)(1ull << (p % 64));
    st->queued[b] = 0;
}

/* the front of the level's lowest-priority non-empty queue, or -1 */
static i64 trt_front(const TRT *st, i64 level) {
    uint64_t lo = (uint64_t)st->nonempty[level * 2], hi = (uint64_t)st->nonempty[level * 2 + 1];
    i64 p;
    if (lo) p = __builtin_ctzll(lo);
    else if (hi) p = 64 + __builtin_ctzll(hi);
    else return -1;
    return st->qhead[level * PRIORITIES + p];
}

/* ---- residency counts and the eviction log (_count, _uncount) ---- */

static inline void trt_count(TRT *st, i64 b) {
    if (st->level[b] == 0 && !st->counted[b] && st->key[b] >= 0) {
        st->counted[b] = 1;
        st->gpu_count[st->key[b]] += 1;
        st->meta[GPU_BLOCKS] += 1;
    }
}

static inline void trt_uncount(TRT *st, i64 b) {
    if (!st->counted[b]) return;
    st->counted[b] = 0;
    st->meta[GPU_BLOCKS] -= 1;
    if (--st->gpu_count[st->key[b]] == 0) kv_log_eviction(&st->h, st->key[b]);
}

/* ---- expiry ---- */

static inline void trt_not_expiring(TRT *st, i64 b) {
    if (!isnan(st->expires[b])) {
        st->expires[b] = NAN;
        st->meta[EXPIRING] -= 1;
    }
}

static int trt_has_free_child(const TRT *st, i64 b) {
    for (i64 c = st->first_child[b]; c >= 0; c = st->next_sib[c])
        if (st->refs[c] == 0 && st->level[c] == st->level[b]) return 1;
    return 0;
}

/* releaseBlock: to the end of its queue (leaf-only: once no child of its pool is free) */
static void trt_release(TRT *st, i64 b) {
    if (!isnan(st->duration[b]) && st->priority[b] != DEFAULT_PRIORITY) {
        if (isnan(st->expires[b])) st->meta[EXPIRING] += 1;
        st->expires[b] = st->clock[0] + st->duration[b];
    }
    if (!(st->meta[LEAF_ONLY] && trt_has_free_child(st, b))) trt_queue(st, b);
}

/* claimBlock: out of the free queue; a waiting parent may become a leaf */
static void trt_claim(TRT *st, i64 b) {
    trt_unqueue(st, b);
    trt_not_expiring(st, b);
    i64 p = st->parent[b];
    if (!st->meta[LEAF_ONLY] || p < 0 || p == trt_root(st) || st->refs[p] != 0 || st->queued[p] ||
        st->level[p] != st->level[b])
        return;
    for (i64 c = st->first_child[p]; c >= 0; c = st->next_sib[c])
        if (c != b && st->refs[c] == 0 && st->level[c] == st->level[p]) return;
    trt_queue(st, p);
}

/* ---- the tree (_unlink, _detach) ---- */

static void trt_unlink(TRT *st, i64 b) {
    i64 k = st->key[b], p = st->parent[b];
    if (k != NO_KEY && p >= 0) {
        if (trt_child(st, p, k) == b) trt_remove_child(st, p, k, b);
        if (k >= 0) st->where_count[k] -= 1;
        trt_uncount(st, b);
        st->meta[DROPPED] += 1;
    }
    st->parent[b] = -1;
    st->key[b] = NO_KEY;
}

/* b and its subtree leave the tree; the subtree's free blocks join the end of the priority-35
 * queue, its held ones join a queue when released (scratch: the stack) */
static void trt_detach(TRT *st, i64 b) {
    i64 *stack = st->scratch, n = 0;
    for (i64 c = st->first_child[b]; c >= 0; c = st->next_sib[c]) stack[n++] = c;
    trt_unlink(st, b);
    while (n > 0) {
        i64 c = stack[--n];
        for (i64 d = st->first_child[c]; d >= 0; d = st->next_sib[d]) stack[n++] = d;
        trt_unqueue(st, c);
        trt_unlink(st, c);
        st->priority[c] = DEFAULT_PRIORITY;
        st->duration[c] = NAN;
        trt_not_expiring(st, c);
        if (st->refs[c] == 0) trt_queue(st, c);
    }
}

/* getFreeBlock: a block to hold new KV (priority < 0: the default; duration NaN: none), or -1 */
static i64 trt_free_block(TRT *st, i64 priority, f64 duration) {
    i64 b = trt_front(st, 0);
    if (b < 0) return -1;
    i64 host = st->key[b] != NO_KEY && st->priority[b] >= st->meta[OFFLOAD_MIN] ? trt_front(st, 1) : -1;
    if (host >= 0) {
        trt_claim(st, b);
        trt_claim(st, host);
        trt_uncount(st, b);
        st->level[b] = 1;
        st->level[host] = 0;
        st->duration[b] = NAN;
        trt_not_expiring(st, b);
        st->meta[OFFLOADED] += 1;
        trt_release(st, b);
        b = host;
    } else {
        trt_claim(st, b);
    }
    trt_detach(st, b);
    st->priority[b] = priority < 0 ? DEFAULT_PRIORITY : priority;
    st->duration[b] = duration;
    return b;
}

/* a matched block on the host comes back to the GPU pool: 0 when no GPU block is free */
static int trt_onboard(TRT *st, i64 b) {
    i64 slot = trt_free_block(st, -1, NAN);
    if (slot < 0) return 0;
    st->level[slot] = 1;
    st->level[b] = 0;
    trt_count(st, b);
    trt_release(st, slot);
    st->meta[ONBOARDED] += 1;
    return 1;
}

/* ---- retention and time ---- */

/* (priority, duration) of request's block j: the range holding its first token (-1, NaN: none) */
static void trt_block_retention(const TRT *st, i64 request, i64 j, i64 block_size, i64 *priority, f64 *duration) {
    *priority = -1;
    *duration = NAN;
    if (request < 0 || request + 1 >= st->ret_offsets_n) return;
    i64 first = j * block_size;
    for (i64 r = st->ret_offsets[request]; r < st->ret_offsets[request + 1]; r++) {
        i64 end = st->ret_end[r];
        if (end >= 0 && end <= first) continue;
        if (first >= st->ret_start[r]) {
            *priority = st->ret_priority[r];
            *duration = isfinite(st->ret_duration[r]) ? st->ret_duration[r] : NAN;
        }
        return;
    }
}

static inline int trt_expires_before(const TRT *st, i64 a, i64 b) {
    return st->expires[a] < st->expires[b] || (st->expires[a] == st->expires[b] && a < b);
}

static void trt_sift(TRT *st, i64 *h, i64 i, i64 n) {
    for (;;) {
        i64 l = 2 * i + 1, best = i;
        if (l < n && trt_expires_before(st, h[best], h[l])) best = l;
        if (l + 1 < n && trt_expires_before(st, h[best], h[l + 1])) best = l + 1;
        if (best == i) return;
        i64 t = h[i];
        h[i] = h[best];
        h[best] = t;
        i = best;
    }
}

/* refreshBlocks: blocks whose priority has run out fall back to 35, soonest first */
static void trt_refresh(TRT *st, f64 now) {
    if (now > st->clock[0]) st->clock[0] = now;
    if (st->meta[EXPIRING] == 0) return;
    i64 *h = st->scratch, n = 0, N = st->level_n;
    for (i64 b = 0; b < N; b++)
        if (!isnan(st->expires[b]) && st->expires[b] <= st->clock[0]) h[n++] = b;
    for (i64 i = n / 2 - 1; i >= 0; i--) trt_sift(st, h, i, n); /* heapsort by (expires, id) */
    for (i64 m = n - 1; m > 0; m--) {
        i64 t = h[0];
        h[0] = h[m];
        h[m] = t;
        trt_sift(st, h, 0, m);
    }
    for (i64 q = 0; q < n; q++) {
        i64 b = h[q];
        trt_not_expiring(st, b);
        int was = st->queued[b];
        trt_unqueue(st, b);
        st->priority[b] = DEFAULT_PRIORITY;
        st->duration[b] = NAN;
        if (was) trt_queue(st, b);
        st->meta[EXPIRED] += 1;
    }
}

/* ---- a request ---- */

static inline i64 trt_hit_limit(TRT *st, i64 num_blocks, i64 input_length, i64 block_size) {
    st->meta[SCAN] = trt_root(st);
    return kv_min(num_blocks, kv_max(0, input_length - 1) / block_size);
}

/* Is b the next block on the path the scan follows? Moves only the scan. */
static inline int trt_resident(TRT *st, i64 b) {
    i64 c = trt_child(st, st->meta[SCAN], b);
    if (c < 0) return 0;
    st->meta[SCAN] = c;
    return 1;
}

static inline int trt_in_hbm(TRT *st, i64 b) { return st->where_count[b] > 0; }

static inline void trt_hold(TRT *st, i64 b) {
    st->refs[b] += 1;
    if (st->refs[b] == 1 && st->level[b] == 0) {
        st->meta[FREE_GPU] -= 1;
        st->h.hold[HELD] += 1;
    }
}

/* the request's held blocks in order into out[] (its chain read out) */
static i64 trt_held(const TRT *st, i64 ids, const i64 *handles, i64 base, i64 n, i64 *out) {
    i64 direct = kv_min(n, ids);
    for (i64 j = 0; j < direct; j++) out[j] = handles[base + j];
    if (n > ids)
        for (i64 j = ids, b = handles[base + ids]; j < n; j++, b = st->chain[b]) out[j] = b;
    return n;
}

/* addSequence: the matched blocks claimed (onboarded from the host), the rest from getFreeBlock;
 * refused (nothing held) when the GPU pool has too few free blocks for them */
static i64 trt_pin_request(TRT *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 input_length,
                           i64 block_size, i64 *handles, i64 base) {
    i64 *m = st->meta;
    if (request >= 0 && request < st->times_n) trt_refresh(st, st->times[request]);
    i64 ids = end - start, full = kv_max(0, input_length - 1) / block_size;
    /* the walk of the first min(hits, full) ids, matched blocks into handles[base:] */
    i64 matched = 0, node = trt_root(st), limit = kv_min(kv_min(hits, full), ids);
    for (i64 q = 0; q < limit; q++) {
        i64 c = trt_child(st, node, blocks[start + q]);
        if (c < 0) break;
        handles[base + matched++] = c;
        node = c;
    }
    i64 need = kv_ceil_div(input_length, block_size), onboard = 0, free = m[FREE_GPU];
    for (i64 j = 0; j < matched; j++) {
        i64 b = handles[base + j];
        onboard += st->level[b] == 1;
        free -= st->level[b] == 0 && st->refs[b] == 0;
    }
    if (need - matched + onboard > free) {
        m[REFUSED] = 1;
        kv_refuse(&st->h);
        return 0;
    }
    m[REFUSED] = 0;
    i64 priority;
    f64 duration;
    for (i64 j = 0; j < matched; j++) {
        i64 b = handles[base + j];
        trt_claim(st, b);
        /* held before it is onboarded: the onboarding claims a host block, and a claim lets a free
         * parent become a leaf; b, free until held, would be queued while being matched */
        trt_hold(st, b);
        if (st->level[b] == 1) {
            trt_onboard(st, b);
            m[FREE_GPU] -= 1; /* (held on the host, then on the GPU) */
            st->h.hold[HELD] += 1;
        }
        trt_block_retention(st, request, j, block_size, &priority, &duration);
        if (priority >= 0) st->priority[b] = (i32)priority;
        st->duration[b] = duration;
        m[REUSED] += 1;
    }
    i64 tail = -1;
    for (i64 j = matched; j < need; j++) {
        trt_block_retention(st, request, j, block_size, &priority, &duration);
        i64 b = trt_free_block(st, priority, duration);
        if (b < 0) return j; /* (cannot happen: every free block is reachable) */
        trt_hold(st, b);
        if (j < ids) {
            handles[base + j] = b;
        } else {
            if (j == ids) handles[base + j] = b;
            else st->chain[tail] = (i32)b;
            st->chain[b] = -1;
            tail = b;
        }
        m[MISSED] += 1;
    }
    return need;
}

/* storeBlocks: the keys of the first L - 1 tokens (with `partial`, the partial tail's too), the
 * request's blocks (held, in order) from the first key the tree does not have */
static void trt_store(TRT *st, const i32 *blocks, i64 start, i64 ids, const i64 *held, i64 n, i64 input_length,
                      i64 block_size, int partial) {
    i64 tokens = kv_max(0, input_length - 1);
    i64 nk = kv_min(tokens / block_size, ids), keys = nk, pkey = NO_KEY;
    if (partial && tokens % block_size) {
        st->meta[PARTIAL_KEYS] += 1;
        pkey = -1 - st->meta[PARTIAL_KEYS];
        keys += 1;
    }
    i64 node = trt_root(st);
    for (i64 q = 0; q < kv_min(keys, n); q++) {
        i64 k = q < nk ? blocks[start + q] : pkey, b = held[q];
        i64 c = trt_child(st, node, k);
        if (c >= 0) {
            node = c;
            continue;
        }
        if (st->parent[b] < 0) {
            st->key[b] = k;
            st->parent[b] = (i32)node;
            trt_add_child(st, node, k, b);
            if (k >= 0) st->where_count[k] += 1;
            trt_count(st, b);
        }
        node = b;
    }
}

static void trt_store_request(void *vst, i64 request, const i32 *blocks, i64 start, i64 end, i64 input_length,
                              i64 block_size, const i64 *handles, i64 base, i64 n) {
    TRT *st = (TRT *)vst;
    (void)request;
    i64 *held = st->scratch;
    trt_held(st, end - start, handles, base, n, held);
    trt_store(st, blocks, start, end - start, held, n, input_length, block_size, 0);
}

static i64 trt_own_blocks(void *vst, i64 start, i64 end, const i64 *handles, i64 base, i64 n) {
    TRT *st = (TRT *)vst;
    i64 *held = st->scratch, own = 0;
    trt_held(st, end - start, handles, base, n, held);
    for (i64 j = 0; j < n; j++) own += st->refs[held[j]] == 1 && st->level[held[j]] == 0;
    return own;
}

/* removeSequence: its blocks stored, then released last first (each to its queue once no other
 * request holds it) */
static void trt_unpin_request(TRT *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 input_length,
                              i64 block_size, const i64 *handles, i64 base, i64 n) {
    (void)request;
    i64 *held = st->scratch;
    trt_held(st, end - start, handles, base, n, held);
    trt_store(st, blocks, start, end - start, held, n, input_length, block_size, 1);
    for (i64 j = n - 1; j >= 0; j--) {
        i64 b = held[j];
        st->refs[b] -= 1;
        if (st->refs[b] == 0) {
            if (st->level[b] == 0) {
                st->meta[FREE_GPU] += 1;
                st->h.hold[HELD] -= 1;
            }
            trt_release(st, b);
        }
    }
}

static inline void trt_access_request(TRT *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                                      i64 input_length, i64 block_size) {
    i64 n = trt_pin_request(st, request, blocks, start, end, hits, input_length, block_size, st->handles, 0);
    trt_unpin_request(st, request, blocks, start, end, input_length, block_size, st->handles, 0, n);
}

KV_REPLAY(trtllm, TRT, trt_resident, trt_hit_limit, trt_access_request)
KV_REPLAY_ACCOUNT(trtllm, TRT, trt_resident, trt_in_hbm, trt_hit_limit, trt_access_request)

static int trtllm_resident_op(void *st, i64 b) { return trt_resident((TRT *)st, b); }
static int trtllm_in_hbm_op(void *st, i64 b) { return trt_in_hbm((TRT *)st, b); }
static i64 trtllm_hit_limit_op(void *st, i64 num_blocks, i64 L, i64 bs) {
    return trt_hit_limit((TRT *)st, num_blocks, L, bs);
}
static void trtllm_access_request_op(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 L,
                                     i64 bs) {
    trt_access_request((TRT *)st, request, blocks, start, end, hits, L, bs);
}
static i64 trtllm_pin_request_op(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits, i64 L,
                                 i64 bs, i64 *handles, i64 base) {
    return trt_pin_request((TRT *)st, request, blocks, start, end, hits, L, bs, handles, base);
}
static void trtllm_unpin_request_op(void *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 L, i64 bs,
                                    const i64 *handles, i64 base, i64 n) {
    trt_unpin_request((TRT *)st, request, blocks, start, end, L, bs, handles, base, n);
}

KV_EXPORT const KvPolicy kv_policy_trtllm = {
    .name = "trtllm",
    .layout = KV_LAYOUT(FIELDS, SLOTS),
    .resident = trtllm_resident_op,
    .hit_limit = trtllm_hit_limit_op,
    .access_request = trtllm_access_request_op,
    .pin_request = trtllm_pin_request_op,
    .unpin_request = trtllm_unpin_request_op,
    .in_hbm = trtllm_in_hbm_op,
    .hbm_gaps = 0,
    .replay = trtllm_replay,
    .piecewise = 0,
    .paged = NULL,
    .cached_blocks = NULL,
    .tree = NULL,
    .replay_account = trtllm_replay_account,
    .store_request = trt_store_request,
    .own_blocks = trt_own_blocks,
};
