/* vLLM v1's block pool, compiled (the rules, the reference engine and the numba engine: vllm.py).
 *
 * Blocks without a hash are interchangeable and the free ones all sit at the head of the free
 * queue, so they are a count (HASHLESS_FREE); a block that holds a hash has a slot: its hash, its
 * ref_cnt, its links in the free queue's run of cached blocks (ends in meta) and among the holders
 * of its hash (ends per hash id: holder_head is what a lookup returns, -1: not resident). Unused
 * slots wait on slot_stack. Allocation is all or nothing; a request is freed tail block first. */
#include "../include/list.h"
#include "../include/policy.h"

#define FIELDS(F)                                                                                  \
    F(i32, holder_head) F(i32, holder_tail) F(i32, slot_hash) F(i32, slot_ref) F(i32, queue_prev) \
    F(i32, queue_next) F(i32, holder_prev) F(i32, holder_next) F(i32, slot_stack) F(i64, handles) F(i64, meta)
#define SLOTS(S)                                                                                   \
    S(CAPACITY) S(RECOMPUTE) S(HASHLESS_FREE) S(QUEUE_HEAD) S(QUEUE_TAIL) S(FREE_SLOTS) S(CACHED_BLOCKS) \
    S(ADMISSIONS) S(EVICTIONS) S(DUPLICATES) S(PINNED_PEAK) S(OVERSIZE)
KV_STATE(VLLM, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

static inline int vllm_resident(VLLM *st, i64 b) { return st->holder_head[b] >= 0; }

static inline i64 vllm_hit_limit(VLLM *st, i64 num_blocks, i64 input_length, i64 block_size) {
    /* (L - 1) / bs truncates where Python floors (L = 0): either is clamped to 0 below */
    i64 cap = st->meta[RECOMPUTE] != 0 ? (input_length - 1) / block_size : input_length / block_size;
    if (cap > num_blocks) cap = num_blocks;
    if (cap < 0) cap = 0;
    return cap;
}

/* Take slot s's hash away (its block is being reused) and give the slot back. */
static inline void vllm_uncache(VLLM *st, i64 s) {
    i64 h = st->slot_hash[s];
    kv_list32_unlink(st->holder_prev, st->holder_next, &st->holder_head[h], &st->holder_tail[h], s);
    if (st->holder_head[h] < 0) kv_log_eviction(&st->h, h); /* its last holder: not resident any more */
    st->slot_hash[s] = -1;
    i64 *m = st->meta;
    m[CACHED_BLOCKS] -= 1;
    st->slot_stack[m[FREE_SLOTS]] = (i32)s;
    m[FREE_SLOTS] += 1;
}

/* A pinned block without a hash gets hash h: it takes a slot, last among h's holders. */
static inline i64 vllm_cache(VLLM *st, i64 h) {
    i64 *m = st->meta;
    m[FREE_SLOTS] -= 1;
    i64 s = st->slot_stack[m[FREE_SLOTS]];
    if (st->holder_tail[h] >= 0) m[DUPLICATES] += 1;
    kv_list32_append(st->holder_prev, st->holder_next, &st->holder_head[h], &st->holder_tail[h], s);
    st->slot_hash[s] = (i32)h;
    st->slot_ref[s] = 1;
    m[CACHED_BLOCKS] += 1;
    m[ADMISSIONS] += 1;
    return s;
}

/* The hit blocks with ref_cnt 0 (in the free queue), each block once: a hash repeated within a
 * request hits one block (a free block is marked -1 while it is counted). */
static i64 vllm_free_hits(VLLM *st, const i32 *blocks, i64 start, i64 hits) {
    i64 count = 0;
    for (i64 j = 0; j < hits; j++) {
        i64 s = st->holder_head[blocks[start + j]];
        if (st->slot_ref[s] == 0) {
            st->slot_ref[s] = -1;
            count++;
        }
    }
    for (i64 j = 0; j < hits; j++) {
        i64 s = st->holder_head[blocks[start + j]];
        if (st->slot_ref[s] < 0) st->slot_ref[s] = 0;
    }
    return count;
}

/* Hold the k hit blocks ids[start:start+k] (ref_cnt + 1; a free one leaves the free queue);
 * their slots go to handles[base:base + k]. */
static void vllm_touch(VLLM *st, const i32 *ids, i64 start, i64 k, i64 *handles, i64 base) {
    i64 *m = st->meta;
    for (i64 j = 0; j < k; j++) {
        i64 s = st->holder_head[ids[start + j]];
        if (st->slot_ref[s] == 0) {
            kv_list_unlink(st->queue_prev, st->queue_next, &m[QUEUE_HEAD], &m[QUEUE_TAIL], s);
            st->h.hold[HELD] += 1;
        }
        st->slot_ref[s] += 1;
        handles[base + j] = s;
    }
    if (st->h.hold[HELD] > m[PINNED_PEAK]) m[PINNED_PEAK] = st->h.hold[HELD];
}

/* Hold `count` new blocks without a hash, from the head of the free queue: the blocks without a
 * hash first, then cached ones, which lose their hash (an eviction). */
static void vllm_allocate(VLLM *st, i64 count) {
    i64 *m = st->meta;
    st->h.hold[HELD] += count;
    if (st->h.hold[HELD] > m[PINNED_PEAK]) m[PINNED_PEAK] = st->h.hold[HELD];
    i64 take = count < m[HASHLESS_FREE] ? count : m[HASHLESS_FREE];
    m[HASHLESS_FREE] -= take;
    for (i64 q = take; q < count; q++) {
        i64 s = m[QUEUE_HEAD];
        kv_list_unlink(st->queue_prev, st->queue_next, &m[QUEUE_HEAD], &m[QUEUE_TAIL], s);
        vllm_uncache(st, s);
        m[EVICTIONS] += 1;
    }
}

static i64 vllm_pin_request(VLLM *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                            i64 input_length, i64 block_size, i64 *handles, i64 base) {
    (void)request;
    i64 *m = st->meta;
    i64 *hold = st->h.hold;
    i64 need = (input_length + block_size - 1) / block_size;
    i64 held_count = need;
    if (need > m[CAPACITY]) held_count = m[CAPACITY];
    if (held_count < hits) held_count = hits;
    i64 new = held_count - hits;
    /* All or nothing: the new blocks and the free hit blocks (they leave the free queue) must fit
     * in the free blocks. Counted only when the hits might not fit (never in a sequential replay
     * but for a hash repeated beyond the capacity): a free block is marked -1 once. */
    i64 free = m[CAPACITY] - hold[HELD];
    if (new + hits > free) {
        if (new + vllm_free_hits(st, blocks, start, hits) > free) {
            kv_refuse(&st->h);
            return 0;
        }
    }
    if (need > m[CAPACITY]) m[OVERSIZE] += 1;
    i64 full = input_length / block_size;
    if (full > end - start) full = end - start;
    if (full > held_count) full = held_count;
    vllm_touch(st, blocks, start, hits, handles, base);  /* 1. touch the hit blocks */
    vllm_allocate(st, new);  /* 2. new blocks from the head of the free queue */
    /* 3. prefill caches the full blocks */
    for (i64 j = hits; j < full; j++) handles[base + j] = vllm_cache(st, blocks[start + j]);
    return held_count;
}

/* Free tail first: hashless blocks to the head (a count), the others to the tail. */
static void vllm_unpin_request(VLLM *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 input_length,
                               i64 block_size, const i64 *handles, i64 base, i64 n) {
    (void)request; (void)blocks;
    i64 *m = st->meta;
    i64 *hold = st->h.hold;
    i32 *slot_ref = st->slot_ref;
    i64 full = input_length / block_size;
    if (full > end - start) full = end - start;
    if (full > n) full = n;
    m[HASHLESS_FREE] += n - full;
    hold[HELD] -= n - full;
    for (i64 j = full - 1; j >= 0; j--) {
        i64 s = handles[base + j];
        slot_ref[s] -= 1;
        if (slot_ref[s] == 0) {
            kv_list_append(st->queue_prev, st->queue_next, &m[QUEUE_HEAD], &m[QUEUE_TAIL], s);
            hold[HELD] -= 1;
        }
    }
}

static inline void vllm_access_request(VLLM *st, i64 request, const i32 *blocks, i64 start, i64 end, i64 hits,
                                       i64 input_length, i64 block_size) {
    i64 n = vllm_pin_request(st, request, blocks, start, end, hits, input_length, block_size, st->handles, 0);
    vllm_unpin_request(st, request, blocks, start, end, input_length, block_size, st->handles, 0, n);
}

/* ---- the pool chunk by chunk, as vLLM's scheduler drives it (include/policy.h KvPaged; the
 * simulator's requests.c: kv_cache_manager.py allocate_slots and free of vLLM 0.33.0) ---- */

static i64 paged_free(void *vst) {
    VLLM *st = vst;
    return st->meta[CAPACITY] - st->h.hold[HELD];
}

static i64 paged_evictable(void *vst, const i32 *ids, i64 start, i64 k) { return vllm_free_hits(vst, ids, start, k); }

static void paged_touch(void *vst, const i32 *ids, i64 start, i64 k, i64 *handles, i64 base) {
    vllm_touch(vst, ids, start, k, handles, base);
}

static void paged_allocate(void *vst, i64 count) { vllm_allocate(vst, count); }

static i64 paged_cache(void *vst, i64 id) { return vllm_cache((VLLM *)vst, id); }

static void paged_release(void *vst, const i64 *handles, i64 base, i64 hashed, i64 unhashed) {
    VLLM *st = vst;
    i64 *m = st->meta;
    m[HASHLESS_FREE] += unhashed;
    st->h.hold[HELD] -= unhashed;
    for (i64 j = hashed - 1; j >= 0; j--) {
        i64 s = handles[base + j];
        st->slot_ref[s] -= 1;
        if (st->slot_ref[s] == 0) {
            kv_list_append(st->queue_prev, st->queue_next, &m[QUEUE_HEAD], &m[QUEUE_TAIL], s);
            st->h.hold[HELD] -= 1;
        }
    }
}

static const KvPaged vllm_paged = {paged_free, paged_evictable, paged_touch, paged_allocate, paged_cache,
                                   paged_release};

/* a request caches its full blocks only: never the prompt's partial tail */
static i64 vllm_cached_blocks(void *st, i64 num_blocks, i64 input_length, i64 block_size) {
    /* (a request longer than the pool holds its first `capacity` blocks: vllm.py) */
    return kv_min(kv_min(num_blocks, input_length / block_size), ((VLLM *)st)->meta[CAPACITY]);
}

KV_REQUEST_POLICY(vllm, VLLM, KV_LAYOUT(FIELDS, SLOTS), vllm_resident, vllm_hit_limit, vllm_access_request,
                  vllm_pin_request, vllm_unpin_request, vllm_resident, 1, &vllm_paged, vllm_cached_blocks, NULL)
